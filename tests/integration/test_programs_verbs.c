/* kvserver and kvbench as an operator runs them: bad input gives one clear line
 * and a non-zero exit, a good run serves a client, SIGTERM shuts down cleanly
 * and connected clients see KVC_ESERVERGONE rather than a hang. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvclient_errors.h"
#include "rmem_verbs.h"

TestSuite(programs_verbs, .init = kvt_require_rdma, .timeout = 180);

/* Run argv to completion; returns the exit status, output in p->all. */
static int run(struct kvt_proc *p, char *const argv[], int timeout_ms)
{
	cr_assert_eq(kvt_start(p, argv), 0);
	return kvt_wait(p, timeout_ms);
}

/* Lines that start with prefix. */
static int count_prefixed(const char *s, const char *prefix)
{
	int n = 0;

	for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		n += strncmp(l, prefix, strlen(prefix)) == 0;
	return n;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void start_server(struct kvt_proc *p, const char *port)
{
	kvt_start_server(p, port, NULL);
}

Test(programs_verbs, kvserver_unknown_device_is_one_line_and_exit_1)
{
	struct kvt_proc p;
	char *argv[] = { KV_SERVER_BIN, "-d", "nosuchdev0", "-p", "7611", NULL };

	cr_expect_eq(run(&p, argv, 30000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "nosuchdev0") && strstr(p.all, "not found"), "output: %s", p.all);
	cr_expect(strstr(p.all, kvt_rdma_dev()) != NULL, "lists the devices there are: %s", p.all);
}

/* With -l the address picks the device; a -d naming none is still "not
 * found", not "the address is on another device". */
Test(programs_verbs, kvserver_listening_on_an_address_with_an_unknown_device_lists_the_devices)
{
	struct kvt_proc p;
	char *argv[] = { KV_SERVER_BIN, "-l", (char *)kvt_rdma_addr(), "-d", "nosuchdev0", "-p", "7621", NULL };

	cr_expect_eq(run(&p, argv, 30000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "'nosuchdev0' not found") && strstr(p.all, "available") &&
			  strstr(p.all, kvt_rdma_dev()),
		  "output: %s", p.all);
}

/* rdma_cm reports a port another listener holds like an address on no RDMA
 * interface (EADDRNOTAVAIL): the message must say which it is. */
Test(programs_verbs, kvserver_on_a_port_another_kvserver_holds_says_the_port_is_in_use)
{
	struct kvt_proc srv;

	start_server(&srv, "7622");
	for (int i = 0; i < 2; i++) { /* on the same address, then on all (-l left out) */
		struct kvt_proc p;
		char *argv[] = { KV_SERVER_BIN, "-p", "7622", i ? NULL : "-l", (char *)kvt_rdma_addr(), NULL };

		cr_expect_eq(run(&p, argv, 30000), 1, "%s: %s", i ? "wildcard" : "-l", p.all);
		cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
		cr_expect(strstr(p.all, "port is in use") && strstr(p.all, "7622") && strstr(p.all, "-p"),
			  "%s: %s", i ? "wildcard" : "-l", p.all);
		cr_expect_null(strstr(p.all, "RDMA-capable"), "output: %s", p.all);
	}
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver output: %s", srv.all);
}

Test(programs_verbs, kvserver_on_an_address_rdma_cannot_serve_says_why)
{
	static const char *const bad[][2] = {
		{ "192.0.2.1", "not on an RDMA-capable interface" }, /* TEST-NET-1: on no interface */
		{ "127.0.0.1", "loopback" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvt_proc p;
		char *argv[] = { KV_SERVER_BIN, "-l", (char *)bad[i][0], "-p", "7623", NULL };

		cr_expect_eq(run(&p, argv, 30000), 1, "%s: %s", bad[i][0], p.all);
		cr_expect_eq(count_lines(p.all), 1, "%s: %s", bad[i][0], p.all);
		cr_expect(strstr(p.all, bad[i][1]) && strstr(p.all, "-l"), "%s: %s", bad[i][0], p.all);
	}
}

/* A non-root client under a small locked-memory limit cannot register its
 * buffers: the message names the limit, not just "out of memory". */
Test(programs_verbs, a_client_under_a_small_memlock_limit_names_the_limit)
{
	struct kvt_proc srv, p;
	char cmd[512];
	int rc;
	char *argv[] = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", cmd, NULL };

	if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK))
		cr_skip_test("needs root and setpriv to run the client as another user");
	start_server(&srv, "7624");
	snprintf(cmd, sizeof(cmd), "ulimit -l 4 && exec %s -s %s:7624 put k v", KV_CLI_BIN, kvt_rdma_addr());
	argv[0] = "/usr/bin/setpriv";
	rc = run(&p, argv, 60000);
	cr_expect_eq(rc, 2, "kvcli exits 2 for an error (got %d): %s", rc, p.all);
	/* A client needs only a few pages now (buffers sized by what it
	 * carries), so the limit is one page; below 32 KiB libibverbs adds its
	 * own warning lines: ours is the one kvcli line. */
	cr_expect_eq(count_prefixed(p.all, "kvcli:"), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "locked-memory limit") && strstr(p.all, "ulimit -l"), "output: %s", p.all);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver output: %s", srv.all);
}

