/* memcached meta's item states in libkvclient (kvclient.h enum kvc_meta,
 * enum kvc_item; layout.h "Recache tokens"): invalidation marks an item
 * stale, a GET of a stale item -- or, asked, of one whose TTL runs low --
 * contends for the right to recache it and one client wins, a GET says
 * whether the item was read before; a DELETE can name the version it
 * removes. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

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

TestSuite(meta, .init = setup, .fini = teardown, .timeout = 60);

static int run(kvc_t *c, struct kvc_op *op)
{
	struct kvc_op *done;

	op->status = 0;
	if (kvc_submit(c, op))
		return -1000;
	while (kvc_poll(c, &done, 1, -1) == 0)
		;
	return op->status;
}

/* GET k with meta bits; the item bits it learnt. */
static uint32_t get_item_bits(kvc_t *c, const char *k, uint32_t meta, uint64_t recache_ms, char *v, size_t cap)
{
	struct kvc_op op = { .type = KVC_OP_GET, .key = k, .key_len = strlen(k), .buf = v, .buf_len = cap - 1,
			     .meta = meta, .recache_ms = recache_ms };

	cr_assert_eq(run(c, &op), 0, "GET %s: %s", k, kvc_err_name(op.status));
	v[op.value_len] = 0;
	return op.item;
}

static int invalidate(kvc_t *c, const char *k, uint64_t ttl_ms, uint64_t cas)
{
	struct kvc_op op = { .type = KVC_OP_DELETE, .key = k, .key_len = strlen(k), .meta = KVC_META_INVALIDATE,
			     .ttl_ms = ttl_ms, .cas = cas };

	return run(c, &op);
}

static void stale_items(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, cache, 4);
	uint64_t c0 = 0, c1 = 0;
	uint32_t bits;
	char v[64];

	cr_expect_eq(invalidate(a, "s", 0, 0), KVC_ENOTFOUND);
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "s", 1, "old", 3, 7, 0, 0, &c0), 0);
	bits = get_item_bits(b, "s", 0, 0, v, sizeof(v));
	cr_expect_eq(bits, 0, "fresh, unread, not stale");
	cr_expect_eq(invalidate(a, "s", 0, c0 + 99), KVC_EEXISTS, "a cas that does not match");
	cr_assert_eq(invalidate(a, "s", 0, c0), 0);
	/* The first GET of the stale item wins; every later one is told
	 * someone did. */
	bits = get_item_bits(b, "s", 0, 0, v, sizeof(v));
	cr_expect_str_eq(v, "old", "a stale item is still served");
	cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT), KVC_ITEM_STALE | KVC_ITEM_WON);
	for (int i = 0; i < 3; i++) {
		bits = get_item_bits(i % 2 ? a : b, "s", 0, 0, v, sizeof(v));
		cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT),
			     KVC_ITEM_STALE | KVC_ITEM_WIN_SENT);
		cr_expect(bits & KVC_ITEM_FETCHED, "read before");
	}
	/* A touch keeps the state and the token; a store makes a new item. */
	cr_assert_eq(kvc_touch(a, "s", 1, 60000), 0);
	bits = get_item_bits(b, "s", 0, 0, v, sizeof(v));
	cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WIN_SENT), KVC_ITEM_STALE | KVC_ITEM_WIN_SENT);
	cr_assert_eq(kvc_get_item(b, "s", 1, v, sizeof(v), NULL, NULL, &c1), 0);
	cr_expect_neq(c1, c0, "invalidation bumps the unique");
	cr_assert_eq(kvc_store(a, KVC_STORE_CAS, "s", 1, "new", 3, 7, 0, c1, NULL), 0);
	bits = get_item_bits(b, "s", 0, 0, v, sizeof(v));
	cr_expect_str_eq(v, "new");
	cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT), 0, "recached: fresh again");
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(meta, stale_items_through_the_buckets)
{
	stale_items(0);
}

Test(meta, stale_items_through_a_cached_location)
{
	stale_items(1024);
}

