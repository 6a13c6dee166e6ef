/* The client's location cache (client/locache.h) against other clients'
 * writes: a cached location that went stale (the key moved, was replaced
 * or deleted) falls back to the buckets without a duplicate; a cached
 * location outside the key's buckets is never locked; a forged hash
 * collision cannot make a cached PUT replace another key's value; a set
 * keeps four keys, least recently confirmed out. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

KVT_DPATH_SUITE(locache);

/* Scenario state shared with the fire callbacks (each test is its own process). */
static kvc_t *other;
static const char *the_key;
static char filler_key[48];
static int fire_rc[4];

/* B deletes the key, fills its old slot with another key, and re-inserts the
 * key, which then lands in its other bucket. */
static void fire_move_to_other_bucket(struct kvt_trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_del_s(other, the_key);
	kvt_key_with_first_bucket(&env, "filler", kvt_hash_of(&env, the_key).b[0], filler_key);
	fire_rc[1] = kvt_put_s(other, filler_key, "f");
	fire_rc[2] = kvt_put_s(other, the_key, "from-b");
}

Test(locache, cached_put_after_the_key_moved_to_its_other_bucket_updates_it_there_without_a_duplicate)
{
	struct kvt_trig t = { .fire = fire_move_to_other_bucket };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 1024, 4);
	char v[64];
	int which = -1;

	other = kvt_client(&env, NULL, 0, 4);
	the_key = "mover";
	cr_assert_eq(kvt_put_s(a, the_key, "a1"), 0); /* cached: first bucket */
	cr_assert_eq(kvt_key_slots(&env, the_key, NULL, 0, &which), 1);
	cr_assert_eq(which, 0);
	kvt_on_lock_cas(&env, &t, kvt_hash_of(&env, the_key).b[0]);
	t.armed = 1;
	cr_assert_eq(kvt_put_s(a, the_key, "a2"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect(fire_rc[0] == 0 && fire_rc[1] == 0 && fire_rc[2] == 0);
	cr_expect_eq(kvt_key_slots(&env, the_key, v, sizeof(v), &which), 1, "exactly one slot holds the key");
	cr_expect_eq(which, 1, "updated in the bucket it moved to");
	cr_expect_str_eq(v, "a2");
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_PUT_UPDATE), 1, "the stale hint fell back to the general path");
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	cr_assert_eq(kvt_get_s(other, filler_key, v, sizeof(v)), 0, "the key now in the old slot is intact");
	cr_expect_str_eq(v, "f");
	kvc_destroy(other);
	kvc_destroy(a);
}

static void fire_replace(struct kvt_trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_put_s(other, the_key, "from-b");
}

Test(locache, cached_delete_after_another_client_replaced_the_value_removes_the_key)
{
	struct kvt_trig t = { .fire = fire_replace };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 1024, 4);
	char v[64];

	other = kvt_client(&env, NULL, 0, 4);
	the_key = "replaced";
	cr_assert_eq(kvt_put_s(a, the_key, "a1"), 0);
	kvt_on_lock_cas(&env, &t, kvt_hash_of(&env, the_key).b[0]);
	t.armed = 1;
	cr_assert_eq(kvt_del_s(a, the_key), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_eq(kvt_key_slots(&env, the_key, NULL, 0, NULL), 0);
	cr_expect_eq(kvt_get_s(other, the_key, v, sizeof(v)), KVC_ENOTFOUND);
	cr_expect_eq(kvt_get_s(a, the_key, v, sizeof(v)), KVC_ENOTFOUND);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(other);
	kvc_destroy(a);
}

static void fire_delete(struct kvt_trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_del_s(other, the_key);
}

