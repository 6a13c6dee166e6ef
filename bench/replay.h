/* Trace replay (kvbench --trace): a request trace (trace.h) replayed against a
 * target as a cache-aside client would meet it. A GET; on a miss, a PUT of the
 * item with the trace's value size (and TTL, where the format has one), as if
 * fetched from the backing store. A trace's SETs and DELETEs go to the cache as
 * they are; other operations (incr, decr) are counted and skipped. One
 * connection, `depth` requests in flight, issued in trace order. The same
 * requests go through an exact LRU of `lru_bytes` (the target's own memory by
 * default: equal bytes), which counts each object as its key + value bytes and
 * ignores TTLs. Requests for items larger than the target takes are skipped for
 * both and counted. */
#ifndef KVB_REPLAY_H
#define KVB_REPLAY_H

#include <stdint.h>

#include "driver.h"
#include "trace.h"

struct kvb_replay_cfg {
	const struct kvb_driver *drv;
	char host[1024], port[16];
	const char *device;
	const char *path; /* "-": standard input */
	int fmt;          /* enum kvb_trace_fmt; 0 = detect */
	/* Or requests from a generator (twload.h), when next is set: as
	 * kvb_trace_next, with arg; it must end (max_requests) if it does not. */
	int (*next)(void *arg, struct kvb_trace_req *r, char *err, size_t errlen);
	void *arg;
	unsigned depth;
	uint64_t lru_bytes;    /* 0: the target's memory (its limit) */
	uint64_t max_requests; /* 0: the whole trace */
	uint64_t warmup;       /* requests not counted (the LRU's neither) */
	double ttl_scale;      /* TTLs divided by this (a replay faster than its trace); 0 = 1 */
	uint64_t rate;         /* requests per second at most; 0 = as fast as possible */
};

struct kvb_replay_side {
	uint64_t gets, hits, get_bytes, hit_bytes;
};

struct kvb_replay_result {
	int fmt;
	uint64_t requests, sets, deletes, others, too_large, fill_puts;
	uint64_t errors;
	int first_error;
	uint64_t lru_bytes; /* the baseline's capacity */
	/* What the target held at the end (driver server_mem: memcached's slab
	 * pages and hash table; kvcache's index and handed-out memory); 0 when
	 * it cannot say. */
	uint64_t target_bytes;
	struct kvb_replay_side cache, lru;
	double seconds;
};

/* 0; -1 with one line in err when it could not run (trace unreadable or
 * malformed, target unreachable, no size for the baseline). */
int kvb_replay(const struct kvb_replay_cfg *c, struct kvb_replay_result *r, char *err, size_t errlen);

#endif
