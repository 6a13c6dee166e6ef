/* Memcached's item semantics in libkvclient (kvclient.h kvc_store,
 * kvc_get_item): the flags word and the CAS unique round-trip, every store
 * changes the unique, add / replace / cas decide under the bucket locks --
 * an expired item counting as absent, through the buckets and through a
 * cached location -- with the round trips kvclient.h states, and two
 * clients racing a conditional store on one key: exactly one wins. The
 * reclaimer's side (a copy keeps flags and unique; reuse brings no unique
 * back) is in test_reclaim. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

static struct kvt_env env;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 0, 64), 0);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(items, .init = setup, .fini = teardown, .timeout = 60);

static void flags_and_cas_round_trip(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, cache, 4);
	uint64_t c1 = 0, c2 = 0, got_cas = 0;
	uint32_t flags = 0;
	char v[64];

	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "k", "one", 0xdeadbeefu, 0, 0, &c1), 0);
	cr_expect_neq(c1, 0, "a unique is never 0");
	cr_assert_eq(kvt_get_item_s(b, "k", v, sizeof(v), &flags, &got_cas), 0);
	cr_expect_str_eq(v, "one");
	cr_expect_eq(flags, 0xdeadbeefu);
	cr_expect_eq(got_cas, c1, "GET returns the unique the store returned");
	/* Again (b's location cached now, when cache is on). */
	cr_assert_eq(kvt_get_item_s(b, "k", v, sizeof(v), &flags, &got_cas), 0);
	cr_expect_eq(flags, 0xdeadbeefu);
	cr_expect_eq(got_cas, c1);
	/* A plain PUT stores flags 0 and a new unique. */
	cr_assert_eq(kvt_put_s(a, "k", "two"), 0);
	cr_assert_eq(kvt_get_item_s(b, "k", v, sizeof(v), &flags, &c2), 0);
	cr_expect_str_eq(v, "two");
	cr_expect_eq(flags, 0);
	cr_expect_neq(c2, c1, "a PUT changes the unique");
	cr_expect_neq(c2, 0);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(items, flags_and_cas_round_trip_through_the_buckets)
{
	flags_and_cas_round_trip(0);
}

