/* kvbench --cpu-per-op: the client's CPU time per GET and per PUT, measured
 * over whole phases with the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID),
 * against local://MIB, where no NIC and no wire hide anything. It includes
 * the in-process transport doing what a NIC would (moving the bytes at the
 * poll, deferred mode, drv_local.c): that share is timed apart (its own
 * cycle counts, converted by the phase's ratio of cycles to ns) and reported
 * beside the whole, and the rest -- the library and the loop -- bounds the
 * operations per second one client core drives once a NIC does the
 * transport. */
#ifndef KVB_CPUOP_H
#define KVB_CPUOP_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

enum { KVB_CPUOP_GET = 1, KVB_CPUOP_PUT = 2, KVB_CPUOP_BOTH = 3 };

struct kvb_cpuop_cfg {
	const struct kvb_driver *drv;
	char host[1024], port[16];
	uint64_t records;    /* keys loaded first, then read and updated, < 2^32 */
	uint64_t operations; /* per phase */
	unsigned depth;      /* requests in flight */
	uint32_t value_size;
	uint64_t seed;
	int phases; /* KVB_CPUOP_GET and/or KVB_CPUOP_PUT */
};

#define KVB_CPUOP_KINDS 16
struct kvb_cpuop_phase {
	uint64_t ops, failed;
	int first_error;
	uint64_t cpu_ns, wall_ns;
	/* Of cpu_ns: the in-process transport doing a NIC's work (moving the
	 * bytes, completing requests); 0 when the target has no such figure. */
	uint64_t transport_ns;
	uint64_t rt_ops[KVB_CPUOP_KINDS]; /* library counters over the phase, by kind */
};

struct kvb_cpuop_result {
	struct kvb_cpuop_phase load, get, put;
	struct kvb_cpuop_phase harness; /* the timing loop alone, no library: included in get and put */
	const char *rt_names[KVB_CPUOP_KINDS];
	unsigned rt_kinds;
};

/* Load the records, then time a phase of GETs and a phase of PUTs (updates),
 * each over uniformly chosen loaded keys. 0; -1 with one line in err when it
 * could not start or the connection was lost; -2 (a usage error) when the
 * target refuses the value size. */
int kvb_cpu_per_op(const struct kvb_cpuop_cfg *c, struct kvb_cpuop_result *r, char *err, size_t errlen);

#endif
