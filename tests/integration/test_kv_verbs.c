/* The key-value data path over real verbs against a real kvserver process:
 * libkvclient end to end, round trips as counted on the wire, several client
 * processes on shared keys checked against what they acknowledged, the
 * server's CPU staying idle while clients work (the one-sided property), and
 * kvcli's exit codes. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvclient.h"
#include "layout.h"
#include "rmem_verbs.h"

TestSuite(kv_verbs, .init = kvt_require_rdma, .timeout = 300);

static kvc_t *connect_kv(const char *port, unsigned cache_entries)
{
	return kvt_kv_connect(port, 16, cache_entries);
}

static void stop_server(struct kvt_proc *srv)
{
	kvt_kill(srv, SIGTERM);
	cr_expect_eq(kvt_wait(srv, 20000), 0, "kvserver: %s", srv->all);
}

static uint64_t rtt_of(kvc_t *h, int kind, uint64_t *ops)
{
	struct kvc_stats s;

	kvc_get_stats(h, &s);
	*ops = s.ops[kind];
	return s.round_trips[kind];
}

Test(kv_verbs, put_get_delete_over_verbs_with_spec_round_trips)
{
	struct kvt_proc srv;
	kvc_t *h, *nc;
	char buf[64];
	size_t len = 0;
	uint64_t r0, n0, r1, n1;

	kvt_start_server(&srv, "7631", NULL);
	h = connect_kv("7631", 1024);
	nc = connect_kv("7631", 0);
	r0 = rtt_of(nc, KVC_STAT_PUT_INSERT, &n0);
	cr_assert_eq(kvc_put(nc, "hello", 5, "world", 5, 0), 0);
	r1 = rtt_of(nc, KVC_STAT_PUT_INSERT, &n1);
	cr_expect_eq(n1 - n0, 1);
	cr_expect_leq(r1 - r0, 2);
	r0 = rtt_of(nc, KVC_STAT_GET_HIT, &n0);
	cr_assert_eq(kvc_get(nc, "hello", 5, buf, sizeof(buf), &len), 0);
	r1 = rtt_of(nc, KVC_STAT_GET_HIT, &n1);
	cr_expect_eq(len, 5);
	cr_expect_eq(memcmp(buf, "world", 5), 0);
	cr_expect_leq(r1 - r0, 2);
	r0 = rtt_of(nc, KVC_STAT_GET_MISS, &n0);
	cr_expect_eq(kvc_get(nc, "absent", 6, buf, sizeof(buf), &len), KVC_ENOTFOUND);
	r1 = rtt_of(nc, KVC_STAT_GET_MISS, &n1);
	cr_expect_eq(r1 - r0, 1);
	cr_assert_eq(kvc_get(h, "hello", 5, buf, sizeof(buf), &len), 0); /* fills h's cache */
	r0 = rtt_of(h, KVC_STAT_GET_HIT_CACHED, &n0);
	cr_assert_eq(kvc_get(h, "hello", 5, buf, sizeof(buf), &len), 0);
	r1 = rtt_of(h, KVC_STAT_GET_HIT_CACHED, &n1);
	cr_expect_eq(n1 - n0, 1);
	cr_expect_eq(r1 - r0, 1);
	cr_assert_eq(kvc_put(h, "hello", 5, "again", 5, 60000), 0);
	cr_assert_eq(kvc_get(nc, "hello", 5, buf, sizeof(buf), &len), 0);
	cr_expect_eq(memcmp(buf, "again", 5), 0);
	cr_assert_eq(kvc_delete(nc, "hello", 5), 0);
	cr_expect_eq(kvc_get(h, "hello", 5, buf, sizeof(buf), &len), KVC_ENOTFOUND);
	kvc_destroy(h);
	kvc_destroy(nc);
	stop_server(&srv);
}

