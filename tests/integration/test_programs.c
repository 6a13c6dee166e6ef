/* kvserver and kvbench as an operator runs them: bad input gives one clear line
 * and a non-zero exit, a good run serves a client, SIGTERM shuts down cleanly
 * and connected clients see KVC_ESERVERGONE rather than a hang. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kvclient_errors.h"
#include "rmem_verbs.h"

TestSuite(programs, .init = kvt_require_rdma, .timeout = 180);

/* Run argv to completion; returns the exit status, output in p->all. */
static int run(struct kvt_proc *p, char *const argv[], int timeout_ms)
{
	cr_assert_eq(kvt_start(p, argv), 0);
	return kvt_wait(p, timeout_ms);
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

Test(programs, kvserver_unknown_device_is_one_line_and_exit_1)
{
	struct kvt_proc p;
	char *argv[] = { KV_SERVER_BIN, "-d", "nosuchdev0", "-p", "7611", NULL };

	cr_expect_eq(run(&p, argv, 30000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "nosuchdev0") && strstr(p.all, "not found"), "output: %s", p.all);
}

Test(programs, kvserver_on_a_device_without_atomics_refuses_to_start)
{
	struct kvt_proc p;
	const char *siw = getenv("SIW_DEV");
	char *argv[] = { KV_SERVER_BIN, "-d", (char *)siw, "-p", "7612", NULL };

	if (!siw || !*siw)
		cr_skip_test("no siw device in this environment (SIW_DEV unset)");
	cr_expect_eq(run(&p, argv, 30000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "atomic") != NULL, "output: %s", p.all);
}

Test(programs, kvserver_bad_flags_exit_2_with_the_reason)
{
	static const char *const bad[][3] = {
		{ "-m", "0", "memory" }, { "-p", "70000", "port" }, { "--hugepages", "maybe", "hugepages" },
		{ "-m", "12x", "memory" }, { "extra-arg", NULL, "unexpected" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvt_proc p;
		char *argv[] = { KV_SERVER_BIN, (char *)bad[i][0], (char *)bad[i][1], NULL };

		cr_expect_eq(run(&p, argv, 30000), 2, "%s %s: %s", bad[i][0], bad[i][1], p.all);
		cr_expect(strstr(p.all, bad[i][2]) != NULL, "%s %s: %s", bad[i][0], bad[i][1], p.all);
	}
}

Test(programs, kvbench_against_nothing_is_one_line_and_exit_1)
{
	struct kvt_proc p;
	char target[128];
	char *argv[] = { KV_BENCH_BIN, "--target", target, NULL };

	snprintf(target, sizeof(target), "rdma://%s:7613", kvt_rdma_addr());
	cr_expect_eq(run(&p, argv, 60000), 1, "output: %s", p.all);
	cr_expect_eq(count_lines(p.all), 1, "output: %s", p.all);
	cr_expect(strstr(p.all, "7613") != NULL, "names where: %s", p.all);
}

Test(programs, kvbench_measures_a_running_kvserver)
{
	struct kvt_proc srv, b;
	char target[128];
	char *argv[] = { KV_BENCH_BIN, "--target", target, "-n", "200", NULL };

	start_server(&srv, "7614");
	snprintf(target, sizeof(target), "rdma://%s:7614", kvt_rdma_addr());
	cr_expect_eq(run(&b, argv, 120000), 0, "output: %s", b.all);
	cr_expect(strstr(b.all, "get_hit ") && strstr(b.all, "put_insert ") && strstr(b.all, "delete "),
		  "output: %s", b.all);
	printf("%s", b.all);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver output: %s", srv.all);
}

Test(programs, sigterm_shuts_down_and_clients_fail_fast)
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
