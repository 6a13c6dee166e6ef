/* YCSB generators checked against YCSB's own formulas: fnvhash64 and key names,
 * Zipfian frequencies and zeta, ScrambledZipfian, SkewedLatest, Uniform, the
 * insert counters, the key chooser and the core workload mixes. Sample sizes are
 * fixed and seeds constant, so the statistical bounds (5 sigma) cannot flake. */
#include <stdio.h>
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ycsb_gen.h"

/* Binomial standard deviation of a count with probability p over n draws. */
static double sigma(double n, double p)
{
	return sqrt(n * p * (1 - p));
}

static double direct_zeta(uint64_t n, double theta)
{
	double sum = 0;

	for (uint64_t k = 1; k <= n; k++)
		sum += 1 / pow((double)k, theta);
	return sum;
}

/* --- RNG */

Test(ycsb_rng, deterministic_by_seed_and_double_in_unit_interval)
{
	struct kvb_rng a, b, c;
	int differ = 0;

	kvb_rng_seed(&a, 42);
	kvb_rng_seed(&b, 42);
	kvb_rng_seed(&c, 43);
	for (int i = 0; i < 1000; i++) {
		uint64_t x = kvb_rng_next(&a);

		cr_assert_eq(x, kvb_rng_next(&b));
		differ |= x != kvb_rng_next(&c);
	}
	cr_expect(differ);
	for (int i = 0; i < 100000; i++) {
		double d = kvb_rng_double(&a);

		cr_assert(d >= 0 && d < 1, "%g", d);
	}
}

/* --- fnvhash64 and key names */

/* Expected values from an independent Python model of YCSB's Java, with Java's
 * signed 64-bit wrap-around, arithmetic >> and Math.abs:
 *   def s64(x): x %= 2**64; return x - 2**64 if x >= 2**63 else x
 *   def fnv(v):
 *       h = s64(0xCBF29CE484222325); v = s64(v)
 *       for _ in range(8):
 *           o = v & 0xff; v >>= 8; h = s64(h ^ o); h = s64(h * 1099511628211)
 *       return h if h >= 0 or h == -2**63 else -h
 * fnv(0) = 6284781860667377211 is also the familiar first YCSB key, user6284781860667377211. */
