/* Reclamation: the server's reclaimer against real clients over the local
 * transport. What is dropped, moved, evicted and expired; races of the slot
 * switch with writers and readers (hooks pause either side); memory that
 * stays bounded while clients write many times the heap. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dpath_check.h"
#include "hash.h"
#include "kvclient_errors.h"

#define MAX_OP_MS 50u
#define QUARANTINE_MS (2 * MAX_OP_MS + KVS_QUARANTINE_MARGIN_MS)
#define SETTLE_US ((MAX_OP_MS + KVS_QUARANTINE_MARGIN_MS) * 1000u + 5000u)

static struct kvt_env env;
static struct kvs_reclaimer *rcl;
static struct kvs_reclaim_hooks rhooks;

static void setup_with(uint64_t mib, uint64_t buckets, int no_evict, uint32_t max_op_ms)
{
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = 64u << 10, .max_op_ms = max_op_ms,
				   .quarantine_ms = 2 * max_op_ms + KVS_QUARANTINE_MARGIN_MS,
				   .no_evict = no_evict };

	cr_assert_eq(kvt_env_init_opts(&env, mib, &o), 0);
	cr_assert_eq(kvt_env_reclaimer(&env, &rhooks, &rcl), 0);
}

static void setup(void)
{
	setup_with(4, 0, 0, MAX_OP_MS);
}

static void teardown(void)
{
	kvs_reclaim_destroy(rcl);
	rcl = NULL;
	kvt_env_fini(&env);
	memset(&rhooks, 0, sizeof(rhooks));
}

static kvc_t *client(const struct kvi_local_hooks *hk, unsigned cache)
{
	kvc_t *c = NULL;

	cr_assert_eq(kvt_env_client(&env, hk, cache, 4, &c), 0);
	return c;
}

/* Wait until every sealed segment has settled, then reclaim them all. */
static unsigned reclaim_all(void)
{
	unsigned n = 0;
	int rc;

	/* Twice: the first round also seals the shared carving segment, which
	 * then has to settle. */
	for (int round = 0; round < 2; round++) {
		usleep(SETTLE_US);
		while ((rc = kvs_reclaim_one(rcl)) != 0) {
			cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
			n += rc == 1;
		}
	}
	return n;
}

static struct kvs_core_stats stats(void)
{
	struct kvs_core_stats st;

	kvs_core_stats(env.srv.core, &st);
	return st;
}

/* The object a slot in the key's two buckets names (the last one found;
 * NULL if none). */
static const struct kvi_obj_hdr *obj_of(const char *key)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	const uint8_t *base = kvs_core_region(env.srv.core);
	const struct kvi_obj_hdr *found = NULL;
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), sb->hash_seed, sb->bucket_count, &kh);
	for (int w = 0; w < (kh.b[0] == kh.b[1] ? 1 : 2); w++) { /* hash.h: they may coincide */
		const struct kvi_bucket *b = (const void *)(base + kvi_home_bucket_off(sb, kh.b[w]));

		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			const struct kvi_obj_hdr *oh;

			if (!b->slot[i] || kvi_slot_fp(b->slot[i]) != kh.fp)
				continue;
			oh = (const void *)(base + kvi_slot_obj_off(b->slot[i]));
			if (oh->key_len == strlen(key) && memcmp(oh + 1, key, oh->key_len) == 0)
				found = oh;
		}
	}
	return found;
}

static void value_of(char *v, size_t cap, const char *tag, unsigned i)
{
	snprintf(v, cap, "%s-%u-%0*u", tag, i, 150, i); /* ~160 bytes */
}

TestSuite(reclaim, .init = setup, .fini = teardown, .timeout = 120);

Test(reclaim, superseded_versions_are_dropped_and_the_key_keeps_its_last_value)
{
	kvc_t *a = client(NULL, 0), *b = client(NULL, 0);
	char v[200], got[256];
	struct kvs_core_stats st;
	unsigned n;

	for (unsigned i = 0; i < 2000; i++) {
		value_of(v, sizeof(v), "k", i);
		cr_assert_eq(kvt_put_s(a, "k", v), 0);
	}
	cr_assert_eq(kvt_get_s(b, "k", got, sizeof(got)), 0); /* read: it is kept */
	cr_assert_eq(kvt_get_s(b, "k", got, sizeof(got)), 0); /* carries the access mark */
	kvc_destroy(a);
	n = reclaim_all();
	st = stats();
	cr_expect_gt(n, 3, "the writer's extents were reclaimed");
	cr_expect_eq(st.rc.segments, n);
	cr_expect_eq(st.rc.dropped, 1999, "every superseded version dropped: %lu", (unsigned long)st.rc.dropped);
	cr_expect_eq(st.rc.moved, 1, "the last version, read, copied forward");
	cr_expect_eq(st.rc.evictions, 0);
	cr_expect_eq(st.segments_quarantined, n);
	cr_assert_eq(kvt_get_s(b, "k", got, sizeof(got)), 0);
	value_of(v, sizeof(v), "k", 1999);
	cr_expect_str_eq(got, v);
	cr_expect_eq(kvt_key_slots(&env, "k", NULL, 0, NULL), 1);
	kvc_destroy(b);
}

/* A copy the reclaimer makes is the same item: its flags word and CAS unique
 * stay what the store gave it (layout.h "CAS uniques"), and a cas store
 * with that unique still succeeds on the copy. */