/* "mg R": the token is contended only below the threshold. */
Test(meta, recache_when_the_ttl_runs_low)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4);
	struct kvc_stats s0, s1;
	char v[64];

	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "r", 1, "v", 1, 0, 10000, 0, NULL), 0);
	cr_expect_eq(get_item_bits(a, "r", 0, 0, v, sizeof(v)) & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT), 0);
	kvc_get_stats(b, &s0);
	cr_expect_eq(get_item_bits(b, "r", KVC_META_RECACHE, 5000, v, sizeof(v)) & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT), 0,
		     "10 s left, threshold 5 s");
	kvc_get_stats(b, &s1);
	cr_expect_eq(s1.round_trips[KVC_STAT_GET_HIT] - s0.round_trips[KVC_STAT_GET_HIT], 2, "no token: no CAS");
	cr_expect_eq(get_item_bits(b, "r", KVC_META_RECACHE, 20000, v, sizeof(v)) & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT),
		     KVC_ITEM_WON);
	kvc_get_stats(b, &s0);
	cr_expect_eq(s0.round_trips[KVC_STAT_GET_HIT] - s1.round_trips[KVC_STAT_GET_HIT], 3, "the token's CAS: one more");
	cr_expect_eq(get_item_bits(a, "r", KVC_META_RECACHE, 20000, v, sizeof(v)) & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT),
		     KVC_ITEM_WIN_SENT);
	cr_expect_eq(get_item_bits(a, "r", 0, 0, v, sizeof(v)) & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT), KVC_ITEM_WIN_SENT,
		     "Z whenever the token is out");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* Objects are 4-byte aligned (layout.h "Objects"), so the aligned word an
 * access byte's CAS works on is an object's first 8 bytes or the 8 after
 * them. Items of keys of 1..8 bytes written one after another (footprints
 * of 28 to 36 bytes) lie at both: the token and the read mark work at
 * either, and a flags word (after the value, when not 0) comes back as
 * stored, through an invalidation and an append. */
Test(meta, tokens_and_marks_at_either_word_of_an_object)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4), *b = kvt_client(&env, NULL, 0, 4);
	const char *k = "kkkkkkkk";
	uint32_t bits, flags;
	size_t len;
	char v[64];

	for (unsigned i = 0; i < 8; i++)
		cr_assert_eq(kvc_store(a, KVC_STORE_SET, k, i + 1, "v", 1, i % 3 ? 0xfeed0000u + i : 0, 0, 0, NULL), 0);
	for (unsigned i = 0; i < 8; i++) {
		struct kvc_op op = { .type = KVC_OP_DELETE, .key = k, .key_len = i + 1, .meta = KVC_META_INVALIDATE };

		cr_assert_eq(run(a, &op), 0);
	}
	for (unsigned i = 0; i < 8; i++) {
		struct kvc_op op = { .type = KVC_OP_GET, .key = k, .key_len = i + 1, .buf = v, .buf_len = sizeof(v) };

		cr_assert_eq(run(b, &op), 0, "key of %u bytes", i + 1);
		cr_expect_eq(op.item & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT), KVC_ITEM_STALE | KVC_ITEM_WON,
			     "key of %u bytes: the first GET wins", i + 1);
		cr_expect_eq(op.flags, i % 3 ? 0xfeed0000u + i : 0, "key of %u bytes: flags", i + 1);
		op.status = 0;
		cr_assert_eq(run(b, &op), 0);
		cr_expect_eq(op.item & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED),
			     KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED, "key of %u bytes: the token is out, read before",
			     i + 1);
	}
	for (unsigned i = 0; i < 8; i++) {
		cr_assert_eq(kvc_store(a, KVC_STORE_APPEND, k, i + 1, "w", 1, 0, 0, 0, NULL), 0);
		cr_assert_eq(kvc_get_item(b, k, i + 1, v, sizeof(v), &len, &flags, NULL), 0);
		cr_expect(len == 2 && memcmp(v, "vw", 2) == 0, "key of %u bytes: appended", i + 1);
		cr_expect_eq(flags, i % 3 ? 0xfeed0000u + i : 0, "key of %u bytes: flags kept by the append", i + 1);
	}
	bits = get_item_bits(a, "k", 0, 0, v, sizeof(v));
	cr_expect_eq(bits & KVC_ITEM_STALE, 0, "an append makes a new item");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* Many clients GET a stale item at once: exactly one wins. */