Test(ycsb_keys, fnvhash64_known_values)
{
	static const struct {
		uint64_t in, out;
	} t[] = {
		{ 0, 6284781860667377211ull },
		{ 1, 8517097267634966620ull },
		{ 2, 1820151046732198393ull },
		{ 42, 55488592825689361ull },
		{ 999, 2071219101098386137ull },
		{ 1000, 5952875239596136740ull },
		{ 12345678, 2115995694829345612ull },
		{ 10000000000ull, 1201321332300452516ull },
		{ 2147483647, 627943977067101855ull },
		{ 9223372036854775807ull, 8289549613075766851ull },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		cr_expect_eq(kvb_fnvhash64(t[i].in), t[i].out, "fnvhash64(%llu) = %llu, want %llu",
			     (unsigned long long)t[i].in, (unsigned long long)kvb_fnvhash64(t[i].in),
			     (unsigned long long)t[i].out);
	/* Every result is Math.abs of a long: below 2^63 (the Long.MIN_VALUE case aside). */
	for (uint64_t v = 0; v < 100000; v++)
		cr_assert(kvb_fnvhash64(v) < (1ull << 63));
}

Test(ycsb_keys, key_names_hashed_ordered_and_padded)
{
	char k[KVB_KEY_NAME_CAP];

	cr_expect_eq(kvb_key_name(0, 0, 1, k, sizeof(k)), strlen("user6284781860667377211"));
	cr_expect_str_eq(k, "user6284781860667377211");
	kvb_key_name(1000, 0, 1, k, sizeof(k));
	cr_expect_str_eq(k, "user5952875239596136740");
	cr_expect_eq(kvb_key_name(5, 1, 1, k, sizeof(k)), 5);
	cr_expect_str_eq(k, "user5");
	kvb_key_name(5, 1, 0, k, sizeof(k));
	cr_expect_str_eq(k, "user5");
	cr_expect_eq(kvb_key_name(5, 1, 10, k, sizeof(k)), 14);
	cr_expect_str_eq(k, "user0000000005");
	/* every digit count, odd and even (the digits go two at a time) */
	for (uint64_t v = 0, p = 1; p <= 1000000; p *= 10) {
		char want[32];

		for (v = p - 1; v <= p + 1; v++) {
			snprintf(want, sizeof(want), "user%llu", (unsigned long long)v);
			cr_expect_eq(kvb_key_name(v, 1, 1, k, sizeof(k)), strlen(want));
			cr_expect_str_eq(k, want);
		}
	}
	kvb_key_name(UINT64_MAX >> 1, 1, 1, k, sizeof(k));
	cr_expect_str_eq(k, "user9223372036854775807");
	kvb_key_name(123456, 1, 3, k, sizeof(k)); /* padding never truncates */
	cr_expect_str_eq(k, "user123456");
	kvb_key_name(0, 0, 21, k, sizeof(k)); /* 19 hash digits, two zeros */
	cr_expect_str_eq(k, "user006284781860667377211");
	kvb_key_name(0, 1, 27, k, sizeof(k)); /* fills the documented capacity exactly */
	cr_expect_eq(strlen(k), 31);
	/* Long.toString: an ordered number past 2^63 - 1 prints as the negative long. */
	kvb_key_name(1ull << 63, 1, 1, k, sizeof(k));
	cr_expect_str_eq(k, "user-9223372036854775808");
	/* Too small a buffer: 0 and an empty string, never a cut key. */
	cr_expect_eq(kvb_key_name(5, 1, 1, k, 5), 0);
	cr_expect_str_eq(k, "");
	cr_expect_eq(kvb_key_name(5, 1, 1, k, 6), 5);
	cr_expect_eq(kvb_key_name(5, 1, 28, k, sizeof(k)), 0);
}

/* --- Zipfian */

/* Probability that YCSB's generator (Gray et al.) returns rank k over n items:
 * u * zetan < 1 gives 0, < 1 + 0.5^theta gives 1, otherwise
 * floor(n * (1 - eta * (1 - u))^alpha), solved here for the interval of u. */
static double gray_prob(uint64_t k, uint64_t n, double theta)
{
	double zetan = direct_zeta(n, theta), zeta2 = 1 + pow(0.5, theta);
	double eta = (1 - pow(2.0 / (double)n, 1 - theta)) / (1 - zeta2 / zetan);
	double t1 = 1 / zetan, t2 = zeta2 / zetan, p = 0, lo, hi;

	if (k == 0)
		p = t1;
	else if (k == 1)
		p = t2 - t1;
	lo = fmax(1 - (1 - pow((double)k / (double)n, 1 - theta)) / eta, t2);
	hi = fmin(1 - (1 - pow((double)(k + 1) / (double)n, 1 - theta)) / eta, 1);
	return hi > lo ? p + hi - lo : p;
}

Test(ycsb_zipf, zeta_matches_direct_sum_including_incremental_growth)
{
	struct kvb_zipf z;
	struct kvb_rng r;
	double eta500;

	cr_assert_eq(kvb_zipf_init(&z, 0, 999, 0.99), 0);
	/* Same terms added in the same order, so equal to the last bit. */
	cr_expect_eq(z.zetan, direct_zeta(1000, 0.99));
	cr_expect_eq(z.zeta2theta, direct_zeta(2, 0.99));
	cr_expect_eq(z.alpha, 1 / (1 - 0.99));

	/* nextLong(itemcount) with a larger count extends zeta over the new terms only. */
	cr_assert_eq(kvb_zipf_init(&z, 0, 499, 0.99), 0);
	eta500 = z.eta;
	kvb_rng_seed(&r, 1);
	kvb_zipf_next_n(&z, &r, 1000);
	cr_expect_eq(z.countforzeta, 1000);
	cr_expect_eq(z.zetan, direct_zeta(1000, 0.99));
	/* ... and YCSB then recomputes eta with the constructor's item count (500). */
	cr_expect_eq(z.eta, (1 - pow(2.0 / 500, 1 - 0.99)) / (1 - z.zeta2theta / z.zetan));
	cr_expect_neq(z.eta, eta500);
	/* A smaller count keeps the larger zeta (allowitemcountdecrease = false). */
	kvb_zipf_next_n(&z, &r, 700);
	cr_expect_eq(z.countforzeta, 1000);
	cr_expect_eq(z.zetan, direct_zeta(1000, 0.99));

	cr_assert_eq(kvb_zipf_init_zetan(&z, 5, 1004, 0.99, 7.5), 0);
	cr_expect_eq(z.zetan, 7.5);
	cr_expect_eq(z.base, 5);
	cr_expect_eq(z.items, 1000);
}

Test(ycsb_zipf, frequencies_follow_zipf_over_1000_items)
{
	enum { N_ITEMS = 1000, SAMPLES = 1000000 };
	const double theta = KVB_ZIPFIAN_CONSTANT, zeta = direct_zeta(N_ITEMS, theta);
	static const unsigned ideal_ranks[] = { 0, 1, 9, 99 };
	unsigned *count = calloc(N_ITEMS, sizeof(*count));
	struct kvb_zipf z;
	struct kvb_rng r;
	double ideal2, gray2, sd2;

	cr_assert_not_null(count);
	cr_assert_eq(kvb_zipf_init(&z, 100, 100 + N_ITEMS - 1, theta), 0);
	kvb_rng_seed(&r, 7);
	for (int i = 0; i < SAMPLES; i++) {
		uint64_t v = kvb_zipf_next(&z, &r);

		cr_assert(v >= 100 && v < 100 + N_ITEMS, "%llu", (unsigned long long)v);
		count[v - 100]++;
	}
	for (size_t i = 0; i < sizeof(ideal_ranks) / sizeof(ideal_ranks[0]); i++) {
		unsigned k = ideal_ranks[i];
		double p = (1 / pow(k + 1, theta)) / zeta;

		cr_expect(fabs(count[k] - SAMPLES * p) <= 5 * sigma(SAMPLES, p),
			  "rank %u: %u draws, zipf expects %.0f +- %.0f", k, count[k], SAMPLES * p,
			  5 * sigma(SAMPLES, p));
	}
	/* Gray's method is exact for ranks 0 and 1 only; at rank 2 YCSB draws about 17 %
	 * more than the ideal 1/3^theta/zeta (0.0510 vs 0.0436 here, 36 sigma). A
	 * faithful port reproduces that, so rank 2 is held to the generator's own
	 * closed-form probability, and shown to miss the ideal one. */
	ideal2 = (1 / pow(3, theta)) / zeta;
	gray2 = gray_prob(2, N_ITEMS, theta);
	sd2 = sigma(SAMPLES, gray2);
	cr_expect(fabs(count[2] - SAMPLES * gray2) <= 5 * sd2, "rank 2: %u draws, Gray expects %.0f +- %.0f",
		  count[2], SAMPLES * gray2, 5 * sd2);
	cr_expect(count[2] > SAMPLES * ideal2 + 5 * sigma(SAMPLES, ideal2));
	/* The closed form also holds further out, where it and the ideal nearly agree. */
	for (unsigned k = 3; k < 100; k += 16) {
		double p = gray_prob(k, N_ITEMS, theta);

		cr_expect(fabs(count[k] - SAMPLES * p) <= 5 * sigma(SAMPLES, p), "rank %u", k);
	}
	free(count);
}

/* The reference for counts past the exact range: every term, with Kahan's
 * compensation so that the reference's own rounding stays near 1e-16. */
static double kahan_zeta(uint64_t first, uint64_t last, double theta)
{
	double sum = 0, c = 0;

	for (uint64_t k = first; k <= last; k++) {
		double y = 1 / pow((double)k, theta) - c, t = sum + y;

		c = (t - sum) - y;
		sum = t;
	}
	return sum;
}

/* integral of x^-theta over [a, b] */
static double zeta_integral(double a, double b, double theta)
{
	return (pow(b, 1 - theta) - pow(a, 1 - theta)) / (1 - theta);
}

Test(ycsb_zipf, zeta_up_to_2_16_terms_is_the_direct_sum_to_the_last_bit)
{
	/* So the distribution of every generator up to 65536 items is unchanged. */
	cr_expect_eq(kvb_zeta(0, 65536, 0.99, 0), direct_zeta(65536, 0.99));
	cr_expect_eq(kvb_zeta(0, 65536, 0.5, 0), direct_zeta(65536, 0.5));
	/* 65536 more terms onto an initial sum, as a latest generator grows */
	double sum = 3.0;

	for (uint64_t k = 1001; k <= 66536; k++)
		sum += 1 / pow((double)k, 0.99);
	cr_expect_eq(kvb_zeta(1000, 66536, 0.99, 3.0), sum);
	cr_expect_eq(kvb_zeta(5, 5, 0.99, 2.5), 2.5); /* no terms */
}

Test(ycsb_zipf, closed_form_tail_is_within_its_stated_error_bound)
{
	/* kvb_zeta_tail claims |error| < 5.1e-3 * a^-(4 + theta). For small a that
	 * is large enough to measure, so the bound itself is checked, not just
	 * "close enough"; past a = 1024 it is below double rounding. */
	static const uint64_t starts[] = { 1, 2, 3, 5, 10, 30, 100 };
	static const double thetas[] = { 0.01, 0.5, 0.99, 0.999 };

	for (size_t t = 0; t < sizeof(thetas) / sizeof(thetas[0]); t++) {
		for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
			uint64_t a = starts[i], b = 200000;
			double exact = kahan_zeta(a, b, thetas[t]), got = kvb_zeta_tail(a, b, thetas[t]);
			double bound = 5.1e-3 * pow((double)a, -(4 + thetas[t])) + 4e-16 * exact;

			cr_expect(fabs(got - exact) <= bound, "theta %g, [%llu, %llu]: %.17g vs %.17g (bound %.3g)",
				  thetas[t], (unsigned long long)a, (unsigned long long)b, got, exact, bound);
		}
	}
}