Test(reclaim, a_copy_forward_keeps_the_flags_and_the_unique)
{
	kvc_t *a = client(NULL, 0), *b = client(NULL, 0);
	char v[200], got[256];
	uint64_t cas = 0, got_cas = 0;
	uint32_t flags = 0;
	size_t n = 0;

	for (unsigned i = 0; i < 500; i++) {
		value_of(v, sizeof(v), "k", i);
		cr_assert_eq(kvc_store(a, KVC_STORE_SET, "k", 1, v, strlen(v), 0xc0ffee00u + i, 0, 0, &cas), 0);
	}
	cr_assert_eq(kvc_get(b, "k", 1, got, sizeof(got), &n), 0); /* read: it is kept */
	cr_assert_eq(kvc_get(b, "k", 1, got, sizeof(got), &n), 0); /* carries the access mark */
	kvc_destroy(a);
	cr_assert_gt(reclaim_all(), 0);
	cr_assert_eq(stats().rc.moved, 1, "the last version, read, copied forward");
	cr_assert_eq(kvc_get_item(b, "k", 1, got, sizeof(got), &n, &flags, &got_cas), 0);
	cr_expect_eq(flags, 0xc0ffee00u + 499);
	cr_expect_eq(got_cas, cas, "the copy kept the unique");
	cr_expect_eq(kvc_store(b, KVC_STORE_CAS, "k", 1, "x", 1, 0, 0, cas, NULL), 0, "cas on the copy");
	kvc_destroy(b);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* Stores through several times the heap, with segments reclaimed and
 * handed out again (the same bytes, new extents): no unique ever comes back. */
Test(reclaim, uniques_never_repeat_across_memory_reuse)
{
	enum { N = 48000, KEYS = 40 };
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	kvc_t *a = client(NULL, 0), *b = client(NULL, 1024);
	static uint64_t seen[N];
	char key[16], v[200];
	uint64_t footprint = 0;

	for (unsigned i = 0; i < N; i++) {
		kvc_t *c = i % 2 ? a : b;
		int rc;

		snprintf(key, sizeof(key), "u%u", i % KEYS);
		value_of(v, sizeof(v), key, i);
		footprint += kvi_obj_footprint(kvi_obj_len((uint32_t)strlen(key), (uint32_t)strlen(v), 0));
		if (i % 3000 == 2999)
			(void)reclaim_all();
		rc = kvc_store(c, i < KEYS ? KVC_STORE_ADD : KVC_STORE_REPLACE, key, strlen(key), v, strlen(v), i, 0, 0,
			       &seen[i]);
		cr_assert_eq(rc, 0, "store %u: %s", i, kvc_err_name(rc));
		cr_assert_neq(seen[i], 0);
	}
	cr_assert_gt(footprint, 2 * sb->heap_size, "the heap was written over several times");
	cr_assert_gt(stats().rc.segments, sb->heap_size / sb->segment_size, "segments were reused");
	qsort(seen, N, sizeof(seen[0]), cmp_u64);
	for (unsigned i = 1; i < N; i++)
		cr_assert_neq(seen[i], seen[i - 1], "a unique came back after memory reuse");
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(reclaim, cold_items_are_evicted_and_read_items_copied_forward)
{
	kvc_t *a = client(NULL, 0), *b = client(NULL, 1024);
	char k[32], v[200], got[256];
	struct kvs_core_stats st;

	for (unsigned i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "item-%u", i);
		value_of(v, sizeof(v), k, i);
		cr_assert_eq(kvt_put_s(a, k, v), 0);
	}
	/* Live data fills most of the segment (else reclaiming it would copy
	 * even the cold items: nothing would need to go). */
	for (unsigned i = 0; i < 200; i++) {
		snprintf(k, sizeof(k), "filler-%u", i);
		cr_assert_eq(kvt_put_s(a, k, v), 0);
	}
	kvc_destroy(a); /* seals its extent */
	for (unsigned i = 0; i < 50; i++) {
		snprintf(k, sizeof(k), "item-%u", i);
		cr_assert_eq(kvt_get_s(b, k, got, sizeof(got)), 0);
	}
	cr_assert_eq(kvt_get_s(b, "item-0", got, sizeof(got)), 0); /* carries the last marks */
	cr_assert_eq(kvt_get_s(b, "item-0", got, sizeof(got)), 0);
	cr_expect_geq(reclaim_all(), 1);
	st = stats();
	/* The read items and, from segments that were mostly garbage or empty,
	 * some fillers are moved; the cold items of full segments are evicted. */
	cr_expect_geq(st.rc.moved, 50, "moved %lu", (unsigned long)st.rc.moved);
	cr_expect_geq(st.rc.evictions, 50, "evicted %lu", (unsigned long)st.rc.evictions);
	cr_expect_eq(st.rc.evicted_unfetched, st.rc.evictions, "only unread items are evicted");
	for (unsigned i = 0; i < 100; i++) {
		int rc;

		snprintf(k, sizeof(k), "item-%u", i);
		rc = kvt_get_s(b, k, got, sizeof(got)); /* b's cached locations are stale: it must notice */
		if (i < 50) {
			cr_expect_eq(rc, 0, "%s: %s", k, kvc_err_name(rc));
			value_of(v, sizeof(v), k, i);
			cr_expect_str_eq(got, v);
		} else {
			cr_expect_eq(rc, KVC_ENOTFOUND, "%s was cold and evicted: %s", k, kvc_err_name(rc));
			cr_expect_eq(kvt_key_slots(&env, k, NULL, 0, NULL), 0);
		}
	}
	kvc_destroy(b);
}

/* A lock doorbell takes up to LOCK_BATCH (7) buckets, and every slot of them
 * may be switched in one batch: 7 x 31 slot writes. A small index full of
 * one segment's items, all read (so all copied forward), makes that happen. */
Test(reclaim, a_batch_that_switches_every_slot_of_its_buckets_copies_every_item_intact)
{
	enum { NK = 220 };
	kvc_t *a, *b;
	char k[32], v[32], got[64];
	struct kvs_core_stats st;
	unsigned bad = 0;

	teardown();
	setup_with(4, 8, 0, MAX_OP_MS); /* 8 buckets, 248 slots: ~27 items per bucket */
	a = client(NULL, 0);
	b = client(NULL, 0);
	for (unsigned i = 0; i < NK; i++) {
		snprintf(k, sizeof(k), "full-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		cr_assert_eq(kvt_put_s(a, k, v), 0, "%s", k);
	}
	kvc_destroy(a); /* seals its extent: one segment holds every item */
	for (int round = 0; round < 2; round++) { /* read, then carry the marks */
		for (unsigned i = 0; i < NK; i++) {
			snprintf(k, sizeof(k), "full-%u", i);
			cr_assert_eq(kvt_get_s(b, k, got, sizeof(got)), 0, "%s", k);
		}
	}
	cr_expect_geq(reclaim_all(), 1);
	st = stats();
	cr_expect_eq(st.rc.moved, NK, "every item was read: every item is copied forward");
	for (unsigned i = 0; i < NK; i++) {
		int rc;

		snprintf(k, sizeof(k), "full-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		rc = kvt_get_s(b, k, got, sizeof(got));
		if (rc != 0 || strcmp(got, v) != 0)
			if (bad++ < 5)
				cr_expect_fail("%s: %s '%s'", k, kvc_err_name(rc), rc == 0 ? got : "");
	}
	cr_expect_eq(bad, 0, "%u of %u items lost or changed by their copy", bad, NK);
	kvc_destroy(b);
}

/* The header flags of the object of key's slot (asserting there is one). */
static uint8_t obj_flags_of(const char *key)
{
	struct kvi_keyhash kh = kvt_hash_of(&env, key);

	for (unsigned w = 0; w < 2; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t sl = *kvt_slot_ptr(&env, kh.b[w], i);
			const struct kvi_obj_hdr *h;

			if (!sl || kvi_slot_fp(sl) != (kh.fp & ((1u << KVI_SLOT_FP_BITS) - 1)))
				continue;
			h = (const void *)(kvt_base(&env) + kvi_slot_obj_off(sl));
			if (h->key_len == strlen(key) && memcmp(h + 1, key, h->key_len) == 0)
				return h->flags;
		}
	cr_assert_fail("%s has no slot", key);
	return 0;
}

Test(reclaim, expired_items_are_cleared_and_counted)
{
	kvc_t *a = client(NULL, 0);
	char k[32];
	struct kvs_core_stats st;

	for (unsigned i = 0; i < 20; i++) {
		snprintf(k, sizeof(k), "ttl-%u", i);
		cr_assert_eq(kvc_put(a, k, strlen(k), "v", 1, 100), 0);
	}
	cr_assert_eq(kvt_put_s(a, "forever", "v"), 0);
	kvc_destroy(a);
	usleep(200 * 1000); /* past the 100 ms expiry */
	reclaim_all();
	st = stats();
	cr_expect_eq(st.rc.expired, 20);
	cr_expect_eq(st.rc.expired_unfetched, 20);
	cr_expect_eq(st.rc.evictions, 0, "a segment of mostly garbage evicts nothing");
	cr_expect_eq(st.rc.moved, 1, "the one live item, unread, was kept");
	/* ... and its copy was not taken for one that had been read: evicted
	 * later, it counts as evicted_unfetched. */
	cr_expect_eq(obj_flags_of("forever") & KVI_OBJ_F_FETCHED, 0, "an unread item's copy is marked fetched");
	for (unsigned i = 0; i < 20; i++) {
		snprintf(k, sizeof(k), "ttl-%u", i);
		cr_expect_eq(kvt_key_slots(&env, k, NULL, 0, NULL), 0, "%s still has a slot", k);
	}
}

Test(reclaim, an_insert_takes_the_slot_of_an_expired_item)
{
	kvc_t *a;
	char k[32], got[16], nk[32];
	struct kvc_stats cs;
	unsigned n = 0;

	teardown();
	setup_with(4, 2, 1, MAX_OP_MS); /* two buckets: 62 slots for every key; no eviction */
	a = client(NULL, 0);
	for (unsigned i = 0, next = 0; i < 2 * KVI_SLOTS_PER_BUCKET; i++) {
		kvt_spread_key(&env, "short", &next, k, sizeof(k));
		n += kvc_put(a, k, strlen(k), "v", 1, 500) == 0;
	}
	cr_assert_eq(n, 2 * KVI_SLOTS_PER_BUCKET);
	kvt_spread_key(&env, "newcomer", &(unsigned){ 0 }, nk, sizeof(nk));
	cr_expect_eq(kvt_put_s(a, nk, "here"), KVC_EINDEXFULL, "every slot holds a live item");
	usleep(600 * 1000);
	cr_expect_eq(kvt_put_s(a, nk, "here"), 0);
	cr_expect_eq(kvt_get_s(a, nk, got, sizeof(got)), 0);
	cr_expect_str_eq(got, "here");
	kvc_get_stats(a, &cs);
	cr_expect_eq(cs.expired_reused, 1);
	cr_expect_eq(cs.index_evictions, 0);
	kvc_destroy(a);
}

Test(reclaim, a_cache_with_a_full_bucket_pair_evicts_an_unread_item_there)
{
	enum { NK = 2 * KVI_SLOTS_PER_BUCKET };
	char k[NK][32], nk[32], got[16];
	struct kvc_stats cs;
	unsigned present = 0, next = 0;
	kvc_t *a;

	teardown();
	setup_with(4, 2, 0, MAX_OP_MS); /* two buckets, eviction on */
	a = client(NULL, 0);
	/* Keys whose two choices differ: each may use all of both buckets. */
	for (unsigned i = 0; i < NK; i++) {
		kvt_spread_key(&env, "set", &next, k[i], sizeof(k[i]));
		cr_assert_eq(kvt_put_s(a, k[i], "v"), 0);
	}
	/* Read every item but the eighth, twice (the second read carries the mark). */
	for (int round = 0; round < 2; round++) {
		for (unsigned i = 0; i < NK; i++) {
			if (i != 7)
				cr_assert_eq(kvt_get_s(a, k[i], got, sizeof(got)), 0, "%s", k[i]);
		}
	}
	kvt_spread_key(&env, "newcomer", &next, nk, sizeof(nk));
	cr_expect_eq(kvt_put_s(a, nk, "here"), 0, "a cache makes room, like a full CPU cache set");
	cr_expect_eq(kvt_get_s(a, nk, got, sizeof(got)), 0);
	cr_expect_eq(kvt_get_s(a, k[7], got, sizeof(got)), KVC_ENOTFOUND, "the one unread item went");
	for (unsigned i = 0; i < NK; i++)
		present += kvt_get_s(a, k[i], got, sizeof(got)) == 0;
	cr_expect_eq(present, NK - 1);
	kvc_get_stats(a, &cs);
	cr_expect_eq(cs.index_evictions, 1);
	kvc_destroy(a);
}

/* ---- races --------------------------------------------------------------- */

static kvc_t *racer;
static int race_rc;

static void put_during_reclaim(void *arg)
{
	(void)arg;
	race_rc = kvt_put_s(racer, "raced", "newer");
}

static void delete_during_reclaim(void *arg)
{
	(void)arg;
	race_rc = kvc_delete(racer, "raced", strlen("raced"));
}

/* "raced" = "older", written by a client that then leaves (sealing its
 * extent) and read twice by the returned one (so it is marked read); the
 * racer is opened and the reclaimer remade with these hooks. */
static kvc_t *setup_race(struct kvs_reclaim_hooks hooks)
{
	kvc_t *a = client(NULL, 0), *b = client(NULL, 0);
	char got[64];

	racer = client(NULL, 0);
	cr_assert_eq(kvt_put_s(a, "raced", "older"), 0);
	cr_assert_eq(kvt_get_s(b, "raced", got, sizeof(got)), 0);
	cr_assert_eq(kvt_get_s(b, "raced", got, sizeof(got)), 0);
	kvc_destroy(a);
	rhooks = hooks;
	kvs_reclaim_destroy(rcl);
	cr_assert_eq(kvt_env_reclaimer(&env, &rhooks, &rcl), 0);
	return b;
}

/* The item is live (and read) when the walk finds it; before the reclaimer
 * locks its bucket, a writer replaces or deletes it. */
static void race_walk_and(void (*fn)(void *), int want_get, const char *want_val)
{
	kvc_t *b = setup_race((struct kvs_reclaim_hooks){ .before_lock = fn });
	char got[64];
	struct kvs_core_stats st;

	reclaim_all();
	cr_assert_eq(race_rc, 0);
	st = stats();
	cr_expect_eq(st.rc.moved, 0, "the copy of a replaced item is never published");
	cr_expect_eq(kvt_get_s(b, "raced", got, sizeof(got)), want_get);
	cr_expect_str_eq(got, want_val);
	cr_expect_eq(kvt_key_slots(&env, "raced", NULL, 0, NULL), want_get == 0);
	kvc_destroy(b);
	kvc_destroy(racer);
}

Test(reclaim, an_update_racing_the_switch_is_never_overwritten_by_the_copy)
{
	race_walk_and(put_during_reclaim, 0, "newer");
}

Test(reclaim, a_delete_racing_the_switch_is_never_undone)
{
	race_walk_and(delete_during_reclaim, KVC_ENOTFOUND, "");
}

/* With the bucket locked by the reclaimer (copy made, slot not switched), a
 * writer cannot get in: the switch is atomic for everybody else. */
static void impatient_put(void *arg)
{
	(void)arg;
	kvi_client_conn(racer, 0)->op_timeout_ms = 30;
	race_rc = kvt_put_s(racer, "raced", "blocked");
}

Test(reclaim, writers_wait_while_the_reclaimer_holds_the_bucket)
{
	kvc_t *b = setup_race((struct kvs_reclaim_hooks){ .before_switch = impatient_put });
	char got[64];

	reclaim_all();
	cr_expect_eq(race_rc, KVC_ETIMEDOUT, "the writer got %s", kvc_err_name(race_rc));
	cr_expect_eq(stats().rc.moved, 1);
	cr_expect_eq(kvt_get_s(b, "raced", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "older", "moved, not lost");
	kvc_destroy(b);
	kvc_destroy(racer);
}

/* A reader between its bucket READ and its object READ: the reclaimer runs
 * in between (moving or evicting the object and zeroing the segment). */
struct pause {
	int armed, fired;
	uint64_t heap_off;
	void (*fn)(void);
};
static struct pause pz;

static int pause_before_object_read(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (pz.armed && op->kind == KVI_ROP_READ && op->roff >= pz.heap_off && op->len != 8) {
		pz.armed = 0;
		pz.fired++;
		pz.fn();
	}
	return 0;
}

static void reclaim_now(void)
{
	while (kvs_reclaim_one(rcl) > 0)
		;
}

static void stalled_reader(int read_first, int want_rc, const char *want_val)
{
	struct kvi_local_hooks hk = { .before_op = pause_before_object_read };
	kvc_t *a = client(NULL, 0), *b = client(NULL, 0), *r = client(&hk, 0);
	char got[64];
	struct kvc_stats cs;

	cr_assert_eq(kvt_put_s(a, "paused", "the-value"), 0);
	if (read_first) {
		cr_assert_eq(kvt_get_s(b, "paused", got, sizeof(got)), 0);
		cr_assert_eq(kvt_get_s(b, "paused", got, sizeof(got)), 0);
	} else {
		char k[32], v[200];

		/* Live, unread data fills its segment: the cold item is evicted. */
		for (unsigned i = 0; i < 200; i++) {
			snprintf(k, sizeof(k), "filler-%u", i);
			value_of(v, sizeof(v), k, i);
			cr_assert_eq(kvt_put_s(a, k, v), 0);
		}
	}
	kvc_destroy(a);
	/* Sealed and settled before the reader starts: its deadline is not spent
	 * waiting (the first call seals the shared carving segment). */
	cr_assert_eq(kvs_reclaim_one(rcl), 0);
	usleep(SETTLE_US);
	pz = (struct pause){ .armed = 1, .heap_off = kvs_core_geometry(env.srv.core)->heap_off, .fn = reclaim_now };
	cr_expect_eq(kvt_get_s(r, "paused", got, sizeof(got)), want_rc);
	cr_expect_str_eq(got, want_val);
	cr_expect_eq(pz.fired, 1);
	kvc_get_stats(r, &cs);
	cr_expect_geq(cs.verify_retries, 1, "the reader read the zeroed segment and looked again");
	kvc_destroy(b);
	kvc_destroy(r);
}

Test(reclaim, a_reader_paused_across_a_move_returns_the_value)
{
	stalled_reader(1, 0, "the-value");
}

Test(reclaim, a_reader_paused_across_an_eviction_misses)
{
	stalled_reader(0, KVC_ENOTFOUND, "");
}

/* Stalled across reclaim, quarantine and reuse: the bytes it reads at the old
 * place now belong to other objects. It must fail with KVC_ETIMEDOUT. */
static kvc_t *refiller;

static void reclaim_and_reuse(void)
{
	char k[32], v[200];

	reclaim_now();
	usleep(QUARANTINE_MS * 1000u + 5000u);
	kvs_core_tick(env.srv.core, 0);
	/* Rewrite the heap with the same key at new values: the old offset now
	 * holds some newer object. */
	for (unsigned i = 0; i < 3000; i++) {
		snprintf(k, sizeof(k), "other-%u", i);
		value_of(v, sizeof(v), k, i);
		cr_assert_eq(kvt_put_s(refiller, k, v), 0);
	}
}

Test(reclaim, a_reader_stalled_across_reuse_times_out_and_never_returns_foreign_bytes)
{
	struct kvi_local_hooks hk = { .before_op = pause_before_object_read };
	kvc_t *a = client(NULL, 0), *r = client(&hk, 0);
	char got[64];
	int rc;

	refiller = client(NULL, 0);
	cr_assert_eq(kvt_put_s(a, "paused", "the-value"), 0);
	kvc_destroy(a);
	cr_assert_eq(kvs_reclaim_one(rcl), 0);
	usleep(SETTLE_US);
	pz = (struct pause){ .armed = 1, .heap_off = kvs_core_geometry(env.srv.core)->heap_off,
			     .fn = reclaim_and_reuse };
	rc = kvt_get_s(r, "paused", got, sizeof(got));
	cr_expect_eq(rc, KVC_ETIMEDOUT, "got %s '%s'", kvc_err_name(rc), got);
	kvc_destroy(r);
	kvc_destroy(refiller);
}

/* ---- memory stays bounded ------------------------------------------------ */

struct bg {
	pthread_t t;
	int stop, err;
	unsigned runs;
};

static void *reclaimer_thread(void *arg)
{
	struct bg *g = arg;

	while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
		int rc = kvs_reclaim_run(rcl);

		if (rc < 0) {
			g->err = rc;
			break;
		}
		g->runs += (unsigned)rc;
		kvs_core_tick(env.srv.core, 0);
		usleep(200);
	}
	return NULL;
}

static void bg_start(struct bg *g)
{
	memset(g, 0, sizeof(*g));
	cr_assert_eq(pthread_create(&g->t, NULL, reclaimer_thread, g), 0);
}

static void bg_stop(struct bg *g)
{
	__atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
	pthread_join(g->t, NULL);
	cr_expect_eq(g->err, 0, "reclaimer: %s", kvc_err_name(g->err));
}

/* Updates writing `times` x the heap over a working set of 30 % of it. */
static void sustained_updates(int no_evict, unsigned times)
{
	const struct kvi_geometry *sb;
	static uint32_t last[4096];
	uint64_t written = 0;
	unsigned keys, failed = 0, missing = 0, wrong = 0;
	uint64_t rng = 88172645463325252ull;
	struct kvs_core_stats st;
	char k[32], v[600], got[700];
	struct bg g;
	kvc_t *a;

	teardown();
	setup_with(2, 0, no_evict, MAX_OP_MS);
	sb = kvs_core_geometry(env.srv.core);
	a = client(NULL, 1024);
	keys = (unsigned)(sb->heap_size * 3 / 10 / 560);
	cr_assert_leq(keys, 4096);
	memset(last, 0xff, sizeof(last));
	bg_start(&g);
	for (uint32_t seq = 0; written < times * sb->heap_size && failed < 100; seq++) {
		unsigned i;
		int rc;

		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		i = (unsigned)(rng % keys);
		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "%u:%0500u", seq, seq);
		rc = kvt_put_s(a, k, v);
		if (rc) {
			if (!failed++)
				cr_log_warn("first failed PUT: %s after %lu bytes\n", kvc_err_name(rc),
					    (unsigned long)written);
			continue;
		}
		last[i] = seq;
		written += kvi_obj_footprint(kvi_obj_len((uint32_t)strlen(k), (uint32_t)strlen(v), 0));
	}
	bg_stop(&g);
	for (unsigned i = 0; i < keys; i++) {
		int rc;

		if (last[i] == UINT32_MAX)
			continue;
		snprintf(k, sizeof(k), "key-%u", i);
		rc = kvt_get_s(a, k, got, sizeof(got));
		if (rc == KVC_ENOTFOUND) {
			missing++;
			continue;
		}
		cr_assert_eq(rc, 0, "%s: %s", k, kvc_err_name(rc));
		if ((uint32_t)strtoul(got, NULL, 10) != last[i])
			wrong++;
	}
	st = stats();
	cr_expect_eq(failed, 0, "%u PUTs failed", failed);
	cr_expect_eq(wrong, 0, "%u keys read a value other than their last acknowledged one", wrong);
	if (no_evict)
		cr_expect_eq(missing, 0, "%u keys lost without eviction", missing);
	cr_expect_gt(st.rc.segments, times, "reclaimed %lu segments", (unsigned long)st.rc.segments);
	cr_log_info("%ux heap, no_evict=%d: %lu segments reclaimed, %lu dropped, %lu moved, %lu evicted, %u keys "
		    "missing of %u, %lu grants deferred\n",
		    times, no_evict, (unsigned long)st.rc.segments, (unsigned long)st.rc.dropped,
		    (unsigned long)st.rc.moved, (unsigned long)st.rc.evictions, missing, keys,
		    (unsigned long)st.grants_deferred);
	kvc_destroy(a);
}

Test(reclaim, sustained_updates_of_50x_the_heap_without_eviction_keep_every_last_value)
{
	sustained_updates(1, 50);
}

Test(reclaim, sustained_updates_with_eviction_never_fail_or_read_an_old_value)
{
	sustained_updates(0, 20);
}

Test(reclaim, live_data_three_times_the_heap_keeps_the_newest_keys)
{
	const struct kvi_geometry *sb;
	unsigned n, failed = 0, recent_missing = 0;
	char k[32], v[600], got[700];
	struct bg g;
	kvc_t *a;

	teardown();
	setup_with(2, 0, 0, MAX_OP_MS);
	sb = kvs_core_geometry(env.srv.core);
	a = client(NULL, 0);
	n = (unsigned)(3 * sb->heap_size / 560);
	bg_start(&g);
	for (unsigned i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "fill-%u", i);
		snprintf(v, sizeof(v), "%0500u", i);
		failed += kvt_put_s(a, k, v) != 0;
	}
	bg_stop(&g);
	cr_expect_eq(failed, 0, "%u of %u PUTs failed", failed, n);
	/* The newest tenth of the heap was written after the last reclamation
	 * could have reached it. */
	for (unsigned i = n - (unsigned)(sb->heap_size / 10 / 560); i < n; i++) {
		snprintf(k, sizeof(k), "fill-%u", i);
		recent_missing += kvt_get_s(a, k, got, sizeof(got)) != 0;
	}
	cr_expect_eq(recent_missing, 0, "%u of the newest keys missing", recent_missing);
	cr_expect_gt(stats().rc.evictions, 0);
	kvc_destroy(a);
}

Test(reclaim, a_thousand_one_shot_clients_all_succeed)
{
	char k[32], got[64];
	unsigned failed = 0, missing = 0;
	struct bg g;

	teardown();
	setup_with(2, 0, 0, MAX_OP_MS);
	bg_start(&g);
	for (unsigned i = 0; i < 1000; i++) {
		kvc_t *c = NULL;

		snprintf(k, sizeof(k), "oneshot-%u", i);
		if (kvt_env_client(&env, NULL, 0, 1, &c) || kvt_put_s(c, k, k))
			failed++;
		kvc_destroy(c);
	}
	bg_stop(&g);
	cr_expect_eq(failed, 0);
	{
		kvc_t *c = client(NULL, 0);

		for (unsigned i = 0; i < 1000; i++) {
			snprintf(k, sizeof(k), "oneshot-%u", i);
			missing += kvt_get_s(c, k, got, sizeof(got)) != 0;
		}
		kvc_destroy(c);
	}
	cr_expect_eq(missing, 0, "%u keys missing: 1000 small items fit a 2 MiB server", missing);
	cr_expect_leq(stats().segments_total - stats().segments_free, 4);
}

Test(reclaim, no_evict_refuses_when_live_data_fills_the_heap_but_never_for_garbage)
{
	char k[32], v[600];
	unsigned n = 0, again = 0;
	struct bg g;
	kvc_t *a;
	int rc = 0;

	teardown();
	setup_with(2, 0, 1, MAX_OP_MS);
	a = client(NULL, 0);
	bg_start(&g);
	for (; n < 100000; n++) {
		snprintf(k, sizeof(k), "live-%u", n);
		snprintf(v, sizeof(v), "%0500u", n);
		rc = kvt_put_s(a, k, v);
		if (rc)
			break;
	}
	cr_expect_eq(rc, KVC_ENOMEM, "a full heap of live data: %s", kvc_err_name(rc));
	cr_expect_gt(n, 1000, "%u items of 560 bytes in 2 MiB", n);
	for (unsigned i = 0; i < n; i += 2) {
		snprintf(k, sizeof(k), "live-%u", i);
		cr_assert_eq(kvc_delete(a, k, strlen(k)), 0);
	}
	usleep(250000); /* the server's "full" verdict holds 200 ms */
	for (unsigned i = 0; i < n / 8; i++) {
		snprintf(k, sizeof(k), "more-%u", i);
		snprintf(v, sizeof(v), "%0500u", i);
		rc = kvt_put_s(a, k, v);
		if (rc && again == i)
			cr_log_warn("PUT after deletes: %s\n", kvc_err_name(rc));
		again += rc == 0;
	}
	bg_stop(&g);
	cr_expect_eq(again, n / 8, "deleted space is compacted and reused: %u of %u", again, n / 8);
	for (unsigned i = 1; i < n; i += 2) {
		char got[700];

		snprintf(k, sizeof(k), "live-%u", i);
		cr_assert_eq(kvt_get_s(a, k, got, sizeof(got)), 0, "%s lost without eviction", k);
	}
	kvc_destroy(a);
}

/* The access byte of the object a key's slot names. */
static uint8_t access_of(const char *key)
{
	const struct kvi_obj_hdr *oh = obj_of(key);

	cr_assert_not_null(oh, "%s has no slot", key);
	return oh->access;
}

Test(reclaim, a_read_marks_its_object_once_in_a_later_doorbell)
{
	kvc_t *a = client(NULL, 0), *quiet = client(NULL, 0);
	struct kvc_stats cs;
	char got[16];

	kvi_client_conn(quiet, 0)->o.track_access = 0;
	cr_assert_eq(kvt_put_s(a, "marked", "v"), 0);
	cr_assert_eq(kvt_put_s(a, "unmarked", "v"), 0);
	cr_expect_eq(access_of("marked"), 0, "written unread");
	cr_assert_eq(kvt_get_s(a, "marked", got, sizeof(got)), 0);
	cr_expect_eq(access_of("marked"), 0, "the mark waits for the next doorbell");
	cr_assert_eq(kvt_get_s(a, "unmarked-nothing", got, sizeof(got)), KVC_ENOTFOUND);
	cr_expect_eq(access_of("marked"), 1, "and rides in it");
	cr_assert_eq(kvt_get_s(a, "marked", got, sizeof(got)), 0);
	cr_assert_eq(kvt_get_s(a, "marked", got, sizeof(got)), 0);
	kvc_get_stats(a, &cs);
	cr_expect_eq(cs.access_marks, 1, "an object already marked is not marked again");
	cr_assert_eq(kvt_get_s(quiet, "unmarked", got, sizeof(got)), 0);
	cr_assert_eq(kvt_get_s(quiet, "unmarked", got, sizeof(got)), 0);
	cr_expect_eq(access_of("unmarked"), 0, "track_access = 0 marks nothing");
	kvc_destroy(a);
	kvc_destroy(quiet);
}

Test(reclaim, a_put_waiting_for_memory_does_not_block_the_caller)
{
	const struct kvi_geometry *sb;
	struct kvc_op op[2];
	struct kvc_op *done[2];
	char v[600];
	kvc_t *a;
	int n = 0;

	teardown();
	setup_with(2, 0, 0, MAX_OP_MS);
	sb = kvs_core_geometry(env.srv.core);
	a = client(NULL, 0);
	memset(v, 'x', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	/* Fill the heap with nothing reclaiming: the server runs out. */
	for (unsigned i = 0; i < 2 * sb->heap_size / 600 && n == 0; i++) {
		char k[32];

		snprintf(k, sizeof(k), "fill-%u", i);
		op[0] = (struct kvc_op){ .type = KVC_OP_PUT, .key = k, .key_len = strlen(k), .value = v,
					 .value_len = strlen(v) };
		cr_assert_eq(kvc_submit(a, &op[0]), 0);
		n = kvc_poll(a, done, 2, 0);
		if (n == 0)
			break; /* it is waiting for memory */
		cr_assert_eq(done[0]->status, 0);
		n = 0;
	}
	cr_assert_eq(kvc_inflight(a), 1, "a PUT is waiting for memory, and kvc_submit returned");
	/* The reclaimer makes room; the waiting PUT completes from kvc_poll. */
	usleep(SETTLE_US);
	while (kvs_reclaim_one(rcl) > 0)
		;
	usleep(QUARANTINE_MS * 1000u + 5000u);
	kvs_core_tick(env.srv.core, 0);
	n = kvc_poll(a, done, 2, 2000);
	cr_assert_eq(n, 1);
	cr_expect_eq(done[0]->status, 0, "%s", kvc_err_name(done[0]->status));
	kvc_destroy(a);
}

Test(reclaim, items_read_outlive_a_stream_of_keys_written_once)
{
	const struct kvi_geometry *sb;
	char k[32], v[600], got[700];
	unsigned hot = 200, lost = 0; /* read every 112 KB of stream: well inside the 200 KB small FIFO */
	struct bg g;
	kvc_t *a;

	teardown();
	setup_with(2, 0, 0, MAX_OP_MS);
	sb = kvs_core_geometry(env.srv.core);
	a = client(NULL, 0);
	memset(v, 'h', 500);
	v[500] = '\0';
	for (unsigned i = 0; i < hot; i++) {
		snprintf(k, sizeof(k), "hot-%u", i);
		cr_assert_eq(kvt_put_s(a, k, v), 0);
	}
	for (unsigned i = 0; i < 2 * hot; i++) { /* read, and the marks delivered */
		snprintf(k, sizeof(k), "hot-%u", i % hot);
		cr_assert_eq(kvt_get_s(a, k, got, sizeof(got)), 0);
	}
	bg_start(&g);
	/* A one-pass stream of four heaps, with the hot set (1/18 of the heap)
	 * read all along, cache-aside: read ones are copied into the main FIFO
	 * and stay; the stream, never read, leaves through the small one. */
	for (unsigned i = 0, n = (unsigned)(4 * sb->heap_size / 560); i < n; i++) {
		snprintf(k, sizeof(k), "stream-%u", i);
		cr_assert_eq(kvt_put_s(a, k, v), 0);
		snprintf(k, sizeof(k), "hot-%u", i % hot);
		if (kvt_get_s(a, k, got, sizeof(got)) != 0) {
			lost += i >= n / 2; /* counted once the stream filled the heap twice */
			cr_assert_eq(kvt_put_s(a, k, v), 0);
		}
	}
	bg_stop(&g);
	cr_expect_lt(lost, hot / 10, "%u reads of the hot set missed in the second half of the stream", lost);
	cr_expect_gt(stats().rc.moved, 0);
	kvc_destroy(a);
}

/* ---- kill at every step (kvt_fail_nth, for reclamation) ------------------ */

/* Every key where it should be: the read ones with their last value, the
 * unread ones with theirs or evicted; no key in two slots; no lock held. */
static void check_after_reclaim(unsigned step, unsigned nkeys)
{
	kvc_t *c = client(NULL, 0);
	const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
	char k[32], v[200], got[256];

	for (unsigned i = 0; i < nkeys; i++) {
		int rc;

		snprintf(k, sizeof(k), "hot-%u", i);
		value_of(v, sizeof(v), k, 1);
		cr_assert_eq(kvt_get_s(c, k, got, sizeof(got)), 0, "step %u: %s", step, k);
		cr_assert_str_eq(got, v, "step %u: %s", step, k);
		cr_assert_eq(kvt_key_slots(&env, k, NULL, 0, NULL), 1, "step %u: %s", step, k);
		snprintf(k, sizeof(k), "cold-%u", i);
		value_of(v, sizeof(v), k, 0);
		rc = kvt_get_s(c, k, got, sizeof(got));
		cr_assert(rc == 0 || rc == KVC_ENOTFOUND, "step %u: %s: %s", step, k, kvc_err_name(rc));
		if (rc == 0)
			cr_assert_str_eq(got, v, "step %u: %s", step, k);
		cr_assert_leq(kvt_key_slots(&env, k, NULL, 0, NULL), 1, "step %u: %s", step, k);
	}
	for (uint64_t b = 0; b < g->bucket_count; b++) {
		const struct kvi_bucket *bk = (const void *)(kvs_core_region(env.srv.core) + kvi_home_bucket_off(g, b));

		cr_assert_eq(bk->lock, 0, "step %u: bucket %lu still locked", step, (unsigned long)b);
	}
	kvc_destroy(c);
}

/* The reclaimer's connection breaks at its first operation, then in another
 * run at its second, ... until a run completes with no break left to make.
 * After each break the locks it held are released as fencing would, and a
 * new reclaimer takes over: no read item lost or rolled back, no item in two
 * slots, no lock left held. */
Test(reclaim_steps, a_reclaim_broken_after_any_of_its_operations_loses_no_item, .timeout = 600)
{
	enum { KEYS = 12, MAX_STEPS = 2000 };
	struct kvi_local_hooks hk = { .before_op = kvt_fail_nth };
	unsigned step;

	for (step = 1; step < MAX_STEPS; step++) {
		const uint32_t dead = 7000 + 2 * step;
		char k[32], v[200], got[256];
		int rc = 0, left;
		kvc_t *a, *b;

		setup_with(4, 0, 0, 10);
		a = client(NULL, 0);
		b = client(NULL, 0);
		for (unsigned ver = 0; ver < 2; ver++) /* a superseded version each: garbage */
			for (unsigned i = 0; i < KEYS; i++) {
				snprintf(k, sizeof(k), "hot-%u", i);
				value_of(v, sizeof(v), k, ver);
				cr_assert_eq(kvt_put_s(a, k, v), 0);
			}
		for (unsigned i = 0; i < KEYS; i++) {
			snprintf(k, sizeof(k), "cold-%u", i);
			value_of(v, sizeof(v), k, 0);
			cr_assert_eq(kvt_put_s(a, k, v), 0);
		}
		kvc_destroy(a); /* seals its extent */
		for (unsigned r = 0; r < 2; r++) /* read twice: the second carries the marks */
			for (unsigned i = 0; i < KEYS; i++) {
				snprintf(k, sizeof(k), "hot-%u", i);
				cr_assert_eq(kvt_get_s(b, k, got, sizeof(got)), 0);
			}
		kvc_destroy(b);
		kvs_reclaim_destroy(rcl);
		cr_assert_eq(kvt_env_reclaimer_on(&env, &hk, dead, NULL, &rcl), 0);
		kvt_fail_at = (int)step;
		for (int round = 0; round < 2 && rc >= 0; round++) {
			usleep((10 + KVS_QUARANTINE_MARGIN_MS) * 1000u + 5000u);
			while ((rc = kvs_reclaim_one(rcl)) > 0)
				;
		}
		left = kvt_fail_at;
		kvt_fail_at = 0;
		if (rc >= 0 && left) { /* every operation of the reclaim ran: all steps covered */
			struct kvs_core_stats st = stats();

			/* and it had work of every kind to do */
			cr_assert_geq(st.rc.moved, KEYS, "moved %lu", (unsigned long)st.rc.moved);
			cr_assert_geq(st.rc.dropped, KEYS, "dropped %lu", (unsigned long)st.rc.dropped);
			check_after_reclaim(step, KEYS);
			teardown();
			break;
		}
		cr_assert_lt(rc, 0, "step %u: the break was not reported", step);
		kvt_env_fence_locks(&env, dead);
		kvs_reclaim_destroy(rcl);
		cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
		reclaim_all();
		check_after_reclaim(step, KEYS);
		teardown();
	}
	cr_assert_lt(step, MAX_STEPS, "the reclaim kept posting");
	cr_assert_gt(step, 10, "reclaiming takes more than 10 operations");
	printf("reclaim broken after each of its %u operations in turn: no item lost, no lock left\n", step - 1);
}

/* A work request that executes late. A PUT's commit (slot WRITE +
 * unlock) is held in the transport (a before_op hook, which runs other steps
 * before letting it execute) while its extent is sealed and the reclaimer
 * runs; then it lands and the client is told OK. */
struct held_commit {
	int armed, fired;
	uint64_t bucket[2]; /* region offsets of the key's buckets */
	uint32_t owner;     /* the writer, from the lock it holds */
	int (*fn)(void);    /* the reclaimer's runs meanwhile; returns what they reclaimed */
	int reclaimed;
};
static struct held_commit hc;

static void buckets_of(const char *key, uint64_t off[2])
{
	const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), g->hash_seed, g->bucket_count, &kh);
	off[0] = kvi_home_bucket_off(g, kh.b[0]);
	off[1] = kvi_home_bucket_off(g, kh.b[1]);
}