Test(meta, one_winner_among_racing_gets)
{
	enum { N = 4 };
	kvc_t *c[N];
	struct kvc_op op[N];
	char v[N][16];
	unsigned won = 0, left = N;

	for (unsigned i = 0; i < N; i++)
		c[i] = kvt_client(&env, NULL, i % 2 ? 1024 : 0, 4);
	for (unsigned round = 0; round < 50; round++) {
		char k[16];

		snprintf(k, sizeof(k), "race-%u", round);
		cr_assert_eq(kvt_put_s(c[0], k, "v"), 0);
		cr_assert_eq(invalidate(c[1], k, 0, 0), 0);
		for (unsigned i = 0; i < N; i++) {
			op[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = k, .key_len = strlen(k), .buf = v[i],
						 .buf_len = sizeof(v[i]) };
			cr_assert_eq(kvc_submit(c[i], &op[i]), 0);
		}
		for (left = N, won = 0; left;) {
			for (unsigned i = 0; i < N; i++) {
				struct kvc_op *d;

				if (kvc_poll(c[i], &d, 1, 0) == 1) {
					left--;
					cr_assert_eq(op[i].status, 0);
					cr_assert(op[i].item & KVC_ITEM_STALE);
					cr_assert(!!(op[i].item & KVC_ITEM_WON) != !!(op[i].item & KVC_ITEM_WIN_SENT),
						  "won, or told another did");
					won += !!(op[i].item & KVC_ITEM_WON);
				}
			}
		}
		cr_assert_eq(won, 1, "round %u: %u winners", round, won);
	}
	for (unsigned i = 0; i < N; i++)
		kvc_destroy(c[i]);
}

Test(meta, bad_meta_bits_are_refused)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	struct kvc_op op = { .type = KVC_OP_GET, .key = "k", .key_len = 1, .meta = KVC_META_INVALIDATE };

	cr_expect_eq(kvc_submit(a, &op), KVC_EINVAL);
	op = (struct kvc_op){ .type = KVC_OP_DELETE, .key = "k", .key_len = 1, .meta = KVC_META_RECACHE };
	cr_expect_eq(kvc_submit(a, &op), KVC_EINVAL);
	op = (struct kvc_op){ .type = KVC_OP_PUT, .key = "k", .key_len = 1, .meta = KVC_META_INVALIDATE };
	cr_expect_eq(kvc_submit(a, &op), KVC_EINVAL, "invalidates only as a cas");
	op = (struct kvc_op){ .type = KVC_OP_PUT, .key = "k", .key_len = 1, .meta = KVC_META_RECACHE };
	cr_expect_eq(kvc_submit(a, &op), KVC_EINVAL);
	op = (struct kvc_op){ .type = KVC_OP_PUT, .mode = KVC_STORE_APPEND, .key = "k", .key_len = 1, .value = "x",
			      .value_len = 1, .meta = KVC_META_WON };
	cr_expect_eq(kvc_submit(a, &op), KVC_EINVAL, "append builds its object from the old one: no token");
	kvc_destroy(a);
}

/* "mg N": a client that finds a key missing adds an empty item whose token
 * it holds; everyone else is told the win was sent, until a rewrite. */
static void vivified(unsigned cache)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, cache, 4);
	struct kvc_op op = { .type = KVC_OP_PUT, .mode = KVC_STORE_ADD, .key = "v", .key_len = 1, .value = "",
			     .value_len = 0, .ttl_ms = 30000, .meta = KVC_META_WON };
	uint32_t bits;
	char v[64];

	cr_assert_eq(run(a, &op), 0, "%s", kvc_err_name(op.status));
	cr_expect_neq(op.cas, 0);
	op.status = 0;
	cr_expect_eq(run(b, &op), KVC_ENOTSTORED, "a second vivify finds the item");
	for (int i = 0; i < 3; i++) {
		bits = get_item_bits(i % 2 ? a : b, "v", 0, 0, v, sizeof(v));
		cr_expect_str_eq(v, "", "the vivified item is empty");
		cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT), KVC_ITEM_WIN_SENT);
	}
	/* the winner recaches: a new item, no token */
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "v", 1, "fresh", 5, 0, 0, 0, NULL), 0);
	bits = get_item_bits(b, "v", 0, 0, v, sizeof(v));
	cr_expect_str_eq(v, "fresh");
	cr_expect_eq(bits & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT), 0);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(meta, vivified_items_through_the_buckets)
{
	vivified(0);
}