Test(ycsb_zipf, zeta_past_2_16_terms_matches_the_compensated_sum)
{
	static const uint64_t counts[] = { 65537, 100000, 1000000, 3000000 };
	static const double thetas[] = { 0.5, 0.99 };

	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
			double exact = kahan_zeta(1, counts[i], thetas[t]), got = kvb_zeta(0, counts[i], thetas[t], 0);

			cr_expect(fabs(got - exact) <= 1e-14 * exact, "theta %g, n %llu: %.17g vs %.17g", thetas[t],
				  (unsigned long long)counts[i], got, exact);
		}
	}
	/* Grown incrementally by a large step (a latest generator after many
	 * inserts), too. */
	cr_expect(fabs(kvb_zeta(50000, 1000000, 0.99, kahan_zeta(1, 50000, 0.99)) - kahan_zeta(1, 1000000, 0.99)) <
		  1e-13);
	/* And YCSB's own constant for its 10^10-item scrambled space agrees to the
	 * rounding YCSB's term-by-term sum accumulated (about 1e-11). */
	cr_expect(fabs(kvb_zeta(0, KVB_SCRAMBLED_ITEM_COUNT, 0.99, 0) - KVB_SCRAMBLED_ZETAN) < 1e-9);
}

Test(ycsb_zipf, same_draws_past_2_16_items_as_with_the_summed_zeta)
{
	/* The closed form moves zeta by ~1e-16 relative: the draws of a seed are
	 * those the exactly summed zeta gives. */
	struct kvb_zipf a, b;
	struct kvb_rng ra, rb;
	unsigned differ = 0;

	cr_assert_eq(kvb_zipf_init(&a, 0, 499999, 0.99), 0);
	cr_assert_eq(kvb_zipf_init_zetan(&b, 0, 499999, 0.99, kahan_zeta(1, 500000, 0.99)), 0);
	kvb_rng_seed(&ra, 11);
	kvb_rng_seed(&rb, 11);
	for (int i = 0; i < 200000; i++)
		differ += kvb_zipf_next(&a, &ra) != kvb_zipf_next(&b, &rb);
	cr_expect_eq(differ, 0);
}

