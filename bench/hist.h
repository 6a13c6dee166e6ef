/* Latency histogram, log-linear: values below 2^SUB_BITS nanoseconds are exact;
 * above, each power of two is cut into 2^SUB_BITS linear buckets, so every
 * recorded value is within 1/2^SUB_BITS (< 1 %) of the bucket it lands in.
 * Fixed memory, O(1) record, mergeable; covers 1 ns .. 2^40 ns (18 minutes). */
#ifndef KVB_HIST_H
#define KVB_HIST_H

#include <stdint.h>
#include <stdio.h>

#define KVB_HIST_SUB_BITS 7 /* 128 sub-buckets: 0.78 % relative error */
#define KVB_HIST_TOP_BITS 40
#define KVB_HIST_BUCKETS ((KVB_HIST_TOP_BITS - KVB_HIST_SUB_BITS + 1) << KVB_HIST_SUB_BITS)

struct kvb_hist {
	uint64_t count, sum, min, max;
	uint64_t b[KVB_HIST_BUCKETS];
};

void kvb_hist_init(struct kvb_hist *h);
void kvb_hist_record(struct kvb_hist *h, uint64_t ns);
void kvb_hist_merge(struct kvb_hist *into, const struct kvb_hist *from);
/* Value at quantile q (0..1): the upper edge of the bucket holding it, capped at max. */
uint64_t kvb_hist_quantile(const struct kvb_hist *h, double q);
/* Write the cumulative distribution as "microseconds fraction" lines, one per
 * non-empty bucket (for plotting). */
void kvb_hist_write_cdf(const struct kvb_hist *h, FILE *f);

#endif
