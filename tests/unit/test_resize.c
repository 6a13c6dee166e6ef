/* The client's side of an online resize (client/op_resize.c; layout.h
 * "Resize") against the real server core over the local transport. The
 * resize is staged by hand: a new index of twice the buckets in a server
 * extent, every lock word UNMIGRATED, published with kvs_core_set_indexes
 * (MIGRATING), then old buckets migrated one at a time by a test "migrator"
 * that follows layout.h steps 1-3 with CPU atomics, then STABLE. Clients made
 * before the staging know only the old index (stale: they learn of the
 * resize by meeting a MOVED mark); clients made after know both. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"

#define N_OLD 128u                  /* home index; the new one has 2 x as many */
#define MIGRATOR_ID KVI_MAX_CLIENT_ID /* the server's id in lock words: no client has it */

static struct kvt_env env;
static struct {
	uint8_t *base;
	uint64_t seed;
	struct kvi_index oldx, newx;
	uint64_t old_chunks[4], new_chunks[4];
	uint64_t next;  /* next old bucket the stepping migrator works on */
	int locked;     /* it holds old bucket `next` (step 1 done) */
	int staged;     /* the new index is published */
	int stable;     /* every bucket migrated and STABLE published */
} R;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, N_OLD, 64), 0);
	memset(&R, 0, sizeof(R));
	R.base = kvs_core_region(env.srv.core);
	R.seed = kvs_core_geometry(env.srv.core)->hash_seed;
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &R.oldx, R.old_chunks, 4), 0);
	cr_assert_eq(R.oldx.bucket_count, N_OLD);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(resize, .init = setup, .fini = teardown, .timeout = 120);

static struct kvi_bucket *bkt(const struct kvi_index *x, uint64_t b)
{
	return (struct kvi_bucket *)(void *)(R.base + kvi_index_bucket_off(x, b));
}

static uint64_t load(const uint64_t *w)
{
	return __atomic_load_n(w, __ATOMIC_SEQ_CST);
}