/* kvbench -w D -r 2^40 once summed 2^40 terms in every thread before it
 * contacted the target (hours). Now any count is set up in microseconds; the
 * suite's timeout catches a regression to a term-by-term sum. */
Test(ycsb_zipf, set_up_over_2_40_items_returns_with_zeta_within_analytic_bounds, .timeout = 20)
{
	const uint64_t n = 1ull << 40;
	struct kvb_keychooser kc;
	struct kvb_zipf z;
	struct kvb_rng r;
	double head = direct_zeta(1000, 0.99), lo, hi;

	cr_assert_eq(kvb_zipf_init(&z, 0, n - 1, 0.99), 0);
	/* f decreasing: the integral over [k, k + 1] lies between f(k + 1) and f(k). */
	lo = head + zeta_integral(1001, (double)n + 1, 0.99);
	hi = head + zeta_integral(1000, (double)n, 0.99);
	cr_expect(z.zetan > lo && z.zetan < hi, "zeta(2^40) = %.17g, not in [%.17g, %.17g]", z.zetan, lo, hi);
	cr_expect(hi - lo < 1.1e-3);

	/* Workload D's chooser over 2^40 + 1 records (basis 2^40), and draws from it. */
	cr_assert_eq(kvb_keychooser_init(&kc, KVB_DIST_LATEST, n + 1, 1000000, 0.05), 0);
	cr_expect_eq(kc.u.latest.zipf.zetan, z.zetan);
	kvb_rng_seed(&r, 3);
	for (int i = 0; i < 10000; i++) {
		uint64_t k = kvb_choose_key(&kc, &r, n + 1000);

		cr_assert(k >= 1 && k <= n + 1000, "%llu", (unsigned long long)k);
	}
	/* Inserts grew the count by 1000: zeta extended by those terms only (each
	 * ~1.2e-12, added to ~32.5 whose last bit is 7e-15: 1 % is the rounding). */
	cr_expect_eq(kc.u.latest.zipf.countforzeta, n + 1000);
	cr_expect(fabs(kc.u.latest.zipf.zetan - z.zetan - 1000 * pow((double)n, -0.99)) <
			  0.01 * 1000 * pow((double)n, -0.99),
		  "grew by %.6g", kc.u.latest.zipf.zetan - z.zetan);
}

