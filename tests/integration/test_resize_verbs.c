/* Online index resize on a real kvserver over Soft-RoCE (layout.h "Resize"):
 *  - under load: a kvserver started with a tiny index (256 buckets) and
 *    --no-evict is filled with 16000 keys while two verifying workers run
 *    mixed operations; the index grows several times, no worker sees a
 *    violation, and a fresh client and the filler's own handle read every
 *    key back;
 *  - asleep during two resizes: a worker stopped (SIGSTOP) while the index
 *    doubles twice is expelled by its lease; continued, it rejoins, learns
 *    the current index and goes on without a violation. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "harness.h"
#include "kvclient.h"

#define FILL 16000

static void stop_server(struct kvt_proc *srv)
{
	kvt_kill(srv, SIGTERM);
	cr_expect_eq(kvt_wait(srv, 20000), 0, "kvserver: %s", srv->all);
}

static void start_worker(struct kvt_proc *w, const char *port, unsigned id, unsigned seconds, int survive)
{
	static char server[8][128], ids[8][8], secs[8][8];
	char *argv[] = { KV_WORKER_BIN, "-s", server[id], "--id", ids[id], "--seconds", secs[id], "--shared", "16",
			 "--own", "16", survive ? "--survive" : NULL, NULL };
	char line[256];

	snprintf(server[id], sizeof(server[id]), "%s:%s", kvt_rdma_addr(), port);
	snprintf(ids[id], sizeof(ids[id]), "%u", id);
	snprintf(secs[id], sizeof(secs[id]), "%u", seconds);
	cr_assert_eq(kvt_start(w, argv), 0);
	cr_assert_eq(kvt_line(w, line, sizeof(line), 60000), 0, "worker %u: %s", id, w->all);
	cr_assert_str_eq(line, "READY", "worker %u: %s", id, w->all);
}

static void check_worker(struct kvt_proc *w, unsigned id)
{
	int st = kvt_wait(w, 120000);

	cr_expect_eq(st, 0, "worker %u exited %d: %s", id, st, w->all);
	cr_expect(strstr(w->all, "DONE"), "worker %u: %s", id, w->all);
	printf("worker %u: %s", id, strstr(w->all, "DONE") ? strstr(w->all, "DONE") : "(no DONE)\n");
}

/* PUT fill-<i> for i in [from, to); an index that is full for a moment (a
 * resize under way) refuses with KVC_EINDEXFULL: retried, for up to 20 s.
 * So are a deadline missed and a lease lost on a loaded machine (the handle
 * rejoins; KVC_EUNKNOWN: a PUT is idempotent, so it is written again). */
static void fill(kvc_t *h, unsigned from, unsigned to, double *worst)
{
	char k[32], v[32];

	for (unsigned i = from; i < to; i++) {
		double t0 = kvi_mono_s(), dt;
		int rc;

		snprintf(k, sizeof(k), "fill-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		do {
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
			if (rc == KVC_EINDEXFULL)
				usleep(2000);
		} while ((rc == KVC_EINDEXFULL || rc == KVC_ETIMEDOUT || rc == KVC_EFENCED || rc == KVC_EUNKNOWN) &&
			 kvi_mono_s() - t0 < 20);
		cr_assert_eq(rc, 0, "PUT %s: %s", k, kvc_err_name(rc));
		dt = kvi_mono_s() - t0;
		if (dt > *worst)
			*worst = dt;
	}
}