static int cas(uint64_t *w, uint64_t expect, uint64_t want)
{
	return __atomic_compare_exchange_n(w, &expect, want, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* A new index of 2 x N_OLD buckets in one server segment, every bucket
 * UNMIGRATED, published as MIGRATING from the home index. */
static void stage(void)
{
	const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
	struct kvs_extent x = { 0 };
	const char *why;

	cr_assert_eq(kvs_core_server_extent(env.srv.core, &x, 0), 0);
	cr_assert_geq(x.len, 2 * R.oldx.bucket_count * KVI_BUCKET_SIZE, "one segment holds the new index");
	R.new_chunks[0] = x.off;
	R.newx = (struct kvi_index){ .epoch = R.oldx.epoch + 1, .bucket_count = 2 * R.oldx.bucket_count,
				     .chunk_shift = kvi_index_chunk_shift(g), .nchunks = 1,
				     .chunk_off = R.new_chunks };
	why = kvi_index_check(&R.newx, g);
	cr_assert_null(why, "new index: %s", why);
	for (uint64_t b = 0; b < R.newx.bucket_count; b++) {
		memset(bkt(&R.newx, b), 0, KVI_BUCKET_SIZE);
		__atomic_store_n(&bkt(&R.newx, b)->lock, KVI_LOCK_UNMIGRATED, __ATOMIC_SEQ_CST);
	}
	cr_assert_eq(kvs_core_set_indexes(env.srv.core, &R.newx, &R.oldx, KVI_INDEX_MIGRATING), 0);
	R.staged = 1;
}

/* Step 1: lock old bucket b for the migrator; 0 when a writer holds it. */
static int mig_lock(uint64_t b)
{
	return cas(&bkt(&R.oldx, b)->lock, 0, kvi_lock_held_by(MIGRATOR_ID));
}

/* Steps 2 and 3: copy old bucket b's slots to new b and b + N, each to the
 * bucket of the choice that put it in b (same slot index: the two halves
 * cannot collide), then MOVED on old b, then the new ones unmarked. NULL, or
 * what was wrong (callable from any thread: no assertion here). */
static const char *mig_copy_and_mark_why(uint64_t b)
{
	uint64_t n = R.oldx.bucket_count;
	struct kvi_bucket *ob = bkt(&R.oldx, b), *nb[2] = { bkt(&R.newx, b), bkt(&R.newx, b + n) };

	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
		uint64_t s = load(&ob->slot[i]), to;
		const struct kvi_obj_hdr *oh;
		struct kvi_keyhash kh;

		if (!s)
			continue;
		oh = (const void *)(R.base + kvi_slot_obj_off(s));
		kvi_key_hash((const char *)oh + sizeof(*oh), oh->key_len, R.seed, 2 * n, &kh);
		to = kh.lo % n == b ? kh.b[0] : kh.b[1];
		if (to % n != b)
			return "an old bucket holds a key of neither of its choices";
		if (load(&nb[to == b ? 0 : 1]->slot[i]))
			return "a new bucket's slot was written before its migration";
		__atomic_store_n(&nb[to == b ? 0 : 1]->slot[i], s, __ATOMIC_SEQ_CST);
	}
	if (!cas(&ob->lock, kvi_lock_held_by(MIGRATOR_ID), KVI_LOCK_MOVED))
		return "the migrator lost the old bucket's lock";
	if (!cas(&nb[0]->lock, KVI_LOCK_UNMIGRATED, 0) || !cas(&nb[1]->lock, KVI_LOCK_UNMIGRATED, 0))
		return "a new bucket was not UNMIGRATED";
	return NULL;
}

static void mig_copy_and_mark(uint64_t b)
{
	const char *why = mig_copy_and_mark_why(b);

	cr_assert_null(why, "migrating old bucket %llu: %s", (unsigned long long)b, why);
}

static void migrate(uint64_t from, uint64_t to)
{
	for (uint64_t b = from; b < to; b++) {
		cr_assert(mig_lock(b), "old bucket %llu is free", (unsigned long long)b);
		mig_copy_and_mark(b);
	}
}

static void publish_stable(void)
{
	cr_assert_eq(kvs_core_set_indexes(env.srv.core, &R.newx, NULL, KVI_INDEX_STABLE), 0);
	R.stable = 1;
}

/* One step of a migrator that runs alongside the clients: lock the next old
 * bucket (or not yet, when a writer holds it), or finish it; at the end,
 * publish STABLE. */
static void mig_step(void)
{
	if (!R.staged || R.stable)
		return;
	if (R.next == R.oldx.bucket_count) {
		publish_stable();
		return;
	}
	if (!R.locked) {
		R.locked = mig_lock(R.next);
		return;
	}
	mig_copy_and_mark(R.next++);
	R.locked = 0;
}

/* How many slots name `key` among its truth buckets (layout.h "Resize"). */
static unsigned slots_of(const char *key)
{
	uint64_t n = R.oldx.bucket_count;
	struct kvi_bucket *truth[2];
	struct kvi_keyhash kh;
	unsigned count = 0;

	kvi_key_hash(key, strlen(key), R.seed, 2 * n, &kh);
	for (unsigned j = 0; j < 2; j++) {
		truth[j] = bkt(&R.newx, kh.b[j]);
		if (load(&truth[j]->lock) == KVI_LOCK_UNMIGRATED && load(&bkt(&R.oldx, kh.b[j] % n)->lock) != KVI_LOCK_MOVED)
			truth[j] = bkt(&R.oldx, kh.b[j] % n);
	}
	for (unsigned j = 0; j < 2; j++) {
		if (j == 1 && truth[1] == truth[0])
			break;
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t s = load(&truth[j]->slot[i]);
			const struct kvi_obj_hdr *oh = (const void *)(R.base + kvi_slot_obj_off(s));

			if (s && oh->key_len == strlen(key) && memcmp((const char *)oh + sizeof(*oh), key, oh->key_len) == 0)
				count++;
		}
	}
	return count;
}

static kvc_t *client(unsigned cache, unsigned depth, const struct kvi_local_hooks *hooks)
{
	kvc_t *c;

	cr_assert_eq(kvt_env_client(&env, hooks, cache, depth, &c), 0);
	return c;
}

static struct kvc_stats stats(kvc_t *c)
{
	struct kvc_stats s;

	kvc_get_stats(c, &s);
	return s;
}

#define NKEYS 300u

static void put_all(kvc_t *c)
{
	char k[32], v[32];

	for (unsigned i = 0; i < NKEYS; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "val-%u", i);
		cr_assert_eq(kvt_put_s(c, k, v), 0, "%s", k);
	}
}

static void read_all(kvc_t *c, const char *who)
{
	char k[32], v[32], got[64];

	for (unsigned i = 0; i < NKEYS; i++) {
		int rc;

		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "val-%u", i);
		rc = kvt_get_s(c, k, got, sizeof(got));
		cr_assert_eq(rc, 0, "%s: GET %s: %s", who, k, kvc_err_name(rc));
		cr_assert_str_eq(got, v, "%s: GET %s", who, k);
	}
}