Test(items, flags_and_cas_round_trip_through_a_cached_location)
{
	flags_and_cas_round_trip(1024);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* Every store of any mode, and a delete followed by an add, gives a unique
 * never seen before; GET always returns the last one. */
Test(items, every_store_changes_the_unique)
{
	enum { N = 300 };
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4);
	static uint64_t seen[N];
	uint64_t cur = 0, got = 0;
	uint32_t flags;
	char v[64], want[64];

	cr_assert_eq(kvt_store_s(a, KVC_STORE_ADD, "u", "v0", 0, 0, 0, &cur), 0);
	seen[0] = cur;
	for (unsigned i = 1; i < N; i++) {
		int mode = (int)(i % 4);

		snprintf(want, sizeof(want), "v%u", i);
		if (mode == KVC_STORE_ADD) { /* delete, then add */
			cr_assert_eq(kvt_del_s(i % 8 == 0 ? b : a, "u"), 0);
			cr_assert_eq(kvt_store_s(a, KVC_STORE_ADD, "u", want, i, 0, 0, &cur), 0, "add %u", i);
		} else {
			cr_assert_eq(kvt_store_s(i % 3 ? a : b, mode, "u", want, i, 0, cur, &cur), 0, "mode %d, store %u", mode, i);
		}
		seen[i] = cur;
		cr_assert_eq(kvt_get_item_s(b, "u", v, sizeof(v), &flags, &got), 0);
		cr_expect_str_eq(v, want);
		cr_expect_eq(flags, i);
		cr_assert_eq(got, cur, "store %u: GET returns the last unique", i);
	}
	qsort(seen, N, sizeof(seen[0]), cmp_u64);
	cr_expect_neq(seen[0], 0);
	for (unsigned i = 1; i < N; i++)
		cr_assert_neq(seen[i], seen[i - 1], "a unique came back");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* add / replace / cas on an absent and a present key; a refused store
 * changes nothing. */
static void conditional_semantics(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, cache, 4);
	uint64_t c1 = 0, c2 = 0, got = 0, keep;
	uint32_t flags;
	char v[64];

	cr_expect_eq(kvt_store_s(a, KVC_STORE_REPLACE, "s", "r", 1, 0, 0, NULL), KVC_ENOTSTORED, "replace of an absent key");
	cr_expect_eq(kvt_store_s(a, KVC_STORE_CAS, "s", "c", 1, 0, 12345, NULL), KVC_ENOTFOUND, "cas of an absent key");
	cr_expect_eq(kvt_get_item_s(b, "s", v, sizeof(v), NULL, NULL), KVC_ENOTFOUND, "refusals stored nothing");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_ADD, "s", "added", 7, 0, 0, &c1), 0, "add of an absent key");
	keep = c1 + 1;
	cr_expect_eq(kvt_store_s(b, KVC_STORE_ADD, "s", "again", 8, 0, 0, &keep), KVC_ENOTSTORED, "add of a present key");
	cr_expect_eq(keep, c1 + 1, "a refused store leaves new_cas alone");
	cr_assert_eq(kvt_get_item_s(b, "s", v, sizeof(v), &flags, &got), 0);
	cr_expect_str_eq(v, "added");
	cr_expect_eq(flags, 7);
	cr_expect_eq(got, c1);
	cr_assert_eq(kvt_store_s(b, KVC_STORE_REPLACE, "s", "replaced", 9, 0, 0, &c2), 0, "replace of a present key");
	cr_expect_neq(c2, c1);
	cr_expect_eq(kvt_store_s(a, KVC_STORE_CAS, "s", "stale", 10, 0, c1, NULL), KVC_EEXISTS, "cas with an old unique");
	cr_assert_eq(kvt_get_item_s(a, "s", v, sizeof(v), &flags, &got), 0);
	cr_expect_str_eq(v, "replaced", "a refused cas changed the value");
	cr_expect_eq(flags, 9);
	cr_expect_eq(got, c2);
	cr_assert_eq(kvt_store_s(a, KVC_STORE_CAS, "s", "swapped", 11, 0, c2, &c1), 0, "cas with the current unique");
	cr_assert_eq(kvt_get_item_s(b, "s", v, sizeof(v), &flags, &got), 0);
	cr_expect_str_eq(v, "swapped");
	cr_expect_eq(got, c1);
	cr_assert_eq(kvt_del_s(b, "s"), 0);
	cr_expect_eq(kvt_store_s(a, KVC_STORE_CAS, "s", "late", 1, 0, c1, NULL), KVC_ENOTFOUND, "cas after a delete");
	cr_expect_eq(kvt_store_s(a, KVC_STORE_REPLACE, "s", "late", 1, 0, 0, NULL), KVC_ENOTSTORED, "replace after a delete");
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_FAILED), 0, "refusals are not failures");
	cr_expect_geq(kvt_stat_ops(a, KVC_STAT_STORE_REFUSED), 4);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(items, add_replace_cas_through_the_buckets)
{
	conditional_semantics(0);
}

Test(items, add_replace_cas_through_a_cached_location)
{
	conditional_semantics(1024);
}

/* An expired item is absent to add, replace and cas, as to GET. With a
 * cache, the location stays cached from the store itself: the cached path
 * decides from the header it reads under the lock. */
static void expired_is_absent(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4);
	uint64_t c1 = 0, got = 0;
	char v[64];

	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "e", "short", 1, 100, 0, &c1), 0);
	usleep(200 * 1000);
	cr_expect_eq(kvt_store_s(a, KVC_STORE_REPLACE, "e", "r", 2, 0, 0, NULL), KVC_ENOTSTORED, "replace of an expired item");
	cr_expect_eq(kvt_store_s(a, KVC_STORE_CAS, "e", "c", 2, 0, c1, NULL), KVC_ENOTFOUND, "cas of an expired item");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_ADD, "e", "fresh", 3, 0, 0, &c1), 0, "add over an expired item");
	cr_assert_eq(kvt_get_item_s(a, "e", v, sizeof(v), NULL, &got), 0);
	cr_expect_str_eq(v, "fresh");
	cr_expect_eq(got, c1);
	cr_expect_eq(kvt_key_slots(&env, "e", NULL, 0, NULL), 1, "the add took the expired item's slot");
	if (cache)
		cr_expect_geq(kvt_stat_ops(a, KVC_STAT_PUT_UPDATE_CACHED), 1, "decided through the cached location");
	kvc_destroy(a);
}

