/* Value sizes for generated workloads (kvbench -s): a fixed size, a uniform
 * range, a lognormal, or an empirical distribution read from a file.
 *
 *   N                      every value N bytes
 *   MIN-MAX                uniform in [MIN, MAX]
 *   lognormal:MEAN[,SIGMA[,MAX]]
 *                          lognormal with that mean (bytes) and log-space
 *                          sigma (default 1.0); draws above MAX (default
 *                          16 x MEAN, at most 1 MiB) are MAX, below 1 are 1
 *   file:PATH              one "SIZE [WEIGHT]" per line ('#' comments;
 *                          WEIGHT default 1): SIZE drawn with probability
 *                          WEIGHT / total -- a histogram measured elsewhere,
 *                          or a plain list of observed sizes
 *
 * A draw maps a 64-bit random number to a size, so the caller decides what
 * varies: YCSB draws per write (as YCSB's field length does), cache-aside runs
 * per key (a key's item has one size every time it is fetched). */
#ifndef KVB_SIZEDIST_H
#define KVB_SIZEDIST_H

#include <stddef.h>
#include <stdint.h>

#define KVB_SIZE_MAX (1u << 20)

enum kvb_size_kind { KVB_SIZE_UNIFORM = 1, KVB_SIZE_LOGNORMAL, KVB_SIZE_EMPIRICAL };

struct kvb_sizedist {
	int kind;
	uint32_t min, max;   /* every draw is in [min, max] */
	double mu, sigma;    /* lognormal, of the log */
	size_t n;            /* empirical: sizes and cumulative weights, ascending */
	uint32_t *size;
	uint64_t *cum;
	double mean;         /* of the draws (empirical, uniform: exact; lognormal: before clamping) */
};

/* Parse spec into d: 0, or -1 with one line in err: the spec quoted, and
 * what is wrong with it (for a file, the line). d owns memory until kvb_sizedist_free. */
int kvb_sizedist_parse(const char *spec, struct kvb_sizedist *d, char *err, size_t errlen);
uint32_t kvb_sizedist_draw(const struct kvb_sizedist *d, uint64_t random);
int kvb_sizedist_fixed(const struct kvb_sizedist *d);
/* A short description for a run's header, e.g. "lognormal mean 400 sigma 1.00, 1..6400". */
void kvb_sizedist_describe(const struct kvb_sizedist *d, char *out, size_t len);
void kvb_sizedist_free(struct kvb_sizedist *d);

#endif
