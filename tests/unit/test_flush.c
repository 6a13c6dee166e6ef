/* flush_all (server/flush.h, kvc_flush_all) against the in-process server:
 * every item of every client gone, at once or at the time asked, new writes
 * kept; the latest request deciding; GETs in other threads only hitting or
 * missing while walks run; held and junk lock words; a flush during a
 * resize (the migrator held, both indexes walked); and what a flood of
 * requests costs the server (suite flush_bounds). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_check.h"
#include "flush.h"
#include "kvclient_errors.h"
#include "migrate.h"

static struct kvt_env env;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 0, 64), 0);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(flush, .init = setup, .fini = teardown, .timeout = 120);

static struct kvc_server_stats server_stats(kvc_t *c)
{
	struct kvc_server_stats st;

	cr_assert_eq(kvc_server_stats(c, &st), 0);
	return st;
}

static void key_of(char *k, size_t n, const char *prefix, unsigned i)
{
	snprintf(k, n, "%s-%u", prefix, i);
}

static void put_n(kvc_t *c, const char *prefix, unsigned n)
{
	char k[48], v[64];

	for (unsigned i = 0; i < n; i++) {
		key_of(k, sizeof(k), prefix, i);
		snprintf(v, sizeof(v), "value-of-%s", k);
		cr_assert_eq(kvt_put_s(c, k, v), 0, "put %s", k);
	}
}

/* How many of prefix-0 .. n-1 c finds (each with its own value). */
static unsigned found(kvc_t *c, const char *prefix, unsigned n)
{
	char k[48], v[64], got[80];
	unsigned hits = 0;

	for (unsigned i = 0; i < n; i++) {
		int rc;

		key_of(k, sizeof(k), prefix, i);
		rc = kvt_get_s(c, k, got, sizeof(got));
		cr_assert(rc == 0 || rc == KVC_ENOTFOUND, "get %s: %s", k, kvc_err_name(rc));
		if (rc == 0) {
			snprintf(v, sizeof(v), "value-of-%s", k);
			cr_assert_str_eq(got, v);
			hits++;
		}
	}
	return hits;
}

/* Slots in use in the home index (the region's truth). */
static uint64_t slots_in_use(void)
{
	uint64_t n = 0;

	for (uint64_t b = 0; b < kvt_geom(&env)->bucket_count; b++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			n += *kvt_slot_ptr(&env, b, i) != 0;
	return n;
}

#define N 600u

Test(flush, immediate_clears_every_item_for_every_client_and_keeps_later_writes)
{
	kvc_t *a = kvt_client(&env, NULL, 256, 4), *b = kvt_client(&env, NULL, 256, 4), *c;
	struct kvc_server_stats st;

	put_n(a, "k", N);
	/* b reads everything: its location cache names every item. */
	cr_assert_eq(found(b, "k", N), N);
	cr_assert_eq(slots_in_use(), N);
	cr_assert_eq(kvc_flush_all(a, 0), 0);
	/* Done when it returns: nothing left in the index, no GET finds one
	 * -- b through its cached locations, and a handle made afterwards. */
	cr_expect_eq(slots_in_use(), 0);
	cr_expect_eq(kvt_locked_buckets(&env), 0, "the walk left a bucket locked");
	cr_expect_eq(found(b, "k", N), 0, "a cached location outlived the flush");
	cr_expect_eq(found(a, "k", N), 0);
	c = kvt_client(&env, NULL, 256, 4);
	cr_expect_eq(found(c, "k", N), 0);
	/* Writes after it are kept (also of the same keys). */
	put_n(b, "k", N / 2);
	put_n(c, "new", N / 2);
	cr_expect_eq(found(a, "k", N), N / 2);
	cr_expect_eq(found(a, "new", N / 2), N / 2);
	st = server_stats(c);
	cr_expect_eq(st.cmd_flush, 1);
	cr_expect_eq(st.flushes, 1);
	cr_expect_eq(st.flushed, N, "flushed counts the slots cleared");
	/* Again, from another handle: the same and the counters add up. */
	cr_assert_eq(kvc_flush_all(b, 0), 0);
	cr_expect_eq(found(a, "k", N) + found(a, "new", N / 2), 0);
	st = server_stats(c);
	cr_expect_eq(st.cmd_flush, 2);
	cr_expect_eq(st.flushes, 2);
	cr_expect_eq(st.flushed, 2 * N);
	kvc_destroy(a);
	kvc_destroy(b);
	kvc_destroy(c);
}

/* memcached's curr_items (the clients' reports, less what was removed)
 * counts what a flush cleared as gone. */
Test(flush, curr_items_counts_flushed_items_as_gone)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4), *b;

	put_n(a, "k", 100);
	kvc_destroy(a); /* its counts reach the server at close */
	b = kvt_client(&env, NULL, 0, 4);
	cr_assert_eq(server_stats(b).curr_items, 100);
	cr_assert_eq(kvc_flush_all(b, 0), 0);
	cr_expect_eq(server_stats(b).curr_items, 0);
	put_n(b, "new", 10);
	kvc_destroy(b);
	a = kvt_client(&env, NULL, 0, 4);
	cr_expect_eq(server_stats(a).curr_items, 10);
	kvc_destroy(a);
}