/* What the writer's next request for memory does: seal its open extent. */
static void seal_extent_of(uint32_t owner)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seq = 1,
				.seg_req = { .need = 1024, .used = 1u << 20 } },
			resp;

	pthread_mutex_lock(&env.srv.lock);
	cr_assert_eq(kvs_core_ctrl(env.srv.core, owner, &req, &resp), 0);
	pthread_mutex_unlock(&env.srv.lock);
	cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT);
}

static int hold_commit(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (!hc.armed || op->kind != KVI_ROP_WRITE || op->len != 8)
		return 0;
	for (int w = 0; w < 2; w++) {
		if (op->roff <= hc.bucket[w] || op->roff >= hc.bucket[w] + KVI_BUCKET_SIZE)
			continue;
		hc.armed = 0;
		hc.fired++;
		hc.owner = kvi_lock_owner(*(const uint64_t *)(const void *)(kvs_core_region(env.srv.core) + hc.bucket[w]));
		seal_extent_of(hc.owner);
		hc.reclaimed = hc.fn();
		return 0;
	}
	return 0;
}

/* Past settle (as if the WR had been retransmitted for that long): reclaim
 * whatever is ready, a few times (a postponed segment comes back). */
static int reclaim_past_settle(void)
{
	int n = 0, rc;

	usleep(SETTLE_US);
	for (int i = 0; i < 3 && (rc = kvs_reclaim_one(rcl)) != 0; i++) {
		cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
		n += rc == 1;
	}
	return n;
}