Test(meta, vivified_items_through_a_cached_location)
{
	vivified(64);
}

/* "ms I C": a cas that invalidates. The item's own unique stores as a cas;
 * an older one stores too, the new item stale, with the old one's expiry
 * and recache token; a newer one is refused, and no item is a miss. */
static int recas(kvc_t *c, const char *k, const char *v, uint64_t cas, uint64_t ttl_ms, uint64_t *new_cas)
{
	struct kvc_op op = { .type = KVC_OP_PUT, .mode = KVC_STORE_CAS, .key = k, .key_len = strlen(k), .value = v,
			     .value_len = strlen(v), .flags = 9, .ttl_ms = ttl_ms, .cas = cas,
			     .meta = KVC_META_INVALIDATE };
	int rc = run(c, &op);

	if (new_cas)
		*new_cas = op.cas;
	return rc;
}

Test(meta, a_cas_that_invalidates)
{
	kvc_t *a = kvt_client(&env, NULL, 64, 4), *b = kvt_client(&env, NULL, 0, 4);
	struct kvc_op get = { .type = KVC_OP_GET, .key = "r", .key_len = 1 };
	uint64_t c0 = 0, c1 = 0, c2 = 0;
	uint32_t bits;
	char v[64];

	cr_expect_eq(recas(a, "r", "x", 1, 0, NULL), KVC_ENOTFOUND);
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "r", 1, "one", 3, 7, 60000, 0, &c0), 0);
	cr_expect_eq(recas(a, "r", "x", c0 + 1, 0, NULL), KVC_EEXISTS, "a newer unique");
	cr_assert_eq(recas(a, "r", "two", c0, 0, &c1), 0, "its own unique: a cas");
	cr_expect_gt(c1, c0);
	bits = get_item_bits(b, "r", 0, 0, v, sizeof(v));
	cr_expect_str_eq(v, "two");
	cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT), 0, "not stale");
	get.buf = v;
	get.buf_len = sizeof(v);
	cr_assert_eq(run(b, &get), 0);
	cr_expect_eq(get.expiry_ms, 0, "the cas's own TTL (none)");
	/* an older unique: stored, stale, the expiry kept */
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "r", 1, "three", 5, 7, 60000, 0, &c1), 0);
	cr_assert_eq(run(b, &get), 0);
	uint64_t exp = get.expiry_ms;
	cr_assert_eq(recas(a, "r", "four", c0, 0, &c2), 0);
	cr_expect_gt(c2, c1, "a new unique");
	bits = get_item_bits(b, "r", 0, 0, v, sizeof(v));
	cr_expect_str_eq(v, "four");
	cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON), KVC_ITEM_STALE | KVC_ITEM_WON);
	get.status = 0;
	cr_assert_eq(run(a, &get), 0);
	cr_expect_eq(get.expiry_ms, exp, "the stale item keeps its expiry");
	cr_expect_eq(get.flags, 9, "and takes the new flags");
	cr_expect(get.item & KVC_ITEM_WIN_SENT);
	/* again older: the token stays sent */
	cr_assert_eq(recas(b, "r", "five", c0, 0, NULL), 0);
	bits = get_item_bits(a, "r", 0, 0, v, sizeof(v));
	cr_expect_str_eq(v, "five");
	cr_expect_eq(bits & (KVC_ITEM_STALE | KVC_ITEM_WON | KVC_ITEM_WIN_SENT), KVC_ITEM_STALE | KVC_ITEM_WIN_SENT);
	kvc_destroy(a);
	kvc_destroy(b);
}