Test(flush, an_empty_cache_flushes_at_once)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	uint64_t t0 = kvt_mono_ms();

	cr_assert_eq(kvc_flush_all(a, 0), 0);
	cr_expect_lt(kvt_mono_ms() - t0, 2000);
	cr_expect_eq(server_stats(a).flushed, 0);
	kvc_destroy(a);
}

/* Wait until the server has done `walks` flushes; at most ms. */
static void wait_walks(kvc_t *c, uint64_t walks, uint64_t ms)
{
	uint64_t end = kvt_mono_ms() + ms;

	while (server_stats(c).flushes < walks) {
		cr_assert_lt(kvt_mono_ms(), end, "no flush %" PRIu64 " within %" PRIu64 " ms", walks, ms);
		usleep(2000);
	}
}

Test(flush, delayed_items_are_there_before_the_time_and_gone_after)
{
	kvc_t *a = kvt_client(&env, NULL, 256, 4), *b = kvt_client(&env, NULL, 256, 4);
	uint64_t t0;

	put_n(a, "k", N);
	t0 = kvt_mono_ms();
	cr_assert_eq(kvc_flush_all(a, 400), 0);
	cr_expect_lt(kvt_mono_ms() - t0, 300, "a delayed flush returns once scheduled");
	cr_expect_eq(server_stats(a).cmd_flush, 1);
	cr_expect_eq(found(b, "k", N), N, "items are there before the time");
	wait_walks(b, 1, 5000);
	cr_expect_geq(kvt_mono_ms() - t0, 400, "the flush took effect before its time");
	cr_expect_eq(found(b, "k", N), 0, "items are gone after it");
	put_n(b, "after", 10);
	usleep(100000);
	cr_expect_eq(found(a, "after", 10), 10);
	cr_expect_eq(server_stats(a).flushes, 1, "a delayed flush happens once");
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(flush, a_later_immediate_flush_cancels_a_pending_delayed_one)
{
	kvc_t *a = kvt_client(&env, NULL, 256, 4);
	struct kvc_server_stats st;

	put_n(a, "k", 50);
	cr_assert_eq(kvc_flush_all(a, 300), 0);
	cr_assert_eq(kvc_flush_all(a, 0), 0);
	cr_expect_eq(found(a, "k", 50), 0);
	put_n(a, "kept", 50);
	usleep(600000); /* past the cancelled one's time */
	cr_expect_eq(found(a, "kept", 50), 50, "the cancelled delayed flush happened");
	st = server_stats(a);
	cr_expect_eq(st.cmd_flush, 2);
	cr_expect_eq(st.flushes, 1);
	kvc_destroy(a);
}

Test(flush, a_later_delayed_flush_replaces_the_pending_one)
{
	kvc_t *a = kvt_client(&env, NULL, 256, 4);

	put_n(a, "k", 50);
	cr_assert_eq(kvc_flush_all(a, 200), 0);
	cr_assert_eq(kvc_flush_all(a, 1000000), 0); /* in 1000 s: replaces it */
	usleep(500000);
	cr_expect_eq(found(a, "k", 50), 50, "the replaced flush happened");
	cr_expect_eq(server_stats(a).flushes, 0);
	/* ... and a shorter one replaces that. */
	cr_assert_eq(kvc_flush_all(a, 100), 0);
	wait_walks(a, 1, 5000);
	cr_expect_eq(found(a, "k", 50), 0);
	kvc_destroy(a);
}

/* ---- a held and a junk lock word ----------------------------------------- */

static void *release_later(void *arg)
{
	uint64_t *lock = arg, word = __atomic_load_n(lock, __ATOMIC_SEQ_CST);

	usleep(200000);
	__atomic_compare_exchange_n(lock, &word, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return NULL;
}

/* The bucket key lives in (its slot's). */
static uint64_t bucket_of(const char *key)
{
	struct kvi_keyhash kh = kvt_hash_of(&env, key);
	int which = -1;

	cr_assert_eq(kvt_key_slots(&env, key, NULL, 0, &which), 1);
	return kh.b[which];
}

/* The lock word of home bucket b. */
static uint64_t *home_lock(uint64_t b)
{
	return kvt_word_at(&env, kvt_geom(&env)->index_off + b * KVI_BUCKET_SIZE);
}

Test(flush, a_bucket_a_writer_holds_is_cleared_once_it_is_free)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	uint64_t b, t0, *lock;
	pthread_t t;

	put_n(a, "k", N);
	b = bucket_of("k-7");
	lock = home_lock(b);
	/* As a writer between its lock and its unlock. */
	__atomic_store_n(lock, kvi_lock_held_by(4000), __ATOMIC_SEQ_CST);
	t0 = kvt_mono_ms();
	cr_assert_eq(pthread_create(&t, NULL, release_later, lock), 0);
	cr_assert_eq(kvc_flush_all(a, 0), 0);
	pthread_join(t, NULL);
	cr_expect_geq(kvt_mono_ms() - t0, 190, "the flush was done before the held bucket was free");
	cr_expect_eq(slots_in_use(), 0);
	cr_expect_eq(found(a, "k", N), 0);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(a);
}

Test(flush, a_junk_lock_word_is_repaired_and_its_bucket_cleared)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	uint64_t b, *lock;

	put_n(a, "k", N);
	b = bucket_of("k-3");
	lock = home_lock(b);
	__atomic_store_n(lock, 0x0123456789abcdefull, __ATOMIC_SEQ_CST); /* a stray WRITE's */
	cr_assert(!kvi_lock_legal(*lock));
	cr_assert_eq(kvc_flush_all(a, 0), 0);
	cr_expect_eq(__atomic_load_n(lock, __ATOMIC_SEQ_CST), 0);
	cr_expect_eq(slots_in_use(), 0);
	cr_expect_eq(found(a, "k", N), 0);
	kvc_destroy(a);
}

