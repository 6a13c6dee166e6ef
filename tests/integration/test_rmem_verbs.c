/* The verbs transport against a real peer process over a real RDMA device
 * (rxe in the test guest): every operation, batches, and clean errors for bad
 * accesses, vanished peers and bad connection parameters. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvclient_errors.h"
#include "rmem_verbs.h"

static struct kvt_proc peer;
static struct kvi_rmem *rm;
static uint64_t *lw; /* local buffer as words */

static int try_connect(const char *host, const char *port, const char *dev, struct kvi_rmem **out,
		       struct kvi_errbuf *e)
{
	struct kvi_welcome w;

	return kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = host, .port = port, .device = dev,
							      .lbuf_size = 8192, .timeout_ms = 10000 },
				      out, &w, e);
}

static void connect_peer(const char *const extra[])
{
	char port[16];
	struct kvi_errbuf e = { { 0 } };

	snprintf(port, sizeof(port), "%u", kvt_start_peer(&peer, extra));
	cr_assert_eq(try_connect(kvt_rdma_addr(), port, NULL, &rm, &e), 0, "connect: %s", e.msg);
	lw = kvi_rmem_lbuf(rm, NULL);
}

static void setup(void)
{
	kvt_require_rdma();
	connect_peer(NULL);
}

static void teardown(void)
{
	kvi_rmem_destroy(rm);
	rm = NULL;
	if (peer.pid > 0) {
		kvt_kill(&peer, SIGTERM);
		kvt_wait(&peer, 5000);
	}
}

TestSuite(rmem_verbs, .init = setup, .fini = teardown, .timeout = 120);

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	printf("verbs tests: RDMA_ENV=%s, RDMA device %s at %s\n", getenv("RDMA_ENV") ? getenv("RDMA_ENV") : "unset",
	       kvt_rdma_dev() ? kvt_rdma_dev() : "none", kvt_rdma_addr() ? kvt_rdma_addr() : "none");
	fflush(stdout);
}

Test(rmem_verbs, read_returns_the_peer_region)
{
	struct kvi_rop op = kvi_rop_read(8 * 1000, lw, 64);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	for (int i = 0; i < 8; i++)
		cr_expect_eq(lw[i], 1000u + (uint64_t)i, "word %d: %llu", i, (unsigned long long)lw[i]);
	cr_expect_str_eq(kvi_rmem_verbs_device(rm), kvt_rdma_dev() ? kvt_rdma_dev() : "");
}

Test(rmem_verbs, write_lands_and_reads_back)
{
	struct kvi_rop op;

	for (int i = 0; i < 32; i++)
		lw[i] = 0xabc000u + (uint64_t)i; /* 256 bytes: larger than inline data */
	op = kvi_rop_write(8 * 2000, lw, 256);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	op = kvi_rop_write(8 * 3000, lw, 8); /* small: posted inline */
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	memset(&lw[100], 0, 264);
	struct kvi_rop rd[2] = { kvi_rop_read(8 * 2000, &lw[100], 256), kvi_rop_read(8 * 3000, &lw[140], 8) };
	cr_assert_eq(kvi_rmem_exec(rm, rd, 2, 10000), 0);
	cr_expect_eq(memcmp(&lw[100], lw, 256), 0);
	cr_expect_eq(lw[140], 0xabc000u);
}

Test(rmem_verbs, cas_swaps_only_on_match_and_returns_the_old_value)
{
	struct kvi_rop op = kvi_rop_cas(8 * 50, &lw[0], 50, 0x1234);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	cr_expect_eq(lw[0], 50, "success returns the old value");
	op = kvi_rop_cas(8 * 50, &lw[1], 50, 0x9999);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	cr_expect_eq(lw[1], 0x1234, "failure returns the current value");
	op = kvi_rop_read(8 * 50, &lw[2], 8);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	cr_expect_eq(lw[2], 0x1234, "failed CAS did not write");
}

Test(rmem_verbs, faa_adds_and_returns_the_old_value)
{
	struct kvi_rop op = kvi_rop_faa(8 * 60, &lw[0], 40);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	cr_expect_eq(lw[0], 60);
	op = kvi_rop_faa(8 * 60, &lw[0], 1);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	cr_expect_eq(lw[0], 100);
}

