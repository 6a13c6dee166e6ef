/* Online resize, the server's side (server/migrate.h): the migrator over the
 * local transport's loopback, with quiescent clients before and after and
 * direct checks of the region's memory. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dpath_env.h"
#include "hash.h"
#include "kvclient_errors.h"
#include "migrate.h"

#define MAX_OP_MS 50u
#define QUARANTINE_MS (2 * MAX_OP_MS)
#define NKEYS 2000u

static struct kvt_env env;
static struct kvs_reclaimer *rcl;
static struct kvs_migrator *mig;
static uint32_t quarantine_ms = QUARANTINE_MS;

static void setup_opts(uint64_t mib, uint64_t buckets, int no_evict, unsigned load_pct)
{
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = 64u << 10, .max_op_ms = MAX_OP_MS,
				   .quarantine_ms = quarantine_ms, .no_evict = no_evict, .in_process = 1 };

	cr_assert_eq(kvt_env_init_opts(&env, mib, &o), 0);
	cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
	cr_assert_eq(kvs_migrate_create(env.srv.core, &(struct kvs_migrate_opts){ .load_pct = load_pct }, &mig), 0);
	kvs_reclaim_set_migrator(rcl, mig);
}

static void setup(void)
{
	setup_opts(16, 512, 0, 0);
}

static void teardown(void)
{
	kvs_reclaim_destroy(rcl);
	kvs_migrate_destroy(mig);
	rcl = NULL;
	mig = NULL;
	kvt_env_fini(&env);
}

static kvc_t *client(void)
{
	kvc_t *c = NULL;

	cr_assert_eq(kvt_env_client(&env, NULL, 0, 4, &c), 0);
	return c;
}

static void put_keys(unsigned n)
{
	kvc_t *c = client();
	char k[32], v[32];

	for (unsigned i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		cr_assert_eq(kvt_put_s(c, k, v), 0, "put %s", k);
	}
	kvc_destroy(c);
}

/* A fresh client (it fetches the index in use at join) finds every key. */
static void check_keys(unsigned n)
{
	kvc_t *c = client();
	char k[32], v[32], got[64];

	for (unsigned i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		cr_assert_eq(kvt_get_s(c, k, got, sizeof(got)), 0, "get %s", k);
		cr_assert_str_eq(got, v);
	}
	kvc_destroy(c);
}

static struct kvs_core_stats stats(void)
{
	struct kvs_core_stats st;

	kvs_core_stats(env.srv.core, &st);
	return st;
}

static uint64_t epoch_now(enum kvi_index_state *state)
{
	enum kvi_index_state s;
	uint64_t e;

	kvs_core_index_status(env.srv.core, &e, &s);
	if (state)
		*state = s;
	return e;
}

/* Run the reclaimer's loop (migration first) until the resize phase is
 * `until` with the index STABLE, at most for secs seconds. */
static void run_until_phase(enum kvs_resize_phase until, int secs)
{
	time_t end = time(NULL) + secs;
	enum kvi_index_state st;

	for (;;) {
		int rc = kvs_reclaim_run(rcl);

		cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
		epoch_now(&st);
		if (kvs_core_resize_phase(env.srv.core) == until && st == KVI_INDEX_STABLE &&
		    (until != KVS_RESIZE_RUNNING || kvs_migrate_left(mig) == 0))
			return;
		cr_assert(time(NULL) < end, "resize did not reach phase %d in %d s", until, secs);
		usleep(1000);
	}
}

/* Run the reclaimer thread's loop until `n` old indexes had their memory
 * back (the next resize need not wait for that, the memory does). */
static void run_until_retired(uint64_t n, int secs)
{
	time_t end = time(NULL) + secs;
	struct kvs_migrate_stats ms;

	for (;;) {
		int rc = kvs_reclaim_run(rcl);

		cr_assert_geq(rc, 0, "reclaimer failed: %s", kvc_err_name(rc));
		kvs_migrate_stats(mig, &ms);
		if (ms.retired >= n)
			return;
		cr_assert(time(NULL) < end, "%lu indexes not retired in %d s", (unsigned long)n, secs);
		usleep(1000);
	}
}

static struct kvi_bucket *bk(const struct kvi_index *x, uint64_t i)
{
	return (struct kvi_bucket *)(kvs_core_region(env.srv.core) + kvi_index_bucket_off(x, i));
}

static uint64_t chunks_old[64], chunks_new[64];