Test(ycsb_zipf, bad_parameters_rejected)
{
	struct kvb_zipf z;

	cr_expect_eq(kvb_zipf_init(&z, 0, 9, 0.0), -1);
	cr_expect_eq(kvb_zipf_init(&z, 0, 9, 1.0), -1);
	cr_expect_eq(kvb_zipf_init(&z, 0, 9, -0.5), -1);
	cr_expect_eq(kvb_zipf_init(&z, 0, 9, 1.5), -1);
	cr_expect_eq(kvb_zipf_init(&z, 0, 9, NAN), -1);
	cr_expect_eq(kvb_zipf_init(&z, 10, 9, 0.99), -1);
	cr_expect_eq(kvb_zipf_init(&z, 0, UINT64_MAX, 0.99), -1); /* 2^64 items do not fit */
	cr_expect_eq(kvb_zipf_init_zetan(&z, 0, 9, 0.99, 0), -1);
	cr_expect_eq(kvb_zipf_init_zetan(&z, 0, 9, 0.99, NAN), -1);
	cr_expect_eq(kvb_zipf_init_zetan(&z, 0, 9, 0.99, INFINITY), -1);
	cr_expect_eq(kvb_zipf_init_zetan(&z, 0, 9, 1.0, 3.0), -1);
	cr_expect_eq(kvb_zipf_init(&z, 7, 7, 0.5), 0); /* one item is fine */
}