Test(rmem_verbs, mixed_batch_is_one_completion_in_posting_order)
{
	struct kvi_rop ops[5];
	struct kvi_rcomp c;

	lw[0] = 0x1111;
	ops[0] = kvi_rop_write(8 * 512, &lw[0], 8);
	ops[1] = kvi_rop_cas(8 * 512, &lw[1], 0x1111, 0x2222);
	ops[2] = kvi_rop_faa(8 * 512, &lw[2], 1);
	ops[3] = kvi_rop_read(8 * 512, &lw[3], 8);
	ops[4] = kvi_rop_read(8 * 513, &lw[4], 8);
	cr_assert_eq(kvi_rmem_post(rm, ops, 5, 77), 0);
	cr_assert_eq(kvi_rmem_wait(rm, &c, 1, 10000), 1);
	cr_expect_eq(c.cookie, 77);
	cr_expect_eq(c.status, 0, "%s", kvc_strerror(c.status));
	cr_expect_eq(lw[1], 0x1111);
	cr_expect_eq(lw[2], 0x2222);
	cr_expect_eq(lw[3], 0x2223);
	cr_expect_eq(lw[4], 513);
	cr_expect_eq(kvi_rmem_poll(rm, &c, 1), 0);
}

Test(rmem_verbs, many_batches_in_flight_complete_in_order)
{
	struct kvi_rcomp c[KVI_RMEM_MAX_INFLIGHT];
	unsigned got = 0, n = 48;

	for (unsigned i = 0; i < n; i++) {
		struct kvi_rop op[2] = { kvi_rop_read(8 * (4000 + i), &lw[2 * i], 8),
					 kvi_rop_faa(8 * (5000 + i), &lw[2 * i + 1], 1) };
		cr_assert_eq(kvi_rmem_post(rm, op, 2, 500 + i), 0);
	}
	while (got < n) {
		int k = kvi_rmem_wait(rm, c + got, n - got, 10000);

		cr_assert_gt(k, 0, "timed out with %u of %u batches done", got, n);
		got += (unsigned)k;
	}
	for (unsigned i = 0; i < n; i++) {
		cr_expect_eq(c[i].cookie, 500 + i);
		cr_expect_eq(c[i].status, 0);
		cr_expect_eq(lw[2 * i], 4000 + i);
		cr_expect_eq(lw[2 * i + 1], 5000 + i);
	}
}

Test(rmem_verbs, access_past_the_advertised_region_is_refused_locally)
{
	struct kvi_rop op = kvi_rop_read(rm->region_size - 4, lw, 8);

	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 0), KVC_ERANGE);
	op = kvi_rop_read(0, lw, 8);
	cr_expect_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0, "connection still usable");
}

Test(rmem_verbs, access_past_registered_memory_is_erange_from_the_nic_not_a_crash)
{
	static const char *const lie[] = { "--size", "65536", "--advertise-extra", "1048576", NULL };
	struct kvi_rop op;

	teardown();
	connect_peer(lie);
	op = kvi_rop_read(65536 + 4096, lw, 8); /* passes our check, fails the rkey's */
	cr_expect_eq(kvi_rmem_exec(rm, &op, 1, 20000), KVC_ERANGE);
	op = kvi_rop_read(0, lw, 8);
	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 0), KVC_ESERVERGONE, "the QP is dead after a remote access error");
}

/* Waits set to sleep on the completion channel at once (spin_us 0) see
 * every completion, batch after batch and many in flight, promptly. (How
 * often they do sleep depends on the device: Soft-RoCE with its peer in the
 * same guest often completes a batch within the post itself.) */
Test(rmem_verbs, a_wait_that_sleeps_at_once_sees_every_completion)
{
	struct kvi_rcomp c[KVI_RMEM_MAX_INFLIGHT];
	time_t t0 = time(NULL);

	rm->spin_us = 0;
	for (unsigned i = 0; i < 200; i++) {
		struct kvi_rop op = kvi_rop_faa(8 * 6000, &lw[0], 1);

		cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0, "batch %u", i);
		cr_assert_eq(lw[0], 6000 + i);
	}
	/* Woken by the completions, not by the 100 ms sleep slices (200 of
	 * those would take 20 s). */
	cr_expect_lt(time(NULL) - t0, 10, "200 waits took %ld s (%llu slept)", (long)(time(NULL) - t0),
		     (unsigned long long)rm->sleeps);
	for (unsigned round = 0; round < 5; round++) {
		unsigned got = 0, n = 32;

		for (unsigned i = 0; i < n; i++) {
			struct kvi_rop op = kvi_rop_read(8 * (4000 + i), &lw[i], 8);

			cr_assert_eq(kvi_rmem_post(rm, &op, 1, i), 0);
		}
		while (got < n) {
			int k = kvi_rmem_wait(rm, c + got, n - got, 10000);

			cr_assert_gt(k, 0, "round %u: timed out with %u of %u batches done", round, got, n);
			got += (unsigned)k;
		}
		for (unsigned i = 0; i < n; i++)
			cr_expect_eq(lw[i], 4000 + i);
	}
}