/* Slots naming an object with key k among k's choices in x. */
static unsigned occurrences(const struct kvi_index *x, const char *k)
{
	const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
	struct kvi_keyhash kh;
	unsigned n = 0;

	kvi_key_hash(k, strlen(k), g->hash_seed, x->bucket_count, &kh);
	for (unsigned w = 0; w < 2; w++) {
		if (w == 1 && kh.b[1] == kh.b[0])
			break;
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t s = bk(x, kh.b[w])->slot[i];
			const struct kvi_obj_hdr *h;

			if (!s)
				continue;
			h = (const void *)(kvs_core_region(env.srv.core) + kvi_slot_obj_off(s));
			n += h->key_len == strlen(k) && !memcmp(h + 1, k, h->key_len);
		}
	}
	return n;
}

/* The slot of key k in x (0 if none). */
static uint64_t slot_of(const struct kvi_index *x, const char *k)
{
	const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
	struct kvi_keyhash kh;

	kvi_key_hash(k, strlen(k), g->hash_seed, x->bucket_count, &kh);
	for (unsigned w = 0; w < 2; w++) {
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t s = bk(x, kh.b[w])->slot[i];
			const struct kvi_obj_hdr *h = (const void *)(kvs_core_region(env.srv.core) + kvi_slot_obj_off(s));

			if (s && h->key_len == strlen(k) && !memcmp(h + 1, k, h->key_len))
				return s;
		}
	}
	return 0;
}

TestSuite(migrate, .init = setup, .fini = teardown, .timeout = 60);
/* Tests that set up their own server. */
TestSuite(migrate_opts, .fini = teardown, .timeout = 60);

Test(migrate, resize_keeps_every_key_and_retires_the_old_index)
{
	struct kvi_index old, nw;
	struct kvs_core_stats st0, st;
	char k[32];

	put_keys(NKEYS);
	st0 = stats();
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED, "also while one is under way");
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	cr_assert_eq(epoch_now(NULL), 2);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STALE);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0);
	cr_assert_eq(kvs_core_index(env.srv.core, 1, &old, chunks_old, 64), 0);
	cr_assert_eq(nw.bucket_count, 1024);
	cr_assert_eq(old.bucket_count, 512);
	for (uint64_t i = 0; i < old.bucket_count; i++)
		cr_assert_eq(bk(&old, i)->lock, KVI_LOCK_MOVED, "old bucket %lu", (unsigned long)i);
	for (uint64_t i = 0; i < nw.bucket_count; i++)
		cr_assert_neq(bk(&nw, i)->lock, KVI_LOCK_UNMIGRATED, "new bucket %lu", (unsigned long)i);
	for (unsigned i = 0; i < NKEYS; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		cr_assert_eq(occurrences(&nw, k), 1, "%s", k);
	}
	st = stats();
	cr_assert_eq(st.segments_index, 4, "1024 buckets of 256 bytes in 64 KiB chunks");
	cr_assert_eq(st.segments_free, st0.segments_free - 4);
	check_keys(NKEYS);

	/* Retirement: after the quarantine (no members here). The home index
	 * goes to the pool: the next resize takes its two pieces first. */
	run_until_phase(KVS_RESIZE_IDLE, 20);
	cr_assert_eq(kvs_core_index(env.srv.core, 1, &old, chunks_old, 64), KVC_ENOTFOUND);
	run_until_retired(1, 20);
	cr_assert_eq(kvs_core_grow(env.srv.core, 2), KVI_GROW_STARTED);
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0);
	cr_assert_eq(nw.epoch, 3);
	cr_assert_eq(nw.nchunks, 8);
	{
		const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
		unsigned home = 0;

		for (unsigned c = 0; c < nw.nchunks; c++)
			home += nw.chunk_off[c] < g->heap_off;
		cr_assert_eq(home, 2, "the home area's two 64 KiB pieces are reused");
	}
	st = stats();
	cr_assert_eq(st.segments_index, 4 + 6, "epoch 2's chunks and 6 more");
	check_keys(NKEYS);
	run_until_phase(KVS_RESIZE_IDLE, 20);
	run_until_retired(2, 20);
	st = stats();
	cr_assert_eq(st.segments_index, 6, "epoch 2's segments went back");
	usleep(2 * QUARANTINE_MS * 1000);
	kvs_core_tick(env.srv.core, 0);
	st = stats();
	cr_assert_eq(st.segments_quarantined, st0.segments_quarantined);
	cr_assert_eq(st.segments_free, st0.segments_free - 6, "free segments come back after the quarantine");
	cr_assert_eq(st.index_bytes, 2048u * KVI_BUCKET_SIZE);
	check_keys(NKEYS);
}

