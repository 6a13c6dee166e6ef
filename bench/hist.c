#include "hist.h"

#include <string.h>

void kvb_hist_init(struct kvb_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

/* Bucket of v: exact below 2^SUB; else (exponent, top SUB bits after the leading 1). */
static unsigned bucket_of(uint64_t v)
{
	unsigned e;

	if (v < (1u << KVB_HIST_SUB_BITS))
		return (unsigned)v;
	if (v >= (1ull << KVB_HIST_TOP_BITS))
		v = (1ull << KVB_HIST_TOP_BITS) - 1;
	e = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS */
	return ((e - KVB_HIST_SUB_BITS + 1) << KVB_HIST_SUB_BITS) +
	       (unsigned)((v >> (e - KVB_HIST_SUB_BITS)) & ((1u << KVB_HIST_SUB_BITS) - 1));
}

/* Largest value that lands in bucket i. */
static uint64_t bucket_top(unsigned i)
{
	unsigned group = i >> KVB_HIST_SUB_BITS, sub = i & ((1u << KVB_HIST_SUB_BITS) - 1);
	unsigned e;

	if (group == 0)
		return i;
	e = group + KVB_HIST_SUB_BITS - 1;
	return (((uint64_t)(1u << KVB_HIST_SUB_BITS) + sub + 1) << (e - KVB_HIST_SUB_BITS)) - 1;
}

void kvb_hist_record(struct kvb_hist *h, uint64_t ns)
{
	h->b[bucket_of(ns)]++;
	h->count++;
	h->sum += ns;
	if (ns < h->min)
		h->min = ns;
	if (ns > h->max)
		h->max = ns;
}

void kvb_hist_merge(struct kvb_hist *into, const struct kvb_hist *from)
{
	for (unsigned i = 0; i < KVB_HIST_BUCKETS; i++)
		into->b[i] += from->b[i];
	into->count += from->count;
	into->sum += from->sum;
	if (from->min < into->min)
		into->min = from->min;
	if (from->max > into->max)
		into->max = from->max;
}

uint64_t kvb_hist_quantile(const struct kvb_hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (h->count == 0)
		return 0;
	rank = (uint64_t)(q * (double)h->count);
	if (rank >= h->count)
		rank = h->count - 1;
	for (unsigned i = 0; i < KVB_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen > rank) {
			uint64_t top = bucket_top(i);

			return top > h->max ? h->max : top;
		}
	}
	return h->max;
}

void kvb_hist_write_cdf(const struct kvb_hist *h, FILE *f)
{
	uint64_t seen = 0;

	for (unsigned i = 0; i < KVB_HIST_BUCKETS && h->count; i++) {
		uint64_t top;

		if (!h->b[i])
			continue;
		seen += h->b[i];
		top = bucket_top(i);
		fprintf(f, "%.3f %.6f\n", (top > h->max ? h->max : top) / 1e3, (double)seen / (double)h->count);
	}
}
