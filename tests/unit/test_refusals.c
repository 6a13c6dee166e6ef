/* Refusals stay refusals: a full index that cannot grow answers
 * every insert KVC_EINDEXFULL promptly and never costs the writer its lease;
 * the server grows an index only when a GROW's claim holds; a host's
 * connections share one quota. Over the local transport, with the real
 * core, reclaimer, migrator and leases. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "migrate.h"

static struct kvc_stats cstats(kvc_t *c)
{
	struct kvc_stats s;

	kvc_get_stats(c, &s);
	return s;
}

/* kvserver's other thread and event loop, as far as this test needs them:
 * the reclaimer (the migrator and its load sampler first) and lease expiry
 * (an expired member is counted: kvserver would fence it). */
struct server {
	struct kvt_env *env;
	struct kvs_reclaimer *rcl;
	struct kvs_migrator *mig;
	pthread_t t;
	int stop;
	unsigned expired;
	int failed;
};

static void *server_loop(void *arg)
{
	struct server *s = arg;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		uint32_t ids[16];
		unsigned n;

		if (kvs_reclaim_run(s->rcl) < 0)
			s->failed = 1;
		pthread_mutex_lock(&s->env->srv.lock);
		n = s->env->srv.members ? kvs_members_expired(s->env->srv.members, kvi_mono_ns(), ids, 16) : 0;
		pthread_mutex_unlock(&s->env->srv.lock);
		__atomic_add_fetch(&s->expired, n, __ATOMIC_RELAXED);
		usleep(1000);
	}
	return NULL;
}

static void server_start(struct server *s, struct kvt_env *env)
{
	memset(s, 0, sizeof(*s));
	s->env = env;
	cr_assert_eq(kvt_env_reclaimer(env, NULL, &s->rcl), 0);
	cr_assert_eq(kvs_migrate_create(env->srv.core, &(struct kvs_migrate_opts){ .load_pct = KVS_DEFAULT_RESIZE_LOAD_PCT },
					 &s->mig), 0);
	kvs_reclaim_set_migrator(s->rcl, s->mig);
	cr_assert_eq(pthread_create(&s->t, NULL, server_loop, s), 0);
}

static void server_stop(struct server *s)
{
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	pthread_join(s->t, NULL);
	kvs_reclaim_destroy(s->rcl);
	kvs_migrate_destroy(s->mig);
}

TestSuite(refusals, .timeout = 120);

/* Defect 6: kvserver -m 2 --buckets 4 --no-evict (one 1 MiB segment: the
 * index cannot grow), default deadline (1 s) and lease (1 s, renewed every
 * 250 ms). A client fills the index until KVC_EINDEXFULL, deletes one item
 * and tries 200 more inserts: the first that find room succeed, every other
 * one fails KVC_EINDEXFULL well before its deadline, and the handle is never
 * fenced, broken or expelled; its lease is renewed meanwhile. */
