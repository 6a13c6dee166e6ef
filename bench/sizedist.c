/* Value-size distributions (sizedist.h). */
#include "sizedist.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ycsb_gen.h"

/* A uniform double in (0, 1) from 53 bits of r. */
static double unit(uint64_t r)
{
	return ((double)(r >> 11) + 0.5) * 0x1p-53;
}


static int bad(char *err, size_t errlen, const char *spec, const char *why)
{
	snprintf(err, errlen, "'%s': %s", spec, why);
	return -1;
}

/* A whole number in [lo, hi] that is all of s (up to end, or the string). */
static int num(const char *s, const char *end, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *e;
	unsigned long long v;

	if (!end)
		end = s + strlen(s);
	if (s == end || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &e, 10);
	if (errno || e != end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_lognormal(const char *spec, const char *p, struct kvb_sizedist *d, char *err, size_t errlen)
{
	char buf[96], *f[3] = { NULL, NULL, NULL }, *save = NULL, *tok, *e;
	double mean, sigma = 1.0, max;
	unsigned nf = 0;

	if (strlen(p) >= sizeof(buf))
		return bad(err, errlen, spec, "too long");
	strcpy(buf, p);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (nf == 3)
			return bad(err, errlen, spec, "lognormal:MEAN[,SIGMA[,MAX]] takes at most three numbers");
		f[nf++] = tok;
	}
	if (nf == 0)
		return bad(err, errlen, spec, "lognormal needs a mean: lognormal:MEAN[,SIGMA[,MAX]]");
	errno = 0;
	mean = strtod(f[0], &e);
	if (errno || *e || !(mean >= 1 && mean <= KVB_SIZE_MAX))
		return bad(err, errlen, spec, "the mean must be 1..1048576 bytes");
	if (f[1]) {
		sigma = strtod(f[1], &e);
		if (errno || *e || !(sigma >= 0 && sigma <= 4))
			return bad(err, errlen, spec, "sigma must be 0..4");
	}
	max = 16 * mean > KVB_SIZE_MAX ? KVB_SIZE_MAX : floor(16 * mean);
	if (f[2]) {
		uint64_t m;

		if (num(f[2], NULL, (uint64_t)ceil(mean), KVB_SIZE_MAX, &m))
			return bad(err, errlen, spec, "MAX must be a whole number of bytes, from the mean to 1048576");
		max = (double)m;
	}
	d->kind = KVB_SIZE_LOGNORMAL;
	d->sigma = sigma;
	d->mu = log(mean) - sigma * sigma / 2; /* E[exp(N(mu, sigma))] = mean */
	d->min = 1;
	d->max = (uint32_t)max;
	d->mean = mean;
	return 0;
}

static int cmp_size(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x >> 32) < (y >> 32) ? -1 : (x >> 32) > (y >> 32);
}

/* file:PATH: "SIZE [WEIGHT]" lines into sorted sizes and cumulative weights. */
static int parse_file(const char *spec, const char *path, struct kvb_sizedist *d, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[256];
	uint64_t *pairs = NULL, total = 0; /* size << 32 | weight, while reading */
	size_t n = 0, cap = 0, lineno = 0;
	double sum = 0;

	if (!f) {
		snprintf(err, errlen, "'%s': cannot open %s: %s", spec, path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *sz, *w, *save = NULL;
		uint64_t s, wt = 1;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "'%s': %s line %zu is longer than %zu bytes", spec, path, lineno,
				 sizeof(line) - 2);
			goto fail;
		}
		p[strcspn(p, "#\r\n")] = '\0';
		sz = strtok_r(p, " \t,", &save);
		if (!sz)
			continue;
		w = strtok_r(NULL, " \t,", &save);
		if (num(sz, NULL, 1, KVB_SIZE_MAX, &s) || (w && num(w, NULL, 1, UINT32_MAX, &wt)) ||
		    strtok_r(NULL, " \t,", &save)) {
			snprintf(err, errlen,
				 "'%s': %s line %zu: want SIZE (1..1048576 bytes) and an optional whole "
				 "WEIGHT (1..4294967295)", spec, path, lineno);
			goto fail;
		}
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			uint64_t *np = nc > SIZE_MAX / sizeof(*np) ? NULL : realloc(pairs, nc * sizeof(*np));

			if (!np) {
				snprintf(err, errlen, "'%s': out of memory at %s line %zu", spec, path, lineno);
				goto fail;
			}
			pairs = np;
			cap = nc;
		}
		pairs[n++] = s << 32 | wt;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "'%s': cannot read %s", spec, path);
		goto fail;
	}
	if (n == 0) {
		snprintf(err, errlen, "'%s': %s holds no sizes", spec, path);
		goto fail;
	}
	qsort(pairs, n, sizeof(*pairs), cmp_size);
	d->size = malloc(n * sizeof(*d->size));
	d->cum = malloc(n * sizeof(*d->cum));
	if (!d->size || !d->cum) {
		snprintf(err, errlen, "'%s': out of memory", spec);
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t s = (uint32_t)(pairs[i] >> 32), w = (uint32_t)pairs[i];

		total += w; /* n x 2^32 cannot wrap 64 bits for any file that fits memory */
		d->size[i] = s;
		d->cum[i] = total;
		sum += (double)s * w;
	}
	d->kind = KVB_SIZE_EMPIRICAL;
	d->n = n;
	d->min = d->size[0];
	d->max = d->size[n - 1];
	d->mean = sum / (double)total;
	free(pairs);
	fclose(f);
	return 0;