/* ---- GETs in other threads while flushes run ----------------------------- */

#define NREAD 3000u

struct reader {
	kvc_t *c;
	int stop;
	uint64_t gets, hits, bad;
	int bad_rc;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char k[48], v[64], got[80];
	unsigned i = 0;

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		int rc;

		key_of(k, sizeof(k), "r", i);
		rc = kvt_get_s(r->c, k, got, sizeof(got));
		r->gets++;
		if (rc == 0) {
			snprintf(v, sizeof(v), "value-of-%s", k);
			if (strcmp(got, v) != 0) {
				r->bad++;
				r->bad_rc = 1;
			}
			r->hits++;
		} else if (rc != KVC_ENOTFOUND) {
			r->bad++;
			r->bad_rc = rc;
		}
		i = (i + 7) % NREAD;
	}
	return NULL;
}

static void big_setup(void)
{
	/* 64 Ki buckets (a 16 MiB index): walks take a while. */
	cr_assert_eq(kvt_env_init(&env, 64, 1u << 16, 64), 0);
}

TestSuite(flush_big, .init = big_setup, .fini = teardown, .timeout = 180);

Test(flush_big, gets_in_other_threads_only_hit_or_miss_while_flushes_run)
{
	kvc_t *w = kvt_client(&env, NULL, 256, 4);
	struct reader r[2] = { { .c = kvt_client(&env, NULL, 1024, 4) }, { .c = kvt_client(&env, NULL, 0, 4) } };
	pthread_t t[2];
	uint64_t t0, ms_total = 0;

	put_n(w, "r", NREAD);
	for (unsigned i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, reader_main, &r[i]), 0);
	for (unsigned round = 0; round < 5; round++) {
		usleep(20000);
		t0 = kvt_mono_ms();
		cr_assert_eq(kvc_flush_all(w, 0), 0);
		ms_total += kvt_mono_ms() - t0;
		put_n(w, "r", NREAD); /* back, for the next round */
	}
	for (unsigned i = 0; i < 2; i++) {
		__atomic_store_n(&r[i].stop, 1, __ATOMIC_RELEASE);
		pthread_join(t[i], NULL);
		cr_expect_eq(r[i].bad, 0, "reader %u: %" PRIu64 " GETs neither hit nor missed (last: %d)", i, r[i].bad,
			     r[i].bad_rc);
		cr_expect_gt(r[i].gets, 0);
		kvc_destroy(r[i].c);
	}
	cr_log_info("5 flushes of %u buckets with 2 readers: %" PRIu64 " ms each", 1u << 16, ms_total / 5);
	cr_expect_eq(server_stats(w).flushes, 5);
	kvc_destroy(w);
}