Test(ycsb_zipf, one_item_and_shrunk_counts_stay_in_range)
{
	struct kvb_zipf z;
	struct kvb_rng r;

	kvb_rng_seed(&r, 3);
	cr_assert_eq(kvb_zipf_init(&z, 7, 7, 0.99), 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(kvb_zipf_next(&z, &r), 7);
	cr_assert_eq(kvb_zipf_init(&z, 0, 999, 0.99), 0);
	for (int i = 0; i < 10000; i++)
		cr_assert_lt(kvb_zipf_next_n(&z, &r, 3), 3);
}

/* --- ScrambledZipfian */

Test(ycsb_scrambled, uses_the_precomputed_zetan_over_1e10_items)
{
	struct kvb_scrambled s;
	struct kvb_rng r;

	/* Computing zeta over 10^10 terms would take minutes; init must not. */
	cr_assert_eq(kvb_scrambled_init(&s, 0, 999), 0);
	cr_expect_eq(s.zipf.zetan, 26.46902820178302);
	cr_expect_eq(s.zipf.items, KVB_SCRAMBLED_ITEM_COUNT + 1); /* ZipfianGenerator(0, ITEM_COUNT) */
	cr_expect_eq(s.zipf.countforzeta, s.zipf.items);
	cr_expect_eq(s.zipf.theta, 0.99);
	cr_expect_eq(s.itemcount, 1000);
	kvb_rng_seed(&r, 1);
	for (int i = 0; i < 1000; i++)
		kvb_scrambled_next(&s, &r);
	cr_expect_eq(s.zipf.zetan, 26.46902820178302);
	cr_expect_eq(s.zipf.countforzeta, KVB_SCRAMBLED_ITEM_COUNT + 1);
}

Test(ycsb_scrambled, in_range_hot_key_is_hash_of_zero)
{
	enum { N = 1000, MIN = 100, SAMPLES = 200000 };
	unsigned count[N] = { 0 }, best = 0;
	struct kvb_scrambled s;
	struct kvb_rng r;

	cr_assert_eq(kvb_scrambled_init(&s, MIN, MIN + N - 1), 0);
	kvb_rng_seed(&r, 11);
	for (int i = 0; i < SAMPLES; i++) {
		uint64_t v = kvb_scrambled_next(&s, &r);

		cr_assert(v >= MIN && v < MIN + N, "%llu", (unsigned long long)v);
		count[v - MIN]++;
	}
	for (unsigned i = 1; i < N; i++)
		if (count[i] > count[best])
			best = i;
	cr_expect_eq(MIN + best, kvb_fnvhash64(0) % N + MIN); /* 6284781860667377211 % 1000 = 211 */
	cr_expect_eq(MIN + best, 311);
	/* Rank 0 of the 10^10 + 1 items alone has probability 1/zetan (3.8 %); other
	 * ranks only add to it through the modulus. */
	cr_expect_geq(count[best], SAMPLES / 26.46902820178302 - 5 * sigma(SAMPLES, 1 / 26.46902820178302));
}

Test(ycsb_scrambled, deterministic_by_seed)
{
	struct kvb_scrambled a, b, c;
	struct kvb_rng ra, rb, rc;
	int differ = 0;

	cr_assert_eq(kvb_scrambled_init(&a, 0, 99999), 0);
	b = a;
	c = a;
	kvb_rng_seed(&ra, 99);
	kvb_rng_seed(&rb, 99);
	kvb_rng_seed(&rc, 100);
	for (int i = 0; i < 10000; i++) {
		uint64_t v = kvb_scrambled_next(&a, &ra);

		cr_assert_eq(v, kvb_scrambled_next(&b, &rb));
		differ += v != kvb_scrambled_next(&c, &rc);
	}
	cr_expect_gt(differ, 9000);
	cr_expect_eq(kvb_scrambled_init(&a, 10, 9), -1);
	cr_expect_eq(kvb_scrambled_init(&a, 0, UINT64_MAX), -1);
}

/* --- SkewedLatest */

static void check_latest(struct kvb_latest *l, struct kvb_rng *r, uint64_t latest)
{
	enum { SAMPLES = 100000 };
	unsigned *count = calloc(latest + 1, sizeof(*count));
	uint64_t best = 0;

	cr_assert_not_null(count);
	for (int i = 0; i < SAMPLES; i++) {
		uint64_t v = kvb_latest_next(l, r, latest);

		/* latest - nextLong(latest), nextLong in [0, latest - 1]: key 0 never comes up. */
		cr_assert(v >= 1 && v <= latest, "%llu > latest %llu", (unsigned long long)v,
			  (unsigned long long)latest);
		count[v]++;
	}
	for (uint64_t k = 1; k <= latest; k++)
		if (count[k] > count[best])
			best = k;
	cr_expect_eq(best, latest);
	cr_expect_gt(count[latest - 1], count[latest - 2]);
	free(count);
}

Test(ycsb_latest, latest_is_hottest_and_never_exceeded)
{
	struct kvb_latest l;
	struct kvb_rng r;

	kvb_rng_seed(&r, 5);
	cr_assert_eq(kvb_latest_init(&l, 1000), 0);
	cr_expect_eq(l.zipf.items, 1000);
	check_latest(&l, &r, 1000);
	/* Inserts moved latest on: zeta grows incrementally, the hot key follows. */
	check_latest(&l, &r, 1500);
	cr_expect_eq(l.zipf.zetan, direct_zeta(1500, 0.99));
	cr_expect_eq(kvb_latest_init(&l, 0), -1);
}

/* --- Uniform */

Test(ycsb_uniform, in_range_and_flat)
{
	enum { LB = 10, N = 100, SAMPLES = 100000 };
	unsigned count[N] = { 0 };
	struct kvb_uniform u;
	struct kvb_rng r;
	double chi2 = 0, e = (double)SAMPLES / N;

	cr_assert_eq(kvb_uniform_init(&u, LB, LB + N - 1), 0);
	kvb_rng_seed(&r, 17);
	for (int i = 0; i < SAMPLES; i++) {
		uint64_t v = kvb_uniform_next(&u, &r);

		cr_assert(v >= LB && v < LB + N);
		count[v - LB]++;
	}
	for (int i = 0; i < N; i++)
		chi2 += (count[i] - e) * (count[i] - e) / e;
	/* 99 degrees of freedom: mean 99, standard deviation sqrt(2 * 99) = 14. */
	cr_expect_lt(chi2, 99 + 5 * sqrt(2 * 99.0), "chi2 %.1f", chi2);

	cr_assert_eq(kvb_uniform_init(&u, 42, 42), 0);
	cr_expect_eq(kvb_uniform_next(&u, &r), 42);
	cr_assert_eq(kvb_uniform_init(&u, 0, UINT64_MAX), 0);
	kvb_uniform_next(&u, &r);
	cr_expect_eq(kvb_uniform_init(&u, 2, 1), -1);
}

/* --- Counters */

Test(ycsb_counter, sequence_and_acknowledged_prefix)
{
	struct kvb_counter c;
	struct kvb_ackcounter a;

	kvb_counter_init(&c, 5);
	cr_expect_eq(kvb_counter_last(&c), 4);
	cr_expect_eq(kvb_counter_next(&c), 5);
	cr_expect_eq(kvb_counter_next(&c), 6);
	cr_expect_eq(kvb_counter_last(&c), 6);

	cr_assert_eq(kvb_ackcounter_init(&a, 10), 0);
	cr_expect_eq(kvb_ackcounter_last(&a), 9);
	cr_expect_eq(kvb_ackcounter_next(&a), 10);
	cr_expect_eq(kvb_ackcounter_next(&a), 11);
	cr_expect_eq(kvb_ackcounter_next(&a), 12);
	cr_expect_eq(kvb_ackcounter_ack(&a, 11), 0);
	cr_expect_eq(kvb_ackcounter_last(&a), 9); /* 10 still in flight */
	cr_expect_eq(kvb_ackcounter_ack(&a, 11), -1); /* slot still taken */
	cr_expect_eq(kvb_ackcounter_ack(&a, 10), 0);
	cr_expect_eq(kvb_ackcounter_last(&a), 11);
	cr_expect_eq(kvb_ackcounter_ack(&a, 12), 0);
	cr_expect_eq(kvb_ackcounter_last(&a), 12);
	kvb_ackcounter_destroy(&a);
	cr_expect_eq(kvb_ackcounter_init(&a, 0), -1);
}

enum { THREADS = 4, PER_THREAD = 10000, START = 1000 };

struct shared {
	struct kvb_counter c;
	struct kvb_ackcounter a;
	uint64_t got[THREADS][PER_THREAD];
};

struct worker {
	struct shared *sh;
	int id;
};

static void *run_worker(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		w->sh->got[w->id][i] = kvb_counter_next(&w->sh->c);
		if (kvb_ackcounter_ack(&w->sh->a, kvb_ackcounter_next(&w->sh->a)) != 0)
			return w;
	}
	return NULL;
}