static void peer_loss_is_noticed(void)
{
	struct kvi_rop op = kvi_rop_read(0, lw, 8);
	time_t t0;
	int rc = 0;

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 10000), 0);
	kvt_kill(&peer, SIGKILL);
	kvt_wait(&peer, 10000);
	t0 = time(NULL);
	while (rc == 0 && time(NULL) - t0 < 60) {
		rc = kvi_rmem_exec(rm, &op, 1, 30000);
		if (rc == 0)
			usleep(10000);
	}
	cr_expect_eq(rc, KVC_ESERVERGONE, "got %s (%d) after %lds", kvc_err_name(rc), rc, (long)(time(NULL) - t0));
	printf("peer loss noticed after %ld s (%s)\n", (long)(time(NULL) - t0),
	       rm->spin_us < 0 ? "polling" : "sleeping waits");
}

Test(rmem_verbs, killed_peer_gives_servergone_not_a_hang)
{
	rm->spin_us = -1;
	peer_loss_is_noticed();
}

/* Waits that sleep notice a lost peer as polling ones do (the rdma_cm
 * channel and error completions wake them). */
Test(rmem_verbs, a_sleeping_wait_notices_a_killed_peer)
{
	rm->spin_us = 0;
	peer_loss_is_noticed();
}

/* --- connection set-up errors: one clear message and a distinct code --- */

TestSuite(rmem_setup_verbs, .init = kvt_require_rdma, .timeout = 120);

Test(rmem_setup_verbs, no_listener_on_the_port_is_unreachable)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *r = NULL;

	cr_expect_eq(try_connect(kvt_rdma_addr(), "1", NULL, &r, &e), KVC_EUNREACHABLE, "%s", e.msg);
	cr_expect_null(r);
	cr_expect(strstr(e.msg, "refused") || strstr(e.msg, "unreachable"), "message: %s", e.msg);
}

Test(rmem_setup_verbs, unresolvable_host_is_unreachable)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *r = NULL;

	cr_expect_eq(try_connect("no-such-host.invalid", "7471", NULL, &r, &e), KVC_EUNREACHABLE, "%s", e.msg);
	cr_expect(strstr(e.msg, "no-such-host.invalid") != NULL, "message names the host: %s", e.msg);
}

Test(rmem_setup_verbs, unknown_device_name_is_enodev_and_lists_devices)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *r = NULL;

	cr_expect_eq(try_connect(kvt_rdma_addr(), "1", "mlx5_99", &r, &e), KVC_ENODEV, "%s", e.msg);
	cr_expect(strstr(e.msg, "mlx5_99") && strstr(e.msg, "available"), "message: %s", e.msg);
}

Test(rmem_setup_verbs, device_without_atomics_is_refused_up_front)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *r = NULL;
	const char *siw = getenv("SIW_ADDR");

	if (!siw || !*siw)
		cr_skip_test("no siw device in this environment (SIW_ADDR unset)");
	cr_expect_eq(try_connect(siw, "1", NULL, &r, &e), KVC_ENOTSUP, "%s", e.msg);
	cr_expect(strstr(e.msg, "atomic") != NULL, "message: %s", e.msg);
}

/* The server reuses memory assuming what a client posts executes
 * within the bound it states; a client whose QP (read back after
 * connecting: ACK timeout 14, retry count 7, 587 ms) may retransmit for
 * longer refuses to run, and says why. */
Test(rmem_setup_verbs, a_qp_that_may_execute_later_than_the_server_allows_is_refused)
{
	static const char *const tight[] = { "--exec-ms", "100", NULL };
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *r = NULL;
	char port[16];

	snprintf(port, sizeof(port), "%u", kvt_start_peer(&peer, tight));
	cr_expect_eq(try_connect(kvt_rdma_addr(), port, NULL, &r, &e), KVC_ENOTSUP, "%s", e.msg);
	cr_expect_null(r);
	cr_expect(strstr(e.msg, "100 ms") && strstr(e.msg, "ACK timeout 14") && strstr(e.msg, "retry count 7"),
		  "message: %s", e.msg);
	kvi_rmem_destroy(r);
	kvt_kill(&peer, SIGTERM);
	kvt_wait(&peer, 5000);
}