/* A small index filling fast doubles again before its last old index's
 * memory could be reused: a GROW that comes while a resize runs starts the
 * next one as soon as the old index is unpublished, and that does not wait
 * for the quarantine of the one before (several wait together). An insert
 * that waited for both -- a quarantine, 2.5 s by default -- would fail
 * KVC_EINDEXFULL at three quarters of its deadline. */
static void setup_long_quarantine(void)
{
	quarantine_ms = 3000;
	setup_opts(16, 512, 0, 0);
	quarantine_ms = QUARANTINE_MS;
}

Test(migrate_opts, a_grow_asked_during_a_resize_begins_at_its_retirement, .init = setup_long_quarantine)
{
	struct kvs_migrate_stats ms;
	enum kvi_index_state st;
	time_t end = time(NULL) + 20;

	put_keys(NKEYS);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	run_until_phase(KVS_RESIZE_RUNNING, 20); /* migrated; the old index not yet retired */
	cr_assert_eq(epoch_now(NULL), 2);
	cr_assert_eq(kvs_core_grow(env.srv.core, 2), KVI_GROW_STARTED, "remembered, not dropped");
	/* Nobody asks again: epoch 3 comes and its old index is unpublished,
	 * while epoch 1's memory still waits out its quarantine. */
	for (;;) {
		struct kvi_index prev;

		cr_assert_geq(kvs_reclaim_run(rcl), 0);
		if (epoch_now(&st) == 3 && st == KVI_INDEX_STABLE &&
		    kvs_core_index(env.srv.core, 1, &prev, chunks_old, 64) == KVC_ENOTFOUND)
			break;
		cr_assert(time(NULL) < end, "epoch 3 was not reached and retired by itself");
		usleep(1000);
	}
	kvs_migrate_stats(mig, &ms);
	cr_expect_eq(ms.retired, 0, "both old indexes still wait for their quarantine");
	cr_expect_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_IDLE);
	check_keys(NKEYS);
	run_until_retired(2, 20);
	check_keys(NKEYS);
}

Test(migrate, a_held_bucket_delays_only_itself)
{
	struct kvi_index old, nw;
	const uint64_t held = 7, fake = kvi_lock_held_by(4000);

	put_keys(300);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &old, chunks_old, 64), 0);
	__atomic_store_n(&bk(&old, held)->lock, fake, __ATOMIC_SEQ_CST); /* a client holds it */
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	for (int i = 0; i < 200 && kvs_migrate_left(mig) != 1; i++)
		cr_assert_geq(kvs_reclaim_run(rcl), 0);
	cr_assert_eq(kvs_migrate_left(mig), 1, "every bucket but the held one is migrated");
	for (int i = 0; i < 20; i++)
		cr_assert_geq(kvs_reclaim_run(rcl), 0);
	cr_assert_eq(kvs_migrate_left(mig), 1, "the held one waits");
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0);
	for (uint64_t i = 0; i < old.bucket_count; i++) {
		cr_assert_eq(bk(&old, i)->lock, i == held ? fake : KVI_LOCK_MOVED);
		cr_assert_eq(bk(&nw, i)->lock == KVI_LOCK_UNMIGRATED, i == held);
		cr_assert_eq(bk(&nw, i + old.bucket_count)->lock == KVI_LOCK_UNMIGRATED, i == held);
	}
	/* Its writer finishes. */
	__atomic_store_n(&bk(&old, held)->lock, 0, __ATOMIC_SEQ_CST);
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	cr_assert_eq(bk(&old, held)->lock, KVI_LOCK_MOVED);
	cr_assert_eq(bk(&nw, held)->lock, 0);
	cr_assert_eq(bk(&nw, held + old.bucket_count)->lock, 0);
	check_keys(300);
}

/* A live client keeps an old bucket's lock: the migrator reports it as a
 * writer does (server/lockwatch.h); past the watch window its owner is
 * condemned, and once fenced the resize finishes. */
