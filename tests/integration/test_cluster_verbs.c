/* Three kvservers behind one handle, over real RDMA: one is killed -9 under
 * load and restarted. Its keys must fail fast (KVC_ESERVERGONE, within one
 * operation deadline) while the others' keys are served without a failure,
 * and must be served again soon after it is back. The same with kvbench
 * driving a list target. A server list file edited at run time is followed.
 * Figures (throughput of the surviving servers' keys before and after, the
 * failed operations' latency, the time to serve again) are printed. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "harness.h"
#include "kvclient.h"

#define NSRV 3
#define KEYS 1500
#define OP_MS 1000

static const char *const extra[] = { "--max-op-ms", "1000", NULL };

/* Each test has its own ports (Criterion runs them in parallel). */
static char ports[NSRV][8];

static void start_all(struct kvt_proc *srv, unsigned base)
{
	kvt_require_rdma();
	for (unsigned i = 0; i < NSRV; i++) {
		snprintf(ports[i], sizeof(ports[i]), "%u", base + i);
		kvt_start_server(&srv[i], ports[i], extra);
	}
}

static void list_of(char *out, size_t len, unsigned n)
{
	out[0] = '\0';
	for (unsigned i = 0; i < n; i++)
		snprintf(out + strlen(out), len - strlen(out), "%s%s:%s", i ? "," : "", kvt_rdma_addr(), ports[i]);
}

/* What a phase of blocking GETs saw, per server of the key. */
struct tally {
	unsigned ok[NSRV], failed[NSRV], other[NSRV];
	double busy[NSRV]; /* seconds spent in operations on that server's keys */
	double fail_lat[4096];
	unsigned nfail;
};

static void gets(kvc_t *h, const int *owner, double secs, struct tally *t)
{
	char k[32], buf[64];
	double end = kvi_mono_s() + secs;
	unsigned i = 0;

	memset(t, 0, sizeof(*t));
	while (kvi_mono_s() < end) {
		unsigned key = (i++ * 7919u) % KEYS;
		double t0;
		size_t len;
		int rc, s = owner[key];

		snprintf(k, sizeof(k), "key-%u", key);
		t0 = kvi_mono_s();
		rc = kvc_get(h, k, strlen(k), buf, sizeof(buf), &len);
		t->busy[s] += kvi_mono_s() - t0;
		if (rc == 0 || rc == KVC_ENOTFOUND) {
			t->ok[s]++;
		} else if (rc == KVC_ESERVERGONE || rc == KVC_ETIMEDOUT) {
			t->failed[s]++;
			if (t->nfail < sizeof(t->fail_lat) / sizeof(t->fail_lat[0]))
				t->fail_lat[t->nfail++] = kvi_mono_s() - t0;
		} else {
			t->other[s]++;
		}
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Operations per second of busy time on servers 0 and 2's keys. */
static double others_rate(const struct tally *t)
{
	return (t->ok[0] + t->ok[2]) / (t->busy[0] + t->busy[2]);
}

Test(cluster_verbs, a_killed_server_fails_its_keys_fast_and_the_others_go_on)
{
	struct kvt_proc srv[NSRV];
	struct tally before, during, after;
	char list[256], err[400], k[32], v[32];
	static int owner[KEYS];
	struct kvc_opts o;
	double t0, back, p99;
	kvc_t *h;
	int rc;

	start_all(srv, 7681);
	list_of(list, sizeof(list), NSRV);
	kvc_opts_init(&o);
	o.server = list;
	o.op_timeout_ms = OP_MS;
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_server_count(h), NSRV);
	for (unsigned i = 0; i < KEYS; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "v-%u", i);
		owner[i] = kvc_key_server(h, k, strlen(k));
		cr_assert(owner[i] >= 0 && owner[i] < NSRV);
		/* A server still joining fails its keys fast (the sanitizer
		 * build in an emulated guest may take a while): set-up waits. */
		rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
		for (t0 = kvi_mono_s(); rc == KVC_ESERVERGONE && kvi_mono_s() - t0 < 10;) {
			usleep(20 * 1000);
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
		}
		cr_assert_eq(rc, 0, "put %s to server %d: %s", k, owner[i], kvc_err_name(rc));
	}
	gets(h, owner, 1.5, &before);
	for (unsigned s = 0; s < NSRV; s++)
		cr_assert_eq(before.failed[s] + before.other[s], 0, "server %u failed before the kill", s);

	kvt_kill(&srv[1], SIGKILL);
	kvt_wait(&srv[1], 10000);
	gets(h, owner, 3.0, &during);
	for (unsigned s = 0; s < NSRV; s += 2)
		cr_expect_eq(during.failed[s] + during.other[s], 0, "server %u's keys failed while 1 was down", s);
	cr_expect_eq(during.ok[1], 0, "a dead server's key was served");
	cr_expect_eq(during.other[1], 0, "a dead server's key failed with a code other than gone/timed out");
	cr_assert_gt(during.nfail, 0);
	qsort(during.fail_lat, during.nfail, sizeof(double), cmp_d);
	p99 = during.fail_lat[during.nfail * 99 / 100];
	/* One deadline at most (the first operation may have been caught by the
	 * kill), with room for a loaded machine. */
	cr_expect_leq(p99, OP_MS / 1000.0 + 0.5, "p99 of a failed operation %.3f s", p99);

	/* Back, empty (it is a cache): its keys are served again (as misses). */
	kvt_start_server(&srv[1], ports[1], extra);
	t0 = kvi_mono_s();
	for (unsigned key = 0;; key++) {
		if (owner[key % KEYS] != 1)
			continue;
		snprintf(k, sizeof(k), "key-%u", key % KEYS);
		rc = kvc_put(h, k, strlen(k), "again", 5, 0);
		if (rc == 0 || kvi_mono_s() - t0 > 10)
			break;
		usleep(1000);
	}
	back = kvi_mono_s() - t0;
	cr_assert_eq(rc, 0, "the restarted server's keys still fail: %s", kvc_err_name(rc));
	gets(h, owner, 1.5, &after);
	for (unsigned s = 0; s < NSRV; s++)
		cr_expect_eq(after.failed[s] + after.other[s], 0, "server %u failed after the restart", s);

	printf("three servers, one killed: the others' keys %.0f ops/s of busy time before, %.0f while it was "
	       "down (%.2fx), %.0f after; its keys failed in p50 %.1f ms, p99 %.1f ms, max %.1f ms "
	       "(%u failures); served again %.2f s after the restart\n",
	       others_rate(&before), others_rate(&during), others_rate(&during) / others_rate(&before),
	       others_rate(&after), during.fail_lat[during.nfail / 2] * 1e3, p99 * 1e3,
	       during.fail_lat[during.nfail - 1] * 1e3, during.nfail, back);
	cr_expect_lt(back, 5.0, "served again only %.2f s after the restart", back);
	kvc_destroy(h);
	for (unsigned i = 0; i < NSRV; i++) {
		kvt_kill(&srv[i], SIGTERM);
		kvt_wait(&srv[i], 20000);
	}
}