Test(programs_verbs, kvserver_on_a_device_without_atomics_refuses_to_start)
{
	struct kvt_proc p;
	const char *siw = getenv("SIW_DEV");
	char *argv[] = { KV_SERVER_BIN, "-d", (char *)siw, "-p", "7612", NULL };

	if (!siw || !*siw)
		cr_skip_test("no siw device in this environment (SIW_DEV unset)");
	cr_expect_eq(run(&p, argv, 30000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "no remote atomics") && strstr(p.all, "rxe"), "says what lacks and what to use: %s",
		  p.all);
	if (getenv("SIW_ADDR") && *getenv("SIW_ADDR")) { /* the address picks the device */
		char *argv2[] = { KV_SERVER_BIN, "-l", getenv("SIW_ADDR"), "-p", "7612", NULL };

		cr_expect_eq(run(&p, argv2, 30000), 1, "output: %s", p.all);
		cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
		cr_expect(strstr(p.all, "no remote atomics") != NULL, "output: %s", p.all);
	}
}

Test(programs_verbs, kvserver_bad_flags_exit_2_with_the_reason)
{
	static const char *const bad[][3] = {
		{ "-m", "0", "memory" }, { "-p", "70000", "port" }, { "--hugepages", "maybe", "hugepages" },
		{ "-m", "12x", "memory" }, { "extra-arg", NULL, "unexpected" },
		{ "--quarantine-ms", "100", "quarantine" }, /* shorter than 2 x the default max-op-ms */
		{ "--max-op-ms", "0", "max-op-ms" }, { "--reclaim-low", "96", "reclaim-low" },
		{ "--reclaim-high", "1", "watermarks" }, /* below the default low one (2) */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvt_proc p;
		char *argv[] = { KV_SERVER_BIN, (char *)bad[i][0], (char *)bad[i][1], NULL };

		cr_expect_eq(run(&p, argv, 30000), 2, "%s %s: %s", bad[i][0], bad[i][1], p.all);
		cr_expect(strstr(p.all, bad[i][2]) != NULL, "%s %s: %s", bad[i][0], bad[i][1], p.all);
	}
}

