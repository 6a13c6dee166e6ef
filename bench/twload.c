#include "twload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* From github.com/twitter/cache-trace stat/2020Mar.md, one row per cluster:
 * Zipf alpha, key size, value size, operation mix, common TTLs (the first
 * six listed; h = 3600 s, d = 86400 s). Operations: gets counts as get; add
 * and cas as set; incr and prepend as other. Clusters without a Zipf alpha
 * in the table, or whose requests are nearly all writes, are left out. */
static const struct kvb_twl_cluster clusters[] = {
	{ 4, 1.1004, 67, 2439, 0.93, 0.07, 0, 0,
	  { { 60, 0.39 }, { 300, 0.24 }, { 3600, 0.13 }, { 600, 0.12 }, { 14400, 0.09 }, { 86400, 0.03 } } },
	{ 7, 1.0666, 17, 1936, 0.82, 0.18, 0, 0,
	  { { 6480, 0.28 }, { 6120, 0.24 }, { 6840, 0.23 }, { 5760, 0.13 }, { 7200, 0.12 } } },
	{ 14, 1.2959, 96, 414, 0.65, 0.13, 0.22, 0, { { 86400, 1.00 } } },
	{ 19, 0.7350, 42, 101, 0.75, 0.25, 0, 0,
	  { { 27000, 0.08 }, { 26640, 0.07 }, { 23760, 0.07 }, { 25920, 0.07 }, { 24120, 0.07 }, { 25200, 0.07 } } },
	{ 22, 0.7624, 54, 4, 0.72, 0.10, 0, 0.18, { { 86400, 0.85 }, { 3600, 0.11 }, { 1800, 0.03 } } },
	{ 26, 0.6299, 122, 1745, 0.71, 0.29, 0, 0,
	  { { 60, 0.67 }, { 120, 0.10 }, { 360, 0.09 }, { 600, 0.06 }, { 660, 0.03 }, { 180, 0.02 } } },
	{ 29, 1.2323, 36, 799, 0.86, 0.13, 0, 0, { { 3600, 0.67 }, { 7200, 0.33 } } },
	{ 34, 1.1401, 33, 322, 0.94, 0.06, 0, 0,
	  { { 38160, 0.04 }, { 37800, 0.04 }, { 39960, 0.04 }, { 35280, 0.04 }, { 40320, 0.04 }, { 38520, 0.04 } } },
	{ 48, 0.8191, 44, 70, 0.65, 0.35, 0, 0, { { 86400, 1.00 } } },
	{ 52, 1.2117, 20, 273, 0.93, 0.06, 0, 0, { { 86400, 0.65 }, { 1209600, 0.27 }, { 43200, 0.07 } } },
	{ 53, 1.2061, 36, 9213, 0.89, 0.03, 0, 0.09, { { 2592000, 0.66 }, { 1814400, 0.34 } } },
	{ 54, 1.6110, 19, 246, 0.97, 0.03, 0, 0,
	  { { 13680, 0.13 }, { 11880, 0.13 }, { 12240, 0.13 }, { 14040, 0.12 }, { 12600, 0.12 }, { 12960, 0.12 } } },
};

#define NCLUSTERS (sizeof(clusters) / sizeof(clusters[0]))
#define VALUE_SIGMA 0.5
#define VALUE_MAX ((1u << 20) - 1024u)
#define KEY_MIN 17 /* "w" + 16 hex digits: unique */

const struct kvb_twl_cluster *kvb_twl_find(unsigned id)
{
	for (size_t i = 0; i < NCLUSTERS; i++)
		if (clusters[i].id == id)
			return &clusters[i];
	return NULL;
}

const char *kvb_twl_list(void)
{
	static char list[128];

	if (!list[0])
		for (size_t i = 0, n = 0; i < NCLUSTERS && n < sizeof(list); i++)
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%u", i ? ", " : "", clusters[i].id);
	return list;
}

/* ---- Zipf by rejection-inversion ------------------------------------------
 * H(x), the integral of the hat h(x) = x^-s, and its inverse, written with
 * expm1/log1p so that s near 1 loses no precision. */
static double expm1_over(double x)
{
	return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x / 2 * (1 + x / 3 * (1 + x / 4));
}

static double log1p_over(double x)
{
	return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - x / 4));
}

static double zh(const struct kvb_zipf_ri *z, double x)
{
	return exp(-z->s * log(x));
}

static double zH(const struct kvb_zipf_ri *z, double x)
{
	double lx = log(x);

	return expm1_over((1 - z->s) * lx) * lx;
}