/* ---- several servers ------------------------------------------------------ */

#define NSRV 3

Test(flush_big, a_handle_over_several_servers_flushes_each)
{
	struct kvt_env more[NSRV];
	struct kvc_server_stats st;
	struct kvc_opts o;
	kvc_t *cl;

	kvc_opts_init(&o);
	o.depth = 16;
	for (unsigned i = 0; i < NSRV; i++)
		cr_assert_eq(kvt_env_init(&more[i], 8, 256, 64), 0);
	cr_assert_eq(kvi_client_new(&o, &cl), 0);
	for (unsigned i = 0; i < NSRV; i++) {
		static const char *const names[NSRV] = { "10.0.0.1:7471", "10.0.0.2:7471", "10.0.0.3:7471" };
		kvi_dial_fn fn;
		void *arg;

		cr_assert_eq(kvt_env_dial(&more[i], &fn, &arg), 0);
		cr_assert_eq(kvi_client_add(cl, names[i], 1, fn, arg, free), 0);
	}
	put_n(cl, "k", 300);
	for (unsigned i = 0; i < NSRV; i++) {
		cr_assert_eq(kvc_server_stats_at(cl, i, &st), 0);
		cr_assert_gt(st.bytes, 0, "server %u got no keys", i);
	}
	cr_assert_eq(kvc_flush_all(cl, 0), 0);
	cr_expect_eq(found(cl, "k", 300), 0);
	cr_assert_eq(kvc_server_stats(cl, &st), 0);
	cr_expect_eq(st.cmd_flush, NSRV);
	cr_expect_eq(st.flushes, NSRV);
	cr_expect_eq(st.flushed, 300, "every item of every server cleared once");
	kvc_destroy(cl);
	for (unsigned i = 0; i < NSRV; i++)
		kvt_env_fini(&more[i]);
}

/* ---- during a resize: the reclaimer's loop with migrator and flusher ----- */

static struct kvs_reclaimer *rcl;
static struct kvs_migrator *mig;
static struct kvs_flusher *fl;

#define RESIZE_BUCKETS (1u << 16) /* several flush and migration slices */

static void resize_setup(void)
{
	struct kvs_core_opts o = { .buckets = RESIZE_BUCKETS, .segment_size = 64u << 10, .max_op_ms = 50,
				   .quarantine_ms = 100, .in_process = 1 };

	cr_assert_eq(kvt_env_init_opts(&env, 128, &o), 0);
	cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
	cr_assert_eq(kvs_migrate_create(env.srv.core, &(struct kvs_migrate_opts){ 0 }, &mig), 0);
	kvs_reclaim_set_migrator(rcl, mig);
	/* Ours, on the reclaimer's loop: the in-process server starts none. */
	cr_assert_eq(kvs_flush_create(env.srv.core, &fl), 0);
	kvs_reclaim_set_flusher(rcl, fl);
}

static void resize_teardown(void)
{
	kvs_reclaim_destroy(rcl);
	kvs_migrate_destroy(mig);
	kvs_flush_destroy(fl);
	rcl = NULL;
	mig = NULL;
	fl = NULL;
	kvt_env_fini(&env);
}

TestSuite(flush_resize, .init = resize_setup, .fini = resize_teardown, .timeout = 180);

static struct kvs_core_stats core_stats(void)
{
	struct kvs_core_stats st;

	kvs_core_stats(env.srv.core, &st);
	return st;
}

static enum kvi_index_state index_state(uint64_t *epoch)
{
	enum kvi_index_state s;
	uint64_t e;

	kvs_core_index_status(env.srv.core, &e, &s);
	if (epoch)
		*epoch = e;
	return s;
}