/* memcached's flags applied by a touch: a GAT contends for the recache token
 * under the locks, against the TTL before its touch (its new object carries
 * the token, no extra round trip), and a stale item's token goes the same
 * way; a touch or a GAT marks the item read ("h"); an invalidation keeps the
 * mark; a vivifying INCR says it created the item. */
Test(meta, touch_takes_the_token_and_marks_the_item_read)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4);
	char v[64];
	struct kvc_op gat = { .type = KVC_OP_GAT, .key = "g", .key_len = 1, .buf = v, .buf_len = sizeof(v) - 1,
			      .ttl_ms = 300000, .meta = KVC_META_RECACHE, .recache_ms = 200000 };
	struct kvc_op incr = { .type = KVC_OP_INCR, .key = "n", .key_len = 1, .delta = 1, .initial = 5,
			       .mode = KVC_ARITH_VIVIFY };
	struct kvc_stats s0, s1;

	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "g", 1, "v", 1, 0, 100000, 0, NULL), 0);
	kvc_get_stats(a, &s0);
	cr_assert_eq(run(a, &gat), 0, "%s", kvc_err_name(gat.status));
	kvc_get_stats(a, &s1);
	cr_expect_eq(gat.item & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED), KVC_ITEM_WON,
		     "100 s left, threshold 200 s: won (item bits %#x)", gat.item);
	{ /* the expiry before the touch ("mg t T": t first shows the old TTL) */
		uint64_t now_ms = (uint64_t)time(NULL) * 1000u;

		cr_expect(gat.expiry_ms > now_ms + 90000 && gat.expiry_ms < now_ms + 110000,
			  "expiry %llu, now %llu: the one before the touch", (unsigned long long)gat.expiry_ms,
			  (unsigned long long)now_ms);
	}
	cr_expect_eq(s1.ops[KVC_STAT_RMW] + s1.ops[KVC_STAT_RMW_CACHED] - s0.ops[KVC_STAT_RMW] - s0.ops[KVC_STAT_RMW_CACHED],
		     1, "one read-modify-write, no CAS of its own");
	cr_expect_eq(get_item_bits(b, "g", 0, 0, v, sizeof(v)) & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED),
		     KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED, "the token is out; the GAT was a fetch");
	gat.status = 0;
	cr_assert_eq(run(b, &gat), 0);
	cr_expect_eq(gat.item & (KVC_ITEM_WON | KVC_ITEM_WIN_SENT), KVC_ITEM_WIN_SENT, "300 s left now: Z, not W");

	/* a touch marks read; an invalidation keeps it; its stale item's token to the next GAT */
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "t", 1, "v", 1, 0, 0, 0, NULL), 0);
	cr_assert_eq(kvc_touch(a, "t", 1, 100000), 0);
	cr_expect(get_item_bits(b, "t", 0, 0, v, sizeof(v)) & KVC_ITEM_FETCHED, "touched: read before");
	cr_assert_eq(invalidate(a, "t", 0, 0), 0);
	cr_expect_eq(get_item_bits(b, "t", 0, 0, v, sizeof(v)) & (KVC_ITEM_FETCHED | KVC_ITEM_STALE | KVC_ITEM_WON),
		     KVC_ITEM_FETCHED | KVC_ITEM_STALE | KVC_ITEM_WON, "invalidated: still read before, stale, won");

	cr_assert_eq(run(a, &incr), 0);
	cr_expect_eq(incr.result, 5);
	cr_expect(incr.item & KVC_ITEM_CREATED, "vivified: created");
	incr.status = 0;
	cr_assert_eq(run(a, &incr), 0);
	cr_expect_eq(incr.result, 6);
	cr_expect_eq(incr.item & KVC_ITEM_CREATED, 0, "found: not created");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* KVC_META_NO_BUMP ("mg u"): a GET, a GAT, a recache token won and a
 * vivified item leave the item unread; the next plain GET marks it. */