/* A writer whose extents have grown to whole segments: "w" written over and
 * over, so the next object goes into a segment of its own that sealing the
 * extent seals at once. Returns a key whose buckets are not w's (the
 * reclaimer then never waits for the held lock over w). */
static kvc_t *whole_segment_writer(const struct kvi_local_hooks *hk, char *key, size_t cap)
{
	kvc_t *a = client(hk, 0);
	uint64_t wb[2];
	char v[200];

	for (unsigned i = 0; i < 400; i++) {
		value_of(v, sizeof(v), "w", i);
		cr_assert_eq(kvt_put_s(a, "w", v), 0);
	}
	buckets_of("w", wb);
	for (unsigned n = 0;; n++) {
		snprintf(key, cap, "late-%u", n);
		buckets_of(key, hc.bucket);
		if (hc.bucket[0] != wb[0] && hc.bucket[0] != wb[1] && hc.bucket[1] != wb[0] && hc.bucket[1] != wb[1])
			return a;
	}
}

Test(reclaim, a_commit_held_past_settle_keeps_its_object_while_the_writer_holds_the_lock)
{
	struct kvi_local_hooks hk = { .before_op = hold_commit };
	char key[32], got[256];
	kvc_t *a = whole_segment_writer(&hk, key, sizeof(key)), *b = client(NULL, 0);
	int rc;

	hc.fn = reclaim_past_settle;
	hc.armed = 1;
	cr_assert_eq(kvt_put_s(a, key, "acknowledged"), 0);
	cr_assert_eq(hc.fired, 1);
	/* Its object's segment was sealed and settled, and no slot named the
	 * object yet: only the held lock said a commit may still land. */
	cr_expect_eq(hc.reclaimed, 0, "the segment was reclaimed under a commit still to land");
	cr_expect_geq(stats().rc.aborted, 1, "the reclaimer gave the segment back");
	rc = kvt_get_s(b, key, got, sizeof(got));
	cr_expect_eq(rc, 0, "the acknowledged PUT is lost: %s", kvc_err_name(rc));
	cr_expect_str_eq(got, "acknowledged");
	/* Once the commit landed the segment is reclaimed like any other. */
	kvc_destroy(a);
	reclaim_all();
	cr_expect_eq(kvt_get_s(b, key, got, sizeof(got)), 0);
	cr_expect_str_eq(got, "acknowledged");
	cr_expect_eq(kvt_key_slots(&env, key, NULL, 0, NULL), 1);
	cr_expect_eq(kvt_get_s(b, "w", got, sizeof(got)), 0);
	kvc_destroy(b);
}

