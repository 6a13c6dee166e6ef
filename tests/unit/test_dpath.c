/* The data path over the local transport: every operation and error path,
 * the round trips each operation takes, fingerprint collisions, full buckets,
 * torn and corrupt reads, size limits, expiry and the asynchronous interface. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "scenarios.h"

static struct kvt_env env;
static kvc_t *h;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 0, 64), 0);
	cr_assert_eq(kvt_env_client(&env, NULL, 1024, 16, &h), 0);
}

static void teardown(void)
{
	kvc_destroy(h);
	h = NULL;
	kvt_env_fini(&env);
}

TestSuite(dpath, .init = setup, .fini = teardown, .timeout = 60);


/* Round trips of the last operation of a kind: stats delta. */
static uint64_t rtts(kvc_t *c, int kind, uint64_t *ops)
{
	struct kvc_stats s;

	kvc_get_stats(c, &s);
	*ops = s.ops[kind];
	return s.round_trips[kind];
}

Test(dpath, put_then_get_returns_the_value)
{
	char v[64];

	cr_assert_eq(kvt_put_s(h, "alpha", "one"), 0);
	cr_assert_eq(kvt_get_s(h, "alpha", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "one");
}

Test(dpath, missing_key_is_enotfound_for_get_and_delete)
{
	char v[8];

	cr_expect_eq(kvt_get_s(h, "nope", v, sizeof(v)), KVC_ENOTFOUND);
	cr_expect_eq(kvc_delete(h, "nope", 4), KVC_ENOTFOUND);
}

Test(dpath, update_replaces_and_delete_removes)
{
	char v[64];

	cr_assert_eq(kvt_put_s(h, "k", "v1"), 0);
	cr_assert_eq(kvt_put_s(h, "k", "version-two"), 0);
	cr_assert_eq(kvt_get_s(h, "k", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "version-two");
	cr_assert_eq(kvc_delete(h, "k", 1), 0);
	cr_expect_eq(kvt_get_s(h, "k", v, sizeof(v)), KVC_ENOTFOUND);
	cr_expect_eq(kvc_delete(h, "k", 1), KVC_ENOTFOUND);
	cr_assert_eq(kvt_put_s(h, "k", "back"), 0);
	cr_assert_eq(kvt_get_s(h, "k", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "back");
}

Test(dpath, another_client_sees_writes_and_deletes)
{
	kvc_t *o;
	char v[64];

	cr_assert_eq(kvt_env_client(&env, NULL, 1024, 4, &o), 0);
	cr_assert_eq(kvt_put_s(h, "shared", "from-h"), 0);
	cr_assert_eq(kvt_get_s(o, "shared", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "from-h");
	cr_assert_eq(kvt_put_s(o, "shared", "from-o"), 0);
	cr_assert_eq(kvt_get_s(h, "shared", v, sizeof(v)), 0, "h's cached location is stale and must be rechecked");
	cr_expect_str_eq(v, "from-o");
	cr_assert_eq(kvc_delete(o, "shared", 6), 0);
	cr_expect_eq(kvt_get_s(h, "shared", v, sizeof(v)), KVC_ENOTFOUND);
	kvc_destroy(o);
}

/* The location cache takes any size (rounded down to a power of two; one
 * entry is 32 bytes, less than its 64-byte alignment) and serves a GET of
 * the key it holds from the cached path. */
Test(dpath, a_location_cache_of_any_size_serves_its_keys)
{
	static const unsigned sizes[] = { 1, 3, 5, 1000 };
	char v[64];

	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t n0, n1;
		kvc_t *c;

		cr_assert_eq(kvt_env_client(&env, NULL, sizes[i], 4, &c), 0, "%u entries", sizes[i]);
		cr_assert_eq(kvt_put_s(c, "lc-key", "v1"), 0);
		cr_assert_eq(kvt_get_s(c, "lc-key", v, sizeof(v)), 0);
		rtts(c, KVC_STAT_GET_HIT_CACHED, &n0);
		cr_assert_eq(kvt_get_s(c, "lc-key", v, sizeof(v)), 0);
		cr_expect_str_eq(v, "v1");
		rtts(c, KVC_STAT_GET_HIT_CACHED, &n1);
		cr_expect_eq(n1 - n0, 1, "%u entries: the second GET used the cached location", sizes[i]);
		kvc_destroy(c);
	}
}

/* Two entries are one set: two keys both stay cached, whatever their hashes
 * (a direct-mapped cache of two would lose one half the time); a third key
 * takes the place of the one used longer ago. */
Test(dpath, a_location_cache_keeps_two_keys_of_one_set_and_drops_the_older)
{
	static const char *const keys[] = { "set-a", "set-b", "set-c" };
	uint64_t n0, n1;
	char v[64];
	kvc_t *c;

	cr_assert_eq(kvt_env_client(&env, NULL, 2, 4, &c), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(kvt_put_s(c, keys[i], keys[i]), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(kvt_get_s(c, keys[i], v, sizeof(v)), 0);
	rtts(c, KVC_STAT_GET_HIT_CACHED, &n0);
	for (int r = 0; r < 10; r++)
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(kvt_get_s(c, keys[i], v, sizeof(v)), 0);
			cr_expect_str_eq(v, keys[i]);
		}
	rtts(c, KVC_STAT_GET_HIT_CACHED, &n1);
	cr_expect_eq(n1 - n0, 20, "every GET of the two keys used a cached location");
	/* "set-b" was used last: "set-c" takes "set-a"'s place (ticks of
	 * KVI_LOC_TICK_NS order them: wait one). */
	usleep(40000);
	cr_assert_eq(kvt_get_s(c, keys[1], v, sizeof(v)), 0);
	usleep(40000);
	cr_assert_eq(kvt_get_s(c, keys[2], v, sizeof(v)), 0);
	rtts(c, KVC_STAT_GET_HIT_CACHED, &n0);
	cr_assert_eq(kvt_get_s(c, keys[1], v, sizeof(v)), 0);
	cr_assert_eq(kvt_get_s(c, keys[2], v, sizeof(v)), 0);
	rtts(c, KVC_STAT_GET_HIT_CACHED, &n1);
	cr_expect_eq(n1 - n0, 2, "the two used last are the cached ones");
	cr_assert_eq(kvt_get_s(c, keys[0], v, sizeof(v)), 0);
	rtts(c, KVC_STAT_GET_HIT_CACHED, &n0);
	cr_expect_eq(n0 - n1, 0, "the one used longer ago was dropped");
	kvc_destroy(c);
}

Test(dpath, round_trips_meet_the_spec_targets)
{
	kvc_t *nc; /* no location cache */
	char v[64];
	uint64_t r0, n0, r1, n1;

	cr_assert_eq(kvt_env_client(&env, NULL, 0, 4, &nc), 0);
	/* PUT insert <= 2 */
	r0 = rtts(nc, KVC_STAT_PUT_INSERT, &n0);
	cr_assert_eq(kvt_put_s(nc, "rt-key", "v"), 0);
	r1 = rtts(nc, KVC_STAT_PUT_INSERT, &n1);
	cr_expect_eq(n1 - n0, 1);
	cr_expect_leq(r1 - r0, 2, "PUT insert took %llu round trips", (unsigned long long)(r1 - r0));
	/* GET hit <= 2 */
	r0 = rtts(nc, KVC_STAT_GET_HIT, &n0);
	cr_assert_eq(kvt_get_s(nc, "rt-key", v, sizeof(v)), 0);
	r1 = rtts(nc, KVC_STAT_GET_HIT, &n1);
	cr_expect_eq(n1 - n0, 1);
	cr_expect_leq(r1 - r0, 2, "GET hit took %llu", (unsigned long long)(r1 - r0));
	/* GET miss == 1 */
	r0 = rtts(nc, KVC_STAT_GET_MISS, &n0);
	cr_assert_eq(kvt_get_s(nc, "rt-absent", v, sizeof(v)), KVC_ENOTFOUND);
	r1 = rtts(nc, KVC_STAT_GET_MISS, &n1);
	cr_expect_eq(r1 - r0, 1, "GET miss took %llu", (unsigned long long)(r1 - r0));
	/* PUT update <= 3 */
	r0 = rtts(nc, KVC_STAT_PUT_UPDATE, &n0);
	cr_assert_eq(kvt_put_s(nc, "rt-key", "v2"), 0);
	r1 = rtts(nc, KVC_STAT_PUT_UPDATE, &n1);
	cr_expect_eq(n1 - n0, 1);
	cr_expect_leq(r1 - r0, 3, "PUT update took %llu", (unsigned long long)(r1 - r0));
	/* DELETE <= 3 */
	r0 = rtts(nc, KVC_STAT_DELETE, &n0);
	cr_assert_eq(kvc_delete(nc, "rt-key", 6), 0);
	r1 = rtts(nc, KVC_STAT_DELETE, &n1);
	cr_expect_leq(r1 - r0, 3, "DELETE took %llu", (unsigned long long)(r1 - r0));
	kvc_destroy(nc);

	/* With the location cache: GET hit 1, PUT update 2. */
	cr_assert_eq(kvt_put_s(h, "rt-cached", "v"), 0);
	r0 = rtts(h, KVC_STAT_GET_HIT_CACHED, &n0);
	cr_assert_eq(kvt_get_s(h, "rt-cached", v, sizeof(v)), 0);
	r1 = rtts(h, KVC_STAT_GET_HIT_CACHED, &n1);
	cr_expect_eq(n1 - n0, 1, "the cache was used");
	cr_expect_eq(r1 - r0, 1, "cached GET hit took %llu", (unsigned long long)(r1 - r0));
	r0 = rtts(h, KVC_STAT_PUT_UPDATE_CACHED, &n0);
	cr_assert_eq(kvt_put_s(h, "rt-cached", "v2"), 0);
	r1 = rtts(h, KVC_STAT_PUT_UPDATE_CACHED, &n1);
	cr_expect_eq(n1 - n0, 1, "the cache was used");
	cr_expect_leq(r1 - r0, 2, "cached PUT update took %llu", (unsigned long long)(r1 - r0));
}

Test(dpath, size_limits_are_enforced_and_change_nothing)
{
	char key[KVC_MAX_KEY + 2];
	size_t maxv = kvc_max_value(h, 8), len = 0;
	char *big = malloc(maxv + 1);
	char v[64];

	cr_assert_not_null(big);
	memset(key, 'k', sizeof(key));
	cr_assert_eq(kvt_put_s(h, "keep", "safe"), 0);
	cr_expect_eq(kvc_put(h, key, 0, "v", 1, 0), KVC_EKEYSIZE);
	cr_expect_eq(kvc_put(h, key, KVC_MAX_KEY + 1, "v", 1, 0), KVC_EKEYSIZE);
	cr_expect_eq(kvc_get(h, key, KVC_MAX_KEY + 1, v, sizeof(v), &len), KVC_EKEYSIZE);
	cr_expect_eq(kvc_put(h, key, KVC_MAX_KEY, "v", 1, 0), 0, "a 250-byte key is fine");
	memset(big, 'x', maxv + 1);
	cr_expect_eq(kvc_put(h, "bigvalue", 8, big, maxv + 1, 0), KVC_EVALSIZE);
	cr_expect_eq(kvc_get(h, "bigvalue", 8, v, sizeof(v), &len), KVC_ENOTFOUND);
	cr_expect_eq(kvc_put(h, "bigvalue", 8, big, maxv, 0), 0, "the largest value fits");
	cr_assert_eq(kvc_get(h, "bigvalue", 8, big, maxv, &len), 0);
	cr_expect_eq(len, maxv);
	cr_assert_eq(kvt_get_s(h, "keep", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "safe");
	free(big);
}

Test(dpath, small_buffer_gets_etrunc_and_the_needed_length)
{
	char v[4];
	size_t len = 0;

	cr_assert_eq(kvt_put_s(h, "long", "0123456789"), 0);
	cr_expect_eq(kvc_get(h, "long", 4, v, sizeof(v), &len), KVC_ETRUNC);
	cr_expect_eq(len, 10);
}

Test(dpath, empty_value_round_trips)
{
	char v[8];
	size_t len = 99;

	cr_assert_eq(kvc_put(h, "empty", 5, NULL, 0, 0), 0);
	cr_assert_eq(kvc_get(h, "empty", 5, v, sizeof(v), &len), 0);
	cr_expect_eq(len, 0);
}

Test(dpath, expired_items_read_as_misses)
{
	char v[16];

	cr_assert_eq(kvc_put(h, "ttl", 3, "soon", 4, 300), 0);
	cr_assert_eq(kvc_put(h, "forever", 7, "yes", 3, 0), 0);
	cr_assert_eq(kvt_get_s(h, "ttl", v, sizeof(v)), 0);
	usleep(400 * 1000); /* past the expiry: TTLs are milliseconds */
	cr_expect_eq(kvt_get_s(h, "ttl", v, sizeof(v)), KVC_ENOTFOUND, "expired via the cached location");
	kvc_t *nc;
	cr_assert_eq(kvt_env_client(&env, NULL, 0, 4, &nc), 0);
	cr_expect_eq(kvt_get_s(nc, "ttl", v, sizeof(v)), KVC_ENOTFOUND, "expired via the buckets");
	cr_expect_eq(kvt_get_s(nc, "forever", v, sizeof(v)), 0);
	cr_assert_eq(kvc_put(nc, "ttl", 3, "again", 5, 0), 0, "an expired item can be replaced");
	cr_assert_eq(kvt_get_s(h, "ttl", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "again");
	kvc_destroy(nc);
}

/* Two keys with the same fingerprint whose bucket pairs overlap. */
static void colliding_keys(const struct kvi_geometry *g, char a[32], char b[32])
{
	static struct kvi_keyhash kh[4096];

	for (int i = 0; i < 4096; i++) {
		char k[32];

		snprintf(k, sizeof(k), "collide-%d", i);
		kvi_key_hash(k, strlen(k), g->hash_seed, g->bucket_count, &kh[i]);
		for (int j = 0; j < i; j++) {
			if (kh[j].fp == kh[i].fp && kh[j].b[0] == kh[i].b[0]) {
				snprintf(a, 32, "collide-%d", j);
				snprintf(b, 32, "%s", k);
				return;
			}
		}
	}
	cr_assert_fail("no colliding pair found");
}

Test(dpath_small, fingerprint_collisions_keep_both_keys)
{
	char a[32], b[32], v[64];
	struct kvt_env e2;
	kvc_t *nc;

	/* 64 buckets x 4096 fingerprints: 4096 keys give ~32 colliding pairs. */
	cr_assert_eq(kvt_env_init(&e2, 4, 64, 64), 0);
	colliding_keys(kvs_core_geometry(e2.srv.core), a, b);
	cr_assert_eq(kvt_env_client(&e2, NULL, 0, 4, &nc), 0);
	cr_assert_eq(kvt_put_s(nc, a, "value-a"), 0);
	cr_assert_eq(kvt_put_s(nc, b, "value-b"), 0);
	cr_assert_eq(kvt_get_s(nc, a, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "value-a");
	cr_assert_eq(kvt_get_s(nc, b, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "value-b");
	cr_assert_eq(kvt_put_s(nc, b, "value-b2"), 0, "update one of the pair");
	cr_assert_eq(kvt_get_s(nc, a, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "value-a");
	cr_assert_eq(kvc_delete(nc, a, strlen(a)), 0);
	cr_assert_eq(kvt_get_s(nc, b, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "value-b2");
	cr_expect_eq(kvt_get_s(nc, a, v, sizeof(v)), KVC_ENOTFOUND);
	kvc_destroy(nc);
	kvt_env_fini(&e2);
}

/* --- geometry from the server, not from the region ----------------------- */

/* Any client may WRITE the region's superblock. A new client takes the
 * geometry from the server (layout.h "Geometry"): the superblock's contents
 * change nothing for it. */
static void scribble_then_new_client_finds_old_keys(void (*scribble)(struct kvi_superblock *sb))
{
	struct kvi_superblock *rsb = kvi_local_region_base(env.srv.reg);
	char k[32], v[64], want[64];
	kvc_t *nc;

	for (int i = 0; i < 200; i++) {
		snprintf(k, sizeof(k), "before-%d", i);
		snprintf(want, sizeof(want), "value-%d", i);
		cr_assert_eq(kvt_put_s(h, k, want), 0);
	}
	scribble(rsb);
	cr_assert_eq(kvt_env_client(&env, NULL, 1024, 4, &nc), 0, "a new client fails over a scribbled superblock");
	for (int i = 0; i < 200; i++) {
		snprintf(k, sizeof(k), "before-%d", i);
		snprintf(want, sizeof(want), "value-%d", i);
		cr_assert_eq(kvt_get_s(nc, k, v, sizeof(v)), 0, "new client misses %s", k);
		cr_assert_str_eq(v, want);
	}
	/* Its writes land where everyone looks: no duplicate, no lost key. */
	cr_assert_eq(kvt_put_s(nc, "before-7", "updated"), 0);
	cr_assert_eq(kvt_put_s(nc, "after", "new"), 0);
	cr_assert_eq(kvt_get_s(h, "before-7", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "updated");
	cr_assert_eq(kvt_get_s(h, "after", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "new");
	cr_assert_eq(kvc_delete(h, "before-7", 8), 0);
	cr_expect_eq(kvt_get_s(nc, "before-7", v, sizeof(v)), KVC_ENOTFOUND, "a duplicate survived the delete");
	kvc_destroy(nc);
}

static void wrong_bucket_count(struct kvi_superblock *sb)
{
	sb->bucket_count = sb->bucket_count / 2 + 1; /* still a valid-looking layout */
}

static void garbage_superblock(struct kvi_superblock *sb)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned char *p = (unsigned char *)sb;

	for (unsigned i = 0; i < 128; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)x;
	}
}

Test(dpath, a_stray_bucket_count_in_the_superblock_changes_nothing_for_new_clients)
{
	scribble_then_new_client_finds_old_keys(wrong_bucket_count);
}

Test(dpath, garbage_over_the_superblock_changes_nothing_for_new_clients)
{
	scribble_then_new_client_finds_old_keys(garbage_superblock);
}

/* The bucket holding key's slot, found by scanning the index for an object
 * with this key (not by hashing: the test must see where the client put it). */
static uint64_t bucket_holding(struct kvt_env *e, const char *key)
{
	const struct kvi_geometry *g = kvs_core_geometry(e->srv.core);
	const unsigned char *base = kvi_local_region_base(e->srv.reg);
	const struct kvi_bucket *b = (const void *)(base + g->index_off);

	for (uint64_t i = 0; i < g->bucket_count; i++)
		for (unsigned j = 0; j < KVI_SLOTS_PER_BUCKET; j++) {
			const struct kvi_obj_hdr *oh;

			if (!b[i].slot[j] || !kvi_slot_in_heap(g, b[i].slot[j]))
				continue;
			oh = (const void *)(base + kvi_slot_obj_off(b[i].slot[j]));
			if (oh->key_len == strlen(key) && memcmp(oh + 1, key, oh->key_len) == 0)
				return i;
		}
	cr_assert_fail("key %s is in no bucket", key);
	return 0;
}

Test(dpath_small, two_servers_with_different_seeds_place_a_key_in_different_buckets)
{
	struct kvs_core_opts o = { .buckets = 4096, .segment_size = 64u << 10, .max_op_ms = 20000,
				   .quarantine_ms = 40100, .no_evict = 1 };
	struct kvt_env e[2];
	kvc_t *c[2];
	unsigned differ = 0;
	char k[32];

	for (int s = 0; s < 2; s++) {
		o.hash_seed = 1000 + (uint64_t)s;
		cr_assert_eq(kvt_env_init_opts(&e[s], 4, &o), 0);
		cr_assert_eq(kvt_env_client(&e[s], NULL, 0, 4, &c[s]), 0);
		cr_assert_eq(kvi_client_conn(c[s], 0)->sb.hash_seed, 1000 + (uint64_t)s, "the client hashes with the server's seed");
	}
	for (int i = 0; i < 32; i++) {
		uint64_t where[2];

		snprintf(k, sizeof(k), "seeded-%d", i);
		for (int s = 0; s < 2; s++) {
			struct kvi_keyhash kh;

			cr_assert_eq(kvt_put_s(c[s], k, "v"), 0);
			where[s] = bucket_holding(&e[s], k);
			kvi_key_hash(k, strlen(k), 1000 + (uint64_t)s, 4096, &kh);
			cr_expect(where[s] == kh.b[0] || where[s] == kh.b[1], "%s not in a bucket of seed %d", k, s);
		}
		differ += where[0] != where[1];
	}
	/* Same bucket by chance: ~2/4096 a key. */
	cr_expect_geq(differ, 30, "only %u of 32 keys placed differently", differ);
	for (int s = 0; s < 2; s++) {
		kvc_destroy(c[s]);
		kvt_env_fini(&e[s]);
	}
}

/* --- full buckets --------------------------------------------------------- */

Test(dpath_small, full_buckets_give_eindexfull_and_lose_no_key, .timeout = 60)
{
	struct kvt_env e2;
	kvc_t *c;
	char k[32], v[32], got[32], keys[100][32];
	int stored = 0, rc = 0, i;
	unsigned next = 0;

	/* Two buckets: every key's two choices are the same 62 slots (keys
	 * with a single candidate bucket left out, see kvt_spread_key). */
	cr_assert_eq(kvt_env_init(&e2, 4, 2, 64), 0);
	cr_assert_eq(kvt_env_client(&e2, NULL, 0, 4, &c), 0);
	for (i = 0; i < 100 && rc == 0; i++) {
		kvt_spread_key(&e2, "full", &next, k, sizeof(k));
		snprintf(keys[i], sizeof(keys[i]), "%s", k);
		snprintf(v, sizeof(v), "val-%d", i);
		rc = kvt_put_s(c, k, v);
		if (rc == 0)
			stored++;
	}
	cr_expect_eq(rc, KVC_EINDEXFULL, "got %s", kvc_err_name(rc));
	cr_expect_eq(stored, 2 * KVI_SLOTS_PER_BUCKET);
	cr_expect_eq(kvt_get_s(c, k, got, sizeof(got)), KVC_ENOTFOUND, "the refused key is not there");
	for (int j = 0; j < stored; j++) {
		snprintf(v, sizeof(v), "val-%d", j);
		cr_assert_eq(kvt_get_s(c, keys[j], got, sizeof(got)), 0, "%s lost", keys[j]);
		cr_expect_str_eq(got, v);
	}
	cr_expect_eq(kvt_put_s(c, keys[0], "updated"), 0, "updates still work when full");
	cr_assert_eq(kvc_delete(c, keys[1], strlen(keys[1])), 0);
	kvt_spread_key(&e2, "newcomer", &next, k, sizeof(k));
	cr_expect_eq(kvt_put_s(c, k, "fits now"), 0, "a delete makes room");
	kvc_destroy(c);
	kvt_env_fini(&e2);
}

Test(dpath_small, index_fills_past_90_percent_before_the_first_eindexfull, .timeout = 120)
{
	struct kvt_env e2;
	kvc_t *c;
	char k[32];
	unsigned stored = 0;
	int rc = 0;
	double load;

	cr_assert_eq(kvt_env_init(&e2, 8, 1024, 64), 0);
	cr_assert_eq(kvt_env_client(&e2, NULL, 0, 4, &c), 0);
	while (rc == 0) {
		snprintf(k, sizeof(k), "load-%u", stored);
		rc = kvc_put(c, k, strlen(k), "v", 1, 0);
		stored += rc == 0;
	}
	cr_assert_eq(rc, KVC_EINDEXFULL, "got %s", kvc_err_name(rc));
	load = (double)stored / (1024.0 * KVI_SLOTS_PER_BUCKET);
	printf("index load at the first EINDEXFULL: %.1f %% (%u of %u slots)\n", 100 * load, stored,
	       1024 * KVI_SLOTS_PER_BUCKET);
	cr_expect_geq(load, 0.90, "only %.1f %% of the slots were used", 100 * load);
	kvc_destroy(c);
	kvt_env_fini(&e2);
}

Test(dpath_small, heap_exhaustion_is_enomem_and_changes_nothing, .timeout = 60)
{
	struct kvt_env e2;
	kvc_t *c;
	char v[1000], got[1100];
	int rc = 0, i, stored = 0;

	/* 2 MiB: a 2048-bucket index (63488 slots) outlasts a ~1.5 MiB heap. */
	cr_assert_eq(kvt_env_init(&e2, 2, 2048, 64), 0);
	cr_assert_eq(kvt_env_client(&e2, NULL, 0, 4, &c), 0);
	memset(v, 'z', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	for (i = 0; i < 5000 && rc == 0; i++) {
		char k[32];

		snprintf(k, sizeof(k), "fill-%d", i);
		rc = kvt_put_s(c, k, v);
		stored += rc == 0;
	}
	cr_expect_eq(rc, KVC_ENOMEM, "got %s", kvc_err_name(rc));
	cr_expect_gt(stored, 100);
	cr_assert_eq(kvt_get_s(c, "fill-0", got, sizeof(got)), 0);
	cr_expect_str_eq(got, v);
	kvc_destroy(c);
	kvt_env_fini(&e2);
}

/* --- torn and corrupt reads ---------------------------------------------- */

struct tear {
	uint64_t rng;
	unsigned percent;  /* of object reads to tear */
	int buckets_too;   /* also scribble on bucket reads */
	unsigned torn;
	uint64_t heap_off; /* reads below it (and past the superblock) are bucket reads */
};

static uint64_t xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Objects: one byte changed somewhere past the header's start, as a READ that
 * raced a reuse of its memory would show. Buckets: one slot word replaced by
 * garbage. */
static void tear_hook(void *arg, const struct kvi_rop *op, void *dst, const void *src)
{
	struct tear *t = arg;
	unsigned char *d = dst;

	(void)src;
	if (op->roff < KVI_SUPERBLOCK_SIZE) /* nothing reads the superblock page */
		return;
	if (op->roff < t->heap_off) {
		if (t->buckets_too && xs(&t->rng) % 100 < t->percent) {
			uint64_t g = xs(&t->rng);

			memcpy(d + 8 + 8 * (xs(&t->rng) % KVI_SLOTS_PER_BUCKET), &g, 8);
			t->torn++;
		}
		return;
	}
	if (op->len > sizeof(struct kvi_obj_hdr) && xs(&t->rng) % 100 < t->percent) {
		d[9 + xs(&t->rng) % (op->len - 9)] ^= 0x40; /* anything but the access byte */
		t->torn++;
	}
}

/* Every GET returns the right value or an error; never another value. */
static void check_never_wrong(struct tear *t, int expect_some_hits)
{
	struct kvi_local_hooks hooks = { .arg = t, .after_read = tear_hook };
	char k[32], v[48], got[64];
	kvc_t *c;

	t->heap_off = kvs_core_geometry(env.srv.core)->heap_off;
	int hits = 0, errors = 0;

	for (int i = 0; i < 64; i++) {
		snprintf(k, sizeof(k), "torn-%d", i);
		snprintf(v, sizeof(v), "value-%d-%s", i, "padding-to-make-it-longer");
		cr_assert_eq(kvt_put_s(h, k, v), 0);
	}
	cr_assert_eq(kvt_env_client(&env, &hooks, 0, 4, &c), 0);
	for (int round = 0; round < 10; round++) {
		for (int i = 0; i < 64; i++) {
			int rc;

			snprintf(k, sizeof(k), "torn-%d", i);
			snprintf(v, sizeof(v), "value-%d-%s", i, "padding-to-make-it-longer");
			rc = kvt_get_s(c, k, got, sizeof(got));
			if (rc == 0) {
				cr_assert_str_eq(got, v, "a torn read produced a wrong value");
				hits++;
			} else {
				cr_assert(rc == KVC_ECORRUPT || rc == KVC_ENOTFOUND, "%s", kvc_err_name(rc));
				errors++;
			}
		}
	}
	cr_expect_gt(t->torn, 100, "the hook tore reads");
	if (expect_some_hits)
		cr_expect_gt(hits, 320, "hits %d errors %d", hits, errors);
	kvc_destroy(c);
}

Test(dpath, torn_object_reads_are_retried_never_returned)
{
	struct tear t = { .rng = 88172645463325252ull, .percent = 50 };

	check_never_wrong(&t, 1);
}

Test(dpath, every_object_read_torn_gives_errors_never_values)
{
	struct tear t = { .rng = 1, .percent = 100 };

	check_never_wrong(&t, 0);
}

Test(dpath, garbage_in_bucket_reads_never_gives_a_wrong_value)
{
	struct tear t = { .rng = 7, .percent = 50, .buckets_too = 1 };

	check_never_wrong(&t, 1);
}

Test(dpath, corrupt_index_and_heap_do_not_crash_the_client)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	unsigned char *base = kvi_local_region_base(env.srv.reg);
	uint64_t s = 12345;
	char k[32], got[64];

	for (int i = 0; i < 200; i++) {
		snprintf(k, sizeof(k), "victim-%d", i);
		cr_assert_eq(kvt_put_s(h, k, "v"), 0);
	}
	/* A malicious writer scribbles over every slot of the index and over the heap. */
	for (uint64_t b = 0; b < sb->bucket_count; b++)
		for (unsigned i = 1; i <= KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t g = xs(&s);

			if (g & 1) /* keep some in-heap offsets with matching sizes */
				g = (g & ~((1ull << KVI_SLOT_OFF_BITS) - 1)) |
				    ((sb->heap_off / 16 + (g >> 20) % (sb->heap_size / 16)));
			memcpy(base + sb->index_off + b * KVI_BUCKET_SIZE + 8 * i, &g, 8);
		}
	for (uint64_t off = sb->heap_off; off < sb->heap_off + sb->heap_size; off += 4096)
		base[off + xs(&s) % 4096] ^= 0xff;
	kvc_t *nc;
	cr_assert_eq(kvt_env_client(&env, NULL, 0, 4, &nc), 0);
	for (int i = 0; i < 200; i++) {
		int rc;

		snprintf(k, sizeof(k), "victim-%d", i);
		rc = kvt_get_s(nc, k, got, sizeof(got));
		cr_expect(rc == 0 || rc == KVC_ENOTFOUND || rc == KVC_ECORRUPT, "%s", kvc_err_name(rc));
		if (rc == 0)
			cr_expect_str_eq(got, "v");
		rc = kvc_put(nc, k, strlen(k), "w", 1, 0);
		cr_expect(rc == 0 || rc == KVC_EINDEXFULL || rc == KVC_ECORRUPT, "%s", kvc_err_name(rc));
		rc = kvc_delete(h, k, strlen(k));
		cr_expect(rc == 0 || rc == KVC_ENOTFOUND || rc == KVC_ECORRUPT, "%s", kvc_err_name(rc));
	}
	kvc_destroy(nc);
}

/* --- asynchronous interface ------------------------------------------- */

Test(dpath, async_batch_keeps_many_in_flight)
{
	struct kvc_op ops[16], *done[16];
	char keys[16][16], bufs[16][32];
	unsigned finished = 0;

	for (int i = 0; i < 16; i++) {
		snprintf(keys[i], sizeof(keys[i]), "async-%d", i);
		ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[i], .key_len = strlen(keys[i]),
					  .value = keys[i], .value_len = strlen(keys[i]) };
		cr_assert_eq(kvc_submit(h, &ops[i]), 0);
	}
	struct kvc_op extra = { .type = KVC_OP_GET, .key = "x", .key_len = 1 };
	cr_expect_eq(kvc_submit(h, &extra), KVC_EAGAIN, "depth is 16");
	cr_expect_eq(kvc_put(h, "y", 1, "y", 1, 0), KVC_EBUSY);
	while (finished < 16) {
		int n = kvc_poll(h, done, 16, 1000);

		cr_assert_geq(n, 0);
		for (int i = 0; i < n; i++)
			cr_expect_eq(done[i]->status, 0, "%s", kvc_err_name(done[i]->status));
		finished += (unsigned)n;
	}
	for (int i = 0; i < 16; i++) {
		ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = keys[i], .key_len = strlen(keys[i]),
					  .buf = bufs[i], .buf_len = sizeof(bufs[i]) };
		cr_assert_eq(kvc_submit(h, &ops[i]), 0);
	}
	finished = 0;
	while (finished < 16) {
		int n = kvc_poll(h, done, 16, 1000);

		for (int i = 0; i < n; i++) {
			cr_expect_eq(done[i]->status, 0);
			cr_expect_eq(done[i]->value_len, done[i]->key_len);
			cr_expect_eq(memcmp(done[i]->buf, done[i]->key, done[i]->key_len), 0);
		}
		finished += (unsigned)n;
	}
	cr_expect_eq(kvc_inflight(h), 0);
}

/* Poll until n ops came back; each must have status 0. */
static void poll_all_ok(kvc_t *c, unsigned n)
{
	struct kvc_op *done[64];
	unsigned finished = 0;

	while (finished < n) {
		int got = kvc_poll(c, done, 64, 1000);

		cr_assert_gt(got, 0, "%s", got < 0 ? kvc_err_name(got) : "nothing came back in 1 s");
		for (int i = 0; i < got; i++)
			cr_expect_eq(done[i]->status, 0, "%s", kvc_err_name(done[i]->status));
		finished += (unsigned)got;
	}
}

Test(dpath, submit_many_starts_in_order_and_stops_at_the_first_it_cannot)
{
	enum { N = 40 };
	struct kvc_op ops[N], *p[N];
	char keys[N][16], bufs[N][32];
	kvc_t *deep;

	/* More than the handle takes: the first 16 start, the 17th says why. */
	for (int i = 0; i < 20; i++) {
		snprintf(keys[i], sizeof(keys[i]), "many-%d", i);
		ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[i], .key_len = strlen(keys[i]),
					  .value = keys[i], .value_len = strlen(keys[i]), .status = 7 };
		p[i] = &ops[i];
	}
	cr_assert_eq(kvc_submit_many(h, p, 20), 16, "depth is 16");
	cr_expect_eq(ops[16].status, KVC_EAGAIN);
	cr_expect_eq(ops[17].status, 7, "not looked at");
	poll_all_ok(h, 16);

	/* A bad op in the middle: those before it start, it says why, none after. */
	for (int i = 0; i < 3; i++)
		ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = keys[i], .key_len = strlen(keys[i]),
					  .buf = bufs[i], .buf_len = sizeof(bufs[i]) };
	ops[1].key_len = 0;
	cr_assert_eq(kvc_submit_many(h, p, 3), 1);
	cr_expect_eq(ops[1].status, KVC_EKEYSIZE);
	cr_expect_eq(kvc_inflight(h), 1);
	poll_all_ok(h, 1);
	cr_expect_eq(memcmp(bufs[0], keys[0], strlen(keys[0])), 0);

	/* Bad arguments: nothing starts. */
	cr_expect_eq(kvc_submit_many(NULL, p, 1), KVC_EINVAL);
	cr_expect_eq(kvc_submit_many(h, NULL, 1), KVC_EINVAL);
	cr_expect_eq(kvc_submit_many(h, p, 0), 0);
	p[0] = NULL;
	cr_expect_eq(kvc_submit_many(h, p, 1), KVC_EINVAL);
	cr_expect_eq(kvc_inflight(h), 0);

	/* A deeper handle: more than one group of keys hashed together, every
	 * value where its key says, written by one handle, read by another. */
	cr_assert_eq(kvt_env_client(&env, NULL, 1024, N, &deep), 0);
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "deep-%d", i);
		ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[i], .key_len = strlen(keys[i]),
					  .value = keys[i], .value_len = strlen(keys[i]) };
		p[i] = &ops[i];
	}
	cr_assert_eq(kvc_submit_many(deep, p, N), N);
	poll_all_ok(deep, N);
	for (int round = 0; round < 2; round++) { /* uncached, then cached locations */
		for (int i = 0; i < N; i++) {
			ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = keys[i], .key_len = strlen(keys[i]),
						  .buf = bufs[i], .buf_len = sizeof(bufs[i]) };
			memset(bufs[i], 0, sizeof(bufs[i]));
		}
		cr_assert_eq(kvc_submit_many(round ? deep : h, p, round ? N : 16), round ? N : 16);
		poll_all_ok(round ? deep : h, round ? N : 16);
		for (int i = 0; i < (round ? N : 16); i++) {
			cr_expect_eq(ops[i].value_len, strlen(keys[i]));
			cr_expect_eq(memcmp(bufs[i], keys[i], strlen(keys[i])), 0, "%s", keys[i]);
		}
	}
	kvc_destroy(deep);
}

static int fail_every_op(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg, (void)rm, (void)op;
	return KVC_EIO;
}

/* The first op's doorbell breaks the connection: the next one is not
 * started only to fail, it stays the caller's with the reason. */
Test(dpath, submit_many_stops_where_the_connection_broke)
{
	struct kvi_local_hooks hooks = { .before_op = fail_every_op };
	struct kvc_op ops[3], *p[3], *done[3];
	char bufs[3][16];
	kvc_t *c;

	cr_assert_eq(kvt_put_s(h, "brk", "v"), 0);
	cr_assert_eq(kvt_env_client(&env, &hooks, 1024, 4, &c), 0);
	for (int i = 0; i < 3; i++) {
		ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = "brk", .key_len = 3, .buf = bufs[i],
					  .buf_len = sizeof(bufs[i]) };
		p[i] = &ops[i];
	}
	cr_assert_eq(kvc_submit_many(c, p, 3), 1);
	cr_expect(ops[1].status == KVC_ESERVERGONE || ops[1].status == KVC_EFENCED, "%s",
		  kvc_err_name(ops[1].status));
	cr_assert_eq(kvc_poll(c, done, 3, 1000), 1);
	cr_expect_neq(done[0]->status, 0, "the first failed: %s", kvc_err_name(done[0]->status));
	kvc_destroy(c);
}

Test(dpath, server_stats_report_segments_and_cpu)
{
	struct kvc_server_stats ss;

	cr_assert_eq(kvt_put_s(h, "s", "v"), 0);
	cr_assert_eq(kvc_server_stats(h, &ss), 0);
	cr_expect_geq(ss.segments_used, 1);
	cr_expect_gt(ss.segments_total, ss.segments_used);
	cr_expect_gt(ss.cpu_ns, 0);
	/* The index and the extents handed out: the first one is small. */
	cr_expect_gt(ss.bytes_used, kvs_core_geometry(env.srv.core)->bucket_count * KVI_BUCKET_SIZE);
	cr_expect_leq(ss.bytes_used, kvs_core_geometry(env.srv.core)->bucket_count * KVI_BUCKET_SIZE + KVS_MIN_EXTENT);
}

Test(dpath, stat_names_cover_every_kind)
{
	for (int k = 0; k < KVC_STAT_KINDS; k++)
		cr_expect_str_neq(kvc_stat_name(k), "unknown");
	cr_expect_str_eq(kvc_stat_name(KVC_STAT_KINDS), "unknown");
}

/* --- threads (shared with the TSan runner) -------------------------------- */

#define X(name, what) \
	Test(dpath_threads, name, .timeout = 300) { const char *why = name(); cr_expect_null(why, "%s: %s", what, why); }
KVT_DPATH_SCENARIOS(X)
#undef X
