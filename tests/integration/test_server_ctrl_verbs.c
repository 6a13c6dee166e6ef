/* kvserver's control path over real verbs: segment grants reach several
 * clients at once (more than the listener's first CQ sizing holds), are valid
 * segments of the region the client sees, a client that breaks the protocol
 * loses only its own connection, a peer without a control handler answers
 * KVC_EPROTO, and shutdown notices go out before the disconnect. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "rmem_verbs.h"

TestSuite(server_ctrl_verbs, .init = kvt_require_rdma, .timeout = 240);

#define NCLIENTS 6 /* > 128 CQEs / (2 x 17 per peer): the shared CQ must grow */
#define GRANTS 3

/* A request for a whole 64 KiB segment (the servers here use that size). */
static int seg_req(struct kvi_rmem *rm, struct kvi_ctrl *resp)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seg_req = { .need = 64u << 10 } };

	return kvi_rmem_ctrl_call(rm, &req, resp, 20000);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

Test(server_ctrl_verbs, grants_to_several_clients_are_disjoint_segments_of_the_region)
{
	const char *extra[] = { "--segment-size", "64", "-vv", NULL };
	struct kvi_rmem *rm[NCLIENTS];
	uint64_t off[NCLIENTS * GRANTS];
	struct kvi_geometry sb;
	struct kvt_proc srv;
	unsigned n = 0;

	kvt_start_server(&srv, "7751", extra);
	for (int i = 0; i < NCLIENTS; i++)
		rm[i] = kvt_rmem_connect("7751");
	for (int i = 0; i < NCLIENTS; i++) {
		/* The geometry comes in the welcome, the same for every client. */
		sb = rm[i]->geo;
		cr_assert_null(kvi_geometry_check(&sb), "client %d got a bad geometry: %s", i, kvi_geometry_check(&sb));
		cr_assert_eq(sb.region_size, rm[i]->region_size);
		cr_expect_eq(sb.segment_size, 64u << 10);
		cr_expect(kvi_geometry_equal(&sb, &rm[0]->geo), "client %d got another geometry", i);
	}
	/* Interleaved: the server answers each client on its own QP. */
	for (int g = 0; g < GRANTS; g++) {
		for (int i = 0; i < NCLIENTS; i++) {
			struct kvi_ctrl resp;

			cr_assert_eq(seg_req(rm[i], &resp), 0, "client %d grant %d", i, g);
			cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT, "type %u status %s", resp.type,
				     kvc_err_name(resp.status));
			cr_expect_eq(resp.seg_grant.len, sb.segment_size);
			cr_expect_geq(resp.seg_grant.off, sb.heap_off);
			cr_expect_leq(resp.seg_grant.off + resp.seg_grant.len, sb.heap_off + sb.heap_size);
			off[n++] = resp.seg_grant.off;
		}
	}
	qsort(off, n, sizeof(off[0]), cmp_u64);
	for (unsigned i = 1; i < n; i++)
		cr_expect_geq(off[i], off[i - 1] + sb.segment_size, "grants %#lx and %#lx overlap",
			      (unsigned long)off[i - 1], (unsigned long)off[i]);
	/* A granted segment is writable and readable through the region's rkey. */
	{
		unsigned char *lb = kvi_rmem_lbuf(rm[0], NULL);
		struct kvi_rop w = kvi_rop_write(off[n - 1] + sb.segment_size - 4096, lb, 4096);
		struct kvi_rop r = kvi_rop_read(off[n - 1] + sb.segment_size - 4096, lb + 4096, 4096);

		memset(lb, 0x3c, 4096);
		cr_assert_eq(kvi_rmem_exec(rm[0], &w, 1, 20000), 0);
		cr_assert_eq(kvi_rmem_exec(rm[0], &r, 1, 20000), 0);
		cr_expect_eq(memcmp(lb, lb + 4096, 4096), 0);
	}
	for (int i = 0; i < NCLIENTS; i++)
		kvi_rmem_destroy(rm[i]);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
	cr_expect(strstr(srv.all, "granted") != NULL, "-vv logs grants: %s", srv.all);
}