Test(refusals, a_full_index_that_cannot_grow_refuses_every_insert_promptly)
{
	struct kvs_core_opts o = { .buckets = 4, .no_evict = 1 };
	struct kvs_members_stats ms0, ms1;
	struct kvt_env env;
	struct server srv;
	struct kvc_opts co;
	kvc_t *c;
	unsigned next = 0, filled = 0, ok = 0, full = 0;
	uint64_t slowest = 0, t0;
	char k[32];
	int rc;

	cr_assert_eq(kvt_env_init_opts(&env, 2, &o), 0);
	cr_assert_eq(kvt_env_leases(&env, KVS_DEFAULT_LEASE_MS, KVS_DEFAULT_RENEW_MS), 0);
	server_start(&srv, &env);
	kvc_opts_init(&co);
	co.depth = 4;
	cr_assert_eq(kvt_env_client_opts(&env, NULL, &co, &c), 0);
	for (;;) {
		snprintf(k, sizeof(k), "fill-%u", next++);
		rc = kvt_put_s(c, k, "value");
		if (rc == KVC_EINDEXFULL)
			break;
		cr_assert_eq(rc, 0, "PUT %s: %s", k, kvc_err_name(rc));
		filled++;
		cr_assert_leq(filled, 4 * KVI_SLOTS_PER_BUCKET);
	}
	cr_assert_eq(kvc_delete(c, "fill-0", 6), 0);
	pthread_mutex_lock(&env.srv.lock);
	kvs_members_stats(env.srv.members, &ms0);
	pthread_mutex_unlock(&env.srv.lock);
	t0 = kvt_mono_ms();
	for (unsigned i = 0; i < 200; i++) {
		uint64_t t;

		usleep(20000); /* as over Soft-RoCE: 200 inserts take seconds, several deadlines */
		t = kvt_mono_ms();
		snprintf(k, sizeof(k), "more-%u", i);
		rc = kvt_put_s(c, k, "value");
		t = kvt_mono_ms() - t;
		if (t > slowest)
			slowest = t;
		cr_assert(rc == 0 || rc == KVC_EINDEXFULL, "PUT %u (%s): %s after %u refusals, %llu ms", i, k,
			  kvc_err_name(rc), full, (unsigned long long)t);
		ok += rc == 0;
		full += rc == KVC_EINDEXFULL;
	}
	pthread_mutex_lock(&env.srv.lock);
	kvs_members_stats(env.srv.members, &ms1);
	pthread_mutex_unlock(&env.srv.lock);
	printf("full index: %u items, then %u inserts succeeded, %u refused in %llu ms (slowest %llu ms), "
	       "%llu GROW requests, %llu renewals\n",
	       filled, ok, full, (unsigned long long)(kvt_mono_ms() - t0), (unsigned long long)slowest,
	       (unsigned long long)cstats(c).grow_requests, (unsigned long long)(ms1.renewals - ms0.renewals));
	cr_expect_leq(ok, 5, "only the deleted item's room and the slots left free");
	cr_expect_geq(full, 195);
	cr_expect_lt(slowest, 500, "a refusal comes well before the deadline (1 s)");
	cr_expect_eq(cstats(c).rejoins, 0, "the handle never broke");
	cr_expect_eq(__atomic_load_n(&srv.expired, __ATOMIC_RELAXED), 0, "no lease ran out");
	cr_expect_eq(srv.failed, 0);
	cr_expect_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_IDLE);
	/* Still usable: a read and a delete answer. */
	cr_expect_eq(kvc_delete(c, "fill-1", 6), 0);
	kvc_destroy(c);
	server_stop(&srv);
	kvt_env_fini(&env);
}

/* Fill a fresh index of `c` until an insert fails KVC_EINDEXFULL (or every
 * slot is taken); returns the items inserted. */
static unsigned fill(kvc_t *c)
{
	unsigned n = 0;
	char k[32];

	for (;;) {
		int rc;

		snprintf(k, sizeof(k), "fill-%u", n);
		rc = kvt_put_s(c, k, "value");
		if (rc == KVC_EINDEXFULL)
			return n;
		cr_assert_eq(rc, 0, "PUT %s: %s", k, kvc_err_name(rc));
		if (++n == 4 * KVI_SLOTS_PER_BUCKET)
			return n;
	}
}

/* The wait for a GROW answered STARTED (a resize wanted, its migrator not
 * getting to it: here it never runs) lasts three quarters of the deadline,
 * 1.5 s with max-op-ms 2000 -- longer than a lease of 1 s. A kvc_poll that
 * slept through it in one nanosleep (nothing posted, only that insert
 * waiting) would wake with its lease lapsed: the insert would fail
 * KVC_EFENCED and the handle break. The lease must be renewed meanwhile and
 * the insert must end as an insert into a full index does: KVC_EINDEXFULL. */
