/* Key sequences for cache-aside runs, the same for every system and for the
 * offline LRU simulation (deterministic from the seed).
 *
 *   zipf  keys 0..records-1, YCSB's scrambled Zipfian (0.99): hot keys scattered.
 *   scan  the same hot set, but a third of the requests are keys that are
 *         never requested again (records, records + 1, ...): a one-pass stream
 *         that pollutes an LRU cache and that a scan-resistant policy ignores. */
#ifndef KVB_CA_SEQ_H
#define KVB_CA_SEQ_H

#include <stdint.h>

#include "sizedist.h"
#include "trace.h"
#include "ycsb_gen.h"

enum kvb_ca_kind { KVB_CA_ZIPF = 1, KVB_CA_SCAN = 2 };

struct kvb_ca_seq {
	int kind;
	uint64_t records, next_unique;
	struct kvb_rng rng;
	struct kvb_scrambled hot;
};

/* 0, or -1 for a bad kind or records == 0. */
int kvb_ca_seq_init(struct kvb_ca_seq *s, int kind, uint64_t records, uint64_t seed);
uint64_t kvb_ca_seq_next(struct kvb_ca_seq *s);
/* The sequence as a request source of the trace replayer (replay.h), for
 * values of many sizes: each key's item has one size, drawn from sizes for
 * the key (a GET; the replayer PUTs it on a miss). Keys are named as the
 * fixed-size runs name them (kvb_key_name). */
struct kvb_ca_src {
	struct kvb_ca_seq seq;
	const struct kvb_sizedist *sizes;
	uint64_t salt;
};

int kvb_ca_src_init(struct kvb_ca_src *s, int kind, uint64_t records, uint64_t seed, const struct kvb_sizedist *sizes);
/* Key number i's request (op GET). */
void kvb_ca_src_key(const struct kvb_ca_src *s, uint64_t i, struct kvb_trace_req *r);
/* kvb_replay_cfg.next: always 1 (the replayer's max_requests ends it). */
int kvb_ca_src_next(void *arg, struct kvb_trace_req *r, char *err, size_t errlen);
/* Key and value bytes of the hot keys 0..records-1. */
uint64_t kvb_ca_src_bytes(const struct kvb_ca_src *s);

/* "zipf" / "scan" -> kind, 0 if unknown. */
int kvb_ca_kind_parse(const char *name);

#endif