/* (a) */
Test(resize, every_key_is_readable_by_old_and_new_clients_at_every_stage)
{
	kvc_t *w = client(1024, 4, NULL), *old[4], *nw;

	put_all(w);
	for (unsigned s = 0; s < 4; s++) {
		old[s] = client(1024, 4, NULL);
		read_all(old[s], "old client before the resize"); /* and cache every location */
	}
	stage();
	nw = client(1024, 4, NULL);

	read_all(old[0], "old client, nothing migrated");
	cr_expect_eq(stats(old[0]).index_stale, 0, "the old index is still the truth everywhere");
	read_all(nw, "new client, nothing migrated");
	cr_expect_geq(stats(nw).resize_follows, NKEYS, "every key was found in the old index");

	migrate(0, N_OLD / 2);
	read_all(old[1], "old client, half migrated");
	cr_expect_geq(stats(old[1]).index_stale, 1, "it met a MOVED bucket and fetched the index");
	read_all(nw, "new client, half migrated");

	migrate(N_OLD / 2, N_OLD);
	read_all(old[2], "old client, all migrated");
	cr_expect_eq(stats(old[2]).index_stale, 1, "one fetch was enough");
	read_all(nw, "new client, all migrated");
	read_all(w, "writer, all migrated");

	publish_stable();
	read_all(old[3], "old client, STABLE");
	read_all(nw, "new client, STABLE");
	read_all(old[1], "client that followed half a migration, STABLE");
	for (unsigned s = 0; s < 4; s++)
		kvc_destroy(old[s]);
	kvc_destroy(nw);
	kvc_destroy(w);
}

/* (b) */
Test(resize, writes_during_half_a_migration_land_exactly_once)
{
	kvc_t *old = client(1024, 4, NULL), *nw;
	char k[32], v[32], got[64];

	put_all(old);
	stage();
	migrate(0, N_OLD / 2);
	nw = client(1024, 4, NULL);
	for (unsigned i = 0; i < NKEYS; i++) {
		kvc_t *c = i % 2 ? old : nw, *o = i % 2 ? nw : old;

		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "upd-%u", i);
		cr_assert_eq(kvt_put_s(c, k, v), 0, "PUT %s", k);
		cr_assert_eq(slots_of(k), 1, "%s lives in exactly one truth slot", k);
		cr_assert_eq(kvt_get_s(c, k, got, sizeof(got)), 0);
		cr_assert_str_eq(got, v);
		cr_assert_eq(kvt_get_s(o, k, got, sizeof(got)), 0);
		cr_assert_str_eq(got, v, "the other client sees %s's update", k);
	}
	for (unsigned i = 0; i < NKEYS; i += 3) {
		snprintf(k, sizeof(k), "key-%u", i);
		cr_assert_eq(kvc_delete(i % 2 ? nw : old, k, strlen(k)), 0, "DELETE %s", k);
		cr_assert_eq(slots_of(k), 0, "%s is gone from every truth bucket", k);
		cr_assert_eq(kvt_get_s(old, k, got, sizeof(got)), KVC_ENOTFOUND);
		cr_assert_eq(kvt_get_s(nw, k, got, sizeof(got)), KVC_ENOTFOUND);
	}
	for (unsigned i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "new-%u", i);
		cr_assert_eq(kvt_put_s(i % 2 ? old : nw, k, "fresh"), 0, "insert %s", k);
		cr_assert_eq(slots_of(k), 1, "%s inserted once", k);
		cr_assert_eq(kvt_get_s(i % 2 ? nw : old, k, got, sizeof(got)), 0);
	}
	cr_expect_geq(stats(nw).resize_follows, 1);
	cr_expect_geq(stats(old).index_stale, 1);
	kvc_destroy(old);
	kvc_destroy(nw);
}