/* One FLUSH as client `id` sends it: the answer. */
static struct kvi_ctrl flush_req(uint32_t id, uint64_t delay_ms, uint64_t ticket)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_FLUSH, .seq = 1, .flush = { .delay_ms = delay_ms, .ticket = ticket } },
			resp;

	cr_assert_eq(kvs_inproc_ctrl(&env.srv, id, &req, &resp), 0);
	return resp;
}

static void run_once(void)
{
	int rc = kvs_reclaim_run(rcl);

	cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
}

/* Slots in use in index `which` (0 current, 1 previous) of the core's, not
 * counting MOVED buckets (whose slots were copied; nobody reads them). */
static uint64_t index_slots(int which)
{
	uint32_t cap = kvs_core_max_chunks(env.srv.core);
	uint64_t *chunks = calloc(cap, sizeof(uint64_t)), n = 0;
	struct kvi_index ix = { .chunk_off = chunks };

	cr_assert_not_null(chunks);
	if (kvs_core_index(env.srv.core, which, &ix, chunks, cap)) {
		free(chunks);
		return 0;
	}
	for (uint64_t b = 0; b < ix.bucket_count; b++) {
		const struct kvi_bucket *bk = (const void *)(kvt_base(&env) + kvi_index_bucket_off(&ix, b));

		if (bk->lock == KVI_LOCK_MOVED)
			continue;
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			n += bk->slot[i] != 0;
	}
	free(chunks);
	return n;
}

#define NRES 6000u

Test(flush_resize, a_flush_during_a_migration_clears_both_indexes)
{
	kvc_t *a = kvt_client(&env, NULL, 256, 4), *b;
	uint64_t epoch, left, walks = 0;
	uint32_t id = kvs_inproc_new_id(&env.srv);
	struct kvi_ctrl r;
	int migrating_during = 0;

	put_n(a, "k", NRES);
	cr_assert_eq(kvs_core_grow(env.srv.core, (index_state(&epoch), epoch)), KVI_GROW_STARTED);
	/* Start it and migrate a slice: part of the old index moved. */
	for (int i = 0; i < 50 && !(index_state(NULL) == KVI_INDEX_MIGRATING && kvs_migrate_left(mig) < RESIZE_BUCKETS);
	     i++)
		run_once();
	left = kvs_migrate_left(mig);
	cr_assert(left > 0 && left < RESIZE_BUCKETS, "%" PRIu64 " old buckets left", left);
	cr_assert_gt(index_slots(0), 0, "migrated items are in the new index");
	cr_assert_gt(index_slots(1), 0, "unmigrated items are in the old index");
	r = flush_req(id, 0, 0);
	cr_assert_eq(r.type, KVI_CTRL_FLUSHED);
	cr_assert_eq(r.flushed.ticket, 1);
	while (core_stats().flushes == 0) {
		migrating_during |= index_state(NULL) == KVI_INDEX_MIGRATING && kvs_flush_active(fl);
		run_once();
		cr_assert_lt(++walks, 100000, "the flush never finished");
	}
	cr_expect(migrating_during, "the walk did not overlap the migration");
	cr_expect_eq(index_slots(0) + index_slots(1), 0, "a slot survived the flush");
	cr_expect_eq(core_stats().flushed, NRES);
	b = kvt_client(&env, NULL, 256, 4);
	cr_expect_eq(found(b, "k", NRES), 0);
	cr_expect_eq(found(a, "k", NRES), 0, "a cached location outlived the flush");
	/* The migration goes on to its end; writes after the flush are kept. */
	put_n(b, "after", 500);
	for (int i = 0; i < 100000 && !(index_state(NULL) == KVI_INDEX_STABLE && kvs_migrate_left(mig) == 0); i++)
		run_once();
	cr_assert_eq(index_state(NULL), KVI_INDEX_STABLE);
	cr_expect_eq(core_stats().resizes, 1);
	cr_expect_eq(found(a, "after", 500), 500);
	kvc_destroy(b);
	b = kvt_client(&env, NULL, 0, 4);
	cr_expect_eq(found(b, "after", 500), 500);
	kvc_destroy(a);
	kvc_destroy(b);
}

/* An old bucket a writer holds while the walk passes: it must be cleared
 * (or, migrated, found in the new index) -- never migrated into new buckets
 * the walk already went over. */
