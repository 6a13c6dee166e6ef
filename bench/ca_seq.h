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
/* "zipf" / "scan" -> kind, 0 if unknown. */
int kvb_ca_kind_parse(const char *name);

#endif