Test(ycsb_counter, shared_by_threads)
{
	struct shared *sh = calloc(1, sizeof(*sh));
	struct worker w[THREADS];
	pthread_t t[THREADS];
	unsigned char *seen = calloc(THREADS * PER_THREAD, 1);

	cr_assert(sh && seen);
	kvb_counter_init(&sh->c, START);
	cr_assert_eq(kvb_ackcounter_init(&sh->a, START), 0);
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ sh, i };
		cr_assert_eq(pthread_create(&t[i], NULL, run_worker, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		void *res;

		pthread_join(t[i], &res);
		cr_expect_null(res, "acknowledgement refused");
	}
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < PER_THREAD; j++) {
			uint64_t v = sh->got[i][j] - START;

			cr_assert_lt(v, THREADS * PER_THREAD);
			cr_assert_eq(seen[v], 0, "number %llu handed out twice", (unsigned long long)v);
			seen[v] = 1;
		}
	cr_expect_eq(kvb_counter_last(&sh->c), START + THREADS * PER_THREAD - 1);
	/* An acknowledgement made while another thread held the slide may still be
	 * pending; the next one slides over all of them. */
	cr_expect_leq(kvb_ackcounter_last(&sh->a), START + THREADS * PER_THREAD - 1);
	cr_expect_eq(kvb_ackcounter_ack(&sh->a, kvb_ackcounter_next(&sh->a)), 0);
	cr_expect_eq(kvb_ackcounter_last(&sh->a), START + THREADS * PER_THREAD);
	kvb_ackcounter_destroy(&sh->a);
	free(seen);
	free(sh);
}

/* --- Key chooser */

Test(ycsb_keychooser, zipfian_space_includes_expected_new_keys)
{
	struct kvb_keychooser kc, copy;
	struct kvb_rng r, r2;
	uint64_t last = 999, above = 0;

	/* workload D sizes: 1000 records, 1000 ops, 5 % inserts -> 100 expected new keys. */
	cr_assert_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, 1000, 1000, 0.05), 0);
	cr_expect_eq(kc.u.zipfian.min, 0);
	cr_expect_eq(kc.u.zipfian.itemcount, 1101); /* [0, 1000 + 100] inclusive */
	copy = kc;
	kvb_rng_seed(&r, 23);
	kvb_rng_seed(&r2, 23);
	for (int i = 0; i < 20000; i++) {
		uint64_t k = kvb_choose_key(&kc, &r, last);

		cr_assert_leq(k, last);
		cr_assert_eq(k, kvb_choose_key(&copy, &r2, last)); /* a copied chooser is independent */
	}
	/* Once inserts are acknowledged, the keys beyond the records come up too. */
	last = 1100;
	for (int i = 0; i < 20000; i++) {
		uint64_t k = kvb_choose_key(&kc, &r, last);

		cr_assert_leq(k, last);
		above += k > 999;
	}
	cr_expect_gt(above, 0);
	cr_assert_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, 1000, 1000, 0), 0);
	cr_expect_eq(kc.u.zipfian.itemcount, 1001);
}

Test(ycsb_keychooser, uniform_and_latest)
{
	struct kvb_keychooser kc;
	struct kvb_rng r;
	unsigned hot = 0;

	kvb_rng_seed(&r, 29);
	cr_assert_eq(kvb_keychooser_init(&kc, KVB_DIST_UNIFORM, 500, 1000, 0.05), 0);
	for (int i = 0; i < 10000; i++)
		cr_assert_lt(kvb_choose_key(&kc, &r, 10000), 500); /* new keys are never read */
	cr_assert_eq(kvb_keychooser_init(&kc, KVB_DIST_LATEST, 1000, 1000, 0.05), 0);
	cr_expect_eq(kc.u.latest.zipf.items, 999); /* basis: the counter's last value, 999 */
	for (int i = 0; i < 10000; i++) {
		uint64_t k = kvb_choose_key(&kc, &r, 1049);

		cr_assert_leq(k, 1049);
		hot += k == 1049;
	}
	cr_expect_gt(hot, 10000 / 10); /* the newest key takes ~1/zeta(1049) = 13 % */
}

