/* The YCSB run: a load phase that inserts the records, then a run phase that
 * issues the workload's operation mix from `threads` threads, each keeping
 * `depth` requests in flight on its own connection, with a warm-up whose
 * operations are not recorded. */
#ifndef KVB_RUNNER_H
#define KVB_RUNNER_H

#include <stdint.h>

#include "driver.h"
#include "hist.h"
#include "sizedist.h"
#include "ycsb_gen.h"

/* Operation types in the results (YCSB's names). */
enum kvb_type { KVB_T_READ, KVB_T_UPDATE, KVB_T_INSERT, KVB_T_RMW, KVB_T_N };
extern const char *const kvb_type_names[KVB_T_N]; /* "READ", "UPDATE", "INSERT", "READ-MODIFY-WRITE" */

struct kvb_cfg {
	const struct kvb_workload *w;
	enum kvb_dist dist; /* request distribution (the workload's unless overridden) */
	const struct kvb_driver *drv;
	char host[1024], port[16];
	const char *device; /* RDMA device for rdma:// targets, or NULL */
	uint64_t records;    /* inserted by the load phase; keys 0..records-1 */
	uint64_t operations; /* run phase operations (0 = use duration) */
	double duration_s;   /* run phase length when operations == 0 */
	double warmup_s;     /* run-phase seconds not recorded */
	unsigned threads, depth;
	uint32_t vmin, vmax; /* value sizes, uniform in [vmin, vmax] ... */
	const struct kvb_sizedist *sizes; /* ... or drawn from this, when set (within [vmin, vmax]) */
	uint64_t seed;
	int load;     /* 1: run the load phase */
	int prime;    /* 1: then each thread GETs every record once, not recorded (runner.c "Priming") */
	int progress; /* non-zero: live progress line on stderr */
	double interval_s; /* > 0: a line of run-phase throughput on stdout every this many seconds */
};

#define KVB_MAX_ERRS 16
struct kvb_errs {
	int status[KVB_MAX_ERRS];
	uint64_t n[KVB_MAX_ERRS];
	unsigned kinds;
	uint64_t other; /* statuses beyond the table */
};

struct kvb_phase {
	double seconds;             /* measured wall time */
	uint64_t ops[KVB_T_N + 1];  /* recorded operations per type; [KVB_T_N] = all */
	struct kvb_hist hist[KVB_T_N + 1];
	uint64_t failed[KVB_T_N + 1];
	struct kvb_errs errs;
	struct kvb_hist fail_hist; /* how long failed operations took to fail */
	double server_cpu_s; /* server CPU time used during the phase; < 0 if unknown */
};

struct kvb_result {
	struct kvb_phase load, run;
	int signal; /* SIGINT or SIGTERM when one stopped the run, else 0 */
	int64_t mem_after_load; /* server bytes holding items after the load; -1 unknown */
	/* Library round-trip counters summed over the connections (load, warm-up
	 * and run; the run's warm-up and the run only when cfg.prime). */
	unsigned rt_kinds;
	const char *rt_names[16];
	uint64_t rt_ops[16], rt_rtts[16];
};

/* What kvb_run says; every outcome but OK comes with one line in err. */
enum kvb_run_status {
	KVB_RUN_OK = 0,
	KVB_RUN_LOST = 1,     /* a connection was lost on the way: the results count what happened */
	KVB_RUN_STOPPED = 2,  /* SIGINT or SIGTERM (res->signal): the results so far */
	KVB_RUN_FAILED = -1,  /* could not start (e.g. target unreachable): nothing was sent */
	KVB_RUN_REFUSED = -2, /* the target cannot take these parameters (e.g. the value size):
				 nothing was sent; a usage error */
};

/* Run the benchmark. While it runs, SIGINT and SIGTERM are caught: the first
 * stops it within a fraction of a second (KVB_RUN_STOPPED; while connecting,
 * once the attempt ends), a second one kills the process. */
int kvb_run(const struct kvb_cfg *cfg, struct kvb_result *res, char *err, size_t errlen);

#endif