/* Settle covers the execution bound (segtab.h): a segment sealed for
 * max_op + margin, but not yet for max_op + exec + margin, is not reclaimed:
 * a write its writer posted before its deadline may still execute. */
Test(reclaim, a_sealed_segment_settles_only_after_the_execution_bound)
{
	const uint32_t exec_ms = 400;
	struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = MAX_OP_MS, .exec_ms = exec_ms,
				   .quarantine_ms = 2 * MAX_OP_MS + exec_ms + KVS_QUARANTINE_MARGIN_MS };
	char key[32];
	kvc_t *a;
	uint64_t t0;

	teardown(); /* the suite's setup has no execution bound */
	cr_assert_eq(kvt_env_init_opts(&env, 4, &o), 0);
	cr_assert_eq(kvt_env_reclaimer(&env, &rhooks, &rcl), 0);
	a = whole_segment_writer(NULL, key, sizeof(key));
	cr_assert_eq(kvt_put_s(a, key, "v"), 0);
	t0 = kvi_mono_ns();
	kvc_destroy(a); /* seals its extent, a whole segment */
	usleep(SETTLE_US);
	cr_expect_eq(kvs_reclaim_one(rcl), 0, "reclaimed %lu ms after sealing, inside the execution bound",
		     (unsigned long)((kvi_mono_ns() - t0) / 1000000u));
	usleep(exec_ms * 1000u);
	cr_expect_eq(kvs_reclaim_one(rcl), 1, "settled after max_op + exec + margin");
}

