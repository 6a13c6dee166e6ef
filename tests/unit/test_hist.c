/* kvbench's latency histogram: every quantile within 1 % of the exact one. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "hist.h"

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

Test(hist, quantiles_are_within_one_percent_of_exact)
{
	static uint64_t v[200000];
	static struct kvb_hist h;
	static const double q[] = { 0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0 };
	uint64_t s = 12345;
	size_t n = sizeof(v) / sizeof(v[0]);

	kvb_hist_init(&h);
	for (size_t i = 0; i < n; i++) {
		/* log-uniform over 1 ns .. ~17 s: every bucket group gets values */
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		v[i] = (uint64_t)1 << (s % 34);
		v[i] += (s >> 20) % v[i];
		kvb_hist_record(&h, v[i]);
	}
	qsort(v, n, sizeof(v[0]), cmp);
	cr_expect_eq(h.count, n);
	cr_expect_eq(h.min, v[0]);
	cr_expect_eq(h.max, v[n - 1]);
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		size_t rank = (size_t)(q[i] * (double)n);
		uint64_t exact = v[rank >= n ? n - 1 : rank], got = kvb_hist_quantile(&h, q[i]);

		cr_expect_geq(got, exact, "q %g: %llu below the exact %llu", q[i], (unsigned long long)got,
			      (unsigned long long)exact);
		cr_expect_leq((double)(got - exact), 0.01 * (double)exact, "q %g: %llu vs exact %llu", q[i],
			      (unsigned long long)got, (unsigned long long)exact);
	}
}

Test(hist, small_values_are_exact_and_merge_adds_up)
{
	static struct kvb_hist a, b;

	kvb_hist_init(&a);
	kvb_hist_init(&b);
	for (uint64_t i = 1; i <= 100; i++)
		kvb_hist_record(i <= 50 ? &a : &b, i);
	kvb_hist_merge(&a, &b);
	cr_expect_eq(a.count, 100);
	cr_expect_eq(kvb_hist_quantile(&a, 0.5), 51);
	cr_expect_eq(kvb_hist_quantile(&a, 1.0), 100);
	cr_expect_eq(a.min, 1);
	cr_expect_eq(a.sum, 5050);
}