static double zH_inv(const struct kvb_zipf_ri *z, double x)
{
	double t = x * (1 - z->s);

	if (t < -1)
		t = -1;
	return exp(log1p_over(t) * x);
}

int kvb_zipf_ri_init(struct kvb_zipf_ri *z, uint64_t n, double alpha)
{
	if (n == 0 || !(alpha > 0) || alpha > 20)
		return -1;
	z->s = alpha;
	z->n = (double)n;
	z->h_x1 = zH(z, 1.5) - 1;
	z->h_n = zH(z, z->n + 0.5);
	z->sv = 2 - zH_inv(z, zH(z, 2.5) - zh(z, 2));
	return 0;
}

uint64_t kvb_zipf_ri_next(const struct kvb_zipf_ri *z, struct kvb_rng *r)
{
	for (;;) {
		double u = z->h_n + kvb_rng_double(r) * (z->h_x1 - z->h_n);
		double x = zH_inv(z, u), k = floor(x + 0.5);

		if (k < 1)
			k = 1;
		else if (k > z->n)
			k = z->n;
		if (k - x <= z->sv || u >= zH(z, k + 0.5) - zh(z, k))
			return (uint64_t)k;
	}
}

/* ---- Keys ------------------------------------------------------------------ */


/* A uniform in (0, 1) drawn from key id and a salt. */
static double unit(uint64_t id, uint64_t salt)
{
	return ((double)(kvb_mix64(id ^ salt) >> 11) + 0.5) * 0x1p-53;
}

void kvb_twl_key(const struct kvb_twl *w, uint64_t i, struct kvb_trace_req *r)
{
	const struct kvb_twl_cluster *c = w->c;
	uint64_t id = kvb_mix64(i); /* a bijection: hot ranks get unrelated ids */
	size_t len = c->key_size < KEY_MIN ? KEY_MIN : c->key_size > KVB_TRACE_KEY_MAX ? KVB_TRACE_KEY_MAX : c->key_size;
	double z = sqrt(-2 * log(unit(id, 0x5157))) * cos(6.283185307179586 * unit(id, 0x7a11));
	double v = exp(log((double)c->value_size) - VALUE_SIGMA * VALUE_SIGMA / 2 + VALUE_SIGMA * z);
	double pick = unit(id, 0x771) * w->ttl_total;

	r->id = id;
	snprintf(r->key, sizeof(r->key), "w%016llx", (unsigned long long)id);
	memset(r->key + KEY_MIN, 'k', len - KEY_MIN);
	r->key[len] = '\0';
	r->key_len = len;
	r->value_size = v < 1 ? 1 : v > VALUE_MAX ? VALUE_MAX : (uint32_t)v;
	r->ttl_s = 0;
	for (unsigned t = 0; t < KVB_TWL_TTLS && c->ttl[t].ttl_s; t++) {
		r->ttl_s = c->ttl[t].ttl_s;
		pick -= c->ttl[t].share;
		if (pick < 0)
			break;
	}
}

int kvb_twl_init(struct kvb_twl *w, const struct kvb_twl_cluster *c, uint64_t records, uint64_t seed)
{
	memset(w, 0, sizeof(*w));
	w->c = c;
	w->records = records;
	kvb_rng_seed(&w->rng, seed);
	for (unsigned t = 0; t < KVB_TWL_TTLS; t++)
		w->ttl_total += c->ttl[t].share;
	return records == 0 ? -1 : kvb_zipf_ri_init(&w->zipf, records, c->alpha);
}

int kvb_twl_next(void *arg, struct kvb_trace_req *r, char *err, size_t errlen)
{
	struct kvb_twl *w = arg;
	const struct kvb_twl_cluster *c = w->c;
	double op = kvb_rng_double(&w->rng) * (c->get + c->set + c->del + c->other);

	(void)err;
	(void)errlen;
	kvb_twl_key(w, kvb_zipf_ri_next(&w->zipf, &w->rng), r);
	r->time = 0;
	r->op = op < c->get ? KVB_TOP_GET : op < c->get + c->set ? KVB_TOP_SET
		: op < c->get + c->set + c->del ? KVB_TOP_DELETE : KVB_TOP_OTHER;
	return 1;
}

uint64_t kvb_twl_bytes(const struct kvb_twl *w)
{
	struct kvb_trace_req r;
	uint64_t total = 0;

	for (uint64_t i = 1; i <= w->records; i++) {
		kvb_twl_key(w, i, &r);
		total += r.key_len + r.value_size;
	}
	return total;
}