/* ... and so does the quarantine: a GET's access mark (or any write) posted
 * just before its deadline may execute exec_ms later, so reclaimed memory is
 * reused only after 2 x max_op + exec + margin (segtab.h). */
Test(reclaim, the_quarantine_covers_the_execution_bound)
{
	struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = MAX_OP_MS, .exec_ms = 400,
				   .quarantine_ms = QUARANTINE_MS };
	struct kvi_errbuf e = { { 0 } };
	struct kvs_core *c = NULL;
	uint32_t max_op, quarantine;
	uint16_t flags;
	void *region;

	teardown();
	region = aligned_alloc(4096, 4u << 20);
	cr_assert(region);
	cr_expect_eq(kvs_core_create(region, 4u << 20, &o, &c, &e), KVC_EINVAL, "a %u ms quarantine accepted",
		     QUARANTINE_MS);
	cr_expect(strstr(e.msg, "execution bound") != NULL, "message: %s", e.msg);
	o.quarantine_ms = 0; /* the least that is safe */
	cr_assert_eq(kvs_core_create(region, 4u << 20, &o, &c, &e), 0, "%s", e.msg);
	kvs_core_limits(c, &max_op, &quarantine, &flags);
	cr_expect_eq(quarantine, 2 * MAX_OP_MS + 400 + KVS_QUARANTINE_MARGIN_MS);
	cr_expect_eq(kvs_core_exec_ms(c), 400, "the welcome states it");
	kvs_core_destroy(c);
	free(region);
}