/* A temporary file holding text; its path in path (size >= 32). */
static void write_tmp(char *path, const char *text, size_t len)
{
	int fd;

	snprintf(path, 32, "/tmp/kvtest.XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
}

Test(programs_verbs, kvserver_bad_config_file_or_environment_exit_2_naming_where)
{
	char conf[32], want[96];
	struct kvt_proc p;
	char *argv[] = { KV_SERVER_BIN, "--config", conf, "-p", "7616", NULL };
	static const char text[] = "# kvserver settings\nmemory = 12x\n";

	write_tmp(conf, text, sizeof(text) - 1);
	cr_expect_eq(run(&p, argv, 30000), 2, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "one line: %s", p.all);
	snprintf(want, sizeof(want), "kvserver: %s:2: invalid memory '12x'", conf);
	cr_expect(strstr(p.all, want) && strstr(p.all, "expected MiB"), "names FILE:LINE, the key and the form: %s",
		  p.all);
	unlink(conf);

	setenv("KVSERVER_LEASE_MS", "forever", 1);
	argv[1] = "-p", argv[2] = "7616", argv[3] = NULL;
	cr_expect_eq(run(&p, argv, 30000), 2, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "one line: %s", p.all);
	cr_expect(strstr(p.all, "KVSERVER_LEASE_MS 'forever'") != NULL, "names the variable: %s", p.all);
	unsetenv("KVSERVER_LEASE_MS");
}

/* The "key = value" part of each line, comments and blank lines dropped. */
static void settings_of(const char *text, char *out, size_t n)
{
	size_t len = 0;

	out[0] = 0;
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		size_t m = strcspn(l, "#\n");

		while (m && l[m - 1] == ' ')
			m--;
		if (m && len + m + 2 < n) {
			memcpy(out + len, l, m);
			len += m;
			out[len++] = '\n';
			out[len] = 0;
		}
	}
}

Test(programs_verbs, kvserver_print_config_output_loads_back)
{
	static char first[4096], second[4096];
	struct kvt_proc p;
	char conf[32];
	char *argv1[] = { KV_SERVER_BIN, "--print-config", "-m", "128", "--lease-ms", "3000", "--no-evict",
			  "--hugepages", "off", "-v", NULL };
	char *argv2[] = { KV_SERVER_BIN, "--config", conf, "--print-config", NULL };

	cr_assert_eq(run(&p, argv1, 30000), 0, "output: %s", p.all);
	cr_expect(strstr(p.all, "memory = 128") && strstr(p.all, "lease-ms = 3000") && strstr(p.all, "no-evict = true") &&
			  strstr(p.all, "log-level = info"),
		  "%s", p.all);
	settings_of(p.all, first, sizeof(first));
	write_tmp(conf, p.all, p.all_len);
	cr_assert_eq(run(&p, argv2, 30000), 0, "output: %s", p.all);
	settings_of(p.all, second, sizeof(second));
	cr_expect_str_eq(second, first, "the same settings after a reload");
	cr_expect(strstr(p.all, conf) != NULL, "values now come from the file: %s", p.all);
	unlink(conf);
}

/* Lines of path that contain s. */
static int file_count(const char *path, const char *s)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, s) != NULL;
	fclose(f);
	return n;
}

Test(programs_verbs, kvserver_logs_logfmt_to_its_log_file_and_reopens_it_on_sighup)
{
	char log[32], moved[48];
	struct kvt_proc srv;
	const char *extra[] = { "--log-file", log, "-v", NULL };
	time_t t0;

	write_tmp(log, "", 0);
	kvt_start_server(&srv, "7617", extra);
	for (t0 = time(NULL); !file_count(log, " level=info event=listening ") && time(NULL) - t0 < 5;)
		usleep(20000);
	cr_expect_eq(file_count(log, " level=info event=listening "), 1, "the start, in logfmt");
	cr_expect_eq(file_count(log, "ts="), file_count(log, ""), "every line is logfmt");
	snprintf(moved, sizeof(moved), "%s.1", log);
	cr_assert_eq(rename(log, moved), 0);
	kvt_kill(&srv, SIGHUP);
	for (t0 = time(NULL); !file_count(log, "event=log_reopened") && time(NULL) - t0 < 20;)
		usleep(50000);
	cr_expect_eq(file_count(log, "event=log_reopened"), 1, "the new file gets the lines after SIGHUP");
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "SIGHUP does not stop the server: %s", srv.all);
	cr_expect_eq(file_count(log, "event=shutdown signal=SIGTERM"), 1);
	cr_expect_eq(file_count(moved, "event=log_reopened"), 0);
	cr_expect_null(strstr(srv.all, "event="), "nothing logged to stderr: %s", srv.all);
	unlink(log);
	unlink(moved);
}