Test(migrate, a_bucket_kept_locked_by_a_live_client_is_reported_by_the_migrator)
{
	struct kvi_index old;
	kvc_t *holder;
	uint64_t held = 7, t0;
	uint32_t id;

	cr_assert_eq(kvt_env_leases(&env, 60000, 15000), 0);
	put_keys(300);
	holder = client();
	id = kvi_client_conn(holder, 0)->rm->client_id;
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &old, chunks_old, 64), 0);
	__atomic_store_n(&bk(&old, held)->lock, kvi_lock_held_by(id), __ATOMIC_SEQ_CST);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	t0 = kvi_mono_ns();
	while (env.srv.fenced_owner != id && kvi_mono_ns() - t0 < 5000000000ull) {
		cr_assert_geq(kvs_reclaim_run(rcl), 0);
		usleep(1000);
	}
	cr_assert_eq(env.srv.fenced_owner, id, "the holder was never condemned");
	kvt_env_fence_locks(&env, id);
	kvc_destroy(holder);
	run_until_phase(KVS_RESIZE_IDLE, 20);
	check_keys(300);
}

/* Junk in an old bucket's lock word (a stray WRITE) must not keep the next
 * resize from ever finishing (a migrator retrying it for good would): it is
 * repaired (the bucket, not migrated yet, is free) and migrated. */
Test(migrate, junk_in_an_old_lock_word_does_not_stop_the_resize)
{
	const uint64_t junked = 5, junk = KVI_LOCK_MOVED | 0x77;
	struct kvi_index old, nw;
	struct kvs_migrate_stats ms;

	put_keys(300);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &old, chunks_old, 64), 0);
	__atomic_store_n(&bk(&old, junked)->lock, junk, __ATOMIC_SEQ_CST);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0);
	cr_expect_eq(bk(&old, junked)->lock, KVI_LOCK_MOVED);
	cr_expect_eq(bk(&nw, junked)->lock, 0);
	cr_expect_eq(bk(&nw, junked + old.bucket_count)->lock, 0);
	kvs_migrate_stats(mig, &ms);
	cr_expect_eq(ms.repaired, 1);
	check_keys(300);
}

Test(migrate, garbage_slots_are_dropped_not_copied)
{
	const struct kvi_geometry *g = kvs_core_geometry(env.srv.core);
	struct kvi_index old, nw;
	struct kvs_migrate_stats ms;
	struct kvi_keyhash kh;
	uint64_t junk, foreign = 0, b;
	unsigned put = 0;

	put_keys(300);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &old, chunks_old, 64), 0);
	/* Zeros in the heap's last segment: no object verifies there. */
	junk = kvi_slot_make(0x123, g->heap_off + g->heap_size - 4096, 64);
	/* A real object whose key has no choice in bucket b. */
	kvi_key_hash("key-0", 5, g->hash_seed, old.bucket_count, &kh);
	b = (kh.b[0] + 1) % old.bucket_count;
	if (b == kh.b[1])
		b = (b + 1) % old.bucket_count;
	foreign = slot_of(&old, "key-0");
	cr_assert(foreign);
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET && put < 2; i++) {
		if (bk(&old, b)->slot[i] == 0) {
			bk(&old, b)->slot[i] = put ? foreign : junk;
			put++;
		}
	}
	cr_assert_eq(put, 2);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	kvs_migrate_stats(mig, &ms);
	cr_assert_eq(ms.dropped, 2);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0);
	for (uint64_t i = 0; i < nw.bucket_count; i++)
		for (unsigned s = 0; s < KVI_SLOTS_PER_BUCKET; s++)
			cr_assert_neq(bk(&nw, i)->slot[s], junk);
	cr_assert_eq(occurrences(&nw, "key-0"), 1, "the real one moved, the stray copy did not");
	check_keys(300);
}

Test(migrate_opts, no_room_and_no_evict_cannot_grow)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_GROW, .seq = 1, .grow = { .epoch = 1 } }, resp;

	/* 1 MiB of home index in a 2 MiB region: 2 MiB more cannot fit. */
	setup_opts(2, 4096, 1, 0);
	cr_assert_eq(kvs_core_ctrl(env.srv.core, 1, &req, &resp), 0);
	cr_assert_eq(resp.type, KVI_CTRL_GROWING);
	cr_assert_eq(resp.growing.verdict, KVI_GROW_NO);
	req.grow.epoch = 0;
	cr_assert_eq(kvs_core_ctrl(env.srv.core, 1, &req, &resp), 0);
	cr_assert_eq(resp.growing.verdict, KVI_GROW_STALE);
	cr_assert_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_IDLE);
}

Test(migrate_bare, a_core_without_a_migrator_cannot_grow)
{
	struct kvs_core_opts o = { .buckets = 32, .segment_size = 64u << 10 };

	cr_assert_eq(kvt_env_init_opts(&env, 4, &o), 0);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_NO);
	kvt_env_fini(&env);
}

