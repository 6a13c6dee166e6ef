/* Memcached's read-modify-writes in libkvclient (kvclient.h: append and
 * prepend store modes, kvc_incr / kvc_decr, kvc_touch, kvc_gat) and the
 * multi-get call (kvc_run_batch): memcached's rules for each, decided under
 * the bucket locks through the buckets and through a cached location, with
 * the round trips kvclient.h states, and clients racing increments on one
 * counter losing none. */
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

TestSuite(rmw, .init = setup, .fini = teardown, .timeout = 60);

static void append_prepend(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, 0, 4);
	uint64_t c0 = 0, c1 = 0, c2 = 0, got = 0;
	uint32_t flags = 0;
	char v[64];

	cr_assert_eq(kvt_store_s(a, KVC_STORE_APPEND, "ap", "x", 0, 0, 0, NULL), KVC_ENOTSTORED, "absent: not stored");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_PREPEND, "ap", "x", 0, 0, 0, NULL), KVC_ENOTSTORED);
	cr_expect_eq(kvt_get_s(b, "ap", v, sizeof(v)), KVC_ENOTFOUND, "a refused append creates nothing");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "ap", "mid", 77, 60000, 0, &c0), 0);
	cr_assert_eq(kvt_store_s(a, KVC_STORE_APPEND, "ap", "-end", 1, 1, 0, &c1), 0);
	cr_assert_eq(kvt_store_s(a, KVC_STORE_PREPEND, "ap", "start-", 2, 2, 0, &c2), 0);
	cr_assert_eq(kvt_get_item_s(b, "ap", v, sizeof(v), &flags, &got), 0);
	cr_expect_str_eq(v, "start-mid-end");
	cr_expect_eq(flags, 77, "append and prepend keep the item's flags");
	cr_expect_eq(got, c2);
	cr_expect(c0 != c1 && c1 != c2 && c0 != c2, "each changes the unique");
	usleep(20 * 1000);
	cr_expect_eq(kvt_get_s(b, "ap", v, sizeof(v)), 0, "and its expiry (not the 1-2 ms given)");
	/* A non-zero cas must match. */
	cr_expect_eq(kvt_store_s(a, KVC_STORE_APPEND, "ap", "!", 0, 0, c1, NULL), KVC_EEXISTS);
	cr_expect_eq(kvt_store_s(a, KVC_STORE_APPEND, "ap", "!", 0, 0, c2, NULL), 0);
	cr_assert_eq(kvt_get_item_s(b, "ap", v, sizeof(v), NULL, NULL), 0);
	cr_expect_str_eq(v, "start-mid-end!");
	if (cache)
		cr_expect_geq(kvt_stat_ops(a, KVC_STAT_RMW_CACHED), 2, "decided through the cached location");
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_FAILED), 0);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(rmw, append_prepend_through_the_buckets)
{
	append_prepend(0);
}

Test(rmw, append_prepend_through_a_cached_location)
{
	append_prepend(1024);
}

/* An append past the object area's first 4 KiB grows it; past the largest
 * object: KVC_EVALSIZE and nothing changes. */
Test(rmw, large_appends)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	size_t max = kvc_max_value(a, 2), n = 0;
	char *big = malloc(max + 1), *out = malloc(max + 1);

	cr_assert(big && out && max > 8000);
	memset(big, 'a', 3000);
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "lg", 2, big, 3000, 0, 0, 0, NULL), 0);
	memset(big, 'b', 3000);
	cr_assert_eq(kvc_store(a, KVC_STORE_APPEND, "lg", 2, big, 3000, 0, 0, 0, NULL), 0);
	memset(big, 'c', 3000);
	cr_assert_eq(kvc_store(a, KVC_STORE_PREPEND, "lg", 2, big, 3000, 0, 0, 0, NULL), 0);
	cr_assert_eq(kvc_get(a, "lg", 2, out, max, &n), 0);
	cr_assert_eq(n, 9000);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(out[i], i < 3000 ? 'c' : i < 6000 ? 'a' : 'b', "byte %zu", i);
	memset(big, 'd', max);
	cr_expect_eq(kvc_store(a, KVC_STORE_APPEND, "lg", 2, big, max - 8000, 0, 0, 0, NULL), KVC_EVALSIZE);
	cr_assert_eq(kvc_get(a, "lg", 2, out, max, &n), 0);
	cr_expect_eq(n, 9000, "a refused append changed nothing");
	free(big);
	free(out);
	kvc_destroy(a);
}