Test(refusals, an_insert_waiting_for_a_resize_keeps_its_lease)
{
	struct kvs_core_opts o = { .buckets = 4, .segment_size = 64u << 10, .no_evict = 1, .max_op_ms = 2000 };
	struct kvs_members_stats ms0, ms1;
	struct kvt_env env;
	struct kvc_opts co;
	kvc_t *c;
	char k[32];

	cr_assert_eq(kvt_env_init_opts(&env, 2, &o), 0);
	cr_assert_eq(kvt_env_leases(&env, KVS_DEFAULT_LEASE_MS, KVS_DEFAULT_RENEW_MS), 0);
	kvs_core_attach_migrator(env.srv.core); /* GROW may be answered STARTED; nothing migrates */
	kvc_opts_init(&co);
	co.depth = 4;
	co.op_timeout_ms = 2000;
	cr_assert_eq(kvt_env_client_opts(&env, NULL, &co, &c), 0);
	fill(c);
	for (unsigned i = 0; i < 3; i++) {
		uint64_t t = kvt_mono_ms();
		int rc;

		pthread_mutex_lock(&env.srv.lock);
		kvs_members_stats(env.srv.members, &ms0);
		pthread_mutex_unlock(&env.srv.lock);
		snprintf(k, sizeof(k), "more-%u", i);
		rc = kvt_put_s(c, k, "value");
		t = kvt_mono_ms() - t;
		pthread_mutex_lock(&env.srv.lock);
		kvs_members_stats(env.srv.members, &ms1);
		pthread_mutex_unlock(&env.srv.lock);
		cr_assert_eq(rc, KVC_EINDEXFULL, "PUT %u: %s after %llu ms", i, kvc_err_name(rc), (unsigned long long)t);
		cr_expect_geq(ms1.renewals - ms0.renewals, 3, "PUT %u: renewed every 250 ms of its %llu ms", i,
			      (unsigned long long)t);
	}
	cr_expect_eq(cstats(c).rejoins, 0, "the handle never broke");
	cr_expect_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_WANTED);
	kvc_destroy(c);
	kvt_env_fini(&env);
}

/* A GROW whose answer is still on its way when kvc_poll first looks for it
 * (on a NIC, always: the answer takes a round trip through the server's
 * event loop). The answer is held back here -- the handler keeps it and
 * reports it lost, as a send whose answer has not come -- and delivered a
 * few milliseconds later. kvc_poll's clock was read before the completion
 * that sent the GROW, so the first look computed a negative age that
 * wrapped around: the GROW was taken as lost at once, its NO never
 * collected, and the insert waited three quarters of its deadline (750 ms of
 * every 1 s; with the uncapped sleep, long enough to lose its lease) and
 * asked again on the next insert. Here it must end KVC_EINDEXFULL as soon as
 * the NO arrives. */
static struct kvt_env late_env;
static struct kvi_ctrl late_answer;
static int late_held;

static int late_grow_answer(void *arg, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	int rc;

	(void)arg;
	pthread_mutex_lock(&late_env.srv.lock);
	rc = kvs_core_ctrl(late_env.srv.core, id, req, resp);
	pthread_mutex_unlock(&late_env.srv.lock);
	if (rc || req->type != KVI_CTRL_GROW)
		return rc;
	late_answer = *resp;
	late_held = 1;
	return KVC_ETIMEDOUT; /* "sent; its answer never comes" -- until the test delivers it */
}