Test(items, an_expired_item_is_absent_to_conditional_stores_through_the_buckets)
{
	expired_is_absent(0);
}

Test(items, an_expired_item_is_absent_to_conditional_stores_through_a_cached_location)
{
	expired_is_absent(1024);
}

/* kvclient.h's counts: a cached store of any mode, done or refused, 2
 * round trips; uncached, 3 with the key present, 2 absent. */
Test(items, round_trips_of_conditional_stores)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4);
	uint64_t c1 = 0;

	cr_assert_eq(kvt_store_s(a, KVC_STORE_ADD, "r", "v", 0, 0, 0, &c1), 0);
	cr_expect_eq(kvt_stat_rtt(a, KVC_STAT_PUT_INSERT), 2, "add of an absent key");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_REPLACE, "r", "w", 0, 0, 0, &c1), 0);
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_PUT_UPDATE_CACHED), 1);
	cr_expect_eq(kvt_stat_rtt(a, KVC_STAT_PUT_UPDATE_CACHED), 2, "cached replace");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_CAS, "r", "x", 0, 0, c1, &c1), 0);
	cr_expect_eq(kvt_stat_rtt(a, KVC_STAT_PUT_UPDATE_CACHED), 4, "cached cas");
	cr_expect_eq(kvt_store_s(a, KVC_STORE_CAS, "r", "y", 0, 0, c1 + 1, NULL), KVC_EEXISTS);
	cr_expect_eq(kvt_store_s(a, KVC_STORE_ADD, "r", "y", 0, 0, 0, NULL), KVC_ENOTSTORED);
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_STORE_REFUSED), 2);
	cr_expect_eq(kvt_stat_rtt(a, KVC_STAT_STORE_REFUSED), 4, "cached refusals: 2 each");

	cr_assert_eq(kvt_store_s(b, KVC_STORE_CAS, "r", "z", 0, 0, c1, &c1), 0);
	cr_expect_eq(kvt_stat_rtt(b, KVC_STAT_PUT_UPDATE), 3, "uncached cas of a present key");
	cr_expect_eq(kvt_store_s(b, KVC_STORE_REPLACE, "absent", "z", 0, 0, 0, NULL), KVC_ENOTSTORED);
	cr_expect_eq(kvt_stat_rtt(b, KVC_STAT_STORE_REFUSED), 2, "uncached replace of an absent key");
	cr_expect_eq(kvt_store_s(b, KVC_STORE_ADD, "r", "z", 0, 0, 0, NULL), KVC_ENOTSTORED);
	cr_expect_eq(kvt_stat_rtt(b, KVC_STAT_STORE_REFUSED), 5, "uncached add of a present key: 3");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* Two clients submit a conditional store on one key at once and their
 * doorbells interleave: exactly one wins, the other is refused. */