Test(kv_verbs, async_batch_over_verbs)
{
	struct kvt_proc srv;
	struct kvc_op ops[32], *done[32];
	char keys[32][16], bufs[32][16];
	unsigned finished = 0;
	kvc_t *h;

	kvt_start_server(&srv, "7632", NULL);
	h = connect_kv("7632", 0);
	for (int i = 0; i < 16; i++) {
		snprintf(keys[i], sizeof(keys[i]), "batch-%d", i);
		ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[i], .key_len = strlen(keys[i]),
					  .value = keys[i], .value_len = strlen(keys[i]) };
		cr_assert_eq(kvc_submit(h, &ops[i]), 0);
	}
	while (finished < 16) {
		int n = kvc_poll(h, done, 32, 10000);

		cr_assert_gt(n, 0);
		for (int i = 0; i < n; i++)
			cr_expect_eq(done[i]->status, 0, "%s", kvc_err_name(done[i]->status));
		finished += (unsigned)n;
	}
	for (int i = 0; i < 16; i++) {
		ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = keys[i], .key_len = strlen(keys[i]),
					  .buf = bufs[i], .buf_len = sizeof(bufs[i]) };
		cr_assert_eq(kvc_submit(h, &ops[i]), 0);
	}
	for (finished = 0; finished < 16;) {
		int n = kvc_poll(h, done, 32, 10000);

		cr_assert_gt(n, 0);
		for (int i = 0; i < n; i++) {
			cr_expect_eq(done[i]->status, 0);
			cr_expect_eq(memcmp(done[i]->buf, done[i]->key, done[i]->key_len), 0);
		}
		finished += (unsigned)n;
	}
	kvc_destroy(h);
	stop_server(&srv);
}

#define WORKERS 3

static void start_worker(struct kvt_proc *w, const char *port, unsigned id, const char *seconds)
{
	char server[128], ids[16];
	char *argv[] = { KV_WORKER_BIN, "-s", server, "--id", ids, "--seconds", (char *)seconds, NULL };

	snprintf(server, sizeof(server), "%s:%s", kvt_rdma_addr(), port);
	snprintf(ids, sizeof(ids), "%u", id);
	cr_assert_eq(kvt_start(w, argv), 0);
}

/* Check every "ACK key value" line of a worker against the server's state. */
static unsigned verify_acks(kvc_t *h, const char *out)
{
	unsigned checked = 0;

	for (const char *l = strstr(out, "ACK "); l; l = strstr(l + 1, "\nACK ")) {
		char key[64], val[64], got[64];
		size_t len = 0;

		if (*l == '\n')
			l++;
		if (sscanf(l, "ACK %63s %63s", key, val) != 2)
			continue;
		cr_assert_eq(kvc_get(h, key, strlen(key), got, sizeof(got) - 1, &len), 0, "acknowledged %s missing", key);
		got[len] = '\0';
		cr_expect_str_eq(got, val, "%s", key);
		checked++;
	}
	return checked;
}

Test(kv_verbs, several_client_processes_end_with_their_acknowledged_state)
{
	struct kvt_proc srv, w[WORKERS];
	unsigned checked = 0;
	kvc_t *h;

	kvt_start_server(&srv, "7633", NULL);
	for (unsigned i = 0; i < WORKERS; i++)
		start_worker(&w[i], "7633", i + 1, "6");
	h = connect_kv("7633", 0);
	for (unsigned i = 0; i < WORKERS; i++) {
		int rc = kvt_wait(&w[i], 120000);

		cr_expect_eq(rc, 0, "worker %u exited %d: %s", i + 1, rc, w[i].all);
		cr_expect(strstr(w[i].all, "DONE ") != NULL, "worker %u: %s", i + 1, w[i].all);
		checked += verify_acks(h, w[i].all);
	}
	cr_expect_gt(checked, WORKERS * 2, "acknowledged keys checked: %u", checked);
	printf("multi-process: %u acknowledged keys verified\n", checked);
	kvc_destroy(h);
	stop_server(&srv);
}

