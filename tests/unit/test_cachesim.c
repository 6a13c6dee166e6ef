/* The cache-aside key sequences and the exact LRU simulator the hit ratios
 * are judged against: the LRU checked against a naive list on random keys. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ca_seq.h"
#include "lrusim.h"

Test(lrusim, evicts_the_least_recently_used)
{
	struct kvb_lru *l;

	cr_assert_eq(kvb_lru_create(2, &l), 0);
	cr_expect_eq(kvb_lru_access(l, 1), 0);
	cr_expect_eq(kvb_lru_access(l, 2), 0);
	cr_expect_eq(kvb_lru_access(l, 1), 1);
	cr_expect_eq(kvb_lru_access(l, 3), 0, "evicts 2, not the recently used 1");
	cr_expect_eq(kvb_lru_access(l, 1), 1);
	cr_expect_eq(kvb_lru_access(l, 2), 0);
	kvb_lru_destroy(l);
	cr_expect_eq(kvb_lru_create(0, &l), -1);
}

/* A list of at most cap keys, most recent first: obviously right, O(cap). */
static int naive_access(uint64_t *list, unsigned *n, unsigned cap, uint64_t key)
{
	for (unsigned i = 0; i < *n; i++) {
		if (list[i] == key) {
			memmove(list + 1, list, i * sizeof(*list));
			list[0] = key;
			return 1;
		}
	}
	if (*n < cap)
		(*n)++;
	memmove(list + 1, list, (*n - 1) * sizeof(*list));
	list[0] = key;
	return 0;
}

Test(lrusim, agrees_with_a_naive_lru_on_every_access)
{
	static uint64_t list[300];
	struct kvb_ca_seq seq;
	struct kvb_lru *l;
	unsigned n = 0, hits = 0;

	cr_assert_eq(kvb_lru_create(300, &l), 0);
	cr_assert_eq(kvb_ca_seq_init(&seq, KVB_CA_SCAN, 2000, 7), 0);
	for (int i = 0; i < 50000; i++) {
		uint64_t k = kvb_ca_seq_next(&seq);
		int a = kvb_lru_access(l, k), b = naive_access(list, &n, 300, k);

		cr_assert_eq(a, b, "access %d of key %llu", i, (unsigned long long)k);
		hits += (unsigned)a;
	}
	cr_expect_gt(hits, 5000, "a Zipfian hot set hits often: %u", hits);
	kvb_lru_destroy(l);
}

Test(ca_seq, zipf_stays_in_the_records_and_scan_keys_never_repeat)
{
	struct kvb_ca_seq a, b;
	uint64_t last_unique = 0, unique = 0;

	cr_assert_eq(kvb_ca_seq_init(&a, KVB_CA_ZIPF, 1000, 3), 0);
	cr_assert_eq(kvb_ca_seq_init(&b, KVB_CA_ZIPF, 1000, 3), 0);
	for (int i = 0; i < 10000; i++) {
		uint64_t k = kvb_ca_seq_next(&a);

		cr_assert_lt(k, 1000);
		cr_assert_eq(k, kvb_ca_seq_next(&b), "same seed, same sequence");
	}
	cr_assert_eq(kvb_ca_seq_init(&a, KVB_CA_SCAN, 1000, 3), 0);
	for (int i = 0; i < 30000; i++) {
		uint64_t k = kvb_ca_seq_next(&a);

		if (k >= 1000) {
			cr_assert_gt(k, last_unique, "a scan key came back");
			last_unique = k;
			unique++;
		}
	}
	cr_expect(unique > 9000 && unique < 11000, "a third are one-off keys: %llu", (unsigned long long)unique);
	cr_expect_eq(kvb_ca_kind_parse("zipf"), KVB_CA_ZIPF);
	cr_expect_eq(kvb_ca_kind_parse("lru"), 0);
	cr_expect_eq(kvb_ca_seq_init(&a, 9, 10, 1), -1);
}
