/* Synthetic workloads shaped like Twitter's production cache clusters
 * (kvbench -w twitter:N): the published per-cluster statistics of
 * github.com/twitter/cache-trace, stat/2020Mar.md (Yang, Yue, Rashmi, "A
 * large scale analysis of hundreds of in-memory cache clusters at Twitter",
 * OSDI 2020) -- Zipf alpha, mean key and value size, the operation mix and the
 * common TTLs -- turned into a request stream for the trace replayer
 * (replay.h), so the same cache-aside client and exact-LRU baseline serve
 * both. What the table does not give is ours, and said where it is chosen:
 * value sizes per key are lognormal (sigma 0.5) around the cluster's mean;
 * the key space is -r keys; keys are capped at 39 bytes (kvbench's limit).
 *
 * Every key's size and TTL are functions of the key, so a GET's fill and a
 * SET of the same key agree, and the working set is known in advance. */
#ifndef KVB_TWLOAD_H
#define KVB_TWLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"
#include "ycsb_gen.h"

#define KVB_TWL_TTLS 6

struct kvb_twl_cluster {
	unsigned id;
	double alpha;                  /* Zipf exponent of key popularity */
	unsigned key_size, value_size; /* means, bytes */
	/* Operations: get and gets are GETs; set, add, cas SETs; the rest
	 * (incr, prepend) OTHER (the replayer counts and skips them). */
	double get, set, del, other;
	struct {
		uint32_t ttl_s;
		double share;
	} ttl[KVB_TWL_TTLS]; /* the most common TTLs; shares renormalised */
};

/* Rejection-inversion sampling of Zipf(alpha) over ranks 1..n (Hormann and
 * Derflinger 1996): O(1) per draw for any alpha > 0, no table of n terms
 * (YCSB's generator needs alpha < 1 and zeta(n)). */
struct kvb_zipf_ri {
	double s, n, h_x1, h_n, sv;
};
int kvb_zipf_ri_init(struct kvb_zipf_ri *z, uint64_t n, double alpha);
uint64_t kvb_zipf_ri_next(const struct kvb_zipf_ri *z, struct kvb_rng *r);

struct kvb_twl {
	const struct kvb_twl_cluster *c;
	uint64_t records;
	struct kvb_rng rng;
	struct kvb_zipf_ri zipf;
	double ttl_total;
};

/* The cluster of that number in the built-in table, or NULL. */
const struct kvb_twl_cluster *kvb_twl_find(unsigned id);
/* The clusters offered, for --help and errors: "4, 7, 14, ...". */
const char *kvb_twl_list(void);
/* 0, or -1 (records 0, or a cluster whose alpha is not usable). */
int kvb_twl_init(struct kvb_twl *w, const struct kvb_twl_cluster *c, uint64_t records, uint64_t seed);
/* The next request (always 1; the signature is the replayer's source). */
int kvb_twl_next(void *w, struct kvb_trace_req *r, char *err, size_t errlen);
/* Key i's request fields (key, id, value_size, ttl_s; op left as is). */
void kvb_twl_key(const struct kvb_twl *w, uint64_t i, struct kvb_trace_req *r);
/* The working set: key + value bytes over every key. */
uint64_t kvb_twl_bytes(const struct kvb_twl *w);

#endif
