/* kvproxy's "stats": the counters each worker keeps, and memcached's
 * general statistics made of them and of the tier's (kvc_server_stats).
 *
 * Who owns what: each worker owns its struct kvp_counters and is the only
 * writer (KVP_COUNT); the stats command reads every worker's with relaxed
 * loads. The figures are gathered in one place, kvp_stats_fill, so that the
 * item and hit counts can later come summed from the servers instead. */
#ifndef KVP_STATS_H
#define KVP_STATS_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "buf.h"
#include "kvclient.h"

#define KVP_COUNTERS(X)                                                                          \
	X(cmd_get) X(cmd_set) X(cmd_flush) X(cmd_touch) X(get_hits) X(get_misses) X(delete_misses) \
	X(delete_hits) X(incr_misses) X(incr_hits) X(decr_misses) X(decr_hits) X(cas_misses)       \
	X(cas_hits) X(cas_badval) X(touch_hits) X(touch_misses) X(total_items)

struct kvp_counters {
#define KVP_FIELD_(n) uint64_t n;
	KVP_COUNTERS(KVP_FIELD_)
#undef KVP_FIELD_
};

/* Single writer: a plain add, published with a relaxed store. */
#define KVP_COUNT(c, f, n) __atomic_store_n(&(c)->f, (c)->f + (uint64_t)(n), __ATOMIC_RELAXED)

/* What the whole process shares (main.c fills it). */
struct kvp_shared {
	/* "stats reset": the counters' sums then, taken off what stats shows
	 * (the workers' own counters only ever grow: one writer each). */
	pthread_mutex_t reset_mu;
	struct kvp_counters base, tier_base; /* this proxy's; the tier's */
	time_t started;
	unsigned threads;
	struct kvp_counters **workers; /* threads of them */
	uint64_t curr_connections;    /* atomic */
	uint64_t total_connections;   /* atomic */
	uint64_t rejected_connections; /* atomic: over -c, accepted and closed */
	int verbosity;
};

/* memcached's general stats, as this proxy can know them. */
struct kvp_stats {
	uint64_t pid, uptime, time;
	/* this process's CPU (getrusage), in microseconds: memcached's
	 * rusage_user / rusage_system, so that a benchmark that samples a
	 * memcached's CPU samples kvproxy's the same way */
	uint64_t rusage_user_us, rusage_system_us;
	uint64_t curr_connections, total_connections, rejected_connections;
	struct kvp_counters c;
	uint64_t threads;
	/* The tier answered (kvc_server_stats): the figures below are its, and
	 * the item and hit counters in c are the tier's, summed over every
	 * client of every server (memcached's are its server's), not this
	 * proxy's own. */
	int tier_ok;
	uint64_t bytes, limit_maxbytes, evictions, curr_items, get_expired;
};

void kvp_stats_fill(struct kvp_stats *s, struct kvp_shared *sh, kvc_t *h);
/* "stats reset": the counters start again from 0 (h: for the tier's). */
void kvp_stats_reset(struct kvp_shared *sh, kvc_t *h);
/* "STAT name value\r\n" lines and "END\r\n". */
void kvp_stats_render(struct kvp_buf *b, const struct kvp_stats *s);

#define KVP_VERSION "1.6.18-kvproxy-0.1.0"

#endif