/* kvbench over a list target: a server killed mid-run does not stop it; the
 * interval lines show the run going on, and the failed operations are
 * reported with their latency. */
Test(cluster_verbs, kvbench_goes_on_when_one_of_three_servers_dies)
{
	struct kvt_proc srv[NSRV], b;
	char list[256], target[300], line[512];
	char *argv[] = { KV_BENCH_BIN, "-w", "A", "-D", "5", "-T", "2", "-r", "3000", "--warmup", "0.5",
			 "--interval", "0.5", "--target", target, NULL };
	double t0;
	int st, killed = 0;

	start_all(srv, 7684);
	list_of(list, sizeof(list), NSRV);
	snprintf(target, sizeof(target), "rdma://%s", list);
	cr_assert_eq(kvt_start(&b, argv), 0);
	t0 = kvi_mono_s();
	while (kvt_line(&b, line, sizeof(line), 30000) == 0) {
		if (strncmp(line, "INTERVAL", 8) == 0)
			printf("kvbench: %s%s\n", line, killed ? " (server 2 of 3 down)" : "");
		if (!killed && strncmp(line, "INTERVAL t=2", 12) == 0) {
			kvt_kill(&srv[1], SIGKILL);
			killed = 1;
		}
		if (strstr(line, "round trips per operation"))
			break;
	}
	st = kvt_wait(&b, 30000);
	cr_expect(killed, "the run never reached 2 s: %s", b.all);
	/* 3: operations failed (docs/benchmarking.md "Exit status"); the run went on to its end. */
	cr_expect_eq(st, 3, "kvbench exited %d: %s", st, b.all);
	cr_expect(strstr(b.all, "run phase: 5.") || strstr(b.all, "run phase: 4.9"), "the run stopped early: %s",
		  b.all);
	cr_expect(!strstr(b.all, "lost"), "a lost server of three stopped the run: %s", b.all);
	cr_expect(strstr(b.all, "failed operations took"), "no failed-latency line: %s", b.all);
	cr_expect_lt(kvi_mono_s() - t0, 25);
	kvt_wait(&srv[1], 10000);
	for (unsigned i = 0; i < NSRV; i += 2) {
		kvt_kill(&srv[i], SIGTERM);
		kvt_wait(&srv[i], 20000);
	}
}

/* The handle follows its list file: a server added there takes its share of
 * the keys, within about a second. */