/* Insert `n` keys spread over the index through a fresh client, then run the
 * reclaimer's loop: the sampler must ask for a resize, and it must run. */
static void fill_until_the_sampler_resizes(const char *prefix, unsigned n)
{
	unsigned next = 0, ok = 0;
	char k[64];
	kvc_t *c = client();

	while (ok < n) {
		kvt_spread_key(&env, prefix, &next, k, sizeof(k));
		ok += kvt_put_s(c, k, "v") == 0;
		cr_assert_lt(next, 5000u);
	}
	kvc_destroy(c);
	cr_assert_eq(epoch_now(NULL), 1);
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	cr_assert_eq(epoch_now(NULL), 2, "the sampler asked for a resize and it ran");
}

Test(migrate_opts, sampling_wants_a_resize_of_a_filled_index)
{
	setup_opts(16, 32, 0, 50);
	/* 32 buckets x 31 slots: fill about 60 % (no insert finds both
	 * buckets full, which would send a GROW). */
	fill_until_the_sampler_resizes("fill", 600);
}

Test(migrate_opts, sampling_leaves_a_light_index_alone)
{
	setup_opts(16, 32, 0, 50);
	put_keys(100); /* 10 % of 992 slots */
	for (int i = 0; i < 5; i++) {
		cr_assert_geq(kvs_reclaim_run(rcl), 0);
		usleep((KVS_MIGRATE_SAMPLE_MS + 5) * 1000);
	}
	cr_assert_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_IDLE);
	cr_assert_eq(epoch_now(NULL), 1);
}

/* Sampling costs CPU: a load far from the line that does not rise is
 * sampled rarely (here every 128 ms: 4 ms per bucket of a 32-bucket index
 * read whole; a large index once a second), not every KVS_MIGRATE_SAMPLE_MS (kvserver
 * spent 5-12 % of a core so with the data path busy), and a load that then
 * rises past it is still seen. */
Test(migrate_opts, a_steady_light_load_is_sampled_rarely_and_still_seen_when_it_rises)
{
	struct kvs_migrate_stats st;

	setup_opts(16, 32, 0, 50);
	put_keys(100); /* 10 % of 992 slots */
	for (int i = 0; i < 60; i++) {
		cr_assert_geq(kvs_reclaim_run(rcl), 0);
		usleep(KVS_MIGRATE_SAMPLE_MS * 1000 / 2);
	}
	kvs_migrate_stats(mig, &st);
	cr_assert_leq(st.samples, 8, "%" PRIu64 " samples of a steady 10 %% load in 0.3 s", st.samples);
	cr_assert_geq(st.samples, 1);
	fill_until_the_sampler_resizes("near", 400); /* past the line (50 %) */
}

/* A reclaimer over a local loopback with fault hooks, as client id. */
static struct kvs_reclaimer *faulty_reclaimer(uint32_t id)
{
	struct kvi_local_hooks hk = { .before_op = kvt_fail_nth };
	struct kvs_reclaimer *r;

	cr_assert_eq(kvt_env_reclaimer_on(&env, &hk, id, NULL, &r), 0);
	kvs_reclaim_set_migrator(r, mig);
	return r;
}

Test(migrate, a_broken_loopback_resumes_where_it_was)
{
	const uint32_t dead = 3000;
	struct kvi_index old, nw;
	int rc = 0;

	put_keys(NKEYS);
	kvs_reclaim_destroy(rcl);
	rcl = faulty_reclaimer(dead);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
	cr_assert_eq(kvs_reclaim_run(rcl), 0, "the first call starts the migration");
	/* Lock doorbell: 5 CAS; end doorbell: old 0 -> MOVED lands, then the
	 * connection breaks before new 0 and N are unlocked. */
	kvt_fail_at = 7;
	for (int i = 0; i < 10 && rc == 0; i++)
		rc = kvs_reclaim_run(rcl);
	cr_assert_eq(rc, KVC_ESERVERGONE);
	cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0);
	cr_assert_eq(kvs_core_index(env.srv.core, 1, &old, chunks_old, 64), 0);
	cr_assert_eq(bk(&old, 0)->lock, KVI_LOCK_MOVED);
	cr_assert_eq(bk(&nw, 0)->lock, KVI_LOCK_UNMIGRATED);
	cr_assert_eq(bk(&old, 1)->lock, kvi_lock_held_by(dead));
	/* Fencing releases what the dead connection held (the local
	 * transport's atomics are the CPU's). */
	kvt_env_fence_locks(&env, dead);
	kvs_reclaim_destroy(rcl);
	rcl = faulty_reclaimer(dead + 1);
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	for (uint64_t i = 0; i < old.bucket_count; i++)
		cr_assert_eq(bk(&old, i)->lock, KVI_LOCK_MOVED, "old bucket %lu", (unsigned long)i);
	for (uint64_t i = 0; i < nw.bucket_count; i++)
		cr_assert_eq(bk(&nw, i)->lock, 0, "new bucket %lu", (unsigned long)i);
	check_keys(NKEYS);
}

