/* The fencer (server/fence.h) over the local transport: a gone client's lock
 * words are all released through the loopback, nobody else's are touched,
 * MOVED marks stay; a loopback that breaks mid-pass is remade and the pass
 * finishes; clients queued together share one pass; a clear request for a
 * word that changed does nothing. What a pass costs over a 64 MiB and a
 * 1 GiB index is bench/fencebench's to measure. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "fence.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "log.h"
#include "rmem_local.h"

#define MIB (1ull << 20)
#define BUCKETS 5000u
#define IDLE_MS 20000

static struct kvi_local_region *reg;
static struct kvs_core *core;
static struct kvs_fence *fence;
static struct kvi_bucket *index_;
static const struct kvi_geometry *sb;

/* Faults: the Nth CAS (counting from 1) of all connections fails; connect
 * fails while connect_fails > 0; connect waits while gate is closed. */
static atomic_uint cas_seen, fail_at[4], connect_fails, connects, gate_closed;

static char logbuf[1 << 16];
static size_t loglen;
static pthread_mutex_t logmu = PTHREAD_MUTEX_INITIALIZER;

static void capture(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	pthread_mutex_lock(&logmu);
	loglen += (size_t)snprintf(logbuf + loglen, sizeof(logbuf) - loglen, "%s\n", msg);
	if (loglen >= sizeof(logbuf))
		loglen = sizeof(logbuf) - 1;
	pthread_mutex_unlock(&logmu);
}

static int before_op(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	unsigned n;

	(void)arg;
	(void)rm;
	if (op->kind != KVI_ROP_CAS)
		return 0;
	n = atomic_fetch_add(&cas_seen, 1) + 1;
	for (unsigned i = 0; i < 4; i++) {
		if (atomic_load(&fail_at[i]) == n)
			return KVC_EIO;
	}
	return 0;
}

static int local_connect(void *arg, struct kvi_rmem **out)
{
	struct kvi_local_hooks h = { .before_op = before_op };
	int rc;

	(void)arg;
	while (atomic_load(&gate_closed))
		usleep(1000);
	if (atomic_load(&connect_fails) > 0) {
		atomic_fetch_sub(&connect_fails, 1);
		return KVC_ESERVERGONE;
	}
	rc = kvi_rmem_local_create(reg, 4096, &h, out);
	if (rc == 0)
		(*out)->client_id = 1000 + atomic_fetch_add(&connects, 1);
	return rc;
}

static void setup_geometry(uint64_t region, uint64_t buckets)
{
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = 1 * MIB, .in_process = 1 };
	struct kvi_errbuf e = { { 0 } };

	reg = kvi_local_region_create(region);
	cr_assert_not_null(reg);
	cr_assert_eq(kvs_core_create(kvi_local_region_base(reg), region, &o, &core, &e), 0, "%s", e.msg);
	sb = kvs_core_geometry(core);
	index_ = (struct kvi_bucket *)((char *)kvi_local_region_base(reg) + sb->index_off);
}

static void start_fence(uint64_t slice)
{
	cr_assert_eq(kvs_fence_create(&(struct kvs_fence_opts){ .core = core, .connect = local_connect,
								.op_timeout_ms = 1000, .slice = slice },
				      &fence),
		     0);
}

static void setup(void)
{
	kvi_log_set(capture, NULL, KVI_LOG_DEBUG);
	setup_geometry(16 * MIB, BUCKETS);
}

static void teardown(void)
{
	kvs_fence_destroy(fence);
	fence = NULL;
	kvs_core_destroy(core);
	core = NULL;
	kvi_local_region_destroy(reg);
	reg = NULL;
}

TestSuite(fence, .init = setup, .fini = teardown, .timeout = 60);

static uint64_t word(uint64_t b)
{
	return __atomic_load_n(&index_[b].lock, __ATOMIC_RELAXED);
}

static void set_word(uint64_t b, uint64_t w)
{
	__atomic_store_n(&index_[b].lock, w, __ATOMIC_RELAXED);
}

/* Client `id` holds every `step`-th bucket from `first`, every 5th of them
 * also MOVED. Returns how many. */
static unsigned lock_as(uint32_t id, uint64_t first, uint64_t step)
{
	unsigned n = 0;

	for (uint64_t b = first; b < sb->bucket_count; b += step, n++)
		set_word(b, kvi_lock_held_by(id) | (n % 5 == 0 ? KVI_LOCK_MOVED : 0));
	return n;
}

/* Every bucket is as expected: id's words now free (MOVED kept), others'
 * untouched. */