Test(refusals, a_grow_answer_that_comes_after_the_first_look_is_still_taken)
{
	struct kvs_core_opts o = { .buckets = 4, .segment_size = 64u << 10, .no_evict = 1, .max_op_ms = 2000 };
	struct kvc_op op = { .type = KVC_OP_PUT, .key = "late", .key_len = 4, .value = "v", .value_len = 1 }, *done;
	struct kvi_rmem *rm;
	struct kvc_opts co;
	uint64_t t0, took;
	kvc_t *c;

	cr_assert_eq(kvt_env_init_opts(&late_env, 2, &o), 0);
	kvc_opts_init(&co);
	co.depth = 4;
	co.op_timeout_ms = 2000;
	cr_assert_eq(kvt_env_client_opts(&late_env, NULL, &co, &c), 0);
	fill(c);
	rm = kvi_client_conn(c, 0)->rm;
	kvi_rmem_local_set_ctrl(rm, late_grow_answer, NULL, rm->client_id);
	late_held = 0;
	t0 = kvt_mono_ms();
	cr_assert_eq(kvc_submit(c, &op), 0);
	for (;;) {
		int n = kvc_poll(c, &done, 1, 1);

		cr_assert_geq(n, 0);
		if (n == 1)
			break;
		if (late_held && kvt_mono_ms() - t0 >= 5) {
			kvi_rmem_ctrl_stash(rm, &late_answer); /* the answer arrives */
			late_held = 0;
		}
		cr_assert_lt(kvt_mono_ms() - t0, 10000);
	}
	took = kvt_mono_ms() - t0;
	printf("an insert into a full index whose GROW was answered 5 ms late: %s after %llu ms\n",
	       kvc_err_name(op.status), (unsigned long long)took);
	cr_expect_eq(op.status, KVC_EINDEXFULL);
	cr_expect_eq(late_answer.growing.verdict, KVI_GROW_NO);
	cr_expect_lt(took, 500, "the NO is taken when it comes, not at three quarters of the deadline (1500 ms)");
	cr_expect_eq(cstats(c).grow_requests, 1);
	kvc_destroy(c);
	kvt_env_fini(&late_env);
}

/* Defect 5 (part): GROW for 20 s with no bucket full doubled a 256-bucket
 * index 7 times. A raw client's GROWs -- naming no bucket, naming buckets
 * that are not full, naming buckets outside the index -- against an empty
 * index are all answered NO, and the migrator, run all along, resizes
 * nothing. */