/* Kill at every step (kvt_fail_nth, for the resize): the migrator's
 * connection breaks at its first operation, then in another run at its
 * second, ... until a run completes with no break left to make. After each
 * break the locks it held are released as fencing would, a new reclaimer
 * takes over, and the resize must finish with every old bucket MOVED, every
 * new one unlocked and every key where a fresh client finds it. */
Test(migrate_opts, a_migration_broken_after_any_of_its_operations_resumes_and_loses_no_key, .timeout = 240)
{
	enum { KEYS = 480, MAX_STEPS = 4000 };
	unsigned step;

	for (step = 1; step < MAX_STEPS; step++) {
		const uint32_t dead = 5000 + 2 * step;
		struct kvi_index old, nw;
		int rc = 0, left;

		setup_opts(16, 32, 0, 0); /* 32 buckets of 31 slots: half full */
		put_keys(KEYS);
		kvs_reclaim_destroy(rcl);
		rcl = faulty_reclaimer(dead);
		cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED);
		kvt_fail_at = (int)step;
		for (int i = 0; i < 1000 && rc == 0 && !(kvs_core_resize_phase(env.srv.core) == KVS_RESIZE_RUNNING &&
							    kvs_migrate_left(mig) == 0 && kvt_fail_at); i++)
			rc = kvs_reclaim_run(rcl);
		left = kvt_fail_at;
		kvt_fail_at = 0;
		if (rc == 0 && left) { /* every operation of the migration ran: all steps covered */
			check_keys(KEYS);
			teardown();
			break;
		}
		cr_assert_eq(rc, KVC_ESERVERGONE, "step %u: %s", step, kvc_err_name(rc));
		kvt_env_fence_locks(&env, dead);
		kvs_reclaim_destroy(rcl);
		rcl = faulty_reclaimer(dead + 1);
		run_until_phase(KVS_RESIZE_RUNNING, 20);
		cr_assert_eq(kvs_core_index(env.srv.core, 0, &nw, chunks_new, 64), 0, "step %u", step);
		cr_assert_eq(kvs_core_index(env.srv.core, 1, &old, chunks_old, 64), 0, "step %u", step);
		for (uint64_t i = 0; i < old.bucket_count; i++)
			cr_assert_eq(bk(&old, i)->lock, KVI_LOCK_MOVED, "step %u: old bucket %lu", step, (unsigned long)i);
		for (uint64_t i = 0; i < nw.bucket_count; i++)
			cr_assert_eq(bk(&nw, i)->lock, 0, "step %u: new bucket %lu", step, (unsigned long)i);
		check_keys(KEYS);
		teardown();
	}
	cr_assert_lt(step, MAX_STEPS, "the migration kept posting");
	cr_assert_gt(step, 20, "a migration of 32 buckets takes more than 20 operations");
	printf("resize broken after each of its %u operations in turn: resumed every time, every key kept\n",
	       step - 1);
}

Test(migrate_opts, eviction_makes_room_for_the_new_index)
{
	struct kvs_core_stats st;
	unsigned n = 0;
	char k[32], v[1024];
	kvc_t *c;

	setup_opts(4, 512, 0, 0);
	memset(v, 'x', sizeof(v) - 1);
	v[sizeof(v) - 1] = 0;
	c = client();
	/* Fill the heap until fewer free segments are left than the 4 chunks
	 * of 1024 buckets need (beyond the reserve). */
	do {
		snprintf(k, sizeof(k), "big-%u", n++);
		cr_assert_eq(kvt_put_s(c, k, v), 0);
		st = stats();
	} while (st.segments_free > 3);
	kvc_destroy(c);
	cr_assert_eq(kvs_core_grow(env.srv.core, 1), KVI_GROW_STARTED, "eviction can make room");
	run_until_phase(KVS_RESIZE_RUNNING, 20);
	st = stats();
	cr_assert_eq(epoch_now(NULL), 2);
	cr_assert_eq(st.segments_index, 4);
	cr_assert_gt(st.rc.segments, 0, "segments were reclaimed to make room");
}