Test(cluster_verbs, the_list_file_is_followed)
{
	struct kvt_proc srv[NSRV];
	char list[256], err[400], path[] = "/tmp/kvlist.XXXXXX", k[32];
	struct kvc_opts o;
	struct kvc_op *done[4];
	unsigned on_new = 0;
	FILE *f;
	kvc_t *h;
	int fd;

	start_all(srv, 7687);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	list_of(list, sizeof(list), 2);
	f = fopen(path, "w");
	fprintf(f, "# two servers\n%s\n", list);
	fclose(f);
	kvc_opts_init(&o);
	o.servers_file = path;
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_server_count(h), 2);
	list_of(list, sizeof(list), 3);
	f = fopen(path, "w");
	fprintf(f, "# three servers\n%s\n", list);
	fclose(f);
	for (int i = 0; i < 40 && kvc_server_count(h) != 3; i++) {
		usleep(100000);
		(void)kvc_poll(h, done, 4, 0);
	}
	cr_assert_eq(kvc_server_count(h), 3, "the list file's third server was not taken");
	/* It joins in the background of the handle's calls (cluster.h "Joining"). */
	for (int i = 0; i < 400; i++) {
		struct kvc_server_info info;

		cr_assert_eq(kvc_server_info(h, 2, &info), 0);
		if (info.state == KVC_SERVER_UP)
			break;
		cr_assert_eq(info.state, KVC_SERVER_JOINING, "the new server's state %d", info.state);
		usleep(5000);
		(void)kvc_poll(h, done, 4, 0);
	}
	for (unsigned i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "file-%u", i);
		cr_assert_eq(kvc_put(h, k, strlen(k), "v", 1, 0), 0);
		on_new += kvc_key_server(h, k, strlen(k)) == 2;
	}
	cr_expect(on_new > 50 && on_new < 150, "the new server took %u of 300 keys", on_new);
	{
		struct kvc_server_stats st;

		cr_assert_eq(kvc_server_stats_at(h, 2, &st), 0);
		cr_expect_gt(st.grants, 0, "the new server took writes");
	}
	kvc_destroy(h);
	unlink(path);
	for (unsigned i = 0; i < NSRV; i++) {
		kvt_kill(&srv[i], SIGTERM);
		kvt_wait(&srv[i], 20000);
	}
}

/* A handle with several servers sleeps once it has polled busy_poll_us (here
 * 0: at once) on all of its connections together, and a completion on any of
 * them wakes it: 400 blocking operations (two round trips each) are woken by
 * their completions, not by the 10 ms limit of one sleep (8 s if they were). */
Test(cluster_verbs, a_handle_with_several_servers_sleeps_and_each_completion_wakes_it)
{
	struct kvt_proc srv[NSRV];
	char list[256], err[400], k[32], v[16];
	struct timespec c0, c1;
	struct kvc_opts o;
	double t0, wall, cpu;
	size_t len;
	kvc_t *h;

	start_all(srv, 7694);
	list_of(list, sizeof(list), NSRV);
	kvc_opts_init(&o);
	o.server = list;
	o.busy_poll_us = 0;
	o.cache_entries = 0; /* every GET reads its buckets, then the object */
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_server_count(h), NSRV);
	for (unsigned i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "sleep-%u", i);
		cr_assert_eq(kvc_put(h, k, strlen(k), k, strlen(k), 0), 0, "%s", k);
	}
	t0 = kvi_mono_s();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	for (unsigned i = 0; i < 400; i++) {
		snprintf(k, sizeof(k), "sleep-%u", i % 100);
		cr_assert_eq(kvc_get(h, k, strlen(k), v, sizeof(v), &len), 0, "%s", k);
		cr_assert(len == strlen(k) && memcmp(v, k, len) == 0, "%s", k);
	}
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	wall = kvi_mono_s() - t0;
	cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
	printf("%u servers, busy_poll_us 0: 400 blocking GETs in %.2f s, %.0f %% of it on the CPU\n", NSRV, wall,
	       100 * cpu / wall);
	cr_expect_lt(wall, 4.0, "400 GETs took %.2f s: the sleeps were not woken by the completions", wall);
	kvc_destroy(h);
	for (unsigned i = 0; i < NSRV; i++) {
		kvt_kill(&srv[i], SIGTERM);
		kvt_wait(&srv[i], 20000);
	}
}

/* A server that is up but never answers a connection request (rmem_peer
 * --silent) beside a live kvserver: kvc_create returns once the live one
 * joined, not after connect_timeout_ms; the silent server's keys fail fast
 * while its join goes on and when it has timed out and is tried again; a
 * list that gains it is set at once; alone, it fails kvc_create after
 * connect_timeout_ms with a reason. Figures are printed. */