Test(flush_resize, an_old_bucket_held_during_the_walk_is_not_migrated_past_it)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	uint32_t cap = kvs_core_max_chunks(env.srv.core);
	uint64_t *chunks = calloc(cap, sizeof(uint64_t)), epoch, b, *lock = NULL, word;
	struct kvi_index old = { .chunk_off = chunks };
	struct kvi_rmem *rm;
	int runs = 0;

	cr_assert_not_null(chunks);
	put_n(a, "k", NRES);
	cr_assert_eq(kvs_core_grow(env.srv.core, (index_state(&epoch), epoch)), KVI_GROW_STARTED);
	for (int i = 0; i < 50 && !(index_state(NULL) == KVI_INDEX_MIGRATING && kvs_migrate_left(mig) < RESIZE_BUCKETS);
	     i++)
		run_once();
	cr_assert_eq(kvs_core_index(env.srv.core, 1, &old, chunks, cap), 0);
	/* The last old bucket holding items: the migrator has not reached it. */
	for (b = old.bucket_count - 1; b > 0 && !lock; b--) {
		struct kvi_bucket *bk = (void *)(kvt_base(&env) + kvi_index_bucket_off(&old, b));

		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET && !lock; i++)
			if (bk->slot[i] && bk->lock == 0)
				lock = &bk->lock;
	}
	cr_assert_not_null(lock);
	__atomic_store_n(lock, kvi_lock_held_by(4000), __ATOMIC_SEQ_CST);
	cr_assert_eq(flush_req(kvs_inproc_new_id(&env.srv), 0, 0).flushed.ticket, 1);
	/* Long enough for the walk to go over every bucket it can, and for
	 * the migrator to migrate every other one. */
	while (kvs_migrate_left(mig) > 1 || runs < 200) {
		run_once();
		cr_assert_lt(++runs, 100000);
		usleep(100);
	}
	cr_assert(kvs_flush_active(fl), "the walk ended with a bucket held");
	word = kvi_lock_held_by(4000);
	cr_assert(__atomic_compare_exchange_n(lock, &word, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	/* The migrator gets there first (over a loopback of the test's). */
	cr_assert_eq(kvs_inproc_loopback(&env.srv, 4096, NULL, kvs_inproc_new_id(&env.srv), &rm), 0);
	while (kvs_migrate_left(mig) > 0) {
		cr_assert_geq(kvs_migrate_run(mig, rm, kvi_rmem_lbuf(rm, NULL), 4096), 0);
		cr_assert_lt(++runs, 100000);
		usleep(100);
	}
	kvi_rmem_destroy(rm);
	while (core_stats().flushes == 0) {
		run_once();
		cr_assert_lt(++runs, 200000, "the flush never finished");
	}
	cr_expect_eq(index_slots(0) + index_slots(1), 0, "a slot survived the flush");
	cr_expect_eq(core_stats().flushed, NRES);
	cr_expect_eq(found(a, "k", NRES), 0);
	free(chunks);
	kvc_destroy(a);
}

Test(flush_resize, a_resize_asked_for_during_a_walk_starts_after_it)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	uint32_t id = kvs_inproc_new_id(&env.srv);
	uint64_t epoch;
	int slices = 0;

	put_n(a, "k", NRES);
	cr_assert_eq(flush_req(id, 0, 0).flushed.ticket, 1);
	run_once();
	cr_assert(kvs_flush_active(fl), "one slice walked the whole index");
	index_state(&epoch);
	cr_assert_eq(kvs_core_grow(env.srv.core, epoch), KVI_GROW_STARTED);
	while (kvs_flush_active(fl)) {
		/* Held: no new index is published under the walk. */
		cr_assert_eq(index_state(NULL), KVI_INDEX_STABLE);
		cr_assert_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_WANTED);
		run_once();
		slices++;
	}
	cr_expect_geq(slices, 2);
	cr_expect_eq(core_stats().flushed, NRES);
	/* ... and then it runs. */
	for (int i = 0; i < 100000 && !(core_stats().resizes == 1 && index_state(NULL) == KVI_INDEX_STABLE); i++)
		run_once();
	cr_expect_eq(core_stats().resizes, 1);
	cr_expect_eq(found(a, "k", NRES), 0);
	kvc_destroy(a);
}

/* ---- what requests cost the server --------------------------------------- */

TestSuite(flush_bounds, .init = setup, .fini = teardown, .timeout = 120);

