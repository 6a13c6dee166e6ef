/* Races with another client's whole operation, run in the middle of this
 * one's batch (dpath_check.h kvt_trig): an insert that meets another insert
 * before its locks, and GETs whose bucket or object READs straddle an
 * update. A key never goes missing and never occupies two slots. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

KVT_DPATH_SUITE(races);

/* Scenario state shared with the fire callbacks (each test is its own process). */
static kvc_t *other;
static const char *the_key;
static char filler_key[48];
static int fire_rc[4];

static void fire_put_b(struct kvt_trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_put_s(other, the_key, "from-b");
}

Test(races, insert_racing_another_insert_before_its_locks_updates_the_one_slot)
{
	struct kvt_trig t = { .armed = 1, .fire = fire_put_b };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	char v[64];

	other = kvt_client(&env, NULL, 0, 4);
	the_key = "both-insert";
	kvt_on_lock_cas(&env, &t, kvt_hash_of(&env, the_key).b[0]);
	cr_assert_eq(kvt_put_s(a, the_key, "from-a"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_PUT_UPDATE), 1, "A found B's insert under its locks");
	cr_expect_eq(kvt_key_slots(&env, the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "from-a");
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(other);
	kvc_destroy(a);
}

Test(races, get_never_misses_a_key_updated_in_place_between_its_two_bucket_reads)
{
	struct kvt_trig t = { .kind = KVI_ROP_READ, .fire = fire_put_b };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	char v[64];
	int which = -1;

	other = kvt_client(&env, NULL, 0, 4);
	the_key = "second-bucket";
	kvt_occupy_first_bucket_of(&env, other, the_key, filler_key);
	cr_assert_eq(kvt_put_s(other, the_key, "before"), 0);
	cr_assert_eq(kvt_key_slots(&env, the_key, NULL, 0, &which), 1);
	cr_assert_eq(which, 1, "the key lives in its second bucket");
	/* Fire between the READ of the first bucket and the READ of the second. */
	t.lo = kvi_home_bucket_off(kvt_geom(&env), kvt_hash_of(&env, the_key).b[1]);
	t.hi = t.lo + 1;
	t.armed = 1;
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0, "an in-place update never makes the key absent");
	cr_assert_eq(t.fired, 1);
	cr_expect_str_eq(v, "from-b");
	kvc_destroy(other);
	kvc_destroy(a);
}

Test(races, get_updated_before_its_object_read_returns_the_old_value_and_the_next_get_the_new_one)
{
	struct kvt_trig t = { .kind = KVI_ROP_READ, .fire = fire_put_b };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 1024, 4);
	char v[64];

	other = kvt_client(&env, NULL, 0, 4);
	the_key = "reread";
	cr_assert_eq(kvt_put_s(other, the_key, "old"), 0);
	t.lo = kvt_geom(&env)->heap_off;
	t.hi = kvt_heap_end(&env);
	t.armed = 1;
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_str_eq(v, "old", "the slot was read before the update: objects are immutable");
	/* A cached the superseded location; it must be rechecked, not trusted. */
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "from-b");
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "from-b");
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_GET_HIT_CACHED), 1, "the new location was cached");
	kvc_destroy(other);
	kvc_destroy(a);
}