static void arith(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4);
	uint64_t v = 0, c0 = 0, c1 = 0;
	uint32_t flags = 0;
	char s[64];

	cr_expect_eq(kvc_incr(a, "n", 1, 1, &v), KVC_ENOTFOUND);
	cr_expect_eq(kvc_decr(a, "n", 1, 1, &v), KVC_ENOTFOUND);
	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "n", "99", 5, 0, 0, &c0), 0);
	cr_assert_eq(kvc_incr(a, "n", 1, 1, &v), 0);
	cr_expect_eq(v, 100);
	cr_assert_eq(kvt_get_item_s(a, "n", s, sizeof(s), &flags, &c1), 0);
	cr_expect_str_eq(s, "100", "the length may change");
	cr_expect_eq(flags, 5, "flags kept");
	cr_expect_neq(c1, c0, "a new unique");
	cr_assert_eq(kvc_decr(a, "n", 1, 1, &v), 0);
	cr_expect_eq(v, 99);
	cr_assert_eq(kvc_decr(a, "n", 1, 1000, &v), 0);
	cr_expect_eq(v, 0, "decr stops at 0");
	cr_assert_eq(kvt_get_s(a, "n", s, sizeof(s)), 0);
	cr_expect_str_eq(s, "0");
	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "n", "18446744073709551615", 0, 0, 0, NULL), 0);
	cr_assert_eq(kvc_incr(a, "n", 1, 2, &v), 0);
	cr_expect_eq(v, 1, "incr wraps at 2^64");
	/* memcached's reading: blanks around, a leading '+'. */
	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "n", "  +41  ", 0, 0, 0, NULL), 0);
	cr_assert_eq(kvc_incr(a, "n", 1, 1, &v), 0);
	cr_expect_eq(v, 42);
	static const char *const bad[] = { "", "abc", "12abc", "-1", "18446744073709551616",
					   "123456789012345678901234", " ", "0x10" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "n", bad[i], 0, 0, 0, &c0), 0);
		cr_expect_eq(kvc_incr(a, "n", 1, 1, &v), KVC_ENONNUMERIC, "'%s'", bad[i]);
		cr_expect_eq(kvc_decr(a, "n", 1, 1, &v), KVC_ENONNUMERIC, "'%s'", bad[i]);
		cr_assert_eq(kvt_get_item_s(a, "n", s, sizeof(s), NULL, &c1), 0);
		cr_expect_str_eq(s, bad[i], "a refused incr changes nothing");
		cr_expect_eq(c1, c0);
	}
	if (cache)
		cr_expect_geq(kvt_stat_ops(a, KVC_STAT_RMW_CACHED), 4, "decided through the cached location");
	kvc_destroy(a);
}

Test(rmw, incr_decr_through_the_buckets)
{
	arith(0);
}

Test(rmw, incr_decr_through_a_cached_location)
{
	arith(1024);
}

/* The async form: vivify on a miss (memcached meta's "ma N J"), a cas that
 * must match, a new TTL on a hit. */
