/* Linearizability over real RDMA: several client processes on a real kvserver
 * (Soft-RoCE in the guest) record their operations, with TTLs expiring
 * mid-history; the checker (tests/lincheck) must find a linearization of
 * every key's history. Same clock for all: one machine. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
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

TestSuite(lin, .init = kvt_require_rdma, .timeout = 600);

Test(lin, histories_of_several_processes_with_ttls_are_linearizable)
{
	struct lc_op *all = malloc(sizeof(*all) * PROCS * OPS);
	uint64_t total = 0, states = 0;
	struct kvt_proc srv;

	cr_assert(all);
	kvt_start_server(&srv, "7671", NULL);
	for (unsigned hist = 1; hist <= HISTORIES; hist++) {
		struct kvt_proc w[PROCS];
		char server[128], id[PROCS][8], seed[16], ops[16], keys[16], path[PROCS][64];
		struct lc_report rep;
		size_t n = 0;

		snprintf(server, sizeof(server), "%s:7671", kvt_rdma_addr());
		snprintf(seed, sizeof(seed), "%u", hist);
		snprintf(ops, sizeof(ops), "%u", OPS);
		snprintf(keys, sizeof(keys), "%u", KEYS);
		for (unsigned p = 0; p < PROCS; p++) {
			char *argv[] = { KV_LIN_WORKER_BIN, server, id[p], seed, ops, keys, path[p], NULL };

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
			kvt_kill(&srv, SIGTERM);
			kvt_wait(&srv, 20000);
			cr_assert_fail("history %u: %s (kept in %s; tests/lincheck shows the shortest failing prefix)", hist,
				       rep.why, keep);
		}
		total += n;
		states += rep.states;
	}
	printf("lincheck over RDMA: %d histories of %d processes, %" PRIu64 " operations, %" PRIu64
	       " search states: 0 violations\n",
	       HISTORIES, PROCS, total, states);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
	free(all);
}