/* (c) */
Test(resize, a_cached_location_in_a_migrated_bucket_is_not_trusted)
{
	kvc_t *a = client(1024, 4, NULL), *b = client(1024, 4, NULL), *nw;
	char got[64];

	cr_assert_eq(kvt_put_s(a, "cached-get", "v1"), 0);
	cr_assert_eq(kvt_put_s(b, "cached-put", "w1"), 0);
	cr_assert_eq(kvt_get_s(a, "cached-get", got, sizeof(got)), 0);
	cr_assert_eq(stats(a).ops[KVC_STAT_GET_HIT_CACHED], 1, "the GET used the cached location");
	stage();
	migrate(0, N_OLD);
	nw = client(1024, 4, NULL);
	cr_assert_eq(kvt_put_s(nw, "cached-get", "v2"), 0);
	/* a's entry still names the old slot, which still names "v1". */
	cr_assert_eq(kvt_get_s(a, "cached-get", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v2", "a cached GET returned a value from a migrated bucket");
	cr_expect_eq(stats(a).index_stale, 1);
	/* b's cached PUT CAS-locks the old bucket: MOVED. */
	cr_assert_eq(kvt_put_s(b, "cached-put", "w2"), 0);
	cr_expect_eq(stats(b).index_stale, 1);
	cr_expect_eq(slots_of("cached-put"), 1);
	cr_assert_eq(kvt_get_s(nw, "cached-put", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "w2");
	kvc_destroy(a);
	kvc_destroy(b);
	kvc_destroy(nw);
}

/* The old bucket holding key (the index is the old one's). */
static uint64_t old_home(const char *key)
{
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), R.seed, R.oldx.bucket_count, &kh);
	for (unsigned j = 0; j < 2; j++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			if (load(&bkt(&R.oldx, kh.b[j])->slot[i]))
				return kh.b[j]; /* the only key in a fresh region */
	cr_assert_fail("%s is in neither old bucket", key);
	return 0;
}

/* (d) */
Test(resize, a_put_waits_for_the_migrator_and_a_get_does_not)
{
	kvc_t *old = client(0, 4, NULL), *nw, *rd;
	struct kvc_op op = { .type = KVC_OP_PUT, .key = "held", .key_len = 4, .value = "v2", .value_len = 2 }, *done;
	uint64_t ob, t0;
	char got[64];

	cr_assert_eq(kvt_put_s(old, "held", "v1"), 0);
	ob = old_home("held");
	stage();
	nw = client(0, 4, NULL);
	rd = client(0, 4, NULL);
	cr_assert(mig_lock(ob));
	cr_assert_eq(kvc_submit(nw, &op), 0);
	t0 = kvt_mono_ms();
	while (kvt_mono_ms() - t0 < 50)
		cr_assert_eq(kvc_poll(nw, &done, 1, 1), 0, "the PUT went on past the migrator's lock");
	cr_expect_geq(stats(nw).lock_conflicts, 1);
	t0 = kvt_mono_ms();
	cr_assert_eq(kvt_get_s(rd, "held", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v1");
	cr_assert_eq(kvt_get_s(old, "held", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v1");
	cr_expect_lt(kvt_mono_ms() - t0, 1000, "GETs do not wait for locks");
	mig_copy_and_mark(ob);
	cr_assert_eq(kvc_poll(nw, &done, 1, 5000), 1);
	cr_assert_eq(op.status, 0, "PUT: %s", kvc_err_name(op.status));
	cr_expect_eq(slots_of("held"), 1);
	cr_assert_eq(kvt_get_s(rd, "held", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v2");
	cr_assert_eq(kvt_get_s(old, "held", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v2");
	kvc_destroy(old);
	kvc_destroy(nw);
	kvc_destroy(rd);
}

/* A migration between two doorbells of one operation: the hook migrates old
 * bucket G.b just before the operation's first access to it (and, for a GET,
 * has another client update the key in the new index right after). */
static struct {
	uint64_t b, off;
	kvc_t *other;
	const char *key;
	int done;
} G;

static int migrate_under(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (!G.done && op->roff == G.off) {
		G.done = 1;
		migrate(G.b, G.b + 1);
		if (G.other)
			cr_assert_eq(kvt_put_s(G.other, G.key, "v2"), 0);
	}
	return 0;
}

Test(resize, a_get_that_finds_its_old_bucket_moved_reads_the_new_one_again)
{
	struct kvi_local_hooks hooks = { .before_op = migrate_under };
	kvc_t *w = client(0, 4, NULL), *g, *up;
	char got[64];

	cr_assert_eq(kvt_put_s(w, "mid", "v1"), 0);
	G = (typeof(G)){ .b = old_home("mid"), .off = kvi_index_bucket_off(&R.oldx, old_home("mid")), .key = "mid" };
	stage();
	up = client(0, 4, NULL);
	g = client(0, 4, &hooks);
	G.other = up;
	cr_assert_eq(kvt_get_s(g, "mid", got, sizeof(got)), 0);
	cr_assert(G.done, "the GET read the old bucket");
	cr_expect_str_eq(got, "v2", "the update made during the GET (after the MOVED) is seen");
	cr_expect_eq(slots_of("mid"), 1);
	kvc_destroy(w);
	kvc_destroy(g);
	kvc_destroy(up);
}

Test(resize, a_put_that_finds_its_old_bucket_moved_starts_over_at_once)
{
	struct kvi_local_hooks hooks = { .before_op = migrate_under };
	kvc_t *w = client(0, 4, NULL), *p;
	char got[64];

	cr_assert_eq(kvt_put_s(w, "mid", "v1"), 0);
	G = (typeof(G)){ .b = old_home("mid"), .off = kvi_index_bucket_off(&R.oldx, old_home("mid")) };
	stage();
	p = client(0, 4, &hooks);
	cr_assert_eq(kvt_put_s(p, "mid", "v3"), 0);
	cr_assert(G.done, "the PUT went for the old bucket");
	cr_expect_eq(stats(p).lock_conflicts, 0, "MOVED is not a conflict: no backoff");
	cr_expect_eq(slots_of("mid"), 1);
	cr_assert_eq(kvt_get_s(w, "mid", got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v3");
	kvc_destroy(w);
	kvc_destroy(p);
}

/* Both new choices of a key (b and b + N) share old bucket b: it is locked
 * and read once. */
Test(resize, choices_that_share_an_old_bucket_lock_and_read_it_once)
{
	kvc_t *w = client(0, 4, NULL), *a, *r;
	struct kvi_keyhash kh;
	char k[32], got[64];
	uint64_t f0;
	unsigned i = 0;

	do {
		snprintf(k, sizeof(k), "dd-%u", i++);
		kvi_key_hash(k, strlen(k), R.seed, 2 * N_OLD, &kh);
	} while (kh.b[0] == kh.b[1] || kh.lo % N_OLD != kh.hi % N_OLD);
	cr_assert_eq(kvt_put_s(w, k, "v1"), 0);
	stage();
	a = client(0, 4, NULL);
	r = client(0, 4, NULL);
	cr_assert_eq(kvt_put_s(a, k, "v2"), 0);
	cr_expect_eq(stats(a).resize_follows, 1, "one old bucket locked for both choices");
	cr_expect_eq(stats(a).lock_conflicts, 0);
	cr_expect_eq(slots_of(k), 1);
	cr_assert_eq(kvt_get_s(r, k, got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v2");
	cr_expect_eq(stats(r).resize_follows, 1, "one old bucket read for both choices");
	migrate(kh.lo % N_OLD, kh.lo % N_OLD + 1);
	f0 = stats(r).resize_follows;
	cr_assert_eq(kvt_get_s(r, k, got, sizeof(got)), 0);
	cr_expect_str_eq(got, "v2");
	cr_expect_eq(stats(r).resize_follows, f0, "migrated: the new buckets are the truth");
	cr_assert_eq(kvc_delete(a, k, strlen(k)), 0);
	cr_expect_eq(slots_of(k), 0);
	kvc_destroy(w);
	kvc_destroy(a);
	kvc_destroy(r);
}

/* A client with a lease learns of a resize from its LEASE (epoch, state), not
 * only from a MOVED mark: it follows the migration before any bucket moved,
 * and drops the previous index when the server says STABLE. */
Test(resize, a_leased_client_learns_of_the_resize_from_its_lease)
{
	kvc_t *c;
	char got[64];
	int i;

	cr_assert_eq(kvt_env_leases(&env, 2000, 20), 0);
	c = client(0, 4, NULL);
	cr_assert_eq(kvt_put_s(c, "leased", "v"), 0);
	stage();
	for (i = 0; i < 200 && stats(c).resize_follows == 0; i++) {
		cr_assert_eq(kvt_get_s(c, "leased", got, sizeof(got)), 0);
		usleep(5000);
	}
	cr_assert_eq(kvi_client_conn(c, 0)->cur.ix.epoch, 2, "the LEASE named epoch 2");
	cr_assert_eq(kvi_client_conn(c, 0)->index_state, KVI_INDEX_MIGRATING);
	cr_expect_eq(stats(c).index_stale, 0, "no operation had to meet a mark first");
	migrate(0, N_OLD);
	publish_stable();
	for (i = 0; i < 200 && kvi_client_conn(c, 0)->prev.ix.epoch != 0; i++) {
		cr_assert_eq(kvt_get_s(c, "leased", got, sizeof(got)), 0);
		cr_assert_str_eq(got, "v");
		usleep(5000);
	}
	cr_expect_eq(kvi_client_conn(c, 0)->index_state, KVI_INDEX_STABLE);
	cr_expect_eq(kvi_client_conn(c, 0)->prev.ix.epoch, 0);
	kvc_destroy(c);
}

/* (e) */
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int step_in_doorbell(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	(void)op;
	if (next_rand() % 2 == 0)
		mig_step();
	return 0;
}

#define LKEYS 20u
#define LOPS 200u

Test(resize, random_ops_during_a_stepwise_migration_read_the_last_acknowledged_write)
{
	struct kvi_local_hooks hooks = { .before_op = step_in_doorbell };
	char model[LKEYS][32] = { { 0 } }, vals[LOPS][32], got[64], k[16];
	kvc_t *h[2];
	unsigned gets = 0;

	h[0] = client(64, 4, &hooks);
	for (unsigned i = 0; i < LKEYS; i += 2) {
		snprintf(k, sizeof(k), "lk-%u", i);
		snprintf(model[i], sizeof(model[i]), "init-%u", i);
		cr_assert_eq(kvt_put_s(h[0], k, model[i]), 0);
	}
	stage();
	h[1] = client(64, 4, &hooks);
	for (unsigned i = 0; i < LOPS; i++) {
		unsigned key = (unsigned)(next_rand() % LKEYS), kind = (unsigned)(next_rand() % 10), who = next_rand() % 2;
		struct kvc_op op = { .key = k, .buf = got, .buf_len = sizeof(got) - 1 }, *done;

		snprintf(k, sizeof(k), "lk-%u", key);
		op.key_len = strlen(k);
		snprintf(vals[i], sizeof(vals[i]), "op-%u", i);
		/* memcached's read-modify-writes too: append, touch, incr (on
		 * values that are not numbers: refused) */
		op.type = kind < 4 ? KVC_OP_GET : kind < 6 ? KVC_OP_PUT : kind == 6 ? KVC_OP_PUT
			: kind == 7 ? KVC_OP_TOUCH : kind == 8 ? KVC_OP_INCR : KVC_OP_DELETE;
		op.value = vals[i];
		op.value_len = strlen(vals[i]);
		if (kind == 6 && strlen(model[key]) + 2 < sizeof(model[key])) {
			op.mode = KVC_STORE_APPEND;
			op.value = "+a";
			op.value_len = 2;
		}
		op.delta = 1;
		cr_assert_eq(kvc_submit(h[who], &op), 0);
		while (kvc_poll(h[who], &done, 1, 0) == 0)
			if (next_rand() % 3 == 0)
				mig_step();
		switch (op.type) {
		case KVC_OP_GET:
			gets++;
			if (!model[key][0]) {
				cr_assert_eq(op.status, KVC_ENOTFOUND, "op %u: GET %s: %s", i, k, kvc_err_name(op.status));
				break;
			}
			cr_assert_eq(op.status, 0, "op %u: GET %s: %s", i, k, kvc_err_name(op.status));
			got[op.value_len] = '\0';
			cr_assert_str_eq(got, model[key], "op %u: GET %s", i, k);
			break;
		case KVC_OP_PUT:
			if (op.mode == KVC_STORE_APPEND) {
				cr_assert_eq(op.status, model[key][0] ? 0 : KVC_ENOTSTORED, "op %u: APPEND %s: %s", i, k,
					     kvc_err_name(op.status));
				if (model[key][0])
					strcat(model[key], "+a");
				break;
			}
			cr_assert_eq(op.status, 0, "op %u: PUT %s: %s", i, k, kvc_err_name(op.status));
			strcpy(model[key], vals[i]);
			break;
		case KVC_OP_TOUCH:
			cr_assert_eq(op.status, model[key][0] ? 0 : KVC_ENOTFOUND, "op %u: TOUCH %s: %s", i, k,
				     kvc_err_name(op.status));
			break;
		case KVC_OP_INCR:
			cr_assert_eq(op.status, model[key][0] ? KVC_ENONNUMERIC : KVC_ENOTFOUND, "op %u: INCR %s: %s", i,
				     k, kvc_err_name(op.status));
			break;
		default:
			cr_assert_eq(op.status, model[key][0] ? 0 : KVC_ENOTFOUND, "op %u: DELETE %s: %s", i, k,
				     kvc_err_name(op.status));
			model[key][0] = '\0';
			break;
		}
	}
	cr_expect(R.stable, "the migration finished during the run (%llu buckets)", (unsigned long long)R.next);
	cr_expect_gt(gets, 50);
	cr_expect_geq(stats(h[0]).index_stale, 1);
	cr_expect_geq(stats(h[1]).resize_follows, 1);
	for (unsigned key = 0; key < LKEYS; key++) {
		snprintf(k, sizeof(k), "lk-%u", key);
		cr_expect_eq(slots_of(k), model[key][0] ? 1u : 0u, "%s", k);
	}
	kvc_destroy(h[0]);
	kvc_destroy(h[1]);
}

/* (f) GROW: a full bucket pair asks the server to grow, once. The core
 * answers NO (it has no migrator): the insert then fails (no-evict) or
 * evicts as it does without a GROW, and the NO is remembered (no second
 * request). */
static void fill_pair(struct kvt_env *e, kvc_t *c, unsigned *next)
{
	char k[32];

	for (unsigned i = 0; i < 2 * KVI_SLOTS_PER_BUCKET; i++) {
		kvt_spread_key(e, "fill", next, k, sizeof(k));
		cr_assert_eq(kvt_put_s(c, k, "v"), 0, "%s", k);
	}
}

Test(grow, a_full_pair_asks_once_then_fails_as_before_under_no_evict)
{
	struct kvt_env e;
	kvc_t *c;
	unsigned next = 0;
	char k[32];

	cr_assert_eq(kvt_env_init(&e, 16, 2, 64), 0);
	cr_assert_eq(kvt_env_client(&e, NULL, 64, 4, &c), 0);
	fill_pair(&e, c, &next);
	kvt_spread_key(&e, "fill", &next, k, sizeof(k));
	cr_expect_eq(kvt_put_s(c, k, "v"), KVC_EINDEXFULL);
	cr_expect_eq(stats(c).grow_requests, 1);
	kvt_spread_key(&e, "fill", &next, k, sizeof(k));
	cr_expect_eq(kvt_put_s(c, k, "v"), KVC_EINDEXFULL);
	cr_expect_eq(stats(c).grow_requests, 1, "the server's NO is remembered");
	cr_expect_eq(stats(c).lock_conflicts, 0);
	kvc_destroy(c);
	kvt_env_fini(&e);
}

Test(grow, a_full_pair_asks_once_then_evicts_as_before)
{
	struct kvs_core_opts o = { .buckets = 2, .segment_size = 64 << 10, .max_op_ms = 20000,
				   .quarantine_ms = 40100 };
	struct kvt_env e;
	kvc_t *c;
	unsigned next = 0;
	char k[32], got[16];

	cr_assert_eq(kvt_env_init_opts(&e, 16, &o), 0);
	cr_assert_eq(kvt_env_client(&e, NULL, 64, 4, &c), 0);
	fill_pair(&e, c, &next);
	kvt_spread_key(&e, "fill", &next, k, sizeof(k));
	cr_expect_eq(kvt_put_s(c, k, "new"), 0);
	cr_expect_eq(stats(c).grow_requests, 1);
	cr_expect_eq(stats(c).index_evictions, 1);
	cr_assert_eq(kvt_get_s(c, k, got, sizeof(got)), 0);
	cr_expect_str_eq(got, "new");
	kvc_destroy(c);
	kvt_env_fini(&e);
}

/* A server that answers GROW with STARTED and has the new index in place by
 * then (this one migrates everything at once): the insert waits for it and
 * lands in the grown index, evicting nothing. */
static int grow_at_once(void *arg, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	(void)arg;
	if (req->type != KVI_CTRL_GROW)
		return kvs_core_ctrl(env.srv.core, client_id, req, resp);
	cr_assert_eq(req->grow.epoch, 1, "GROW names the index that is full");
	stage();
	migrate(0, R.oldx.bucket_count);
	publish_stable();
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_GROWING, .seq = req->seq,
				   .growing = { .verdict = KVI_GROW_STARTED } };
	return 0;
}

Test(grow, a_started_resize_takes_the_insert_into_the_new_index)
{
	struct kvs_core_opts o = { .buckets = 2, .segment_size = 64 << 10, .max_op_ms = 20000,
				   .quarantine_ms = 40100 };
	kvc_t *c;
	unsigned next = 0;
	char k[32], got[16];

	cr_assert_eq(kvt_env_init_opts(&env, 16, &o), 0);
	memset(&R, 0, sizeof(R));
	R.base = kvs_core_region(env.srv.core);
	R.seed = kvs_core_geometry(env.srv.core)->hash_seed;
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &R.oldx, R.old_chunks, 4), 0);
	cr_assert_eq(kvt_env_client(&env, NULL, 64, 4, &c), 0);
	kvi_rmem_local_set_ctrl(kvi_client_conn(c, 0)->rm, grow_at_once, NULL, kvi_client_conn(c, 0)->rm->client_id);
	fill_pair(&env, c, &next);
	kvt_spread_key(&env, "fill", &next, k, sizeof(k));
	cr_assert_eq(kvt_put_s(c, k, "grown"), 0);
	cr_expect(R.stable, "the server was asked to grow");
	cr_expect_eq(stats(c).grow_requests, 1);
	cr_expect_eq(stats(c).index_evictions, 0);
	cr_expect_eq(slots_of(k), 1);
	cr_assert_eq(kvt_get_s(c, k, got, sizeof(got)), 0);
	cr_expect_str_eq(got, "grown");
	for (unsigned i = 0; i < next; i++) {
		snprintf(k, sizeof(k), "fill-%u", i);
		if (kvt_get_s(c, k, got, sizeof(got)) == 0)
			cr_expect_eq(slots_of(k), 1, "%s", k);
	}
	kvc_destroy(c);
	kvt_env_fini(&env);
}

/* Threads: two writers, each PUTting, reading back and deleting its own
 * keys, while a migrator thread migrates every bucket (waiting for writers
 * like any writer) and publishes STABLE. Every read returns the thread's
 * last acknowledged write (also under TSan-like scheduling noise). */
#define TKEYS 40u

struct worker {
	kvc_t *c;
	unsigned id, ops, bad;
	char last[160];
};

static volatile int migrator_done;

static void *migrator(void *arg)
{
	const char **why = arg;

	for (uint64_t b = 0; b < R.oldx.bucket_count && !*why; b++) {
		while (!mig_lock(b))
			sched_yield();
		*why = mig_copy_and_mark_why(b);
	}
	if (!*why && kvs_core_set_indexes(env.srv.core, &R.newx, NULL, KVI_INDEX_STABLE) != 0)
		*why = "publishing STABLE failed";
	__atomic_store_n(&migrator_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *writer(void *arg)
{
	struct worker *w = arg;
	char k[32], v[32], got[64];
	char model[TKEYS][32] = { { 0 } };

	for (unsigned i = 0; i < TKEYS && w->id == 0; i++)
		strcpy(model[i], "pre"); /* written before the resize (the test's main thread) */
	for (unsigned round = 0; !__atomic_load_n(&migrator_done, __ATOMIC_SEQ_CST) || round < 2; round++) {
		for (unsigned i = 0; i < TKEYS; i++) {
			int rc;

			snprintf(k, sizeof(k), "t%u-%u", w->id, i);
			if ((round + i) % 5 == 4) {
				rc = kvc_delete(w->c, k, strlen(k));
				if (rc != (model[i][0] ? 0 : KVC_ENOTFOUND))
					w->bad++;
				model[i][0] = '\0';
			} else {
				snprintf(v, sizeof(v), "r%u-%u", round, i);
				if (kvt_put_s(w->c, k, v) != 0)
					w->bad++;
				else
					strcpy(model[i], v);
			}
			rc = kvt_get_s(w->c, k, got, sizeof(got));
			if (model[i][0] ? rc != 0 || strcmp(got, model[i]) != 0 : rc != KVC_ENOTFOUND) {
				if (!w->bad)
					snprintf(w->last, sizeof(w->last), "%s: %s (%s)", k, kvc_err_name(rc), got);
				w->bad++;
			}
			w->ops += 2;
		}
	}
	return NULL;
}

Test(resize, threads_write_and_read_their_keys_while_a_migrator_thread_runs)
{
	struct worker w[2] = { { .id = 0 }, { .id = 1 } };
	pthread_t t[3];
	const char *why = NULL;

	w[0].c = client(64, 4, NULL); /* knows only the old index */
	for (unsigned i = 0; i < TKEYS; i++) {
		char k[32];

		snprintf(k, sizeof(k), "t0-%u", i);
		cr_assert_eq(kvt_put_s(w[0].c, k, "pre"), 0);
	}
	stage();
	w[1].c = client(64, 4, NULL);
	cr_assert_eq(pthread_create(&t[0], NULL, writer, &w[0]), 0);
	cr_assert_eq(pthread_create(&t[1], NULL, writer, &w[1]), 0);
	cr_assert_eq(pthread_create(&t[2], NULL, migrator, &why), 0);
	for (unsigned i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	cr_assert_null(why, "migrator: %s", why);
	printf("threads during a migration: %u + %u operations, %llu old-bucket follows, %llu stale waits\n", w[0].ops,
	       w[1].ops, (unsigned long long)(stats(w[0].c).resize_follows + stats(w[1].c).resize_follows),
	       (unsigned long long)(stats(w[0].c).index_stale + stats(w[1].c).index_stale));
	for (unsigned i = 0; i < 2; i++) {
		cr_expect_eq(w[i].bad, 0, "writer %u: %u of %u operations wrong, first %s", i, w[i].bad, w[i].ops,
			     w[i].last);
		kvc_destroy(w[i].c);
	}
}