/* Junk in the lock word of a bucket naming an item of the oldest segment (a
 * stray WRITE's) must not stop reclamation for good (a reclaimer retrying the
 * word forever would leave every PUT failing KVC_ENOMEM): the reclaimer
 * repairs it (its index being the only one) and goes on. */
Test(reclaim, junk_in_a_lock_word_does_not_stop_reclamation)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	kvc_t *a = client(NULL, 0), *b = client(NULL, 0);
	char v[200], got[256];
	struct kvi_keyhash kh;
	unsigned n = 0, tries = 0;
	int rc;

	for (unsigned i = 0; i < 1000; i++) {
		value_of(v, sizeof(v), "k", i);
		cr_assert_eq(kvt_put_s(a, "k", v), 0);
	}
	cr_assert_eq(kvt_get_s(b, "k", got, sizeof(got)), 0);
	kvc_destroy(a);
	kvi_key_hash("k", 1, sb->hash_seed, sb->bucket_count, &kh);
	for (int w = 0; w < 2; w++)
		*(uint64_t *)(void *)(kvs_core_region(env.srv.core) + kvi_home_bucket_off(sb, kh.b[w])) =
			KVI_LOCK_MOVED | 0xbad;
	for (int round = 0; round < 2; round++) {
		usleep(SETTLE_US);
		while ((rc = kvs_reclaim_one(rcl)) != 0 && tries++ < 40) {
			cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
			n += rc == 1;
		}
	}
	cr_expect_lt(tries, 40, "reclamation kept failing on the junk word");
	cr_expect_gt(n, 3, "segments reclaimed: %u", n);
	cr_expect_geq(stats().rc.junk_repaired, 1);
	cr_assert_eq(kvt_get_s(b, "k", got, sizeof(got)), 0);
	value_of(v, sizeof(v), "k", 999);
	cr_expect_str_eq(got, v);
	kvc_destroy(b);
}