Test(flush_bounds, without_a_flusher_flush_is_refused)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_FLUSH, .seq = 3 }, resp;

	/* The bare core (the in-process server starts its flusher only when
	 * asked through its handler). */
	cr_assert_eq(kvs_core_ctrl(env.srv.core, 5, &req, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_ENOTSUP);
}

Test(flush_bounds, a_flood_of_requests_is_one_walk_and_bad_ones_are_refused)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	struct kvi_ctrl req, resp;
	struct kvs_flusher *f;
	struct kvi_rmem *rm;
	uint32_t id = kvs_inproc_new_id(&env.srv);
	uint64_t t0, ms;
	int rc;

	put_n(a, "k", 100);
	/* A flusher nobody runs yet: the requests pile up. */
	cr_assert_eq(kvs_flush_create(env.srv.core, &f), 0);
	cr_assert_eq(kvs_inproc_loopback(&env.srv, KVS_FLUSH_LBUF, NULL, kvs_inproc_new_id(&env.srv), &rm), 0);
	t0 = kvt_mono_ms();
	for (unsigned i = 0; i < 100000; i++) {
		req = (struct kvi_ctrl){ .type = KVI_CTRL_FLUSH, .seq = i + 1, .flush = { .delay_ms = i % 2 ? 0 : 5000 } };
		cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_FLUSHED);
		cr_assert_eq(resp.flushed.ticket, i % 2 ? 1 : 0, "request %u", i);
	}
	ms = kvt_mono_ms() - t0;
	cr_log_info("100000 FLUSH requests: %" PRIu64 " ms", ms);
	cr_expect_lt(ms, 5000, "FLUSH costs the event loop more than O(1)");
	cr_expect_eq(core_stats().flush_requests, 100000);
	/* The last was immediate: nothing is pending; one walk does them all. */
	cr_expect_eq(resp.flushed.due_ms, 0);
	while ((rc = kvs_flush_run(f, rm, kvi_rmem_lbuf(rm, NULL), KVS_FLUSH_LBUF)) == KVS_FLUSH_BUSY)
		;
	cr_assert_eq(rc, KVS_FLUSH_IDLE);
	cr_expect_eq(core_stats().flushes, 1);
	cr_expect_eq(core_stats().flushed, 100);
	cr_expect_eq(kvs_flush_run(f, rm, kvi_rmem_lbuf(rm, NULL), KVS_FLUSH_LBUF), KVS_FLUSH_IDLE);
	cr_expect_eq(core_stats().flushes, 1, "a walk nobody asked for");
	/* A delay that never comes due costs nothing; a later one replaces it. */
	req = (struct kvi_ctrl){ .type = KVI_CTRL_FLUSH, .seq = 1, .flush = { .delay_ms = UINT64_MAX } };
	cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
	cr_expect_eq(resp.flushed.ticket, 0);
	cr_expect_gt(resp.flushed.due_ms, 1000ull * 86400 * 365);
	cr_expect_eq(kvs_flush_next_ms(f, 1000), 1000);
	cr_expect_eq(kvs_flush_run(f, rm, kvi_rmem_lbuf(rm, NULL), KVS_FLUSH_LBUF), KVS_FLUSH_IDLE);
	req.flush.delay_ms = 1;
	cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
	usleep(5000);
	cr_expect_eq(kvs_flush_next_ms(f, 1000), 0);
	while ((rc = kvs_flush_run(f, rm, kvi_rmem_lbuf(rm, NULL), KVS_FLUSH_LBUF)) == KVS_FLUSH_BUSY)
		;
	cr_expect_eq(core_stats().flushes, 2);
	/* Asking about a walk that is not the next, or with a delay: refused. */
	req = (struct kvi_ctrl){ .type = KVI_CTRL_FLUSH, .seq = 2, .flush = { .ticket = 99 } };
	cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_EINVAL);
	req.flush = (struct kvi_ctrl_flush){ .ticket = 1, .delay_ms = 7 };
	cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
	cr_expect_eq(resp.status, KVC_EINVAL);
	req.flush = (struct kvi_ctrl_flush){ .ticket = 2 };
	cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_FLUSHED);
	cr_expect_eq(resp.flushed.done, 2);
	/* The server's own message from a client: it is disconnected. */
	req = (struct kvi_ctrl){ .type = KVI_CTRL_FLUSHED, .seq = 4 };
	cr_expect_lt(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
	kvi_rmem_destroy(rm);
	kvs_flush_destroy(f);
	kvc_destroy(a);
}