Test(locache, cached_put_of_a_key_deleted_meanwhile_reinserts_it_once)
{
	struct kvt_trig t = { .fire = fire_delete };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 1024, 4);
	char v[64];

	other = kvt_client(&env, NULL, 0, 4);
	the_key = "deleted-meanwhile";
	cr_assert_eq(kvt_put_s(a, the_key, "a1"), 0);
	kvt_on_lock_cas(&env, &t, kvt_hash_of(&env, the_key).b[0]);
	t.armed = 1;
	cr_assert_eq(kvt_put_s(a, the_key, "a2"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_PUT_INSERT), 2, "the stale hint became an insert");
	cr_expect_eq(kvt_key_slots(&env, the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "a2");
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(other);
	kvc_destroy(a);
}

/* Lock CASes of one client, recorded. */
static uint64_t cas_roff[64];
static unsigned ncas;
static int record_cas(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (op->kind == KVI_ROP_CAS && ncas < 64)
		cas_roff[ncas++] = op->roff;
	return 0;
}

Test(locache, cached_location_outside_the_key_buckets_is_never_locked)
{
	struct kvi_local_hooks hk = { .before_op = record_cas };
	kvc_t *a = kvt_client(&env, &hk, 1024, 4);
	struct kvi_keyhash kh = kvt_hash_of(&env, "misplaced");
	uint64_t bogus = (kh.b[0] + 7) % kvt_geom(&env)->bucket_count;
	char v[64];

	if (bogus == kh.b[1])
		bogus = (bogus + 1) % kvt_geom(&env)->bucket_count;
	cr_assert_eq(kvt_put_s(a, "misplaced", "v1"), 0);
	/* A cache entry that names a foreign bucket (e.g. from before a resize). */
	kvi_locache_put(&kvi_client_conn(a, 0)->cache, kh.lo, kh.hi, bogus, 3, *kvt_slot_ptr(&env, kh.b[0], 0), kvi_now_ns());
	ncas = 0;
	cr_assert_eq(kvt_put_s(a, "misplaced", "v2"), 0);
	for (unsigned i = 0; i < ncas; i++)
		cr_expect(cas_roff[i] == kvi_home_bucket_off(kvt_geom(&env), kh.b[0]) || cas_roff[i] == kvi_home_bucket_off(kvt_geom(&env), kh.b[1]),
			  "locked bucket at offset %llu", (unsigned long long)cas_roff[i]);
	cr_expect_eq(kvt_key_slots(&env, "misplaced", v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "v2");
	kvc_destroy(a);
}

/* A crafted 128-bit collision: the attacker's key hashes like the victim's,
 * so its location-cache entry is the victim's (same hash, same entry, same
 * buckets). Forged here by filing the victim's location under the attacker's
 * hash; the attacker key shares the victim's bucket, as a true collision
 * would. The cached PUT must see the key bytes differ and leave the victim
 * alone -- and an honest cached PUT must still take 2 round trips. */
Test(locache, a_forged_hash_collision_cannot_make_a_cached_put_replace_another_keys_value)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	struct kvi_keyhash kv = kvt_hash_of(&env, "victim"), ka;
	char attacker[48], v[64];
	struct kvc_stats st0, st1;
	uint64_t vb = UINT64_MAX, word = 0;
	unsigned idx = 0;
	int which = -1;

	cr_assert_eq(kvt_put_s(a, "victim", "victim-value"), 0);
	cr_assert_eq(kvt_key_slots(&env, "victim", NULL, 0, &which), 1);
	vb = kv.b[which];
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
		if (*kvt_slot_ptr(&env, vb, i) && kvi_slot_fp(*kvt_slot_ptr(&env, vb, i)) == kv.fp) {
			idx = i;
			word = *kvt_slot_ptr(&env, vb, i);
		}
	cr_assert_neq(word, 0);
	kvt_key_with_first_bucket(&env, "attacker", vb, attacker);
	ka = kvt_hash_of(&env, attacker);
	kvi_locache_put(&kvi_client_conn(a, 0)->cache, ka.lo, ka.hi, vb, idx, word, kvi_now_ns());
	cr_assert_eq(kvt_put_s(a, attacker, "attacker-value"), 0);
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), 0, "the victim's key is gone");
	cr_expect_str_eq(v, "victim-value", "the victim's value was replaced");
	cr_expect_eq(kvt_get_s(a, attacker, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "attacker-value");
	cr_expect_eq(kvt_key_slots(&env, "victim", NULL, 0, NULL), 1);
	cr_expect_eq(kvt_key_slots(&env, attacker, NULL, 0, NULL), 1);
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_PUT_UPDATE_CACHED), 0, "the forged entry was used as the attacker's");
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	/* The honest cached update: one doorbell more READ, no more round trips. */
	kvc_get_stats(a, &st0);
	cr_assert_eq(kvt_put_s(a, attacker, "attacker-2"), 0);
	kvc_get_stats(a, &st1);
	cr_expect_eq(st1.ops[KVC_STAT_PUT_UPDATE_CACHED] - st0.ops[KVC_STAT_PUT_UPDATE_CACHED], 1);
	cr_expect_eq(st1.round_trips[KVC_STAT_PUT_UPDATE_CACHED] - st0.round_trips[KVC_STAT_PUT_UPDATE_CACHED], 2);
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "victim-value");
	kvc_destroy(a);
}