Test(ycsb_keychooser, bad_parameters_rejected)
{
	struct kvb_keychooser kc;

	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, 0, 1000, 0), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_UNIFORM, 0, 1000, 0), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, 1000, 1000, -0.1), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, 1000, 1000, 1.1), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, 1000, 1000, NAN), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_ZIPFIAN, UINT64_MAX - 10, 1000, 0.5), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_LATEST, 1, 1000, 0.05), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, (enum kvb_dist)7, 1000, 1000, 0), -1);
	cr_expect_eq(kvb_keychooser_init(&kc, KVB_DIST_LATEST, 2, 1000, 0.05), 0);
}

/* --- Workloads */

Test(ycsb_workload, table_matches_ycsb_workload_files)
{
	const struct kvb_workload *w;

	w = kvb_workload_find('A');
	cr_assert_not_null(w);
	cr_expect(w->read == 0.5 && w->update == 0.5 && w->insert == 0 && w->rmw == 0 && w->scan == 0);
	cr_expect_eq(w->dist, KVB_DIST_ZIPFIAN);
	w = kvb_workload_find('B');
	cr_assert_not_null(w);
	cr_expect(w->read == 0.95 && w->update == 0.05 && w->dist == KVB_DIST_ZIPFIAN);
	w = kvb_workload_find('C');
	cr_assert_not_null(w);
	cr_expect(w->read == 1 && w->update == 0 && w->dist == KVB_DIST_ZIPFIAN);
	w = kvb_workload_find('D');
	cr_assert_not_null(w);
	cr_expect(w->read == 0.95 && w->insert == 0.05 && w->dist == KVB_DIST_LATEST);
	w = kvb_workload_find('E');
	cr_assert_not_null(w);
	cr_expect(w->scan == 0.95 && w->insert == 0.05 && w->read == 0 && w->dist == KVB_DIST_ZIPFIAN);
	cr_expect_not_null(w->desc);
	w = kvb_workload_find('F');
	cr_assert_not_null(w);
	cr_expect(w->read == 0.5 && w->rmw == 0.5 && w->update == 0 && w->dist == KVB_DIST_ZIPFIAN);
	cr_expect_eq(kvb_workload_find('a'), kvb_workload_find('A'));
	cr_expect_null(kvb_workload_find('G'));
	cr_expect_null(kvb_workload_find('z'));
	cr_expect_null(kvb_workload_find('\0'));
}

Test(ycsb_workload, operation_mix_matches_proportions)
{
	enum { SAMPLES = 100000 };
	struct kvb_rng r;

	kvb_rng_seed(&r, 31);
	for (char name = 'A'; name <= 'F'; name++) {
		const struct kvb_workload *w = kvb_workload_find(name);
		double p[5];
		unsigned count[5] = { 0 };

		cr_assert_not_null(w);
		p[KVB_OP_READ] = w->read;
		p[KVB_OP_UPDATE] = w->update;
		p[KVB_OP_INSERT] = w->insert;
		p[KVB_OP_RMW] = w->rmw;
		p[KVB_OP_SCAN] = w->scan;
		for (int i = 0; i < SAMPLES; i++) {
			int op = kvb_workload_next_op(w, &r);

			cr_assert(op >= 0 && op < 5, "workload %c: op %d", name, op);
			count[op]++;
		}
		for (int op = 0; op < 5; op++)
			cr_expect(fabs(count[op] - SAMPLES * p[op]) <= 5 * sigma(SAMPLES, p[op]),
				  "workload %c %s: %u of %d, want %.0f", name, kvb_op_name(op), count[op],
				  SAMPLES, SAMPLES * p[op]);
	}
}

Test(ycsb_workload, weights_are_normalised_and_empty_mix_refused)
{
	/* DiscreteGenerator divides by the sum, so weights need not add up to 1. */
	struct kvb_workload w = { .name = 'X', .read = 3, .insert = 1, .update = -2 };
	struct kvb_workload none = { .name = 'Y' };
	struct kvb_rng r;
	unsigned reads = 0;

	kvb_rng_seed(&r, 37);
	for (int i = 0; i < 100000; i++) {
		int op = kvb_workload_next_op(&w, &r);

		cr_assert(op == KVB_OP_READ || op == KVB_OP_INSERT); /* negative weights are skipped */
		reads += op == KVB_OP_READ;
	}
	cr_expect(fabs(reads - 75000.0) <= 5 * sigma(100000, 0.75), "%u reads", reads);
	cr_expect_eq(kvb_workload_next_op(&none, &r), -1);
	cr_expect_str_eq(kvb_op_name(KVB_OP_RMW), "READ-MODIFY-WRITE");
}