fail:
	free(pairs);
	free(d->size);
	free(d->cum);
	d->size = NULL;
	d->cum = NULL;
	fclose(f);
	return -1;
}

int kvb_sizedist_parse(const char *spec, struct kvb_sizedist *d, char *err, size_t errlen)
{
	const char *dash;
	uint64_t a, b;

	memset(d, 0, sizeof(*d));
	if (strncmp(spec, "lognormal:", 10) == 0)
		return parse_lognormal(spec, spec + 10, d, err, errlen);
	if (strncmp(spec, "file:", 5) == 0) {
		if (!spec[5])
			return bad(err, errlen, spec, "file: needs a path");
		return parse_file(spec, spec + 5, d, err, errlen);
	}
	dash = strchr(spec, '-');
	if (num(spec, dash, 0, KVB_SIZE_MAX, &a) || (dash && num(dash + 1, NULL, 0, KVB_SIZE_MAX, &b)))
		return bad(err, errlen, spec,
			   "want N or MIN-MAX bytes (up to 1048576), lognormal:MEAN[,SIGMA[,MAX]] or file:PATH");
	if (!dash)
		b = a;
	if (a > b)
		return bad(err, errlen, spec, "MIN is larger than MAX");
	d->kind = KVB_SIZE_UNIFORM;
	d->min = (uint32_t)a;
	d->max = (uint32_t)b;
	d->mean = ((double)a + (double)b) / 2;
	return 0;
}

uint32_t kvb_sizedist_draw(const struct kvb_sizedist *d, uint64_t r)
{
	switch (d->kind) {
	case KVB_SIZE_LOGNORMAL: { /* Box-Muller from two independent uniforms */
		double z = sqrt(-2 * log(unit(r))) * cos(6.283185307179586 * unit(kvb_mix64(r)) /* a second number from the same draw */);
		double v = exp(d->mu + d->sigma * z);

		return v >= d->max ? d->max : v <= 1 ? 1u : (uint32_t)(v + 0.5);
	}
	case KVB_SIZE_EMPIRICAL: { /* the first size whose cumulative weight exceeds the pick */
		uint64_t pick = (uint64_t)(unit(r) * (double)d->cum[d->n - 1]);
		size_t lo = 0, hi = d->n - 1;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (d->cum[mid] > pick)
				hi = mid;
			else
				lo = mid + 1;
		}
		return d->size[lo];
	}
	default:
		return d->min == d->max ? d->min : d->min + (uint32_t)(r % ((uint64_t)d->max - d->min + 1));
	}
}

int kvb_sizedist_fixed(const struct kvb_sizedist *d)
{
	return d->min == d->max;
}

void kvb_sizedist_describe(const struct kvb_sizedist *d, char *out, size_t len)
{
	switch (d->kind) {
	case KVB_SIZE_LOGNORMAL:
		snprintf(out, len, "lognormal, mean %.0f B, sigma %.2f, %u..%u B", d->mean, d->sigma, d->min, d->max);
		break;
	case KVB_SIZE_EMPIRICAL:
		snprintf(out, len, "from a file, %zu sizes, mean %.0f B, %u..%u B", d->n, d->mean, d->min, d->max);
		break;
	default:
		if (d->min == d->max)
			snprintf(out, len, "%u B", d->min);
		else
			snprintf(out, len, "uniform %u..%u B", d->min, d->max);
	}
}

void kvb_sizedist_free(struct kvb_sizedist *d)
{
	free(d->size);
	free(d->cum);
	d->size = NULL;
	d->cum = NULL;
	d->n = 0;
}