Test(programs_verbs, kvbench_against_nothing_is_one_line_and_exit_1)
{
	struct kvt_proc p;
	char target[128];
	char *argv[] = { KV_BENCH_BIN, "-w", "B", "--target", target, NULL };

	snprintf(target, sizeof(target), "rdma://%s:7613", kvt_rdma_addr());
	cr_expect_eq(run(&p, argv, 60000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "7613") != NULL, "names where: %s", p.all);
}

Test(programs_verbs, kvbench_measures_a_running_kvserver)
{
	struct kvt_proc srv, b;
	char target[128];
	char *argv[] = { KV_BENCH_BIN, "--micro", "--target", target, "-n", "200", NULL };

	start_server(&srv, "7614");
	snprintf(target, sizeof(target), "rdma://%s:7614", kvt_rdma_addr());
	cr_expect_eq(run(&b, argv, 120000), 0, "output: %s", b.all);
	cr_expect(strstr(b.all, "get_hit ") && strstr(b.all, "put_insert ") && strstr(b.all, "delete "),
		  "output: %s", b.all);
	/* memcached's calls, with the round trips kvclient.h states */
	cr_expect(strstr(b.all, "mget_16 ") && strstr(b.all, "add_refused ") && strstr(b.all, "gat_cached "),
		  "output: %s", b.all);
	for (unsigned i = 0; i < 3; i++) {
		static const char *const cached[] = { "incr_cached ", "touch_cached ", "append_cached " };
		const char *row = strstr(b.all, cached[i]);
		double rtt = 0, sleeps = -1;

		/* op count p50 p90 p99 p99.9 max rtt/op sleep/op */
		cr_expect(row && sscanf(row, "%*s %*s %*s %*s %*s %*s %*s %lf %lf", &rtt, &sleeps) == 2 &&
				  rtt == 2.0 && sleeps >= 0,
			  "%s: 2 round trips, and sleeps per op: %s", cached[i], b.all);
	}
	printf("%s", b.all);
	/* --raw after --micro on the same server, as deploy/compare runs them:
	 * its extent then starts where --micro's objects left off (4-byte
	 * aligned), and every doorbell, the CASes too, must still be timed. */
	{
		struct kvt_proc r;
		char *rargv[] = { KV_BENCH_BIN, "--raw", "--target", target, "-n", "50", NULL };
		static const char *const rows[] = { "READ ", "CAS ", "cached_get ", "lock ", "commit_cached " };

		cr_expect_eq(run(&r, rargv, 120000), 0, "output: %s", r.all);
		for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
			cr_expect(strstr(r.all, rows[i]) != NULL, "a %srow: %s", rows[i], r.all);
		cr_expect(strstr(r.all, "failed") == NULL, "output: %s", r.all);
	}
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver output: %s", srv.all);
}

Test(programs_verbs, sigterm_shuts_down_and_clients_fail_fast)
{
	struct kvt_proc srv;
	struct kvi_errbuf e = { { 0 } };
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	struct kvi_rop op;
	time_t t0;
	int rc = 0;

	start_server(&srv, "7615");
	cr_assert_eq(kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = kvt_rdma_addr(), .port = "7615",
								    .lbuf_size = 4096, .timeout_ms = 10000 },
					    &rm, &w, &e),
		     0, "%s", e.msg);
	op = kvi_rop_read(0, kvi_rmem_lbuf(rm, NULL), 8);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver exits 0 on SIGTERM: %s", srv.all);
	t0 = time(NULL);
	while (rc == 0 && time(NULL) - t0 < 60)
		rc = kvi_rmem_exec(rm, &op, 1, 30000);
	cr_expect_eq(rc, KVC_ESERVERGONE, "got %s", kvc_err_name(rc));
	cr_expect_lt(time(NULL) - t0, 10, "noticed within seconds, not after transport timeouts");
	kvi_rmem_destroy(rm);
}