static unsigned check_fill(kvc_t *h, unsigned n)
{
	char k[32], v[32], got[64];
	unsigned bad = 0;

	for (unsigned i = 0; i < n; i++) {
		size_t len = 0;
		int rc;

		snprintf(k, sizeof(k), "fill-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		/* A lost lease or deadline on a loaded machine is not a lost key: read again. */
		for (int tries = 0; tries < 5; tries++) {
			rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
			if (rc != KVC_EFENCED && rc != KVC_ETIMEDOUT && rc != KVC_ESERVERGONE)
				break;
			usleep(10000);
		}
		if (rc != 0 || len != strlen(v) || memcmp(got, v, len) != 0) {
			if (bad++ < 5)
				cr_expect_fail("%s: %s, '%.*s'", k, kvc_err_name(rc), (int)len, got);
		}
	}
	return bad;
}

static struct kvc_server_stats stats_of(kvc_t *h)
{
	struct kvc_server_stats s;

	cr_assert_eq(kvc_server_stats(h, &s), 0);
	return s;
}

TestSuite(resize_verbs, .init = kvt_require_rdma, .timeout = 400);

Test(resize_verbs, the_index_grows_under_load_and_loses_nothing)
{
	/* Leases are not what this tests: a 3 s one keeps a worker that the
	 * emulated guest starved for a second (under ASan, beside the filler and
	 * the other worker) from being expelled and failing the run. */
	const char *extra[] = { "--buckets", "128", "--no-evict", "--lease-ms", "3000", NULL };
	struct kvt_proc srv, w1, w2;
	struct kvc_server_stats s;
	double t0, worst = 0;
	kvc_t *h, *fresh;

	kvt_start_server(&srv, "7681", extra);
	start_worker(&w1, "7681", 1, 25, 0);
	start_worker(&w2, "7681", 2, 25, 0);
	h = kvt_kv_connect("7681", 1, 1024);
	t0 = kvi_mono_s();
	fill(h, 0, FILL, &worst);
	s = stats_of(h);
	printf("filled %u keys in %.1f s (slowest PUT %.0f ms): %llu resizes, %llu buckets (epoch %llu)\n", FILL,
	       kvi_mono_s() - t0, worst * 1000, (unsigned long long)s.resizes, (unsigned long long)s.index_buckets,
	       (unsigned long long)s.index_epoch);
	cr_expect_geq(s.resizes, 3, "128 buckets hold 3968 items: 16000 need at least three doublings");
	cr_expect_geq(s.index_buckets, 1024);
	check_worker(&w1, 1);
	check_worker(&w2, 2);
	cr_expect_eq(check_fill(h, FILL), 0, "the filler's own handle");
	fresh = kvt_kv_connect("7681", 1, 0);
	cr_expect_eq(check_fill(fresh, FILL), 0, "a client that joined after the resizes");
	kvc_destroy(fresh);
	kvc_destroy(h);
	stop_server(&srv);
}

Test(resize_verbs, a_client_asleep_during_two_resizes_rejoins_and_stays_correct)
{
	const char *extra[] = { "--buckets", "128", "--no-evict", "--lease-ms", "1000", NULL };
	struct kvt_proc srv, w;
	struct kvc_server_stats s;
	double worst = 0;
	unsigned n = 0;
	kvc_t *h;

	kvt_start_server(&srv, "7682", extra);
	start_worker(&w, "7682", 3, 20, 1);
	h = kvt_kv_connect("7682", 1, 1024);
	kvt_kill(&w, SIGSTOP);
	/* Two doublings while it sleeps (its lease runs out meanwhile). */
	do {
		fill(h, n, n + 1000, &worst);
		n += 1000;
		s = stats_of(h);
	} while (s.resizes < 2 && n < FILL);
	cr_assert_geq(s.resizes, 2, "%u keys did not make the index grow twice", n);
	sleep(2); /* past its lease, whatever the fill took */
	kvt_kill(&w, SIGCONT);
	check_worker(&w, 3);
	cr_expect(strstr(w.all, "survived"), "%s", w.all);
	cr_expect_eq(check_fill(h, n), 0);
	printf("asleep during %llu resizes (%u keys written meanwhile): the worker went on without a violation\n",
	       (unsigned long long)s.resizes, n);
	kvc_destroy(h);
	stop_server(&srv);
}

/* kvserver -m 2 --buckets 4 --no-evict (one segment: the index cannot
 * grow). A client fills it until KVC_EINDEXFULL, deletes one item and tries
 * 200 more inserts: each answers 0 (the room the delete made) or
 * KVC_EINDEXFULL, well within its deadline; the client is never fenced (a
 * refusal must not cost a writer its lease, KVC_EFENCED): no fencing while
 * it is refused, and no rejoin. A join slow enough (ASan in the emulated
 * guest) to make a second attempt leaves the server a losing connection that
 * it fences when that one's lease lapses, at any time in the first seconds
 * (CI: once before the refusals, once during them): the count is taken once
 * it has stood still for more than two leases. */
Test(resize_verbs, a_full_index_that_cannot_grow_refuses_and_never_fences)
{
	const char *extra[] = { "-m", "2", "--buckets", "4", "--no-evict", NULL };
	struct kvt_proc srv;
	struct kvc_server_stats s, s0;
	unsigned filled = 0, ok = 0, full = 0;
	double worst = 0;
	char k[32];
	kvc_t *h;
	int rc;

	kvt_start_server(&srv, "7683", extra);
	h = kvt_kv_connect("7683", 1, 1024);
	for (;;) {
		snprintf(k, sizeof(k), "full-%u", filled);
		rc = kvc_put(h, k, strlen(k), "value", 5, 0);
		if (rc == KVC_EINDEXFULL)
			break;
		cr_assert_eq(rc, 0, "PUT %s: %s", k, kvc_err_name(rc));
		cr_assert_leq(++filled, 124u);
	}
	cr_assert_eq(kvc_delete(h, "full-0", 6), 0);
	s0 = stats_of(h);
	for (double still = kvi_mono_s(), t0 = still; kvi_mono_s() - still < 2.5 && kvi_mono_s() - t0 < 20;) {
		usleep(200000); /* each stats call renews the handle's lease (1 s) */
		s = stats_of(h);
		if (s.fencings != s0.fencings) {
			s0 = s;
			still = kvi_mono_s();
		}
	}
	for (unsigned i = 0; i < 200; i++) {
		double t0 = kvi_mono_s();

		snprintf(k, sizeof(k), "more-%u", i);
		rc = kvc_put(h, k, strlen(k), "value", 5, 0);
		if (kvi_mono_s() - t0 > worst)
			worst = kvi_mono_s() - t0;
		cr_assert(rc == 0 || rc == KVC_EINDEXFULL, "PUT %u (%s): %s after %u refusals", i, k, kvc_err_name(rc),
			  full);
		ok += rc == 0;
		full += rc == KVC_EINDEXFULL;
	}
	s = stats_of(h);
	{
		struct kvc_stats cs;

		kvc_get_stats(h, &cs);
		printf("full index (%u items): %u more inserted, %u refused, slowest %.0f ms, fencings %llu (%llu before "
		       "the refusals), %llu GROW requests, %llu stale waits, %llu rejoins\n", filled, ok, full,
		       worst * 1000, (unsigned long long)s.fencings, (unsigned long long)s0.fencings,
		       (unsigned long long)cs.grow_requests, (unsigned long long)cs.index_stale,
		       (unsigned long long)cs.rejoins);
		cr_expect_eq(cs.rejoins, 0, "the handle's connection never broke");
	}
	cr_expect_eq(s.fencings, s0.fencings, "no fencing while refused");
	cr_expect_lt(worst, 0.5, "a refusal comes well before the deadline (1 s)");
	kvc_destroy(h);
	stop_server(&srv);
}
