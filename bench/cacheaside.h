/* Cache-aside runs: an application with a backing store in front of a cache.
 * For each key of the sequence (ca_seq.h): GET; on a miss, PUT the item (as if
 * fetched from the store). One connection, `depth` requests in flight, keys
 * issued in sequence order. The hit ratio is counted over the requests after
 * the first `warmup`; the same sequence through an exact LRU of `lru_items`
 * items gives the baseline. */
#ifndef KVB_CACHEASIDE_H
#define KVB_CACHEASIDE_H

#include <stdint.h>

#include "driver.h"

struct kvb_ca_cfg {
	const struct kvb_driver *drv;
	char host[1024], port[16];
	const char *device;
	int kind;          /* enum kvb_ca_kind */
	uint64_t records;  /* hot key space */
	uint64_t requests; /* total, warm-up included */
	uint64_t warmup;   /* requests not counted */
	uint32_t value_size;
	unsigned depth;
	uint64_t seed;
	uint64_t lru_items; /* 0: no LRU baseline */
	uint64_t rate;      /* requests per second at most; 0 = as fast as possible */
};

struct kvb_ca_result {
	uint64_t counted, hits, puts, errors;
	int first_error;
	double seconds;
	uint64_t lru_hits, lru_counted; /* over the requests after the warm-up */
	uint64_t key_bytes; /* total key bytes of the records, for sizing */
};

/* 0; -1 with one line in err when it could not run. */
int kvb_cache_aside(const struct kvb_ca_cfg *c, struct kvb_ca_result *r, char *err, size_t errlen);

#endif
