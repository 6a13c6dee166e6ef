/* Linearizability over real RDMA: several client processes on a real kvserver
 * (Soft-RoCE in the guest) record their operations, with TTLs expiring
 * mid-history; the checker (tests/lincheck) must find a linearization of
 * every key's history. Same clock for all: one machine. A second run does
 * the same while a filler makes the index double (online resize). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvclient.h"
#include "lincheck.h"

#define PROCS 4
#define OPS 400
#define KEYS 3
#define HISTORIES 3

static size_t read_history(const char *path, struct lc_op *ops, size_t cap)
{
	FILE *f = fopen(path, "r");
	char line[256];
	size_t n = 0;

	cr_assert(f, "%s", path);
	while (n < cap && fgets(line, sizeof(line), f)) {
		cr_assert_eq(lc_parse(line, &ops[n]), 0, "%s: bad line %s", path, line);
		n++;
	}
	fclose(f);
	return n;
}

TestSuite(lin_verbs, .init = kvt_require_rdma, .timeout = 600);

/* Record `histories` histories of PROCS processes on the kvserver at port
 * and check each; returns the operations checked. */
static uint64_t run_histories(struct kvt_proc *srv, const char *port, unsigned histories, const char *mode,
			      uint64_t *states)
{
	struct lc_op *all = malloc(sizeof(*all) * PROCS * OPS);
	uint64_t total = 0;

	cr_assert(all);
	for (unsigned hist = 1; hist <= histories; hist++) {
		struct kvt_proc w[PROCS];
		char server[128], id[PROCS][8], seed[16], ops[16], keys[16], path[PROCS][64];
		struct lc_report rep;
		size_t n = 0;

		snprintf(server, sizeof(server), "%s:%s", kvt_rdma_addr(), port);
		snprintf(seed, sizeof(seed), "%u", hist);
		snprintf(ops, sizeof(ops), "%u", OPS);
		snprintf(keys, sizeof(keys), "%u", KEYS);
		for (unsigned p = 0; p < PROCS; p++) {
			char *argv[] = { KV_LIN_WORKER_BIN, server, id[p], seed, ops, keys, path[p], (char *)mode, NULL };

			snprintf(id[p], sizeof(id[p]), "%u", hist * 100 + p);
			snprintf(path[p], sizeof(path[p]), "/tmp/lin-%d-%u-%u.txt", (int)getpid(), hist, p);
			cr_assert_eq(kvt_start(&w[p], argv), 0);
		}
		for (unsigned p = 0; p < PROCS; p++) {
			cr_assert_eq(kvt_wait(&w[p], 300000), 0, "worker %u: %s", p, w[p].all);
			n += read_history(path[p], all + n, PROCS * OPS - n);
			unlink(path[p]);
		}
		if (lc_check(all, n, 5000000, &rep) != 1) {
			/* keep the history for a look: lin-failed-<pid>.txt in the cwd */
			char keep[64], line[256];
			FILE *f;

			snprintf(keep, sizeof(keep), "lin-failed-%d.txt", (int)getpid());
			f = fopen(keep, "w");
			for (size_t i = 0; f && i < n; i++) {
				lc_format(&all[i], line, sizeof(line));
				fputs(line, f);
			}
			if (f)
				fclose(f);
			kvt_kill(srv, SIGTERM);
			kvt_wait(srv, 20000);
			cr_assert_fail("history %u: %s (kept in %s; tests/lincheck shows the shortest failing prefix)", hist,
				       rep.why, keep);
		}
		total += n;
		*states += rep.states;
	}
	free(all);
	return total;
}

Test(lin_verbs, histories_of_several_processes_with_ttls_are_linearizable)
{
	uint64_t total, states = 0;
	struct kvt_proc srv;

	kvt_start_server(&srv, "7741", NULL);
	total = run_histories(&srv, "7741", HISTORIES, "plain", &states);
	printf("lincheck over RDMA: %d histories of %d processes, %" PRIu64 " operations, %" PRIu64
	       " search states: 0 violations\n",
	       HISTORIES, PROCS, total, states);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
}

/* memcached's items over RDMA: the unit histories' mix (recorder.h) by
 * several processes on a real kvserver -- conditional stores and CAS loops,
 * then counters (incr / decr, batched and with their modes, touch, gat) --
 * with TTLs of a few milliseconds; uniques included, every key's history
 * must be linearizable. */
Test(lin_verbs, histories_of_memcached_items_and_counters_are_linearizable)
{
	uint64_t items, counters, states = 0;
	struct kvt_proc srv;

	kvt_start_server(&srv, "7743", NULL);
	items = run_histories(&srv, "7743", 2, "items", &states);
	counters = run_histories(&srv, "7743", 2, "counters", &states);
	printf("lincheck over RDMA, memcached items: 2 histories of %d processes (%" PRIu64
	       " operations), counters: 2 (%" PRIu64 "), %" PRIu64 " search states: 0 violations\n",
	       PROCS, items, counters, states);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
}

/* A filler that grows the index while the histories are recorded. */
struct filler {
	const char *port;
	atomic_int stop;
	unsigned put;
	int failed;
};

static void *fill_main(void *arg)
{
	struct filler *f = arg;
	kvc_t *h = kvt_kv_connect(f->port, 1, 0);
	char k[32];

	while (!atomic_load(&f->stop) && f->put < 40000) {
		int rc;

		snprintf(k, sizeof(k), "filler-%u", f->put);
		rc = kvc_put(h, k, strlen(k), "x", 1, 0);
		if (rc == 0)
			f->put++;
		else if (rc != KVC_EINDEXFULL && rc != KVC_ETIMEDOUT && !f->failed)
			f->failed = rc;
	}
	kvc_destroy(h);
	return NULL;
}

static uint64_t resizes_of(const char *port)
{
	struct kvc_server_stats s;
	kvc_t *h = kvt_kv_connect(port, 1, 0);
	int rc = kvc_server_stats(h, &s);

	cr_assert_eq(rc, 0, "server statistics: %s", kvc_err_name(rc));
	kvc_destroy(h);
	return s.resizes;
}

/* The same histories while a filler makes the index double again and again
 * (layout.h "Resize"): operations meet UNMIGRATED and MOVED buckets, clients
 * fetch new indexes mid-operation, and every history must still be
 * linearizable. */
Test(lin_verbs, histories_recorded_while_the_index_doubles_are_linearizable)
{
	const char *extra[] = { "--buckets", "32", "--no-evict", NULL };
	struct filler f = { .port = "7742" };
	uint64_t total, states = 0, r0, r1;
	struct kvt_proc srv;
	pthread_t t;

	kvt_start_server(&srv, "7742", extra);
	r0 = resizes_of("7742");
	cr_assert_eq(pthread_create(&t, NULL, fill_main, &f), 0);
	total = run_histories(&srv, "7742", 2, "plain", &states);
	atomic_store(&f.stop, 1);
	pthread_join(t, NULL);
	r1 = resizes_of("7742");
	printf("lincheck over RDMA during %" PRIu64 " resizes (%u keys filled alongside): %" PRIu64
	       " operations, 0 violations\n", r1 - r0, f.put, total);
	cr_expect_eq(f.failed, 0, "the filler: %s", kvc_err_name(f.failed));
	cr_expect_geq(r1 - r0, 2, "the index should have doubled at least twice during the histories");
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
}