Test(kv_verbs, server_cpu_stays_near_zero_while_clients_use_the_data_path)
{
	struct kvt_proc srv, w[2];
	struct kvt_thread_cpu ta[16], tb[16];
	char line[128], threads[512];
	unsigned long long c0, c1;
	unsigned na, nb;
	struct timespec t0, t1;
	double secs, pct;
	long hz = sysconf(_SC_CLK_TCK);

	kvt_start_server(&srv, "7634", NULL);
	for (unsigned i = 0; i < 2; i++)
		start_worker(&w[i], "7634", i + 1, "9");
	/* Joined, granted a segment, data path running: from here on only
	 * one-sided operations (a full segment would cost one tiny request). */
	for (unsigned i = 0; i < 2; i++)
		cr_assert_eq(kvt_line(&w[i], line, sizeof(line), 60000), 0, "worker %u: %s", i, w[i].all);
	na = kvt_threads_cpu(srv.pid, ta, 16);
	c0 = kvt_cpu_ticks(srv.pid);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sleep(6);
	c1 = kvt_cpu_ticks(srv.pid);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	nb = kvt_threads_cpu(srv.pid, tb, 16);
	kvt_threads_cpu_diff(ta, na, tb, nb, threads, sizeof(threads));
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	pct = 100.0 * (double)(c1 - c0) / (double)hz / secs;
	for (unsigned i = 0; i < 2; i++)
		cr_expect_eq(kvt_wait(&w[i], 120000), 0, "worker %u: %s", i, w[i].all);
	printf("server CPU during %.1f s of data-path-only load: %.2f %% of one core (%llu ticks: %s)\n", secs, pct,
	       c1 - c0, threads);
	cr_expect_lt(pct, 5.0, "kvserver used %.2f %% CPU while clients only used the data path (ticks by thread: %s)",
		     pct, threads);
	cr_expect(strstr(w[0].all, "DONE ") != NULL);
	stop_server(&srv);
}

Test(kv_verbs, sigterm_makes_clients_fail_fast_with_servergone)
{
	struct kvt_proc srv;
	char buf[16];
	size_t len;
	time_t t0;
	int rc = 0;
	kvc_t *h;

	kvt_start_server(&srv, "7635", NULL);
	h = connect_kv("7635", 0);
	cr_assert_eq(kvc_put(h, "k", 1, "v", 1, 0), 0);
	stop_server(&srv);
	t0 = time(NULL);
	while (rc == 0 && time(NULL) - t0 < 60)
		rc = kvc_get(h, "k", 1, buf, sizeof(buf), &len);
	cr_expect_eq(rc, KVC_ESERVERGONE, "got %s", kvc_err_name(rc));
	cr_expect_lt(time(NULL) - t0, 10);
	kvc_destroy(h);
}

static int cli(struct kvt_proc *p, const char *port, const char *a, const char *b, const char *c)
{
	char server[128];
	char *argv[] = { KV_CLI_BIN, "-s", server, (char *)a, (char *)b, (char *)c, NULL };

	snprintf(server, sizeof(server), "%s:%s", kvt_rdma_addr(), port);
	cr_assert_eq(kvt_start(p, argv), 0);
	return kvt_wait(p, 60000);
}

