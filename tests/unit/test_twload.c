/* The Twitter-shaped generator (bench/twload.h): its Zipf sampler against
 * the exact probabilities, for exponents below, at and above 1; keys, sizes
 * and TTLs fixed per key and shaped as the cluster's table says. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "twload.h"

static void zipf_matches(uint64_t n, double alpha)
{
	enum { DRAWS = 2000000 };
	static unsigned count[1001];
	struct kvb_zipf_ri z;
	struct kvb_rng r;
	double norm = 0;

	cr_assert(n <= 1000);
	memset(count, 0, sizeof(count));
	cr_assert_eq(kvb_zipf_ri_init(&z, n, alpha), 0);
	kvb_rng_seed(&r, 42);
	for (unsigned i = 0; i < DRAWS; i++) {
		uint64_t k = kvb_zipf_ri_next(&z, &r);

		cr_assert(k >= 1 && k <= n, "rank %llu of %llu", (unsigned long long)k, (unsigned long long)n);
		count[k]++;
	}
	for (uint64_t k = 1; k <= n; k++)
		norm += pow((double)k, -alpha);
	/* The head, one by one (each expected at least ~1000 times), and the
	 * tail's total. */
	for (uint64_t k = 1; k <= 20; k++) {
		double want = pow((double)k, -alpha) / norm * DRAWS, sd = sqrt(want);

		cr_expect(fabs(count[k] - want) < 5 * sd + 1, "alpha %.2f rank %llu: %u draws, %.0f expected", alpha,
			  (unsigned long long)k, count[k], want);
	}
	{
		double want = 0, got = 0;

		for (uint64_t k = n / 2; k <= n; k++) {
			want += pow((double)k, -alpha) / norm * DRAWS;
			got += count[k];
		}
		cr_expect(fabs(got - want) < 5 * sqrt(want) + 1, "alpha %.2f tail: %.0f draws, %.0f expected", alpha,
			  got, want);
	}
}

Test(twload, zipf_below_one)
{
	zipf_matches(1000, 0.63);
}

Test(twload, zipf_at_one)
{
	zipf_matches(1000, 1.0);
}

Test(twload, zipf_above_one)
{
	zipf_matches(1000, 1.61);
}

Test(twload, bad_parameters_are_refused)
{
	struct kvb_zipf_ri z;

	cr_expect_neq(kvb_zipf_ri_init(&z, 0, 1.0), 0);
	cr_expect_neq(kvb_zipf_ri_init(&z, 10, 0.0), 0);
	cr_expect_neq(kvb_zipf_ri_init(&z, 10, NAN), 0);
	cr_expect_null(kvb_twl_find(5), "cluster 5 has no statistics in the table");
}

/* Cluster 52: keys of 20 bytes, values around 273, TTLs of 1 d, 14 d and
 * 12 h in shares .65/.27/.07, ~93 % GETs. */
Test(twload, cluster_52_is_shaped_as_its_table_says)
{
	const struct kvb_twl_cluster *c = kvb_twl_find(52);
	struct kvb_trace_req a, b;
	struct kvb_twl w;
	double vsum = 0;
	unsigned ttl_day = 0, ttl_14d = 0, ttl_12h = 0, gets = 0, n = 100000;

	cr_assert_not_null(c);
	cr_assert_eq(kvb_twl_init(&w, c, n, 7), 0);
	for (uint64_t i = 1; i <= n; i++) {
		kvb_twl_key(&w, i, &a);
		kvb_twl_key(&w, i, &b);
		cr_assert_eq(a.key_len, 20);
		cr_assert_eq(strlen(a.key), 20);
		cr_assert(a.id == b.id && a.value_size == b.value_size && a.ttl_s == b.ttl_s, "fixed per key");
		vsum += a.value_size;
		ttl_day += a.ttl_s == 86400;
		ttl_14d += a.ttl_s == 1209600;
		ttl_12h += a.ttl_s == 43200;
	}
	cr_expect(fabs(vsum / n - 273) < 273 * 0.03, "mean value %.1f", vsum / n);
	cr_expect(fabs(ttl_day / (double)n - 0.65 / 0.99) < 0.01, "%u", ttl_day);
	cr_expect(fabs(ttl_14d / (double)n - 0.27 / 0.99) < 0.01, "%u", ttl_14d);
	cr_expect(fabs(ttl_12h / (double)n - 0.07 / 0.99) < 0.01, "%u", ttl_12h);
	cr_expect_eq(ttl_day + ttl_14d + ttl_12h, n);
	cr_expect_eq(kvb_twl_bytes(&w), (uint64_t)(20 * (double)n) + (uint64_t)vsum);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(kvb_twl_next(&w, &a, NULL, 0), 1);
		gets += a.op == KVB_TOP_GET;
	}
	cr_expect(fabs(gets / (double)n - 0.93 / 0.99) < 0.01, "%u GETs", gets);
}

/* Distinct ranks are distinct keys (a bijection), whatever the key length. */
Test(twload, keys_of_distinct_ranks_differ)
{
	struct kvb_trace_req a, b;
	struct kvb_twl w;

	cr_assert_eq(kvb_twl_init(&w, kvb_twl_find(14), 1000, 1), 0); /* 96-byte keys: capped at 39 */
	for (uint64_t i = 1; i < 1000; i++) {
		kvb_twl_key(&w, i, &a);
		kvb_twl_key(&w, i + 1, &b);
		cr_assert_eq(a.key_len, 39);
		cr_assert_neq(a.id, b.id);
		cr_assert_str_neq(a.key, b.key);
	}
}