Test(server_ctrl_verbs, a_client_breaking_the_protocol_loses_only_its_connection)
{
	const char *extra[] = { "-v", "--segment-size", "64", NULL };
	struct kvi_rmem *bad, *good;
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_GRANT }, resp;
	struct kvt_proc srv;
	time_t t0;
	int rc;

	kvt_start_server(&srv, "7752", extra);
	bad = kvt_rmem_connect("7752");
	good = kvt_rmem_connect("7752");
	/* Server-to-client types are never valid requests. */
	rc = kvi_rmem_ctrl_call(bad, &req, &resp, 10000);
	cr_expect_neq(rc, 0, "no answer to a SEG_GRANT request");
	t0 = time(NULL);
	while (rc != KVC_ESERVERGONE && time(NULL) - t0 < 30)
		rc = seg_req(bad, &resp);
	cr_expect_eq(rc, KVC_ESERVERGONE, "got %s", kvc_err_name(rc));
	cr_assert_eq(seg_req(good, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_SEG_GRANT, "the other client is still served");
	kvi_rmem_destroy(bad);
	/* The shutdown notice is taken by the connected client before the disconnect. */
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
	cr_expect(strstr(srv.all, "refused") != NULL, "the server says why: %s", srv.all);
	cr_expect(strstr(srv.all, "did not take the shutdown notice") == NULL, "%s", srv.all);
	rc = seg_req(good, &resp);
	cr_expect_eq(rc, KVC_ESERVERGONE, "got %s", kvc_err_name(rc));
	kvi_rmem_destroy(good);
}

Test(server_ctrl_verbs, a_peer_without_a_control_handler_answers_eproto)
{
	struct kvi_rmem *rm;
	struct kvi_ctrl resp;
	struct kvt_proc peer;
	unsigned port;
	char ps[16];

	port = kvt_start_peer(&peer, NULL);
	snprintf(ps, sizeof(ps), "%u", port);
	rm = kvt_rmem_connect(ps);
	cr_assert_eq(seg_req(rm, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_EPROTO, "got %s", kvc_err_name(resp.status));
	cr_assert_eq(seg_req(rm, &resp), 0, "and keeps the connection");
	kvi_rmem_destroy(rm);
	kvt_kill(&peer, SIGKILL);
	kvt_wait(&peer, 10000);
}

/* The control-path benchmark (bench/ctrlbench.c; sized for 10 000 clients
 * per server) measures what it says: many handles joined, kept alive by
 * their renewals, kvserver's control-loop CPU read from /proc. A figure, not
 * a timed test: the run must measure everything and lose no lease. */
Test(server_ctrl_verbs, many_clients_stay_connected_and_the_loop_cpu_per_client_is_measured)
{
	const char *extra[] = { "-m", "256", NULL };
	char target[128], pid[32];
	char *argv[] = { KV_CTRLBENCH_BIN, "--target", target, "--server-pid", pid, "-n", "200", "-t", "5", NULL };
	struct kvt_proc srv, b;
	int rc;

	kvt_start_server(&srv, "7665", extra);
	snprintf(target, sizeof(target), "%s:7665", kvt_rdma_addr());
	snprintf(pid, sizeof(pid), "%d", (int)srv.pid);
	cr_assert_eq(kvt_start(&b, argv), 0);
	rc = kvt_wait(&b, 200000);
	cr_expect_eq(rc, 0, "ctrlbench: %s\nkvserver: %s", b.all, srv.all);
	cr_expect(strstr(b.all, "loop_cpu_pct_per_1000_clients="), "%s", b.all);
	cr_expect(strstr(b.all, "leases_lost=0"), "%s", b.all);
	printf("%s", b.all);
	kvt_kill(&srv, SIGTERM);
	kvt_wait(&srv, 20000);
}