static void expect_released(uint32_t id, uint64_t first, uint64_t step)
{
	unsigned n = 0;

	for (uint64_t b = first; b < sb->bucket_count; b += step, n++)
		cr_assert_eq(word(b), n % 5 == 0 ? KVI_LOCK_MOVED : 0, "client %u bucket %llu: %#llx", id,
			     (unsigned long long)b, (unsigned long long)word(b));
}

static int log_has(const char *s)
{
	int r;

	pthread_mutex_lock(&logmu);
	r = strstr(logbuf, s) != NULL;
	pthread_mutex_unlock(&logmu);
	return r;
}

Test(fence, a_gone_clients_locks_are_all_released_and_no_one_elses)
{
	struct kvs_fence_stats st;
	unsigned n7, n8, moved_only = 0;
	char want[96];

	n7 = lock_as(7, 0, 3);
	n8 = lock_as(8, 1, 3);
	/* Free buckets marked MOVED, and a word naming 7 without LOCKED
	 * (garbage): neither is a lock of client 7. */
	for (uint64_t b = 2; b < sb->bucket_count; b += 30, moved_only++)
		set_word(b, KVI_LOCK_MOVED);
	set_word(5, (uint64_t)7 << KVI_LOCK_OWNER_SHIFT);
	start_fence(97); /* slices that do not divide the index */
	cr_assert_eq(kvs_fence_client(fence, 7), 0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	expect_released(7, 0, 3);
	for (uint64_t b = 1, n = 0; b < sb->bucket_count; b += 3, n++)
		cr_assert_eq(word(b), kvi_lock_held_by(8) | (n % 5 == 0 ? KVI_LOCK_MOVED : 0), "client 8 untouched");
	for (uint64_t b = 2; b < sb->bucket_count; b += 30)
		cr_assert_eq(word(b), KVI_LOCK_MOVED);
	cr_assert_eq(word(5), (uint64_t)7 << KVI_LOCK_OWNER_SHIFT, "an unlocked word is not a lock");
	kvs_fence_stats(fence, &st);
	cr_expect_eq(st.fencings, 1);
	cr_expect_eq(st.released, n7);
	cr_expect_eq(st.passes, 1);
	cr_expect_eq(st.retries, 0);
	snprintf(want, sizeof(want), "event=client_fenced client=7 locks_released=%u", n7);
	cr_expect(log_has(want), "%s", logbuf);
	cr_expect(n8 > 0 && moved_only > 0);
	/* The core reports the fencer's work in STATS. */
	{
		uint64_t v[KVI_STATS_PAGES * 5] = { 0 };

		for (unsigned p = 0; p < KVI_STATS_PAGES; p++) {
			struct kvi_ctrl req = { .type = KVI_CTRL_STATS_REQ, .seq = 1, .stats_req = { .page = p } },
					resp;

			cr_assert_eq(kvs_core_ctrl(core, 1, &req, &resp), 0);
			cr_assert_eq(resp.type, KVI_CTRL_STATS);
			memcpy(v + 5 * p, resp.arg, sizeof(resp.arg));
		}
		cr_expect_eq(v[KVI_STAT_FENCINGS], 1);
		cr_expect_eq(v[KVI_STAT_FENCE_RELEASED], n7);
		cr_expect_gt(v[KVI_STAT_FENCE_CPU_NS], 0);
	}
}

Test(fence, a_loopback_that_breaks_mid_pass_is_remade_and_every_lock_released)
{
	struct kvs_fence_stats st;
	unsigned n7;

	n7 = lock_as(7, 4, 7);
	/* The first connection attempts fail, then CAS 3, 40 and 41 (the
	 * first one of the next connection) and 200 break the loopback. */
	atomic_store(&connect_fails, 2);
	atomic_store(&fail_at[0], 3);
	atomic_store(&fail_at[1], 40);
	atomic_store(&fail_at[2], 41);
	atomic_store(&fail_at[3], 200);
	start_fence(250);
	cr_assert_eq(kvs_fence_client(fence, 7), 0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	expect_released(7, 4, 7);
	kvs_fence_stats(fence, &st);
	cr_expect_eq(st.released, n7, "released %llu of %u", (unsigned long long)st.released, n7);
	cr_expect_eq(st.retries, 4);
	cr_expect_eq(st.connects, 5);
	cr_expect(log_has("retries=4 "), "%s", logbuf);
	cr_expect(log_has("reconnecting and retrying"), "%s", logbuf);
	cr_expect(n7 > 200);
}

Test(fence, a_ticket_is_done_only_once_the_pass_that_released_its_locks_finished)
{
	uint64_t t7 = 0, t9 = 0;

	lock_as(7, 0, 3);
	atomic_store(&gate_closed, 1); /* the thread waits in connect: no pass runs */
	start_fence(0);
	cr_assert_eq(kvs_fence_client_ticket(fence, 7, &t7), 0);
	cr_expect_geq(t7, 1);
	cr_expect_lt(kvs_fence_done(fence), t7, "nothing ran yet");
	atomic_store(&gate_closed, 0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	cr_expect_geq(kvs_fence_done(fence), t7);
	expect_released(7, 0, 3);
	/* Queued after that pass: a later one. */
	cr_assert_eq(kvs_fence_client_ticket(fence, 9, &t9), 0);
	cr_expect_gt(t9, t7);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	cr_expect_geq(kvs_fence_done(fence), t9);
	cr_expect_eq(kvs_fence_done(NULL), 0);
}

Test(fence, a_loopback_broken_at_its_first_release_is_remade)
{
	unsigned n7;

	n7 = lock_as(7, 0, 2);
	start_fence(0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0); /* connected */
	/* The loopback's very first CAS fails, as on a QP broken while idle. */
	atomic_store(&fail_at[0], 1);
	cr_assert_eq(kvs_fence_client(fence, 7), 0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	expect_released(7, 0, 2);
	cr_expect(n7 > 0);
}

Test(fence, clients_queued_together_share_one_pass)
{
	struct kvs_fence_stats st;
	unsigned n = 0;

	atomic_store(&gate_closed, 1); /* the thread waits in connect */
	start_fence(0);
	n += lock_as(7, 0, 4);
	n += lock_as(9, 1, 4);
	n += lock_as(KVI_MAX_CLIENT_ID, 2, 4);
	cr_assert_eq(kvs_fence_client(fence, 7), 0);
	cr_assert_eq(kvs_fence_client(fence, 9), 0);
	cr_assert_eq(kvs_fence_client(fence, 7), 0); /* twice: one fencing */
	cr_assert_eq(kvs_fence_client(fence, KVI_MAX_CLIENT_ID), 0);
	cr_assert_eq(kvs_fence_client(fence, 0), KVC_EINVAL);
	cr_assert_eq(kvs_fence_client(fence, KVI_MAX_CLIENT_ID + 1), KVC_EINVAL);
	atomic_store(&gate_closed, 0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	expect_released(7, 0, 4);
	expect_released(9, 1, 4);
	expect_released(KVI_MAX_CLIENT_ID, 2, 4);
	kvs_fence_stats(fence, &st);
	cr_expect_eq(st.passes, 1);
	cr_expect_eq(st.fencings, 3);
	cr_expect_eq(st.released, n);
	cr_expect(log_has("event=fence_pass clients=3 "), "%s", logbuf);
}

Test(fence, clearing_a_word_that_changed_does_nothing)
{
	struct kvs_fence_stats st;
	uint64_t gone = kvi_lock_held_by(50), now = kvi_lock_held_by(51);

	set_word(10, now);                           /* 50's word was replaced by 51's */
	set_word(11, gone | KVI_LOCK_MOVED);         /* still 50's */
	set_word(12, kvi_lock_held_by(52));
	start_fence(0);
	cr_assert_eq(kvs_fence_clear_word(fence, kvi_home_bucket_off(sb, 10), gone), 0);
	cr_assert_eq(kvs_fence_clear_word(fence, kvi_home_bucket_off(sb, 11), gone | KVI_LOCK_MOVED), 0);
	cr_assert_eq(kvs_fence_clear_word(fence, kvi_home_bucket_off(sb, 12), 0), KVC_EINVAL, "an unlocked word");
	cr_assert_eq(kvs_fence_clear_word(fence, sb->region_size, gone), KVC_EINVAL, "past the region");
	cr_assert_eq(kvs_fence_clear_word(fence, kvi_home_bucket_off(sb, 12) + 8, gone), KVC_EINVAL, "not a lock word");
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	cr_expect_eq(word(10), now, "a word that changed is left alone");
	cr_expect_eq(word(11), KVI_LOCK_MOVED, "the word is cleared, MOVED kept");
	cr_expect_eq(word(12), kvi_lock_held_by(52));
	kvs_fence_stats(fence, &st);
	cr_expect_eq(st.cleared, 1);
}

Test(fence, the_fencers_own_ids_are_known)
{
	start_fence(0);
	cr_assert_eq(kvs_fence_wait_idle(fence, IDLE_MS), 0);
	cr_expect(kvs_fence_is_own(fence, 1000));
	cr_expect(!kvs_fence_is_own(fence, 7));
	cr_expect(!kvs_fence_is_own(fence, 0));
	cr_expect(!kvs_fence_is_own(NULL, 1000));
	cr_expect_eq(kvs_fence_client(NULL, 7), KVC_ESERVERGONE);
}