Test(kv_verbs, kvcli_exit_codes_and_output)
{
	struct kvt_proc srv, p;

	kvt_start_server(&srv, "7636", NULL);
	cr_expect_eq(cli(&p, "7636", "put", "color", "blue"), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7636", "get", "color", NULL), 0, "%s", p.all);
	cr_expect_str_eq(p.all, "blue\n");
	cr_expect_eq(cli(&p, "7636", "del", "color", NULL), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7636", "get", "color", NULL), 1, "%s", p.all);
	cr_expect(strstr(p.all, "not found") != NULL, "%s", p.all);
	cr_expect_eq(cli(&p, "7636", "frobnicate", "x", NULL), 2, "%s", p.all);
	stop_server(&srv);
	cr_expect_eq(cli(&p, "7636", "get", "color", NULL), 2, "%s", p.all);
	cr_expect(strstr(p.all, "7636") != NULL && strchr(p.all, '\n') == strrchr(p.all, '\n'),
		  "one line naming the server: %s", p.all);
}

/* flush_all through kvserver's reclaimer thread: at once, then later. */
Test(kv_verbs, kvcli_flush_all_clears_the_server_at_once_or_later)
{
	struct kvt_proc srv, p;
	time_t t0;
	int rc;

	kvt_start_server(&srv, "7648", NULL);
	cr_expect_eq(cli(&p, "7648", "put", "a", "1"), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "put", "b", "2"), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "flush_all", NULL, NULL), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "get", "a", NULL), 1, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "get", "b", NULL), 1, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "put", "c", "3"), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "flush_all", "5", NULL), 0, "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "get", "c", NULL), 0, "before its time: %s", p.all);
	t0 = time(NULL);
	while ((rc = cli(&p, "7648", "get", "c", NULL)) == 0 && time(NULL) - t0 < 60)
		sleep(1);
	cr_expect_eq(rc, 1, "the delayed flush never took effect: %s", p.all);
	cr_expect_eq(cli(&p, "7648", "stats", NULL, NULL), 0, "%s", p.all);
	cr_expect(strstr(p.all, "STAT cmd_flush 2\n") && strstr(p.all, "STAT flushes 2\n") &&
			  strstr(p.all, "STAT flushed 3\n"),
		  "%s", p.all);
	cr_expect_eq(cli(&p, "7648", "flush_all", "soon", NULL), 2, "%s", p.all);
	stop_server(&srv);
}

Test(kv_verbs, the_example_program_works_against_a_server)
{
	struct kvt_proc srv, p;
	char server[128];
	char *argv[] = { KV_EXAMPLE_BIN, server, NULL };

	kvt_start_server(&srv, "7637", NULL);
	snprintf(server, sizeof(server), "%s:7637", kvt_rdma_addr());
	cr_assert_eq(kvt_start(&p, argv), 0);
	cr_expect_eq(kvt_wait(&p, 60000), 0, "%s", p.all);
	cr_expect(strstr(p.all, "greeting = hello") && strstr(p.all, "8 asynchronous GETs completed") &&
			  strstr(p.all, "delete greeting: done"),
		  "%s", p.all);
	stop_server(&srv);
}

Test(kv_verbs, locks_of_a_client_that_dies_are_released_by_the_server)
{
	struct kvt_proc srv, holder;
	char *argv[] = { KV_LOCK_HOLDER_BIN, (char *)kvt_rdma_addr(), "7638", "victim", NULL };
	char server[128], err[400], line[128];
	struct kvc_opts o;
	time_t t0;
	kvc_t *h;
	int rc;

	/* A long lease: this is about fencing on disconnect (test_lease_verbs
	 * has the lease running out). */
	kvt_start_server(&srv, "7638", (const char *const[]){ "--lease-ms", "60000", NULL });
	cr_assert_eq(kvt_start(&holder, argv), 0);
	cr_assert_eq(kvt_line(&holder, line, sizeof(line), 60000), 0, "%s", holder.all);
	cr_assert(strncmp(line, "LOCKED", 6) == 0, "%s", holder.all);
	snprintf(server, sizeof(server), "%s:7638", kvt_rdma_addr());
	kvc_opts_init(&o);
	o.server = server;
	o.op_timeout_ms = 1000;
	cr_assert_eq(kvc_create(&o, &h, err, sizeof(err)), 0, "%s", err);
	rc = kvc_put(h, "victim", 6, "v", 1, 0);
	cr_expect_eq(rc, KVC_ETIMEDOUT, "the held lock must stop writers: got %s", kvc_err_name(rc));
	kvt_kill(&holder, SIGKILL); /* dies holding both locks */
	kvt_wait(&holder, 10000);
	t0 = time(NULL);
	do
		rc = kvc_put(h, "victim", 6, "v", 1, 0);
	while (rc == KVC_ETIMEDOUT && time(NULL) - t0 < 30);
	cr_expect_eq(rc, 0, "after the holder died: %s", kvc_err_name(rc));
	printf("locks of a dead client released within %ld s\n", (long)(time(NULL) - t0));
	kvc_destroy(h);
	stop_server(&srv);
	cr_expect(strstr(srv.all, "event=client_fenced client=") && strstr(srv.all, " locks_released=2\n") != NULL, "kvserver: %s", srv.all);
}