Test(rmw, incr_vivifies_compares_and_touches)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	struct kvc_op op = { .type = KVC_OP_INCR, .key = "vv", .key_len = 2, .delta = 5, .initial = 10,
			     .flags = 3, .mode = KVC_ARITH_VIVIFY, .ttl_ms = 60000 }, *done;
	uint32_t flags = 0;
	uint64_t cas = 0;
	char s[32];

	cr_assert_eq(kvc_submit(a, &op), 0);
	cr_assert_eq(kvc_poll(a, &done, 1, -1), 1);
	cr_assert_eq(op.status, 0);
	cr_expect_eq(op.result, 10, "a miss stores the initial value");
	cr_assert_eq(kvt_get_item_s(a, "vv", s, sizeof(s), &flags, &cas), 0);
	cr_expect_str_eq(s, "10");
	cr_expect_eq(flags, 3);
	cr_expect_eq(cas, op.cas);
	op.status = 0;
	cr_assert_eq(kvc_submit(a, &op), 0);
	cr_assert_eq(kvc_poll(a, &done, 1, -1), 1);
	cr_expect_eq(op.status, 0);
	cr_expect_eq(op.result, 15, "a hit adds");
	op.cas = cas; /* stale now */
	cr_assert_eq(kvc_submit(a, &op), 0);
	cr_assert_eq(kvc_poll(a, &done, 1, -1), 1);
	cr_expect_eq(op.status, KVC_EEXISTS);
	op = (struct kvc_op){ .type = KVC_OP_DECR, .key = "vv", .key_len = 2, .delta = 1, .mode = KVC_ARITH_TOUCH,
			      .ttl_ms = 50 };
	cr_assert_eq(kvc_submit(a, &op), 0);
	cr_assert_eq(kvc_poll(a, &done, 1, -1), 1);
	cr_expect_eq(op.status, 0);
	cr_expect_eq(op.result, 14);
	usleep(120 * 1000);
	cr_expect_eq(kvt_get_s(a, "vv", s, sizeof(s)), KVC_ENOTFOUND, "the TTL the decr gave");
	op.mode = 7;
	cr_expect_eq(kvc_submit(a, &op), KVC_EINVAL, "unknown mode bits");
	kvc_destroy(a);
}

static void touch_and_gat(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, 0, 4);
	uint64_t c0 = 0, c1 = 0;
	uint32_t flags = 0;
	size_t n = 0;
	char s[64];

	cr_expect_eq(kvc_touch(a, "t", 1, 1000), KVC_ENOTFOUND);
	cr_expect_eq(kvc_gat(a, "t", 1, 1000, s, sizeof(s), &n, NULL, NULL), KVC_ENOTFOUND);
	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "t", "tv", 9, 100, 0, &c0), 0);
	cr_assert_eq(kvc_touch(a, "t", 1, 0), 0, "never expire");
	usleep(200 * 1000);
	cr_assert_eq(kvt_get_item_s(b, "t", s, sizeof(s), &flags, &c1), 0, "touched past its first TTL");
	cr_expect_str_eq(s, "tv");
	cr_expect_eq(flags, 9);
	cr_expect_eq(c1, c0, "a touch keeps the unique (as memcached's does)");
	cr_expect_eq(kvt_store_s(a, KVC_STORE_CAS, "t", "tw", 9, 0, c0, NULL), 0, "so a cas with it still succeeds");
	cr_assert_eq(kvt_get_item_s(b, "t", s, sizeof(s), NULL, &c0), 0);
	memset(s, 0, sizeof(s));
	cr_assert_eq(kvc_gat(a, "t", 1, 80, s, sizeof(s), &n, &flags, &c1), 0);
	cr_expect_eq(n, 2);
	cr_expect_str_eq(s, "tw");
	cr_expect_eq(flags, 9);
	cr_expect_eq(c1, c0);
	cr_expect_eq(kvc_gat(a, "t", 1, 80, s, 1, &n, NULL, NULL), KVC_ETRUNC, "short buffer: the length");
	cr_expect_eq(n, 2);
	usleep(200 * 1000);
	cr_expect_eq(kvt_get_s(b, "t", s, sizeof(s)), KVC_ENOTFOUND, "expired at the TTL the gat gave");
	cr_expect_eq(kvc_touch(a, "t", 1, 1000), KVC_ENOTFOUND, "an expired item is absent to touch");
	if (cache)
		cr_expect_geq(kvt_stat_ops(a, KVC_STAT_RMW_CACHED), 2, "decided through the cached location");
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(rmw, touch_and_gat_through_the_buckets)
{
	touch_and_gat(0);
}

Test(rmw, touch_and_gat_through_a_cached_location)
{
	touch_and_gat(1024);
}