/* The cache's sets: four keys whose hashes pick one set all stay; a fifth
 * takes the place of the one confirmed longest ago; a key put again keeps
 * its one entry; a small cache is one set of its entries. */
Test(locache, a_set_holds_four_keys_and_the_fifth_replaces_the_least_recently_confirmed)
{
	struct kvi_locache c;
	const uint64_t tick = KVI_LOC_TICK_NS;
	/* hlo values that pick set 0 of a 64-entry cache: (hlo >> 32 ^ hlo) & 60 == 0 */
	uint64_t hlo[6];

	for (unsigned i = 0; i < 6; i++)
		hlo[i] = (uint64_t)(i + 1) << 8;
	cr_assert_eq(kvi_locache_init(&c, 64), 0);
	for (unsigned i = 0; i < 4; i++)
		kvi_locache_put(&c, hlo[i], i, 7, i, 0x1000 + i, (10 + i) * tick);
	for (unsigned i = 0; i < 4; i++) {
		const struct kvi_loc *l = kvi_locache_get(&c, hlo[i], i);

		cr_assert(l, "key %u of a full set stays", i);
		cr_expect_eq(l->slot, 0x1000 + i);
	}
	kvi_locache_put(&c, hlo[0], 0, 7, 0, 0x2000, 20 * tick); /* confirmed again: now the newest */
	kvi_locache_put(&c, hlo[4], 4, 7, 4, 0x1004, 21 * tick);
	cr_expect_null(kvi_locache_get(&c, hlo[1], 1), "the one confirmed longest ago went");
	cr_expect_eq(kvi_locache_get(&c, hlo[0], 0)->slot, 0x2000, "one entry per key, updated");
	cr_expect_not_null(kvi_locache_get(&c, hlo[2], 2));
	cr_expect_not_null(kvi_locache_get(&c, hlo[3], 3));
	cr_expect_not_null(kvi_locache_get(&c, hlo[4], 4));
	kvi_locache_drop(&c, hlo[4], 4);
	cr_expect_null(kvi_locache_get(&c, hlo[4], 4));
	kvi_locache_put(&c, hlo[5], 5, 7, 5, 0x1005, 22 * tick);
	cr_expect_not_null(kvi_locache_get(&c, hlo[5], 5), "a dropped entry is free again");
	cr_expect_not_null(kvi_locache_get(&c, hlo[2], 2), "and nobody else left for it");
	kvi_locache_fini(&c);

	cr_assert_eq(kvi_locache_init(&c, 2), 0);
	kvi_locache_put(&c, hlo[0], 0, 7, 0, 0x1000, tick);
	kvi_locache_put(&c, hlo[1], 1, 7, 1, 0x1001, 2 * tick);
	cr_expect_not_null(kvi_locache_get(&c, hlo[0], 0), "two entries: one set of two");
	cr_expect_not_null(kvi_locache_get(&c, hlo[1], 1));
	kvi_locache_fini(&c);
}