Test(refusals, grow_against_an_empty_index_resizes_nothing)
{
	struct kvs_core_opts o = { .buckets = 256, .segment_size = 64u << 10, .max_op_ms = 50,
				   .quarantine_ms = 100, .in_process = 1 };
	const uint64_t claims[][2] = { { 0, 0 }, { 1, 2 }, { 256, 255 }, { 257, 0 }, { UINT64_MAX, 1 } };
	struct kvs_reclaimer *rcl;
	struct kvs_migrator *mig;
	struct kvs_core_stats st;
	struct kvt_env env;

	cr_assert_eq(kvt_env_init_opts(&env, 16, &o), 0);
	cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
	cr_assert_eq(kvs_migrate_create(env.srv.core, &(struct kvs_migrate_opts){ .load_pct = KVS_DEFAULT_RESIZE_LOAD_PCT },
					 &mig), 0);
	kvs_reclaim_set_migrator(rcl, mig);
	for (unsigned i = 0; i < 500; i++) {
		const uint64_t *cl = claims[i % (sizeof(claims) / sizeof(claims[0]))];
		struct kvi_ctrl req = { .type = KVI_CTRL_GROW, .seq = i + 1,
					.grow = { .epoch = 1, .split_next = 0, .full_pair = { cl[0], cl[1] } } },
				resp;

		cr_assert_eq(kvs_core_ctrl(env.srv.core, 5, &req, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_GROWING);
		cr_assert_eq(resp.growing.verdict, KVI_GROW_NO, "GROW %u claiming %llu, %llu", i,
			     (unsigned long long)cl[0], (unsigned long long)cl[1]);
		cr_assert_eq(kvs_core_resize_phase(env.srv.core), KVS_RESIZE_IDLE);
		cr_assert_geq(kvs_reclaim_run(rcl), 0);
	}
	kvs_core_stats(env.srv.core, &st);
	cr_expect_eq(st.index_epoch, 1);
	cr_expect_eq(st.index_buckets, 256);
	cr_expect_eq(st.resizes, 0);
	kvs_reclaim_destroy(rcl);
	kvs_migrate_destroy(mig);
	kvt_env_fini(&env);
}

/* ... while a real need is never refused: a client inserting 1000 keys into
 * a 4-bucket index (with the reclaimer and migrator running) has every one
 * inserted, the index grown by its GROWs (and the sampler's), no item
 * evicted. */
Test(refusals, a_client_that_fills_its_index_still_grows_it)
{
	struct kvs_core_opts o = { .buckets = 4, .segment_size = 64u << 10, .max_op_ms = 1000 };
	struct kvs_core_stats st;
	struct kvt_env env;
	struct server srv;
	struct kvc_opts co;
	kvc_t *c;
	char k[32];

	cr_assert_eq(kvt_env_init_opts(&env, 16, &o), 0);
	server_start(&srv, &env);
	kvc_opts_init(&co);
	co.depth = 4;
	co.op_timeout_ms = 1000;
	cr_assert_eq(kvt_env_client_opts(&env, NULL, &co, &c), 0);
	for (unsigned i = 0; i < 1000; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		cr_assert_eq(kvt_put_s(c, k, "value"), 0, "PUT %s", k);
	}
	kvs_core_stats(env.srv.core, &st);
	printf("1000 keys into 4 buckets: %llu buckets now, %llu GROW requests, %llu evictions\n",
	       (unsigned long long)st.index_buckets, (unsigned long long)cstats(c).grow_requests,
	       (unsigned long long)cstats(c).index_evictions);
	cr_expect_geq(st.index_buckets, 64);
	cr_expect_gt(cstats(c).grow_requests, 0);
	cr_expect_eq(cstats(c).index_evictions, 0);
	kvc_destroy(c);
	server_stop(&srv);
	kvt_env_fini(&env);
}

/* Defect 5 (part): one process with 9 connections took 7 of 7 segments, each
 * connection within its quota, and another client's PUT failed. Seven 128
 * KiB segments (no reserve in so small a heap), a quota of 2 segments: nine
 * clients of host A each ask for a whole segment, then one client of host B.
 * Host A's connections share one quota, so once over it they never take the
 * last free segment: B gets it. Returns how many A got and whether B got one. */
static void nine_and_one(const char *host_a, const char *host_b, unsigned *a_got, int *b_got)
{
	struct kvs_core_opts o = { .buckets = 2, .segment_size = 128u << 10 };
	struct kvs_core_stats st;
	struct kvt_env env;
	uint32_t seq = 1;

	cr_assert_eq(kvt_env_init_opts(&env, 1, &o), 0);
	kvs_core_stats(env.srv.core, &st);
	cr_assert_eq(st.segments_total, 7);
	cr_assert_eq(st.quota_bytes, 2 * (128u << 10));
	for (uint32_t id = 1; id <= 10; id++)
		cr_assert_eq(kvs_core_client_host(env.srv.core, id, id <= 9 ? host_a : host_b), 0);
	*a_got = 0;
	for (uint32_t id = 1; id <= 10; id++) {
		struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seq = seq++, .seg_req = { .need = 128u << 10 } },
				resp;

		cr_assert_eq(kvs_core_ctrl(env.srv.core, id, &req, &resp), 0);
		if (id <= 9)
			*a_got += resp.type == KVI_CTRL_SEG_GRANT;
		else
			*b_got = resp.type == KVI_CTRL_SEG_GRANT;
	}
	if (host_a)
		cr_expect_eq(kvs_core_host_held(env.srv.core, 1), (uint64_t)*a_got * (128u << 10),
			     "host A's holdings are its clients' together");
	/* A client leaving takes its holdings out of its host's. */
	kvs_core_client_left(env.srv.core, 1);
	if (host_a)
		cr_expect_eq(kvs_core_host_held(env.srv.core, 2), (uint64_t)(*a_got - 1) * (128u << 10));
	kvt_env_fini(&env);
}

Test(refusals, connections_from_one_host_share_one_quota)
{
	unsigned a;
	int b = 0;

	nine_and_one("192.0.2.1", "192.0.2.2", &a, &b);
	cr_expect_eq(a, 6, "host A: within its quota twice, then over it until one segment is left");
	cr_expect(b, "host B's first grant finds the segment host A had to leave");
}