static void race(int mode, unsigned cache, int loser_code)
{
	kvc_t *c[2] = { kvt_client(&env, NULL, cache, 4), kvt_client(&env, NULL, cache, 4) };
	unsigned wins[2] = { 0, 0 };

	for (unsigned round = 0; round < 100; round++) {
		char key[32], val[2][32], v[64];
		uint64_t cur = 0, got = 0;
		struct kvc_op op[2];
		int left = 2, winner = -1;

		snprintf(key, sizeof(key), "race-%u", round % 10);
		if (mode == KVC_STORE_ADD)
			(void)kvt_del_s(c[0], key);
		else
			cr_assert_eq(kvt_store_s(c[round % 2], KVC_STORE_SET, key, "base", 0, 0, 0, &cur), 0);
		if (cache) /* both know the location */
			for (unsigned i = 0; i < 2; i++)
				(void)kvt_get_item_s(c[i], key, v, sizeof(v), NULL, NULL);
		for (unsigned i = 0; i < 2; i++) {
			snprintf(val[i], sizeof(val[i]), "client-%u-%u", i, round);
			op[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = key, .key_len = strlen(key), .value = val[i],
						 .value_len = strlen(val[i]), .mode = mode, .cas = cur };
		}
		/* The later-numbered client submits first every other round. */
		for (unsigned k = 0; k < 2; k++)
			cr_assert_eq(kvc_submit(c[(k + round) % 2], &op[(k + round) % 2]), 0);
		while (left) {
			for (unsigned i = 0; i < 2; i++) {
				struct kvc_op *done;

				if (kvc_poll(c[i], &done, 1, 0) == 1)
					left--;
			}
		}
		for (unsigned i = 0; i < 2; i++) {
			if (op[i].status == 0) {
				cr_assert_eq(winner, -1, "round %u: both won", round);
				winner = (int)i;
			} else {
				cr_assert_eq(op[i].status, loser_code, "round %u: the loser got %s", round,
					     kvc_err_name(op[i].status));
			}
		}
		cr_assert_neq(winner, -1, "round %u: nobody won", round);
		wins[winner]++;
		cr_assert_eq(kvt_get_item_s(c[0], key, v, sizeof(v), NULL, &got), 0);
		cr_assert_str_eq(v, val[winner], "round %u: the winner's value", round);
		cr_assert_eq(got, op[winner].cas);
	}
	kvc_destroy(c[0]);
	kvc_destroy(c[1]);
}

Test(items, two_clients_racing_cas_on_one_key_exactly_one_wins)
{
	race(KVC_STORE_CAS, 0, KVC_EEXISTS);
}

Test(items, two_clients_racing_cas_through_cached_locations_exactly_one_wins)
{
	race(KVC_STORE_CAS, 1024, KVC_EEXISTS);
}

Test(items, two_clients_racing_add_on_one_key_exactly_one_wins)
{
	race(KVC_STORE_ADD, 0, KVC_ENOTSTORED);
}

/* kvc_submit_many batches conditional stores and item GETs; a bad mode is
 * refused at submission. */
Test(items, conditional_stores_batch_in_submit_many)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 8);
	struct kvc_op op[4], *ops[4], *done[4];
	char buf[64];
	unsigned got = 0;

	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "p", "present", 5, 0, 0, NULL), 0);
	op[0] = (struct kvc_op){ .type = KVC_OP_PUT, .key = "p", .key_len = 1, .value = "x", .value_len = 1,
				 .mode = KVC_STORE_ADD };
	op[1] = (struct kvc_op){ .type = KVC_OP_PUT, .key = "q", .key_len = 1, .value = "y", .value_len = 1,
				 .mode = KVC_STORE_ADD, .flags = 6 };
	op[2] = (struct kvc_op){ .type = KVC_OP_PUT, .key = "n", .key_len = 1, .value = "z", .value_len = 1,
				 .mode = KVC_STORE_REPLACE };
	op[3] = (struct kvc_op){ .type = KVC_OP_GET, .key = "p", .key_len = 1, .buf = buf, .buf_len = sizeof(buf) };
	for (unsigned i = 0; i < 4; i++)
		ops[i] = &op[i];
	cr_assert_eq(kvc_submit_many(a, ops, 4), 4);
	while (got < 4) {
		int n = kvc_poll(a, done, 4, -1);

		cr_assert_geq(n, 0);
		got += (unsigned)n;
	}
	cr_expect_eq(op[0].status, KVC_ENOTSTORED);
	cr_expect_eq(op[1].status, 0);
	cr_expect_neq(op[1].cas, 0);
	cr_expect_eq(op[2].status, KVC_ENOTSTORED);
	cr_expect_eq(op[3].status, 0);
	cr_expect_eq(op[3].flags, 5);
	cr_expect_neq(op[3].cas, 0);
	op[0].mode = 99;
	cr_expect_eq(kvc_submit(a, &op[0]), KVC_EINVAL, "an unknown store mode");
	kvc_destroy(a);
}