Test(programs_verbs, kvbench_refuses_bad_workloads_and_parameters_before_sending_anything)
{
	static const char *const bad[][4] = {
		{ "-w", "Z", "unknown workload", NULL },
		{ "-w", "E", "range scans", NULL },
		{ "--records", "0", "records", "B" },
		{ "--distribution", "pareto", "distribution", "B" },
		{ "--depth", "0", "depth", "B" },
		{ "--value-size", "9-3", "value-size", "B" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvt_proc p;
		char *argv[] = { KV_BENCH_BIN, "--target", "rdma://192.0.2.1:7471", (char *)bad[i][0],
				 (char *)bad[i][1], bad[i][3] ? "-w" : NULL, (char *)bad[i][3], NULL };

		cr_expect_eq(run(&p, argv, 30000), 2, "%s %s: %s", bad[i][0], bad[i][1], p.all);
		cr_expect_eq(count_lines(p.all), 1, "%s %s: %s", bad[i][0], bad[i][1], p.all);
		cr_expect(strstr(p.all, bad[i][2]) != NULL, "%s %s: %s", bad[i][0], bad[i][1], p.all);
	}
}

/* A short YCSB run: load and run phases complete without errors and the JSON
 * report carries the documented fields. */
static void ycsb_run(const char *target, const char *workload, const char *json)
{
	struct kvt_proc b;
	char *argv[] = { KV_BENCH_BIN, "-w", (char *)workload, "--target", (char *)target, "--records", "2000",
			 "--operations", "3000", "--threads", "2", "--depth", "4", "--warmup", "0.2",
			 "--json", (char *)json, NULL };
	char buf[16384];
	FILE *f;
	size_t n;

	cr_expect_eq(run(&b, argv, 240000), 0, "output: %s", b.all);
	cr_expect(strstr(b.all, "run phase") && strstr(b.all, "OVERALL"), "output: %s", b.all);
	printf("%s", b.all);
	f = fopen(json, "r");
	cr_assert_not_null(f, "no JSON report");
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	cr_expect(strstr(buf, "\"throughput_ops_s\"") && strstr(buf, "\"p99\"") && strstr(buf, "\"run\"") &&
			  strstr(buf, "\"server_cpu_percent\""),
		  "JSON: %s", buf);
}

Test(programs_verbs, kvbench_runs_ycsb_a_and_d_against_kvserver)
{
	struct kvt_proc srv;
	char target[128];

	start_server(&srv, "7616");
	snprintf(target, sizeof(target), "rdma://%s:7616", kvt_rdma_addr());
	ycsb_run(target, "A", "/tmp/kvbench-a.json");
	ycsb_run(target, "D", "/tmp/kvbench-d.json");
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver output: %s", srv.all);
}

Test(programs_verbs, kvbench_drives_memcached_with_the_same_generator)
{
	struct kvt_proc mc;
	char *argv[] = { "/usr/bin/memcached", "-l", "127.0.0.1", "-p", "11311", "-U", "0", "-u", "root", "-m", "64",
			 NULL };

	if (access(argv[0], X_OK))
		cr_skip_test("memcached is not installed (deploy/setup.sh installs it)");
	cr_assert_eq(kvt_start(&mc, argv), 0);
	usleep(300000);
	ycsb_run("memcached://127.0.0.1:11311", "B", "/tmp/kvbench-mc.json");
	kvt_kill(&mc, SIGTERM);
	kvt_wait(&mc, 10000);
}