Test(cluster_verbs, a_server_that_never_answers_holds_no_call)
{
	enum { CONNECT_MS = 1500 };
	struct kvt_proc srv, silent;
	struct kvc_server_info info;
	char list[256], one[128], err[400], k[32];
	unsigned port, served = 0, failed = 0;
	double t0, one_s, create_s, worst = 0, end, alone_s, set_s;
	struct kvc_opts o;
	kvc_t *h;
	int rc;

	kvt_require_rdma();
	snprintf(ports[0], sizeof(ports[0]), "7811");
	kvt_start_server(&srv, ports[0], extra);
	port = kvt_start_peer(&silent, (const char *const[]){ "--silent", NULL });
	snprintf(list, sizeof(list), "%s:%s,%s:%u", kvt_rdma_addr(), ports[0], kvt_rdma_addr(), port);
	snprintf(one, sizeof(one), "%s:%s", kvt_rdma_addr(), ports[0]);
	kvc_opts_init(&o);
	o.op_timeout_ms = OP_MS;
	o.connect_timeout_ms = CONNECT_MS;

	/* The live server alone first: what a join costs here (the process's
	 * first also opens the RDMA devices). */
	o.server = one;
	t0 = kvi_mono_s();
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	one_s = kvi_mono_s() - t0;
	kvc_destroy(h);
	o.server = list;
	t0 = kvi_mono_s();
	rc = kvc_create(&o, &h, err, sizeof(err));
	create_s = kvi_mono_s() - t0;
	cr_assert_eq(rc, 0, "%s", err);
	cr_expect_lt(create_s, CONNECT_MS / 4000.0, "kvc_create waited %.3f s for a server that never answers",
		     create_s);
	cr_expect_lt(create_s, 2 * one_s + 0.1, "kvc_create %.3f s, the live server alone %.3f s", create_s, one_s);
	cr_assert_eq(kvc_server_info(h, 1, &info), 0);
	cr_expect_eq(info.state, KVC_SERVER_JOINING);
	/* Past the silent server's join deadline, so that a join times out and
	 * another starts while keys are used. */
	end = kvi_mono_s() + CONNECT_MS / 1000.0 + 1.0;
	for (unsigned i = 0; kvi_mono_s() < end; i++) {
		double d;

		snprintf(k, sizeof(k), "key-%u", i % 500);
		t0 = kvi_mono_s();
		rc = kvc_put(h, k, strlen(k), "v", 1, 0);
		d = kvi_mono_s() - t0;
		worst = d > worst ? d : worst;
		if (kvc_key_server(h, k, strlen(k)) == 0) {
			cr_assert_eq(rc, 0, "the live server's key: %s", kvc_err_name(rc));
			served++;
		} else {
			cr_assert_eq(rc, KVC_ESERVERGONE, "the silent server's key: %s", kvc_err_name(rc));
			failed++;
		}
	}
	cr_expect_lt(worst, 0.2, "an operation took %.3f s", worst);
	kvc_destroy(h);

	/* A list that gains the silent server is set at once. */
	o.server = one;
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	t0 = kvi_mono_s();
	cr_assert_eq(kvc_set_servers(h, list, err, sizeof(err)), 0, "%s", err);
	set_s = kvi_mono_s() - t0;
	cr_expect_lt(set_s, 0.2, "kvc_set_servers waited %.3f s", set_s);
	rc = kvc_put(h, "after", 5, "v", 1, 0);
	cr_expect(kvc_key_server(h, "after", 5) == 1 ? rc == KVC_ESERVERGONE : rc == 0, "%s", kvc_err_name(rc));
	kvc_destroy(h);

	/* Alone, it is an error after the join's deadline, with the reason. */
	o.server = list + strlen(one) + 1;
	t0 = kvi_mono_s();
	rc = kvc_create(&o, &h, err, sizeof(err));
	alone_s = kvi_mono_s() - t0;
	cr_expect_eq(rc, KVC_EUNREACHABLE, "%s: %s", kvc_err_name(rc), err);
	cr_expect(strstr(err, "did not answer within") != NULL, "message: %s", err);
	cr_expect(alone_s > CONNECT_MS / 1000.0 * 0.9 && alone_s < CONNECT_MS / 1000.0 + 1.0,
		  "alone, kvc_create took %.3f s (connect_timeout_ms %d)", alone_s, CONNECT_MS);

	printf("a server that never answers beside a live one: kvc_create %.1f ms (of the live one alone %.1f ms; "
	       "connect_timeout_ms %d), "
	       "%u operations served and %u failed fast over %.1f s (slowest %.1f ms), kvc_set_servers adding "
	       "it %.1f ms; alone it fails in %.2f s\n",
	       create_s * 1e3, one_s * 1e3, CONNECT_MS, served, failed, CONNECT_MS / 1000.0 + 1.0, worst * 1e3, set_s * 1e3,
	       alone_s);
	kvt_kill(&silent, SIGTERM);
	kvt_wait(&silent, 10000);
	kvt_kill(&srv, SIGTERM);
	kvt_wait(&srv, 20000);
}