/* RDMA-WRITE len bytes of buf at offset 0 of the server's region, as any
 * client may (the region's one rkey covers the superblock page too). */
static void write_superblock(const char *port, const void *buf, uint32_t len)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	struct kvi_rop op;

	cr_assert_eq(kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = kvt_rdma_addr(), .port = port,
								    .lbuf_size = 4096, .timeout_ms = 20000 },
					    &rm, &w, &e),
		     0, "%s", e.msg);
	memcpy(kvi_rmem_lbuf(rm, NULL), buf, len);
	op = kvi_rop_write(0, kvi_rmem_lbuf(rm, NULL), len);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 20000), 0);
	kvi_rmem_destroy(rm);
}

/* A new client over a scribbled superblock finds every key written before,
 * and what it writes the old client sees (no key hashed elsewhere). */
static void new_client_sees_old_keys(const char *port, kvc_t *old, const char *tag)
{
	char k[32], want[32], buf[64];
	size_t len = 0;
	kvc_t *nc = connect_kv(port, 1024);

	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "before-%d", i);
		snprintf(want, sizeof(want), "value-%d", i);
		cr_assert_eq(kvc_get(nc, k, strlen(k), buf, sizeof(buf), &len), 0, "%s: new client misses %s", tag, k);
		cr_assert(len == strlen(want) && memcmp(buf, want, len) == 0, "%s: %s has another value", tag, k);
	}
	cr_assert_eq(kvc_put(nc, tag, strlen(tag), "new", 3, 0), 0, "%s", tag);
	cr_assert_eq(kvc_get(old, tag, strlen(tag), buf, sizeof(buf), &len), 0, "%s: old client misses it", tag);
	cr_assert_eq(kvc_put(nc, "before-3", 8, "updated", 7, 0), 0);
	cr_assert_eq(kvc_get(old, "before-3", 8, buf, sizeof(buf), &len), 0);
	cr_expect(len == 7 && memcmp(buf, "updated", 7) == 0, "%s: the update went elsewhere", tag);
	cr_assert_eq(kvc_put(old, "before-3", 8, "value-3", 7, 0), 0);
	kvc_destroy(nc);
}

/* Any client may WRITE the superblock page; the geometry comes from the
 * server's welcome, so neither a stray bucket count nor garbage there
 * changes anything for clients that join afterwards (layout.h "Geometry"). */
Test(kv_verbs, a_client_writing_garbage_over_the_superblock_changes_nothing_for_new_clients)
{
	struct kvi_superblock sb = { .magic = KVI_REGION_MAGIC, .layout_version = KVI_LAYOUT_VERSION,
				     .state = KVI_STATE_SERVING, .epoch = 1, .index_off = KVI_SUPERBLOCK_SIZE,
				     .bucket_count = 2, .segment_size = 1u << 20 };
	unsigned char junk[4096];
	uint64_t x = 0x2545f4914f6cdd1dull;
	struct kvt_proc srv;
	char k[32], v[32];
	kvc_t *h;
	int rc;

	kvt_start_server(&srv, "7639", NULL);
	h = connect_kv("7639", 1024);
	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "before-%d", i);
		snprintf(v, sizeof(v), "value-%d", i);
		rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
		cr_assert_eq(rc, 0, "PUT %s: %s", k, kvc_err_name(rc));
	}
	/* A plausible superblock naming 2 buckets: hashing by it would miss. */
	write_superblock("7639", &sb, sizeof(sb));
	new_client_sees_old_keys("7639", h, "after-bucket-count");
	for (size_t i = 0; i < sizeof(junk); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		junk[i] = (unsigned char)x;
	}
	write_superblock("7639", junk, sizeof(junk));
	new_client_sees_old_keys("7639", h, "after-garbage");
	kvc_destroy(h);
	stop_server(&srv);
}