/* Without an address (the in-process transport; also "?") each connection
 * has its own quota. */
Test(refusals, connections_without_an_address_keep_their_own_quota)
{
	unsigned a;
	int b = 1;

	nine_and_one(NULL, "?", &a, &b);
	cr_expect_eq(a, 7, "each within its own quota: all seven");
	cr_expect_not(b);
}

/* A grant request never blocks kvc_submit while other operations hold
 * locks. A PUT holds its bucket locks (posted, not yet polled); a second PUT
 * needs a new extent, and the server is slow to answer. kvc_submit must not
 * wait for the answer (up to 5 s) with the first PUT's commit behind it: the
 * request goes out without waiting, kvc_submit returns at once, and both
 * PUTs complete. */
static struct kvt_env slow_env;
static struct kvi_ctrl slow_answer;
static int slow_armed, slow_held;

static int slow_grant_answer(void *arg, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	int rc;

	(void)arg;
	pthread_mutex_lock(&slow_env.srv.lock);
	rc = kvs_core_ctrl(slow_env.srv.core, id, req, resp);
	pthread_mutex_unlock(&slow_env.srv.lock);
	if (rc || req->type != KVI_CTRL_SEG_REQ || !slow_armed)
		return rc;
	slow_answer = *resp;
	slow_held = 1;
	slow_armed = 0;
	return KVC_ETIMEDOUT; /* on its way: delivered by the test later */
}

Test(refusals, a_grant_request_does_not_hold_up_operations_that_hold_locks)
{
	struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = 2000, .in_process = 1 };
	static char big[30000];
	struct kvc_op a = { .type = KVC_OP_PUT, .key = "holder", .key_len = 6, .value = "v", .value_len = 1 };
	struct kvc_op b = { .type = KVC_OP_PUT, .key = "large", .key_len = 5, .value = big, .value_len = sizeof(big) };
	struct kvc_op *done[2];
	struct kvi_rmem *rm;
	struct kvc_opts co;
	uint64_t t0, took;
	unsigned got = 0;
	kvc_t *c;
	char v[8];

	memset(big, 'b', sizeof(big));
	cr_assert_eq(kvt_env_init_opts(&slow_env, 8, &o), 0);
	kvc_opts_init(&co);
	co.depth = 4;
	co.op_timeout_ms = 2000;
	cr_assert_eq(kvt_env_client_opts(&slow_env, NULL, &co, &c), 0);
	cr_assert_eq(kvt_put_s(c, "first", "x"), 0); /* an extent, with room for a small PUT */
	rm = kvi_client_conn(c, 0)->rm;
	kvi_rmem_local_set_ctrl(rm, slow_grant_answer, NULL, rm->client_id);
	slow_armed = 1;
	cr_assert_eq(kvc_submit(c, &a), 0); /* posts its lock doorbell */
	t0 = kvt_mono_ms();
	cr_assert_eq(kvc_submit(c, &b), 0);
	took = kvt_mono_ms() - t0;
	cr_expect_lt(took, 100, "kvc_submit waited %llu ms for a segment", (unsigned long long)took);
	cr_expect(slow_held, "the segment request went out");
	while (got < 2) {
		int n = kvc_poll(c, done, 2, 1);

		cr_assert_geq(n, 0);
		got += (unsigned)n;
		if (slow_held && kvt_mono_ms() - t0 >= 300) {
			kvi_rmem_ctrl_stash(rm, &slow_answer); /* the answer arrives */
			slow_held = 0;
		}
		cr_assert_lt(kvt_mono_ms() - t0, 10000);
	}
	cr_expect_eq(a.status, 0, "the lock holder: %s", kvc_err_name(a.status));
	cr_expect_eq(b.status, 0, "the large PUT: %s", kvc_err_name(b.status));
	cr_expect_eq(kvt_get_s(c, "holder", v, sizeof(v)), 0);
	cr_expect_eq(cstats(c).rejoins, 0);
	kvc_destroy(c);
	kvt_env_fini(&slow_env);
}