Test(meta, no_bump_leaves_the_item_unread)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4), *b = kvt_client(&env, NULL, 0, 4);
	const uint32_t seen = KVC_ITEM_FETCHED | KVC_ITEM_WON | KVC_ITEM_WIN_SENT;
	char v[64];
	struct kvc_op gat = { .type = KVC_OP_GAT, .key = "u", .key_len = 1, .buf = v, .buf_len = sizeof(v) - 1,
			      .ttl_ms = 100000, .meta = KVC_META_NO_BUMP };
	struct kvc_op viv = { .type = KVC_OP_PUT, .mode = KVC_STORE_ADD, .key = "w", .key_len = 1, .value = "",
			      .ttl_ms = 30000, .meta = KVC_META_WON | KVC_META_NO_BUMP };

	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "u", 1, "x", 1, 0, 0, 0, NULL), 0);
	cr_expect_eq(get_item_bits(a, "u", KVC_META_NO_BUMP, 0, v, sizeof(v)) & seen, 0);
	cr_assert_eq(run(a, &gat), 0, "%s", kvc_err_name(gat.status));
	cr_expect_eq(gat.item & seen, 0, "a GAT with u after a GET with u: unread");
	cr_expect_eq(get_item_bits(b, "u", 0, 0, v, sizeof(v)) & seen, 0, "the touch did not mark it");
	cr_expect_eq(get_item_bits(b, "u", KVC_META_NO_BUMP, 0, v, sizeof(v)) & seen, KVC_ITEM_FETCHED,
		     "a plain GET marks it");

	/* a token won with u: taken, the item not read; the next GET reads it */
	cr_assert_eq(kvc_store(a, KVC_STORE_SET, "r", 1, "x", 1, 0, 100000, 0, NULL), 0);
	cr_expect_eq(get_item_bits(a, "r", KVC_META_RECACHE | KVC_META_NO_BUMP, 200000, v, sizeof(v)) & seen,
		     KVC_ITEM_WON);
	cr_expect_eq(get_item_bits(b, "r", 0, 0, v, sizeof(v)) & seen, KVC_ITEM_WIN_SENT);
	cr_expect_eq(get_item_bits(b, "r", 0, 0, v, sizeof(v)) & seen, KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED,
		     "the plain GET marked it read, the token kept");

	/* vivified with u ("mg N u"): the token out, not read */
	cr_assert_eq(run(a, &viv), 0, "%s", kvc_err_name(viv.status));
	cr_expect_eq(get_item_bits(b, "w", 0, 0, v, sizeof(v)) & seen, KVC_ITEM_WIN_SENT);
	cr_expect_eq(get_item_bits(b, "w", 0, 0, v, sizeof(v)) & seen, KVC_ITEM_WIN_SENT | KVC_ITEM_FETCHED);

	gat.meta = KVC_META_NO_BUMP | KVC_META_INVALIDATE;
	gat.status = 0;
	cr_expect_eq(kvc_submit(a, &gat), KVC_EINVAL);
	kvc_destroy(a);
	kvc_destroy(b);
}

/* KVC_TTL_EXPIRED (memcached's negative exptime): stored, and from then on a
 * miss to every read; an add then finds the key free. */
Test(meta, an_item_written_already_expired_is_a_miss_at_once)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	char v[8];
	size_t n;

	cr_assert_eq(kvc_store(a, KVC_STORE_ADD, "x", 1, "v", 1, 0, KVC_TTL_EXPIRED, 0, NULL), 0);
	cr_expect_eq(kvc_get(a, "x", 1, v, sizeof(v), &n), KVC_ENOTFOUND);
	cr_expect_eq(kvc_store(a, KVC_STORE_ADD, "x", 1, "w", 1, 0, 0, 0, NULL), 0, "the key is free");
	cr_assert_eq(kvc_get(a, "x", 1, v, sizeof(v), &n), 0);
	cr_expect_eq(v[0], 'w');
	cr_assert_eq(kvc_touch(a, "x", 1, KVC_TTL_EXPIRED), 0);
	cr_expect_eq(kvc_get(a, "x", 1, v, sizeof(v), &n), KVC_ENOTFOUND, "touched expired");
	kvc_destroy(a);
}