/* After a failed parse the walk goes on 4 bytes at a
 * time; it must not then accept an object that lies over live ones. Here a
 * torn object's value embeds a checksum-valid header whose length covers
 * the live object after it: the walk keeps the live one. */
#define FAKE_VAL_AT (16 + sizeof(struct kvi_obj_hdr) + 3)
Test(reclaim, a_value_embedding_a_valid_header_does_not_hide_the_live_object_after_it)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	static uint8_t seg[4096] __attribute__((aligned(16)));
	uint64_t off = sb->heap_off, olen_b = kvi_obj_len(4, 8, 0);
	char fake_val[600];
	uint32_t pos[8], olen[8], n;
	struct kvi_keyhash kh;

	memset(seg, 0, sizeof(seg));
	/* B: live, at 256, named by a slot (below). */
	kvi_obj_build(seg + 256, "live", 4, "value-Bx", 8, 0, 0, 1);
	/* A: a torn object at 0 (its header never arrived) whose value bytes,
	 * at 16, hold a header that makes the next header + 3 + 600 bytes -- B
	 * included -- one checksum-valid object. */
	memset(seg + FAKE_VAL_AT, 'x', 256 - FAKE_VAL_AT);
	memcpy(fake_val, seg + FAKE_VAL_AT, sizeof(fake_val));
	kvi_obj_build(seg + 16, "bad", 3, fake_val, sizeof(fake_val), 0, 0, 2);
	cr_assert_eq(kvi_obj_verify(seg + 16, sizeof(seg) - 16), 0, "the fake verifies");
	cr_assert_eq(memcmp(seg + 256 + offsetof(struct kvi_obj_hdr, version), &(uint8_t){ KVI_LAYOUT_VERSION }, 1), 0, "B is intact");
	kvi_key_hash("live", 4, sb->hash_seed, sb->bucket_count, &kh);
	((struct kvi_bucket *)(void *)(kvs_core_region(env.srv.core) + kvi_home_bucket_off(sb, kh.b[0])))->slot[0] =
		kvi_slot_make(kh.fp, off + 256, olen_b);
	n = kvs_reclaim_walk_for_test(rcl, seg, off, sizeof(seg), pos, olen, 8);
	cr_expect_eq(n, 1, "the live object was hidden");
	cr_expect_eq(pos[0], 256);
	cr_expect_eq(olen[0], olen_b);
}

/* A live client keeps a bucket lock (a bug, or on purpose) on a key nobody
 * else writes, whose old versions fill the oldest segments: only the
 * reclaimer ever waits for it. It reports the lock as a writer does
 * (server/lockwatch.h), so the owner is condemned past the watch window
 * and fenced; then reclamation goes on. */
Test(reclaim, a_lock_kept_by_a_live_client_is_reported_by_the_reclaimer)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	kvc_t *a, *holder;
	char v[200];
	struct kvi_keyhash kh;
	uint32_t id;
	unsigned n = 0, tries = 0;
	uint64_t *lock;
	int rc;

	cr_assert_eq(kvt_env_leases(&env, 60000, 15000), 0);
	a = client(NULL, 0);
	holder = client(NULL, 0);
	id = kvi_client_conn(holder, 0)->rm->client_id;
	for (unsigned i = 0; i < 1000; i++) {
		value_of(v, sizeof(v), "k", i);
		cr_assert_eq(kvt_put_s(a, "k", v), 0);
	}
	kvc_destroy(a);
	kvi_key_hash("k", 1, sb->hash_seed, sb->bucket_count, &kh);
	lock = (uint64_t *)(void *)(kvs_core_region(env.srv.core) + kvi_home_bucket_off(sb, kh.b[0]));
	*lock = kvi_lock_held_by(id);
	usleep(SETTLE_US);
	while (env.srv.fenced_owner != id && tries++ < 10) {
		rc = kvs_reclaim_one(rcl);
		cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
		n += rc == 1;
	}
	cr_assert_eq(env.srv.fenced_owner, id, "the lock's owner was never condemned (%u reports judged)",
		     (unsigned)(env.srv.verdicts[KVI_REPORT_WATCHING] + env.srv.verdicts[KVI_REPORT_FENCING]));
	/* What kvserver does with a condemned owner: fence it, releasing its locks. */
	kvt_env_fence_locks(&env, id);
	kvc_destroy(holder);
	tries = 0;
	for (int round = 0; round < 2; round++) {
		usleep(SETTLE_US);
		while ((rc = kvs_reclaim_one(rcl)) != 0 && tries++ < 40) {
			cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
			n += rc == 1;
		}
	}
	cr_expect_gt(n, 3, "segments reclaimed: %u", n);
}