/* kvclient.h's counts: 2 cached, 3 uncached with the key present, 2 absent. */
Test(rmw, round_trips)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4);
	uint64_t v = 0;

	cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, "r", "1", 0, 0, 0, NULL), 0);
	cr_assert_eq(kvc_incr(a, "r", 1, 1, &v), 0);
	cr_assert_eq(kvc_touch(a, "r", 1, 0), 0);
	cr_assert_eq(kvt_store_s(a, KVC_STORE_APPEND, "r", "0", 0, 0, 0, NULL), 0);
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_RMW_CACHED), 3);
	cr_expect_eq(kvt_stat_rtt(a, KVC_STAT_RMW_CACHED), 6, "cached: 2 each");
	cr_assert_eq(kvc_incr(b, "r", 1, 1, &v), 0);
	cr_expect_eq(v, 21);
	cr_expect_eq(kvt_stat_rtt(b, KVC_STAT_RMW), 3, "uncached, present: 3, not %llu", (unsigned long long)kvt_stat_rtt(b, KVC_STAT_RMW));
	cr_expect_eq(kvc_incr(b, "absent", 6, 1, &v), KVC_ENOTFOUND);
	cr_expect_eq(kvt_stat_rtt(b, KVC_STAT_RMW_MISS), 2, "absent: 2");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* Clients increment one counter at once, their doorbells interleaved:
 * every increment counts once (each decided under the lock). */
Test(rmw, racing_increments_lose_none)
{
	enum { CLIENTS = 3, EACH = 150 };
	kvc_t *c[CLIENTS];
	struct kvc_op op[CLIENTS];
	unsigned left[CLIENTS], busy[CLIENTS] = { 0 };
	char s[32];

	for (unsigned i = 0; i < CLIENTS; i++) {
		c[i] = kvt_client(&env, NULL, i ? 1024 : 0, 4);
		left[i] = EACH;
	}
	cr_assert_eq(kvt_store_s(c[0], KVC_STORE_SET, "ctr", "0", 0, 0, 0, NULL), 0);
	for (unsigned done_all = 0; done_all < CLIENTS;) {
		done_all = 0;
		for (unsigned i = 0; i < CLIENTS; i++) {
			struct kvc_op *d;

			if (!busy[i] && left[i]) {
				op[i] = (struct kvc_op){ .type = KVC_OP_INCR, .key = "ctr", .key_len = 3, .delta = 1 };
				cr_assert_eq(kvc_submit(c[i], &op[i]), 0);
				busy[i] = 1;
			}
			if (busy[i] && kvc_poll(c[i], &d, 1, 0) == 1) {
				cr_assert_eq(op[i].status, 0, "%s", kvc_err_name(op[i].status));
				busy[i] = 0;
				left[i]--;
			}
			done_all += !busy[i] && !left[i];
		}
	}
	cr_assert_eq(kvt_get_s(c[0], "ctr", s, sizeof(s)), 0);
	cr_expect_eq(strtoull(s, NULL, 10), CLIENTS * EACH);
	for (unsigned i = 0; i < CLIENTS; i++)
		kvc_destroy(c[i]);
}

/* Multi-get: one call, more keys than the handle's depth, hits and misses. */
Test(rmw, multi_get_over_the_batch_interface)
{
	enum { N = 20 };
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	struct kvc_op op[N], *ops[N];
	char key[N][16], buf[N][16];

	for (unsigned i = 0; i < N; i++) {
		snprintf(key[i], sizeof(key[i]), "mg%u", i);
		if (i % 3)
			cr_assert_eq(kvt_store_s(a, KVC_STORE_SET, key[i], key[i], i, 0, 0, NULL), 0);
		op[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = key[i], .key_len = strlen(key[i]),
					 .buf = buf[i], .buf_len = sizeof(buf[i]) };
		ops[i] = &op[i];
	}
	cr_assert_eq(kvc_run_batch(a, ops, N), 0);
	for (unsigned i = 0; i < N; i++) {
		if (i % 3 == 0) {
			cr_expect_eq(op[i].status, KVC_ENOTFOUND, "key %u", i);
			continue;
		}
		cr_assert_eq(op[i].status, 0, "key %u: %s", i, kvc_err_name(op[i].status));
		cr_expect_eq(op[i].flags, i);
		cr_expect(op[i].value_len == strlen(key[i]) && memcmp(buf[i], key[i], op[i].value_len) == 0);
	}
	cr_expect_eq(kvc_inflight(a), 0);
	op[0].key_len = 0;
	cr_assert_eq(kvc_run_batch(a, ops, N), 0, "a bad op fails alone");
	cr_expect_eq(op[0].status, KVC_EKEYSIZE);
	cr_expect_eq(op[1].status, 0);
	kvc_destroy(a);
}
