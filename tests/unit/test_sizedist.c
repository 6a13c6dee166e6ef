/* Value-size distributions (bench/sizedist.h): every spelling of -s and its
 * refusals, draws that stay in range and have the stated mean or weights, and
 * cache-aside keys that keep one size each (bench/ca_seq.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ca_seq.h"
#include "sizedist.h"

static struct kvb_rng rng;

static void parse_ok(const char *spec, struct kvb_sizedist *d)
{
	char err[600] = "";

	cr_assert_eq(kvb_sizedist_parse(spec, d, err, sizeof(err)), 0, "%s: %s", spec, err);
}

/* The spec is refused, and the error says why (contains want). */
static void parse_bad(const char *spec, const char *want)
{
	struct kvb_sizedist d;
	char err[600] = "";

	cr_expect_eq(kvb_sizedist_parse(spec, &d, err, sizeof(err)), -1, "%s was accepted", spec);
	cr_expect(strstr(err, want) != NULL, "%s: '%s' does not say '%s'", spec, err, want);
}

static double mean_of(const struct kvb_sizedist *d, unsigned n, uint32_t *lo, uint32_t *hi)
{
	double sum = 0;

	*lo = UINT32_MAX;
	*hi = 0;
	kvb_rng_seed(&rng, 7);
	for (unsigned i = 0; i < n; i++) {
		uint32_t s = kvb_sizedist_draw(d, kvb_rng_next(&rng));

		sum += s;
		*lo = s < *lo ? s : *lo;
		*hi = s > *hi ? s : *hi;
	}
	return sum / n;
}

Test(sizedist, fixed_and_uniform)
{
	struct kvb_sizedist d;
	uint32_t lo, hi;

	parse_ok("100", &d);
	cr_expect(kvb_sizedist_fixed(&d));
	cr_expect_eq(kvb_sizedist_draw(&d, 12345), 100u);
	parse_ok("50-150", &d);
	cr_expect(!kvb_sizedist_fixed(&d));
	cr_expect(fabs(mean_of(&d, 200000, &lo, &hi) - 100) < 1);
	cr_expect_eq(lo, 50u);
	cr_expect_eq(hi, 150u);
}

Test(sizedist, lognormal_has_its_mean_and_stays_in_range)
{
	struct kvb_sizedist d;
	uint32_t lo, hi;
	double m;

	parse_ok("lognormal:400,0.5", &d);
	cr_expect_eq(d.max, 6400u, "MAX defaults to 16 x the mean");
	m = mean_of(&d, 400000, &lo, &hi);
	cr_expect(fabs(m - 400) < 8, "mean %.1f", m);
	cr_expect(lo >= 1 && hi <= 6400);
	cr_expect(hi > 1000 && lo < 200, "a spread: %u..%u", lo, hi);
	parse_ok("lognormal:300,1.5,1000", &d);
	mean_of(&d, 100000, &lo, &hi);
	cr_expect_eq(hi, 1000u, "draws above MAX are MAX");
	parse_ok("lognormal:1000000", &d);
	cr_expect_eq(d.max, KVB_SIZE_MAX);
}

Test(sizedist, a_file_gives_sizes_by_their_weights)
{
	char path[] = "/tmp/test_sizedistXXXXXX";
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");
	struct kvb_sizedist d;
	unsigned n1000 = 0, n20 = 0, n100 = 0, other = 0;

	cr_assert_not_null(f);
	fprintf(f, "# size weight\n1000 1\n\n100\t5  # five times as often\n20,2\n");
	fclose(f);
	char spec[64];
	snprintf(spec, sizeof(spec), "file:%s", path);
	parse_ok(spec, &d);
	cr_expect_eq(d.min, 20u);
	cr_expect_eq(d.max, 1000u);
	cr_expect(fabs(d.mean - (1000.0 + 500 + 40) / 8) < 1e-9);
	kvb_rng_seed(&rng, 3);
	for (unsigned i = 0; i < 80000; i++) {
		uint32_t s = kvb_sizedist_draw(&d, kvb_rng_next(&rng));

		n1000 += s == 1000;
		n100 += s == 100;
		n20 += s == 20;
		other += s != 1000 && s != 100 && s != 20;
	}
	cr_expect_eq(other, 0u);
	cr_expect(abs((int)n100 - 50000) < 800, "100 B drawn %u times of 80000, want about 50000", n100);
	cr_expect(abs((int)n20 - 20000) < 700, "20 B: %u", n20);
	cr_expect(abs((int)n1000 - 10000) < 500, "1000 B: %u", n1000);
	kvb_sizedist_free(&d);

	f = fopen(path, "w");
	fprintf(f, "100 1\n200 x\n");
	fclose(f);
	parse_bad(spec, "line 2");
	f = fopen(path, "w");
	fprintf(f, "2000000\n");
	fclose(f);
	parse_bad(spec, "line 1");
	f = fopen(path, "w");
	fprintf(f, "# nothing\n");
	fclose(f);
	parse_bad(spec, "no sizes");
	unlink(path);
	parse_bad("file:/nonexistent/sizes", "cannot open");
}

Test(sizedist, bad_specs_say_why)
{
	parse_bad("", "want N or MIN-MAX");
	parse_bad("abc", "want N or MIN-MAX");
	parse_bad("10-", "want N or MIN-MAX");
	parse_bad("-10", "want N or MIN-MAX");
	parse_bad("2000000", "want N or MIN-MAX");
	parse_bad("20-10", "MIN is larger");
	parse_bad("lognormal:", "needs a mean");
	parse_bad("lognormal:0", "mean must be");
	parse_bad("lognormal:100,-1", "sigma");
	parse_bad("lognormal:100,1,50", "MAX");
	parse_bad("lognormal:100,1,200,4", "at most three");
	parse_bad("file:", "needs a path");
}

Test(sizedist, cache_aside_keys_keep_one_size)
{
	struct kvb_sizedist d;
	struct kvb_ca_src s;
	struct kvb_trace_req a, b;
	unsigned differ = 0;

	parse_ok("lognormal:200,1", &d);
	cr_assert_eq(kvb_ca_src_init(&s, KVB_CA_ZIPF, 1000, 9, &d), 0);
	for (uint64_t i = 0; i < 1000; i++) {
		kvb_ca_src_key(&s, i, &a);
		kvb_ca_src_key(&s, i, &b);
		cr_assert_eq(a.value_size, b.value_size);
		cr_assert_str_eq(a.key, b.key);
		cr_assert_eq(a.key_len, strlen(a.key));
		cr_assert_eq(a.op, KVB_TOP_GET);
		if (i) {
			kvb_ca_src_key(&s, i - 1, &b);
			differ += a.value_size != b.value_size;
		}
	}
	cr_expect(differ > 900, "sizes vary from key to key (%u of 999 differ)", differ);
	for (int i = 0; i < 1000; i++) {
		cr_assert_eq(kvb_ca_src_next(&s, &a, NULL, 0), 1);
		cr_assert(a.id < 1000);
		kvb_ca_src_key(&s, a.id, &b);
		cr_assert_eq(a.value_size, b.value_size);
	}
	cr_expect(kvb_ca_src_bytes(&s) > 1000 * 150 && kvb_ca_src_bytes(&s) < 1000 * 260);
}
