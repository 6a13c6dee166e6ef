/* Linearizability, checked: first the checker itself on histories whose
 * answer is known (so that it can fail), then many seeded concurrent
 * histories of real clients over the in-process transport, with TTLs of a
 * few milliseconds expiring mid-history, READs and WRITEs stretched at random
 * by hooks, and (every other seed) the server's reclaimer moving items
 * underneath; then histories with two operations in flight per client and
 * commits executing late while the reclaimer runs; then histories of
 * memcached items (kvc_get_item, conditional stores, CAS read-modify-write
 * loops) with the reclaimer running; then the same with counters (incr,
 * decr, touch mixed in). Every history must be linearizable (lincheck.h for
 * the model). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "lincheck.h"
#include "recorder.h"

#define MSN 1000000ull

static struct lc_op mk(int kind, unsigned key, int result, uint64_t value, uint64_t ttl_ms, double inv_ms,
		       double cmp_ms)
{
	return (struct lc_op){ .kind = (uint8_t)kind, .key = key, .result = (uint8_t)result, .value = value,
			       .ttl_ns = ttl_ms * MSN, .inv = (uint64_t)(inv_ms * MSN),
			       .cmp = cmp_ms < 0 ? LC_NEVER : (uint64_t)(cmp_ms * MSN) };
}

static int check(struct lc_op *h, size_t n)
{
	struct lc_report rep;

	return lc_check(h, n, 0, &rep);
}

#define CHECK(expect, ...)                                                              \
	do {                                                                            \
		struct lc_op h_[] = { __VA_ARGS__ };                                    \
		cr_expect_eq(check(h_, sizeof(h_) / sizeof(h_[0])), expect, "line %d", __LINE__); \
	} while (0)

Test(lincheck, registers_without_ttl)
{
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 2, 3));
	/* a stale read after a newer write completed */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, 3), mk(LC_GET, 1, LC_OK, 1, 0, 4, 5));
	/* concurrent writes: the read may order either way ... */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 0.5, 30), mk(LC_GET, 1, LC_OK, 1, 0, 2, 3));
	/* ... but two reads cannot see them in opposite orders */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 10), mk(LC_PUT, 1, 0, 2, 0, 0, 10), mk(LC_GET, 1, LC_OK, 1, 0, 11, 12),
	      mk(LC_GET, 1, LC_OK, 2, 0, 13, 14), mk(LC_GET, 1, LC_OK, 1, 0, 15, 16));
	/* a value nobody wrote; a miss of an acknowledged key */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_OK, 9, 0, 2, 3));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 2, 3));
	/* deletes */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_DELETE, 1, LC_OK, 0, 0, 2, 3), mk(LC_GET, 1, LC_ABSENT, 0, 0, 4, 5),
	      mk(LC_DELETE, 1, LC_ABSENT, 0, 0, 6, 7));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_DELETE, 1, LC_OK, 0, 0, 2, 3), mk(LC_GET, 1, LC_OK, 1, 0, 4, 5));
	CHECK(0, mk(LC_DELETE, 1, LC_OK, 0, 0, 2, 3));
	/* keys are independent */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 2, 0, 2, 0, 0, 1), mk(LC_GET, 2, LC_OK, 2, 0, 2, 3),
	      mk(LC_GET, 1, LC_OK, 1, 0, 2, 3));
}

Test(lincheck, unknown_outcomes_may_or_may_not_take_effect)
{
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, -1), mk(LC_GET, 1, LC_OK, 1, 0, 10, 11));
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, -1), mk(LC_GET, 1, LC_OK, 1, 0, 10, 11),
	      mk(LC_GET, 1, LC_OK, 2, 0, 12, 13));
	/* once seen to have taken effect, it cannot be undone */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, -1), mk(LC_GET, 1, LC_OK, 2, 0, 10, 11),
	      mk(LC_GET, 1, LC_OK, 1, 0, 12, 13));
	/* nor take effect before it was invoked */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_OK, 2, 0, 2, 3), mk(LC_PUT, 1, 0, 2, 0, 4, -1));
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_DELETE, 1, 0, 0, 0, 2, -1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 10, 11));
}

Test(lincheck, ttl_as_layout_h_defines_it)
{
	/* alive well before ttl, gone well after */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 50, 51), mk(LC_GET, 1, LC_ABSENT, 0, 0, 200, 201));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 200, 201));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 50, 51));
	/* near the expiry the window [inv + ttl, cmp + ttl + 1 ms] decides, and
	 * narrows: alive at 100.5, gone at 100.8 is fine; alive again at 101 is not */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 100.5, 100.6),
	      mk(LC_GET, 1, LC_ABSENT, 0, 0, 100.7, 100.8));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 100.5, 100.6),
	      mk(LC_GET, 1, LC_OK, 1, 0, 100.7, 100.8));
	/* The history that broke TTLs once: k held a TTL item not yet expired, then a newer
	 * value without TTL was acknowledged; a concurrent GET that missed fits
	 * no order (before the newer write the item was alive; after it, the
	 * newer value is). */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 1000, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, 3), mk(LC_GET, 1, LC_ABSENT, 0, 0, 2.5, 1500));
	/* had the newer write not completed before the item expired, the miss fits */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 1000, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, 1200), mk(LC_GET, 1, LC_ABSENT, 0, 0, 2.5, 1500));
}

Test(lincheck, history_lines_round_trip)
{
	struct lc_op a = mk(LC_PUT, 7, 0, 123456789012ull, 5, 1.5, -1), b;
	char line[256];

	lc_format(&a, line, sizeof(line));
	cr_assert_eq(lc_parse(line, &b), 0, "%s", line);
	cr_expect(memcmp(&a, &b, sizeof(a)) == 0, "%s", line);
	cr_expect_neq(lc_parse("c=1 k=1 op=X r=0 v=0 ttl=0 inv=1 cmp=2", &b), 0);
	cr_expect_neq(lc_parse("c=1 k=1 op=G r=0 v=0 ttl=0 inv=5 cmp=2", &b), 0, "completes before it starts");
}

/* ---- memcached items: uniques and conditional stores ---------------------- */

/* o with its item fields: uniq (a store's new unique, a GET's read one) and
 * expect (CAS) */
static struct lc_op U(struct lc_op o, uint64_t uniq, uint64_t expect)
{
	o.uniq = uniq;
	o.expect = expect;
	return o;
}

#define SET(key, v, u, ttl, inv, cmp) U(mk(LC_PUT, key, 0, v, ttl, inv, cmp), u, 0)
#define GETU(key, v, u, inv, cmp) U(mk(LC_GET, key, LC_OK, v, 0, inv, cmp), u, 0)
#define MISS(key, inv, cmp) mk(LC_GET, key, LC_ABSENT, 0, 0, inv, cmp)
#define ADD(key, r, v, u, ttl, inv, cmp) U(mk(LC_ADD, key, r, v, ttl, inv, cmp), u, 0)
#define REPL(key, r, v, u, ttl, inv, cmp) U(mk(LC_REPLACE, key, r, v, ttl, inv, cmp), u, 0)
#define CAS(key, r, v, u, e, inv, cmp) U(mk(LC_CAS, key, r, v, 0, inv, cmp), u, e)
#define DEL(key, r, inv, cmp) mk(LC_DELETE, key, r, 0, 0, inv, cmp)

Test(lincheck, items_legal_histories_pass)
{
	/* one client through every verb and refusal, in turn */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), GETU(1, 1, 11, 2, 3), CAS(1, LC_OK, 2, 12, 11, 4, 5), GETU(1, 2, 12, 6, 7),
	      CAS(1, LC_EXISTS, 0, 0, 11, 8, 9), REPL(1, LC_OK, 3, 13, 0, 10, 11), DEL(1, LC_OK, 12, 13),
	      CAS(1, LC_ABSENT, 0, 0, 13, 14, 15), REPL(1, LC_NOTSTORED, 0, 0, 0, 16, 17),
	      ADD(1, LC_OK, 4, 14, 0, 18, 19), ADD(1, LC_NOTSTORED, 0, 0, 0, 20, 21), GETU(1, 4, 14, 22, 23));
	/* two CAS racing from one read: one stores, the other finds another unique */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), GETU(1, 1, 11, 2, 3), CAS(1, LC_EXISTS, 0, 0, 11, 4, 10),
	      CAS(1, LC_OK, 2, 12, 11, 5, 9), GETU(1, 2, 12, 11, 12));
	/* two ADD racing on an absent key: one stores */
	CHECK(1, ADD(1, LC_NOTSTORED, 0, 0, 0, 0, 10), ADD(1, LC_OK, 2, 12, 0, 1, 9), GETU(1, 2, 12, 11, 12));
	/* concurrent with a SET, a REPLACE may find the key either way */
	CHECK(1, REPL(1, LC_OK, 2, 12, 0, 0, 10), SET(1, 1, 11, 0, 1, 9), GETU(1, 2, 12, 11, 12));
	CHECK(1, REPL(1, LC_NOTSTORED, 0, 0, 0, 0, 10), SET(1, 1, 11, 0, 1, 9), GETU(1, 1, 11, 11, 12));
	/* an expired item is absent to conditional stores: ADD stores, REPLACE
	 * and CAS are refused; alive, the other way round */
	CHECK(1, SET(1, 1, 11, 100, 0, 1), ADD(1, LC_NOTSTORED, 0, 0, 0, 50, 51), ADD(1, LC_OK, 2, 12, 0, 200, 201),
	      GETU(1, 2, 12, 300, 301));
	CHECK(1, SET(1, 1, 11, 100, 0, 1), REPL(1, LC_OK, 2, 12, 100, 50, 51), CAS(1, LC_ABSENT, 0, 0, 12, 200, 201),
	      REPL(1, LC_NOTSTORED, 0, 0, 0, 202, 203), MISS(1, 204, 205));
	/* a store with a TTL sets its own expiry: REPLACE's item lives 100 ms from
	 * its own point */
	CHECK(1, SET(1, 1, 11, 100, 0, 1), REPL(1, LC_OK, 2, 12, 100, 90, 91), GETU(1, 2, 12, 150, 151),
	      MISS(1, 200, 201));
	/* GETs that record no unique check values only (histories without items) */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 2, 3), SET(1, 2, 12, 0, 4, 5),
	      mk(LC_GET, 1, LC_OK, 2, 0, 6, 7));
}

Test(lincheck, items_illegal_histories_are_caught)
{
	/* two CAS with the same expected unique both store */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, LC_OK, 2, 12, 11, 2, 10), CAS(1, LC_OK, 3, 13, 11, 3, 11));
	/* ... even one after the other, or after a newer store */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, LC_OK, 2, 12, 11, 2, 3), CAS(1, LC_OK, 3, 13, 11, 4, 5));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), SET(1, 2, 12, 0, 2, 3), CAS(1, LC_OK, 3, 13, 11, 4, 5));
	/* CAS refusals that lie: EXISTS with the item's own unique; NOTFOUND on a live item */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, LC_EXISTS, 0, 0, 11, 2, 3));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, LC_ABSENT, 0, 0, 11, 2, 3));
	CHECK(0, SET(1, 1, 11, 100, 0, 1), CAS(1, LC_ABSENT, 0, 0, 11, 50, 51));
	/* ADD stores while a live value is present (without, and with a TTL not run out) */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), ADD(1, LC_OK, 2, 12, 0, 2, 3));
	CHECK(0, SET(1, 1, 11, 100, 0, 1), ADD(1, LC_OK, 2, 12, 0, 50, 51));
	/* two racing ADDs on an absent key both store */
	CHECK(0, ADD(1, LC_OK, 1, 11, 0, 0, 10), ADD(1, LC_OK, 2, 12, 0, 1, 9));
	/* ADD refused on an absent key: never stored, deleted, expired */
	CHECK(0, ADD(1, LC_NOTSTORED, 0, 0, 0, 0, 1));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), DEL(1, LC_OK, 2, 3), ADD(1, LC_NOTSTORED, 0, 0, 0, 4, 5));
	CHECK(0, SET(1, 1, 11, 100, 0, 1), ADD(1, LC_NOTSTORED, 0, 0, 0, 200, 201));
	/* REPLACE stores on an absent key: never stored, deleted, expired */
	CHECK(0, REPL(1, LC_OK, 1, 11, 0, 0, 1));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), DEL(1, LC_OK, 2, 3), REPL(1, LC_OK, 2, 12, 0, 4, 5));
	CHECK(0, SET(1, 1, 11, 100, 0, 1), REPL(1, LC_OK, 2, 12, 0, 200, 201));
	/* REPLACE refused on a live item */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), REPL(1, LC_NOTSTORED, 0, 0, 0, 2, 3));
	/* a GET returns a unique no store produced */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), GETU(1, 1, 19, 2, 3));
	/* ... or a stale one after a newer store completed: the values are equal,
	 * the uniques tell them apart (without uniques it passes) */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), SET(1, 1, 12, 0, 2, 3), GETU(1, 1, 11, 4, 5));
	CHECK(1, SET(1, 1, 11, 0, 0, 1), SET(1, 1, 12, 0, 2, 3), GETU(1, 1, 0, 4, 5));
	/* ... or the unique of what a CAS replaced */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, LC_OK, 1, 12, 11, 2, 3), GETU(1, 1, 11, 4, 5));
	/* two stores told one unique (of one key, of two keys) */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), SET(1, 2, 11, 0, 2, 3));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), SET(2, 2, 11, 0, 2, 3));
	/* a GET of one key returns the unique of another key's item */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), SET(2, 1, 12, 0, 0, 1), GETU(2, 1, 11, 2, 3));
}

Test(lincheck, items_with_unknown_outcomes)
{
	/* a CAS whose outcome is unknown may have stored: its unique, not told,
	 * is learnt from the first GET that sees its item ... */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), CAS(1, 0, 2, 0, 11, 2, -1), GETU(1, 2, 17, 10, 11), GETU(1, 2, 17, 12, 13));
	/* ... and cannot change afterwards */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, 0, 2, 0, 11, 2, -1), GETU(1, 2, 17, 10, 11), GETU(1, 2, 18, 12, 13));
	/* ... nor be one another store was told */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, 0, 2, 0, 11, 2, -1), SET(1, 3, 13, 0, 20, 21), GETU(1, 2, 13, 10, 11));
	/* or it may not have stored */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), CAS(1, 0, 2, 0, 11, 2, -1), GETU(1, 1, 11, 10, 11));
	/* if it stored, its condition held: not after another CAS took the unique away */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), CAS(1, 0, 2, 0, 11, 2, -1), CAS(1, LC_OK, 3, 13, 11, 5, 6),
	      GETU(1, 3, 13, 7, 8));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), CAS(1, 0, 2, 0, 11, 2, -1), CAS(1, LC_OK, 3, 13, 11, 5, 6),
	      GETU(1, 3, 13, 7, 8), GETU(1, 2, 17, 10, 11));
	/* a CAS of the unique an unknown store made: the unique learnt by a GET */
	CHECK(1, SET(1, 1, 11, 0, 0, 1), SET(1, 2, 0, 0, 2, -1), GETU(1, 2, 17, 10, 11), CAS(1, LC_OK, 3, 13, 17, 12, 13),
	      GETU(1, 3, 13, 14, 15));
	CHECK(0, SET(1, 1, 11, 0, 0, 1), SET(1, 2, 0, 0, 2, -1), GETU(1, 2, 17, 10, 11), CAS(1, LC_OK, 3, 13, 18, 12, 13));
	/* an ADD whose outcome is unknown cannot have stored over a live item ... */
	CHECK(0, SET(1, 1, 11, 0, 0, 1), ADD(1, 0, 2, 0, 0, 2, -1), GETU(1, 2, 17, 10, 11));
	/* ... but over an expired one it can, or not at all */
	CHECK(1, SET(1, 1, 11, 100, 0, 1), ADD(1, 0, 2, 0, 0, 2, -1), GETU(1, 2, 17, 200, 201));
	CHECK(1, SET(1, 1, 11, 100, 0, 1), ADD(1, 0, 2, 0, 0, 2, -1), MISS(1, 200, 201));
	/* a REPLACE whose outcome is unknown cannot have stored on an absent key */
	CHECK(0, REPL(1, 0, 2, 0, 0, 0, -1), GETU(1, 2, 17, 10, 11));
	CHECK(1, SET(1, 1, 11, 0, 0, 1), REPL(1, 0, 2, 0, 0, 0, -1), GETU(1, 2, 17, 10, 11));
}

Test(lincheck, item_history_lines)
{
	struct lc_op a = CAS(3, LC_EXISTS, 9, 0, 77, 1.5, 2.5), b;
	struct lc_op g = GETU(3, 9, 123456789012345ull, 1.5, -1);
	const char *old = "c=2 k=5 op=G r=0 v=42 ttl=0 inv=100 cmp=200\n";
	char line[LC_LINE_MAX];

	lc_format(&a, line, sizeof(line));
	cr_assert_eq(lc_parse(line, &b), 0, "%s", line);
	cr_expect(memcmp(&a, &b, sizeof(a)) == 0, "%s", line);
	cr_expect(strstr(line, " cas=77\n") != NULL, "%s", line);
	lc_format(&g, line, sizeof(line));
	cr_assert_eq(lc_parse(line, &b), 0, "%s", line);
	cr_expect(memcmp(&g, &b, sizeof(g)) == 0, "%s", line);
	/* a line without item fields reads and writes as it always did */
	cr_assert_eq(lc_parse(old, &b), 0);
	cr_expect_eq(b.uniq, 0);
	lc_format(&b, line, sizeof(line));
	cr_expect_str_eq(line, old);
	cr_expect_eq(lc_parse("c=1 k=1 op=A r=2 v=0 ttl=0 inv=1 cmp=2", &b), 0);
	cr_expect_eq(b.kind, LC_ADD);
	cr_expect_eq(lc_parse("c=1 k=1 op=R r=0 v=5 ttl=9 inv=1 cmp=-1 u=4\r\n", &b), 0);
	cr_expect(b.kind == LC_REPLACE && b.uniq == 4 && b.cmp == LC_NEVER);
	cr_expect_neq(lc_parse("c=1 k=1 op=C r=0 v=5 ttl=0 inv=1 cmp=2 u=4", &b), 0, "a CAS names its expected unique");
	cr_expect_neq(lc_parse("c=1 k=1 op=A r=3 v=0 ttl=0 inv=1 cmp=2", &b), 0, "ADD is not refused with EXISTS");
	cr_expect_neq(lc_parse("c=1 k=1 op=R r=1 v=0 ttl=0 inv=1 cmp=2", &b), 0, "REPLACE is not refused with ABSENT");
	cr_expect_neq(lc_parse("c=1 k=1 op=G r=2 v=0 ttl=0 inv=1 cmp=2", &b), 0);
	cr_expect_neq(lc_parse("c=1 k=1 op=G r=0 v=0 ttl=0 inv=1 cmp=2 cas=3", &b), 0, "cas= only on a CAS");
	cr_expect_neq(lc_parse("c=1 k=1 op=G r=0 v=0 ttl=0 inv=1 cmp=2 x", &b), 0, "trailing words");
}

/* ---- read-modify-writes: incr, decr, touch --------------------------------- */

static struct lc_op D(struct lc_op o, uint64_t delta)
{
	o.delta = delta;
	return o;
}

/* INCR / DECR told the new value v and the new unique u; TOUCH to ttl ms */
#define INCR(key, r, v, u, d, inv, cmp) D(U(mk(LC_INCR, key, r, v, 0, inv, cmp), u, 0), d)
#define DECR(key, r, v, u, d, inv, cmp) D(U(mk(LC_DECR, key, r, v, 0, inv, cmp), u, 0), d)
#define TOUCH(key, r, ttl, inv, cmp) mk(LC_TOUCH, key, r, 0, ttl, inv, cmp)
/* o with the arithmetic's mode: initial (LC_VIVIFY) and ttl ms */
static struct lc_op M(struct lc_op o, uint32_t mode, uint64_t initial, uint64_t ttl_ms)
{
	o.mode = mode;
	o.initial = initial;
	o.ttl_ns = ttl_ms * MSN;
	return o;
}

/* GAT read v with unique u and touched the item to ttl ms */
#define GAT(key, r, v, u, ttl, inv, cmp) U(mk(LC_GAT, key, r, v, ttl, inv, cmp), u, 0)

Test(lincheck, rmw_legal_histories_pass)
{
	/* one client: the arithmetic, decr stopping at 0, incr wrapping at 2^64 */
	CHECK(1, SET(1, 5, 11, 0, 0, 1), INCR(1, LC_OK, 8, 12, 3, 2, 3), GETU(1, 8, 12, 4, 5),
	      DECR(1, LC_OK, 6, 13, 2, 6, 7), DECR(1, LC_OK, 0, 14, 10, 8, 9), GETU(1, 0, 14, 10, 11),
	      SET(1, UINT64_MAX - 1, 15, 0, 12, 13), INCR(1, LC_OK, 1, 16, 3, 14, 15), GETU(1, 1, 16, 16, 17));
	/* on no item, or a deleted or expired one: absent, changing nothing */
	CHECK(1, INCR(1, LC_ABSENT, 0, 0, 1, 0, 1), DECR(1, LC_ABSENT, 0, 0, 1, 2, 3), TOUCH(1, LC_ABSENT, 0, 4, 5),
	      MISS(1, 6, 7));
	CHECK(1, SET(1, 5, 11, 0, 0, 1), DEL(1, LC_OK, 2, 3), INCR(1, LC_ABSENT, 0, 0, 1, 4, 5));
	CHECK(1, SET(1, 5, 11, 100, 0, 1), INCR(1, LC_ABSENT, 0, 0, 1, 200, 201), TOUCH(1, LC_ABSENT, 500, 202, 203),
	      MISS(1, 204, 205));
	/* two concurrent increments: each told its own step, in either order */
	CHECK(1, SET(1, 10, 11, 0, 0, 1), INCR(1, LC_OK, 13, 13, 2, 2, 10), INCR(1, LC_OK, 11, 12, 1, 3, 9),
	      GETU(1, 13, 13, 11, 12));
	CHECK(1, SET(1, 10, 11, 0, 0, 1), INCR(1, LC_OK, 12, 12, 2, 2, 10), INCR(1, LC_OK, 13, 13, 1, 3, 9),
	      GETU(1, 13, 13, 11, 12));
	/* incr keeps the item's expiry: gone at 150 after a TTL of 100 */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), INCR(1, LC_OK, 6, 12, 1, 50, 51), GETU(1, 6, 12, 60, 61), MISS(1, 150, 151));
	/* touch: a new expiry from its own point, value and unique kept; 0: never */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_OK, 200, 50, 51), GETU(1, 5, 11, 150, 151), MISS(1, 260, 261));
	CHECK(1, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_OK, 0, 50, 51), GETU(1, 5, 11, 5000, 5001));
	CHECK(1, SET(1, 5, 11, 0, 0, 1), TOUCH(1, LC_OK, 100, 10, 11), GETU(1, 5, 11, 50, 51), MISS(1, 200, 201));
	/* a touch racing the item's expiry may find it either way */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_OK, 500, 99, 102), GETU(1, 5, 11, 300, 301));
	CHECK(1, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_ABSENT, 500, 99, 102), MISS(1, 300, 301));
	/* the arithmetic's unique is an item's like a store's: CAS with it */
	CHECK(1, SET(1, 5, 11, 0, 0, 1), INCR(1, LC_OK, 6, 12, 1, 2, 3), CAS(1, LC_EXISTS, 0, 0, 11, 4, 5),
	      CAS(1, LC_OK, 9, 13, 12, 6, 7), DECR(1, LC_OK, 8, 14, 1, 8, 9), GETU(1, 8, 14, 10, 11));
	/* get-and-touch: reads the item and gives it a new expiry */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), GAT(1, LC_OK, 5, 11, 500, 50, 51), GETU(1, 5, 11, 300, 301),
	      GAT(1, LC_OK, 5, 11, 10, 302, 303), MISS(1, 400, 401), GAT(1, LC_ABSENT, 0, 0, 0, 402, 403));
	CHECK(1, SET(1, 5, 0, 0, 0, -1), GAT(1, LC_OK, 5, 17, 0, 10, 11), GETU(1, 5, 17, 12, 13));
	/* ADD after an incr's item expired; REPLACE of a touched one */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), INCR(1, LC_OK, 6, 12, 1, 2, 3), ADD(1, LC_OK, 7, 13, 0, 200, 201),
	      REPL(1, LC_OK, 8, 14, 10, 202, 203), TOUCH(1, LC_OK, 0, 204, 205), GETU(1, 8, 14, 300, 301));
}

Test(lincheck, rmw_illegal_histories_are_caught)
{
	/* a lost increment: two increments of 1, one after the other, both told 11 */
	CHECK(0, SET(1, 10, 11, 0, 0, 1), INCR(1, LC_OK, 11, 12, 1, 2, 3), INCR(1, LC_OK, 11, 13, 1, 4, 5));
	/* ... or concurrent (both read 10) */
	CHECK(0, SET(1, 10, 11, 0, 0, 1), INCR(1, LC_OK, 11, 12, 1, 2, 10), INCR(1, LC_OK, 11, 13, 1, 3, 9));
	/* ... or seen by a read after both */
	CHECK(0, SET(1, 10, 11, 0, 0, 1), INCR(1, LC_OK, 11, 12, 1, 2, 10), INCR(1, LC_OK, 12, 13, 1, 3, 9),
	      GETU(1, 11, 12, 11, 12));
	/* a double-applied increment (told 11, the item says 12) */
	CHECK(0, SET(1, 10, 11, 0, 0, 1), INCR(1, LC_OK, 11, 12, 1, 2, 3), mk(LC_GET, 1, LC_OK, 12, 0, 4, 5));
	/* ... and one whose outcome is unknown applies once at most */
	CHECK(0, SET(1, 10, 11, 0, 0, 1), INCR(1, 0, 0, 0, 1, 2, -1), mk(LC_GET, 1, LC_OK, 12, 0, 4, 5));
	/* wrong arithmetic: no wrap, a decr below 0, a decr by the wrong delta */
	CHECK(0, SET(1, UINT64_MAX, 11, 0, 0, 1), INCR(1, LC_OK, UINT64_MAX, 12, 1, 2, 3));
	CHECK(0, SET(1, 3, 11, 0, 0, 1), DECR(1, LC_OK, UINT64_MAX - 1, 12, 5, 2, 3));
	CHECK(0, SET(1, 9, 11, 0, 0, 1), DECR(1, LC_OK, 7, 12, 1, 2, 3));
	/* told OK with no item: never stored, deleted, expired */
	CHECK(0, INCR(1, LC_OK, 1, 11, 1, 0, 1));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), DEL(1, LC_OK, 2, 3), DECR(1, LC_OK, 4, 12, 1, 4, 5));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), INCR(1, LC_OK, 6, 12, 1, 200, 201));
	/* told absent on a live item */
	CHECK(0, SET(1, 5, 11, 0, 0, 1), INCR(1, LC_ABSENT, 0, 0, 1, 2, 3));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_ABSENT, 0, 50, 51));
	/* an incr that extended the item's life (it keeps the expiry) */
	CHECK(0, SET(1, 5, 11, 100, 0, 1), INCR(1, LC_OK, 6, 12, 1, 50, 51), GETU(1, 6, 12, 200, 201));
	/* an incr's item with the old unique, or a unique another store was told */
	CHECK(0, SET(1, 5, 11, 0, 0, 1), INCR(1, LC_OK, 6, 12, 1, 2, 3), GETU(1, 6, 11, 4, 5));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), INCR(1, LC_OK, 6, 11, 1, 2, 3));
	/* a CAS with the unique an incr replaced */
	CHECK(0, SET(1, 5, 11, 0, 0, 1), INCR(1, LC_OK, 6, 12, 1, 2, 3), CAS(1, LC_OK, 9, 13, 11, 4, 5));
	/* a touch that brought a dead item back */
	CHECK(0, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_OK, 1000, 200, 201));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), MISS(1, 150, 151), TOUCH(1, LC_OK, 1000, 152, 153), GETU(1, 5, 11, 160, 161));
	/* a touch that was not made: the old expiry still holds, or the new one does not */
	CHECK(0, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_OK, 500, 50, 51), MISS(1, 150, 151));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), TOUCH(1, LC_OK, 100, 10, 11), GETU(1, 5, 11, 200, 201));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), TOUCH(1, LC_OK, 200, 50, 51), GETU(1, 5, 11, 300, 301));
	/* a GAT that read what is not there, or whose touch was not made */
	CHECK(0, SET(1, 5, 11, 0, 0, 1), GAT(1, LC_OK, 6, 11, 0, 2, 3));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), GAT(1, LC_OK, 5, 12, 0, 2, 3));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), GAT(1, LC_OK, 5, 11, 1000, 200, 201));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), GAT(1, LC_ABSENT, 0, 0, 0, 2, 3));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), GAT(1, LC_OK, 5, 11, 500, 50, 51), MISS(1, 300, 301));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), GAT(1, LC_OK, 5, 11, 50, 2, 3), GETU(1, 5, 11, 200, 201));
	/* a touch that changed the value or the unique */
	CHECK(0, SET(1, 5, 11, 0, 0, 1), TOUCH(1, LC_OK, 0, 2, 3), GETU(1, 5, 19, 4, 5));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), TOUCH(1, LC_OK, 0, 2, 3), GETU(1, 6, 11, 4, 5));
}

Test(lincheck, rmw_with_unknown_outcomes)
{
	/* an incr whose outcome is unknown took effect (its unique learnt), or never did */
	CHECK(1, SET(1, 5, 11, 0, 0, 1), INCR(1, 0, 0, 0, 1, 2, -1), GETU(1, 6, 17, 10, 11), GETU(1, 6, 17, 12, 13));
	CHECK(1, SET(1, 5, 11, 0, 0, 1), INCR(1, 0, 0, 0, 1, 2, -1), GETU(1, 5, 11, 10, 11));
	/* ... but not undone once seen, nor before its invocation */
	CHECK(0, SET(1, 5, 11, 0, 0, 1), INCR(1, 0, 0, 0, 1, 2, -1), GETU(1, 6, 17, 10, 11), GETU(1, 5, 11, 12, 13));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), mk(LC_GET, 1, LC_OK, 6, 0, 2, 3), INCR(1, 0, 0, 0, 1, 4, -1));
	/* ... nor on an absent key */
	CHECK(0, INCR(1, 0, 0, 0, 1, 0, -1), mk(LC_GET, 1, LC_OK, 1, 0, 10, 11));
	/* a later incr told the result of both */
	CHECK(1, SET(1, 5, 11, 0, 0, 1), DECR(1, 0, 0, 0, 2, 2, -1), INCR(1, LC_OK, 4, 12, 1, 10, 11));
	CHECK(1, SET(1, 5, 11, 0, 0, 1), DECR(1, 0, 0, 0, 2, 2, -1), INCR(1, LC_OK, 6, 12, 1, 10, 11));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), DECR(1, 0, 0, 0, 2, 2, -1), INCR(1, LC_OK, 5, 12, 1, 10, 11));
	/* a touch whose outcome is unknown: the item lives on, or expires as it would have */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), TOUCH(1, 0, 0, 50, -1), GETU(1, 5, 11, 500, 501));
	CHECK(1, SET(1, 5, 11, 100, 0, 1), TOUCH(1, 0, 0, 50, -1), MISS(1, 500, 501));
	CHECK(1, SET(1, 5, 11, 100, 0, 1), GAT(1, 0, 0, 0, 0, 50, -1), GETU(1, 5, 11, 500, 501));
	CHECK(1, SET(1, 5, 11, 100, 0, 1), GAT(1, 0, 0, 0, 0, 50, -1), MISS(1, 500, 501));
	/* ... but it cannot bring an expired item back */
	CHECK(0, SET(1, 5, 11, 100, 0, 1), MISS(1, 150, 151), TOUCH(1, 0, 0, 152, -1), GETU(1, 5, 11, 500, 501));
}

/* kvc_op.mode of INCR / DECR: vivify on a miss, touch on a hit */
Test(lincheck, rmw_arithmetic_modes)
{
	/* vivify: a miss stores the initial value (with its own TTL), a hit counts */
	CHECK(1, M(INCR(1, LC_OK, 7, 11, 1, 0, 1), LC_VIVIFY, 7, 100), GETU(1, 7, 11, 2, 3),
	      M(INCR(1, LC_OK, 8, 12, 1, 4, 5), LC_VIVIFY, 7, 0), GETU(1, 8, 12, 50, 51), MISS(1, 150, 151),
	      M(DECR(1, LC_OK, 7, 13, 1, 152, 153), LC_VIVIFY, 7, 0), GETU(1, 7, 13, 1000, 1001));
	/* ... so it is never absent, and a hit must count, a miss tell the initial value */
	CHECK(0, M(INCR(1, LC_ABSENT, 0, 0, 1, 0, 1), LC_VIVIFY, 7, 0));
	CHECK(0, M(INCR(1, LC_OK, 8, 11, 1, 0, 1), LC_VIVIFY, 7, 0));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), M(INCR(1, LC_OK, 7, 12, 1, 2, 3), LC_VIVIFY, 7, 0));
	/* two racing on a miss: one stores, the other counts on its item */
	CHECK(1, M(INCR(1, LC_OK, 7, 11, 1, 0, 10), LC_VIVIFY, 7, 0), M(INCR(1, LC_OK, 8, 12, 1, 1, 9), LC_VIVIFY, 7, 0));
	CHECK(0, M(INCR(1, LC_OK, 7, 11, 1, 0, 10), LC_VIVIFY, 7, 0), M(INCR(1, LC_OK, 7, 12, 1, 1, 9), LC_VIVIFY, 7, 0));
	/* when the initial value is what the count would give, either may have
	 * happened: the search tries both (here only the miss fits the read after) */
	CHECK(1, SET(1, 6, 11, 100, 0, 1), M(INCR(1, LC_OK, 7, 12, 1, 99, 103), LC_VIVIFY, 7, 0),
	      GETU(1, 7, 12, 500, 501));
	CHECK(1, SET(1, 6, 11, 100, 0, 1), M(INCR(1, LC_OK, 7, 12, 1, 99, 103), LC_VIVIFY, 7, 0), MISS(1, 500, 501));
	/* unknown: counted, stored the initial value, or nothing */
	CHECK(1, MISS(1, 0, 1), M(INCR(1, 0, 0, 0, 1, 2, -1), LC_VIVIFY, 7, 0), GETU(1, 7, 17, 10, 11));
	CHECK(1, MISS(1, 0, 1), M(INCR(1, 0, 0, 0, 1, 2, -1), LC_VIVIFY, 7, 0), MISS(1, 10, 11));
	CHECK(0, MISS(1, 0, 1), M(INCR(1, 0, 0, 0, 1, 2, -1), LC_VIVIFY, 7, 0), GETU(1, 8, 17, 10, 11));
	CHECK(1, SET(1, 5, 11, 0, 0, 1), M(INCR(1, 0, 0, 0, 1, 2, -1), LC_VIVIFY, 7, 0), GETU(1, 6, 17, 10, 11));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), M(INCR(1, 0, 0, 0, 1, 2, -1), LC_VIVIFY, 7, 0), GETU(1, 7, 17, 10, 11));
	/* touch: a hit also gives the item the TTL; a miss is still a miss */
	CHECK(1, SET(1, 5, 11, 100, 0, 1), M(INCR(1, LC_OK, 6, 12, 1, 50, 51), LC_ARITH_TOUCH, 0, 0),
	      GETU(1, 6, 12, 500, 501), M(DECR(1, LC_OK, 5, 13, 1, 502, 503), LC_ARITH_TOUCH, 0, 10), MISS(1, 600, 601),
	      M(INCR(1, LC_ABSENT, 0, 0, 1, 602, 603), LC_ARITH_TOUCH, 0, 10));
	CHECK(0, SET(1, 5, 11, 100, 0, 1), M(INCR(1, LC_OK, 6, 12, 1, 50, 51), LC_ARITH_TOUCH, 0, 0), MISS(1, 500, 501));
	CHECK(0, SET(1, 5, 11, 0, 0, 1), M(INCR(1, LC_OK, 6, 12, 1, 50, 51), LC_ARITH_TOUCH, 0, 10),
	      GETU(1, 6, 12, 500, 501));
	/* both: a miss stores, a hit counts and touches */
	CHECK(1, M(INCR(1, LC_OK, 3, 11, 1, 0, 1), LC_VIVIFY | LC_ARITH_TOUCH, 3, 10), MISS(1, 50, 51),
	      M(INCR(1, LC_OK, 3, 12, 1, 52, 53), LC_VIVIFY | LC_ARITH_TOUCH, 3, 0),
	      M(INCR(1, LC_OK, 4, 13, 1, 54, 55), LC_VIVIFY | LC_ARITH_TOUCH, 3, 10), GETU(1, 4, 13, 60, 61),
	      MISS(1, 100, 101));
}

Test(lincheck, rmw_history_lines)
{
	struct lc_op in[] = { INCR(3, LC_OK, 18446744073709551615ull, 99, 7, 1.5, 2.5),
			      DECR(3, LC_ABSENT, 0, 0, 1, 1.5, -1), TOUCH(3, LC_OK, 250, 1, 2),
			      TOUCH(3, LC_ABSENT, 0, 1, -1), GAT(3, LC_OK, 8, 1234, 9, 1, 2), GAT(3, LC_ABSENT, 0, 0, 9, 1, 2),
			      M(INCR(3, LC_OK, 5, 6, 1, 1, 2), LC_VIVIFY | LC_ARITH_TOUCH, 5, 3),
			      M(DECR(3, LC_OK, 5, 6, 1, 1, 2), LC_ARITH_TOUCH, 0, 3) },
		     b;
	char line[LC_LINE_MAX];

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		lc_format(&in[i], line, sizeof(line));
		cr_assert_eq(lc_parse(line, &b), 0, "%s", line);
		cr_expect(memcmp(&in[i], &b, sizeof(b)) == 0, "%s", line);
	}
	lc_format(&in[0], line, sizeof(line));
	cr_expect(strstr(line, " op=I ") && strstr(line, " u=99 d=7\n"), "%s", line);
	lc_format(&in[2], line, sizeof(line));
	cr_expect(strstr(line, " op=T ") && strstr(line, " ttl=250000000 "), "%s", line);
	lc_format(&in[4], line, sizeof(line));
	cr_expect(strstr(line, " op=K ") && strstr(line, " ttl=9000000 ") && strstr(line, " u=1234\n"), "%s", line);
	lc_format(&in[6], line, sizeof(line));
	cr_expect(strstr(line, " ttl=3000000 ") && strstr(line, " u=6 d=1 m=3 n=5\n"), "%s", line);
	lc_format(&in[7], line, sizeof(line));
	cr_expect(strstr(line, " d=1 m=2\n"), "%s", line);
	cr_expect_neq(lc_parse("c=1 k=1 op=I r=0 v=4 ttl=0 inv=1 cmp=2 u=5 d=1 m=1", &b), 0, "vivify names n=");
	cr_expect_neq(lc_parse("c=1 k=1 op=I r=0 v=4 ttl=0 inv=1 cmp=2 u=5 d=1 m=2 n=4", &b), 0, "n= only with vivify");
	cr_expect_neq(lc_parse("c=1 k=1 op=I r=0 v=4 ttl=0 inv=1 cmp=2 u=5 d=1 m=4", &b), 0, "modes 1, 2, 3");
	cr_expect_neq(lc_parse("c=1 k=1 op=I r=0 v=4 ttl=0 inv=1 cmp=2 u=5 d=1 m=0", &b), 0, "m=0 is not written");
	cr_expect_eq(lc_parse("c=1 k=1 op=E r=0 v=4 ttl=0 inv=1 cmp=2 u=5 d=1", &b), 0);
	cr_expect(b.kind == LC_DECR && b.value == 4 && b.uniq == 5 && b.delta == 1);
	cr_expect_neq(lc_parse("c=1 k=1 op=I r=0 v=4 ttl=0 inv=1 cmp=2 u=5", &b), 0, "an INCR names its delta");
	cr_expect_neq(lc_parse("c=1 k=1 op=G r=0 v=4 ttl=0 inv=1 cmp=2 d=1", &b), 0, "d= only on I and E");
	cr_expect_neq(lc_parse("c=1 k=1 op=T r=0 v=0 ttl=0 inv=1 cmp=2 u=5", &b), 0, "a TOUCH is told no unique");
	cr_expect_neq(lc_parse("c=1 k=1 op=I r=2 v=0 ttl=0 inv=1 cmp=2 d=1", &b), 0, "INCR is not refused NOTSTORED");
	cr_expect_neq(lc_parse("c=1 k=1 op=T r=3 v=0 ttl=0 inv=1 cmp=2", &b), 0, "TOUCH is not refused EXISTS");
	cr_expect_neq(lc_parse("c=1 k=1 op=K r=2 v=0 ttl=0 inv=1 cmp=2", &b), 0, "GAT is not refused NOTSTORED");
	cr_expect_neq(lc_parse("c=1 k=1 op=E r=0 v=0 ttl=0 inv=1 cmp=2 d=1 cas=3", &b), 0, "cas= only on a CAS");
}

/* ---- concurrent histories of real clients ---------------------------------- */

#define THREADS 4
#define KEYS 3
#define OPS_PER_THREAD 250
#define SEEDS 24

/* Stretch about one operation in 12 by up to 150 us: READs and WRITEs of
 * different clients then overlap in more ways. */
static __thread uint64_t hook_rng;
static int stretch(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	(void)op;
	if (lc_rand(&hook_rng) % 12 == 0)
		usleep((useconds_t)(lc_rand(&hook_rng) % 150));
	return 0;
}

/* ... and hold about one READ in 8 for up to 2 ms after it copied its bytes,
 * before its completion is seen: items expire and are replaced meanwhile. */
static void hold_read(void *arg, const struct kvi_rop *op, void *dst, const void *src)
{
	(void)arg;
	(void)op;
	(void)dst;
	(void)src;
	if (lc_rand(&hook_rng) % 8 == 0)
		usleep((useconds_t)(lc_rand(&hook_rng) % 2000));
}

/* Delayed commits: about one slot WRITE in 6 -- a commit, and the
 * access marks its doorbell carries -- executes up to delay_us late, as a
 * work request retransmitted after lost packets does, while the reclaimer
 * runs. 0: none. */
static uint64_t g_delay_us, g_heap_off;
static int delay_commit(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	if (g_delay_us && op->kind == KVI_ROP_WRITE && op->len == 8 && op->roff < g_heap_off &&
	    lc_rand(&hook_rng) % 6 == 0)
		usleep((useconds_t)(lc_rand(&hook_rng) % g_delay_us));
	return stretch(arg, rm, op);
}

struct worker {
	pthread_t t;
	struct kvt_env *env;
	unsigned id;
	uint64_t seed;
	int slow;
	/* Two operations in flight at once on the handle: the second PUT
	 * (often a large one) may take a new extent, sealing the one the first
	 * reserved its object in before the first commits. */
	int pairs;
	struct lc_op ops[OPS_PER_THREAD];
	size_t n;
	unsigned failed, unknown;
	const char *why;
};

#define BIG_VALUE 16000

/* One operation chosen at random, prepared in *op and *o (key, value and
 * got are its buffers); big: a PUT's value may be up to BIG_VALUE bytes. */
static void pick(struct worker *w, uint64_t *rng, unsigned i, int big, struct kvc_op *op, struct lc_op *o, char *k,
		 char *v, char *got, size_t cap)
{
	unsigned key = (unsigned)(lc_rand(rng) % KEYS), dice = (unsigned)(lc_rand(rng) % 100);

	*o = (struct lc_op){ .key = key, .client = (uint16_t)w->id };
	snprintf(k, 16, "key-%u", key);
	if (dice < 40) {
		o->kind = LC_GET;
		*op = (struct kvc_op){ .type = KVC_OP_GET, .key = k, .key_len = strlen(k), .buf = got,
				       .buf_len = cap - 1 };
	} else if (dice < 85) {
		uint64_t ttl = lc_rand(rng) % 2 ? 1 + lc_rand(rng) % 12 : 0;
		unsigned len = (unsigned)(lc_rand(rng) % (big ? BIG_VALUE : 3000));

		o->kind = LC_PUT;
		o->value = ((uint64_t)w->id << 32) | i;
		o->ttl_ns = ttl * MSN;
		/* values of varied length: objects of several sizes in the segments */
		snprintf(v, cap, "v%" PRIu64 ":%0*u", o->value, (int)len, 0);
		*op = (struct kvc_op){ .type = KVC_OP_PUT, .key = k, .key_len = strlen(k), .value = v,
				       .value_len = strlen(v), .ttl_ms = ttl };
	} else {
		o->kind = LC_DELETE;
		*op = (struct kvc_op){ .type = KVC_OP_DELETE, .key = k, .key_len = strlen(k) };
	}
}

/* The outcome rc of o (got[0..len): a GET's value) into the history.
 * Returns 1 when it failed cleanly: left out, and the handle is replaced. */
static int record(struct worker *w, struct lc_op *o, int rc, char *got, size_t len)
{
	if (o->kind == LC_GET) {
		got[rc == 0 ? len : 0] = '\0';
		if (rc == 0 && sscanf(got, "v%" SCNu64 ":", &o->value) != 1)
			w->why = "a GET returned bytes no client wrote";
	}
	if (o->kind != LC_PUT)
		o->result = rc == 0 ? LC_OK : LC_ABSENT;
	if (rc == KVC_ECORRUPT) {
		/* a slot naming memory that was zeroed or reused */
		w->why = "KVC_ECORRUPT: a slot names an object that is not there";
		return 0;
	}
	if (rc == KVC_EUNKNOWN) {
		o->cmp = LC_NEVER;
		w->unknown++;
	} else if (rc && rc != KVC_ENOTFOUND) {
		w->failed++; /* changed nothing: left out of the history */
		return 1;
	} else if (rc == KVC_ENOTFOUND && o->kind == LC_PUT) {
		w->why = "PUT answered KVC_ENOTFOUND";
	}
	w->ops[w->n++] = *o;
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct kvi_local_hooks hk = { .before_op = delay_commit, .after_read = hold_read };
	uint64_t rng = w->seed * 0x9e3779b97f4a7c15ull + w->id;
	unsigned nop = w->pairs ? 2 : 1;
	kvc_t *h = NULL;
	char k[2][16];
	static __thread char v[2][BIG_VALUE + 100], got[2][BIG_VALUE + 100];

	hook_rng = rng ^ 0x5555;
	for (unsigned i = 0; i + nop <= OPS_PER_THREAD && !w->why; i += nop) {
		struct kvc_op op[2];
		struct lc_op o[2];
		unsigned pending = 0, replace = 0;

		if (!h && kvt_env_client(w->env, &hk, lc_rand(&rng) % 2 ? 64 : 0, nop, &h)) {
			w->why = "cannot open a client";
			break;
		}
		for (unsigned j = 0; j < nop; j++) {
			pick(w, &rng, i + j, j == 1, &op[j], &o[j], k[j], v[j], got[j], sizeof(got[j]));
			o[j].inv = lc_now_ns();
			op[j].status = kvc_submit(h, &op[j]);
			if (op[j].status) /* not started */
				o[j].cmp = lc_now_ns();
			else
				pending |= 1u << j;
		}
		while (pending) {
			struct kvc_op *done[2];
			int n = kvc_poll(h, done, 2, -1);
			uint64_t now = lc_now_ns();

			for (int d = 0; d < n; d++) {
				unsigned j = done[d] == &op[0] ? 0 : 1;

				o[j].cmp = now;
				pending &= ~(1u << j);
			}
		}
		for (unsigned j = 0; j < nop; j++)
			replace |= record(w, &o[j], op[j].status, got[j], op[j].value_len);
		if (replace) {
			/* a failure may have broken the handle: a new one, and its
			 * locks released as kvserver does when a connection breaks
			 * (one it abandoned would stop its keys for good) */
			uint32_t id = kvi_client_conn(h, 0)->rm->client_id;

			kvc_destroy(h);
			h = NULL;
			kvt_env_fence_locks(w->env, id);
			continue;
		}
		/* let TTLs run out mid-history; with the reclaimer, let segments
		 * settle (max-op + 10 ms after sealing) while the clients run */
		if (w->slow || lc_rand(&rng) % 3 == 0)
			usleep((useconds_t)(lc_rand(&rng) % (w->slow ? 1500 : 400)));
	}
	kvc_destroy(h);
	return NULL;
}

static int g_stop;

static void *reclaimer_main(void *arg)
{
	struct kvs_reclaimer *r = arg;

	while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
		/* whatever the watermarks say: every settled segment, at once */
		if (kvs_reclaim_one(r) < 0)
			return (void *)"the reclaimer's connection failed";
		usleep(200);
	}
	return NULL;
}

/* seeds histories; every odd one (or, with delays, every one) with the
 * reclaimer running. exec_ms: the execution bound the core assumes;
 * delay_ms: how late a commit may execute. */
static void histories(uint64_t seeds, uint32_t exec_ms, uint32_t delay_ms)
{
	uint64_t ops = 0, states = 0, unknown = 0, failed = 0, reclaimed = 0;
	struct lc_op *all = malloc(sizeof(struct lc_op) * THREADS * OPS_PER_THREAD);

	cr_assert(all);
	for (uint64_t seed = 1; seed <= seeds; seed++) {
		/* small segments in a small heap, no eviction: the reclaimer (odd
		 * seeds) moves live items while clients read and write them */
		struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = 50, .exec_ms = exec_ms,
					   .quarantine_ms = 110 + exec_ms, .no_evict = 1 };
		static struct worker w[THREADS];
		struct kvs_reclaimer *rcl = NULL;
		struct kvs_core_stats cs;
		struct lc_report rep;
		struct kvt_env env;
		pthread_t rt;
		size_t n = 0;

		cr_assert_eq(kvt_env_init_opts(&env, 2, &o), 0);
		g_stop = 0;
		g_delay_us = (uint64_t)delay_ms * 1000u;
		g_heap_off = kvs_core_geometry(env.srv.core)->heap_off;
		if (seed % 2 || delay_ms) {
			cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
			cr_assert_eq(pthread_create(&rt, NULL, reclaimer_main, rcl), 0);
		}
		for (unsigned i = 0; i < THREADS; i++) {
			memset(&w[i], 0, sizeof(w[i]));
			w[i] = (struct worker){ .env = &env, .id = i + 1, .seed = seed, .slow = rcl != NULL,
						.pairs = delay_ms != 0 };
			cr_assert_eq(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
		}
		for (unsigned i = 0; i < THREADS; i++)
			pthread_join(w[i].t, NULL);
		if (rcl) { /* stop every thread before any assertion can end the test */
			void *rret = NULL;

			__atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
			pthread_join(rt, &rret);
			cr_assert_null(rret, "%s", (const char *)rret);
		}
		for (unsigned i = 0; i < THREADS; i++) {
			cr_assert_null(w[i].why, "seed %" PRIu64 " client %u: %s", seed, i + 1, w[i].why);
			memcpy(all + n, w[i].ops, w[i].n * sizeof(struct lc_op));
			n += w[i].n;
			unknown += w[i].unknown;
			failed += w[i].failed;
		}
		kvs_core_stats(env.srv.core, &cs);
		reclaimed += cs.rc.segments;
		cr_assert_eq(lc_check(all, n, 2000000, &rep), 1, "seed %" PRIu64 ": %s", seed, rep.why);
		ops += n;
		states += rep.states;
		kvs_reclaim_destroy(rcl);
		kvt_env_fini(&env);
	}
	g_delay_us = 0;
	printf("lincheck: %" PRIu64 " histories, %" PRIu64 " operations (%" PRIu64 " unknown outcomes, %" PRIu64
	       " failed and left out), %" PRIu64 " search states, %" PRIu64 " segments reclaimed meanwhile, "
	       "commits up to %u ms late: 0 violations\n",
	       seeds, ops, unknown, failed, states, reclaimed, delay_ms);
	free(all);
}

Test(lincheck, concurrent_histories_of_real_clients_are_linearizable, .timeout = 300)
{
	histories(SEEDS, 0, 0);
}

/* Commits execute up to 100 ms late (an execution bound of 110 ms: settle
 * 50 + 110 + 10 ms) while the reclaimer runs. The settle time must cover the
 * bound: else a late commit names a reclaimed, zeroed segment, the PUT is
 * acknowledged and the key then fails KVC_ECORRUPT. */
Test(lincheck, histories_with_commits_landing_late_while_the_reclaimer_runs, .timeout = 300)
{
	histories(8, 110, 100);
}

/* ---- memcached items over real clients ------------------------------------- */

/* Clients mix kvc_get_item, SET, DELETE, ADD, REPLACE and read-modify-write
 * loops (kvc_get_item, then CAS with the unique read; retried on EXISTS) on
 * a few hot keys (and now and then a few cold ones, whose items live long
 * enough to be copied forward), a third of the stores with TTLs of a few
 * milliseconds, while the reclaimer moves items underneath. Every history, uniques
 * included, must be linearizable. The counter histories store decimal
 * numbers and add incr, decr (told the new value and, half of them, through
 * the batch interface, the new unique; two of one key in one batch now and
 * then), touch and gat to the mix. */
#define ITEM_THREADS 4
#define ITEM_HOT 3  /* keys most operations go to */
#define ITEM_COLD 8 /* keys written seldom: their items stay long enough to be copied forward */
#define ITEM_OPS 300 /* recorded operations per client and history */
#define ITEM_SEEDS 10

struct item_worker {
	pthread_t t;
	struct kvt_env *env;
	uint64_t seed;
	struct lc_op ops[ITEM_OPS];
	struct lc_rec r; /* recorder.h: into ops */
};

/* ... and break the connection at about one operation in 400: writes then
 * end with unknown outcomes (KVC_EUNKNOWN), which the checker must place, and
 * the broken handle is replaced as a rejoining client would be. */
static int stretch_break(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	if (lc_rand(&hook_rng) % 400 == 0)
		return KVC_ESERVERGONE;
	return stretch(arg, rm, op);
}

static void *item_worker_main(void *arg)
{
	struct item_worker *w = arg;
	struct lc_rec *r = &w->r;
	struct kvi_local_hooks hk = { .before_op = stretch_break, .after_read = hold_read };
	uint64_t rng = w->seed * 0x9e3779b97f4a7c15ull + r->id + 1000;
	kvc_t *h = NULL;
	char k[16];

	hook_rng = rng ^ 0x5555;
	/* room for a whole read-modify-write loop */
	while (r->n + 2 * LC_REC_RMW_TRIES <= r->cap && !r->why) {
		unsigned key = lc_rand(&rng) % 16 ? (unsigned)(lc_rand(&rng) % ITEM_HOT)
						 : ITEM_HOT + (unsigned)(lc_rand(&rng) % ITEM_COLD);

		if (!h && kvt_env_client(w->env, &hk, lc_rand(&rng) % 2 ? 64 : 0,
					   r->counters ? LC_REC_DEPTH : 1, &h)) {
			r->why = "cannot open a client";
			break;
		}
		snprintf(k, sizeof(k), "item-%u", key);
		lc_rec_step(r, h, &rng, key, k);
		if (r->broken) { /* a new handle; its locks released as kvserver does */
			uint32_t id = kvi_client_conn(h, 0)->rm->client_id;

			kvc_destroy(h);
			h = NULL;
			kvt_env_fence_locks(w->env, id);
			kvs_core_client_left(w->env->srv.core, id); /* its extent sealed, as kvserver does */
			r->broken = 0;
			continue;
		}
		/* let TTLs run out mid-history and segments settle */
		usleep((useconds_t)(lc_rand(&rng) % 3000));
	}
	kvc_destroy(h);
	return NULL;
}

/* what the item histories did, over all seeds */
struct item_totals {
	struct lc_rec_counts c;
	uint64_t ops, states, reclaimed, moved, expired;
	double seconds;
};

/* A history that is not linearizable, kept for build/tests/lincheck */
static void keep_history(const char *name, const struct lc_op *ops, size_t n)
{
	FILE *f = fopen(name, "w");
	char line[LC_LINE_MAX];

	for (size_t i = 0; f && i < n; i++) {
		lc_format(&ops[i], line, sizeof(line));
		fputs(line, f);
	}
	if (f)
		fclose(f);
}

/* seeds histories of ITEM_THREADS clients (counters: the counter mix), the
 * reclaimer running; each must be linearizable */
static void item_histories(int counters, uint64_t seeds, struct item_totals *t)
{
	struct lc_op *all = malloc(sizeof(struct lc_op) * ITEM_THREADS * ITEM_OPS);
	struct lc_rec_counts *c = &t->c;
	uint64_t t0 = lc_now_ns();

	memset(t, 0, sizeof(*t));
	cr_assert(all);
	for (uint64_t seed = 1; seed <= seeds; seed++) {
		struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = 50, .quarantine_ms = 110,
					   .no_evict = 1 };
		static struct item_worker w[ITEM_THREADS];
		struct kvs_reclaimer *rcl = NULL;
		struct kvs_core_stats cs;
		struct lc_report rep;
		struct kvt_env env;
		void *rret = NULL;
		pthread_t rt;
		size_t n = 0;
		int r;

		cr_assert_eq(kvt_env_init_opts(&env, 2, &o), 0);
		g_stop = 0;
		cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
		cr_assert_eq(pthread_create(&rt, NULL, reclaimer_main, rcl), 0);
		for (unsigned i = 0; i < ITEM_THREADS; i++) {
			w[i] = (struct item_worker){ .env = &env, .seed = seed };
			w[i].r = (struct lc_rec){ .id = (uint16_t)(i + 1), .ops = w[i].ops, .cap = ITEM_OPS,
						  .counters = counters };
			cr_assert_eq(pthread_create(&w[i].t, NULL, item_worker_main, &w[i]), 0);
		}
		for (unsigned i = 0; i < ITEM_THREADS; i++)
			pthread_join(w[i].t, NULL);
		__atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
		pthread_join(rt, &rret);
		cr_assert_null(rret, "%s", (const char *)rret);
		for (unsigned i = 0; i < ITEM_THREADS; i++) {
			cr_assert_null(w[i].r.why, "seed %" PRIu64 " client %u: %s", seed, i + 1, w[i].r.why);
			memcpy(all + n, w[i].ops, w[i].r.n * sizeof(struct lc_op));
			n += w[i].r.n;
			for (unsigned j = 0; j < 2; j++) {
				c->add[j] += w[i].r.c.add[j];
				c->repl[j] += w[i].r.c.repl[j];
				c->arith[j] += w[i].r.c.arith[j];
				c->touch[j] += w[i].r.c.touch[j];
				c->gat[j] += w[i].r.c.gat[j];
			}
			for (unsigned j = 0; j < 3; j++)
				c->cas[j] += w[i].r.c.cas[j];
			c->arith_uniq += w[i].r.c.arith_uniq;
			c->pairs += w[i].r.c.pairs;
			c->arith_modes += w[i].r.c.arith_modes;
			c->rmw_unknown += w[i].r.c.rmw_unknown;
			c->unknown += w[i].r.c.unknown;
			c->failed += w[i].r.c.failed;
			c->rmw_retries += w[i].r.c.rmw_retries;
		}
		kvs_core_stats(env.srv.core, &cs);
		t->reclaimed += cs.rc.segments;
		t->moved += cs.rc.moved;
		t->expired += cs.rc.expired;
		r = lc_check(all, n, 2000000, &rep);
		if (r != 1) {
			char name[64];

			snprintf(name, sizeof(name), "lin-items-failed-%d-%" PRIu64 ".txt", counters, seed);
			keep_history(name, all, n);
		}
		cr_assert_eq(r, 1, "seed %" PRIu64 ": %s (history kept in lin-items-failed-%d-%" PRIu64 ".txt)", seed,
			     rep.why, counters, seed);
		t->ops += n;
		t->states += rep.states;
		kvs_reclaim_destroy(rcl);
		kvt_env_fini(&env);
	}
	t->seconds = (double)(lc_now_ns() - t0) / 1e9;
	free(all);
}

Test(lincheck, item_histories_with_conditional_stores_and_the_reclaimer, .timeout = 300)
{
	struct item_totals t;
	struct lc_rec_counts *c = &t.c;

	item_histories(0, ITEM_SEEDS, &t);
	/* the conditional stores met both of their answers */
	cr_expect(c->add[0] && c->add[1] && c->repl[0] && c->repl[1] && c->cas[0] && c->cas[1]);
	printf("lincheck items: %d histories, %" PRIu64 " operations (%" PRIu64 " unknown outcomes, %" PRIu64
	       " failed and left out), %" PRIu64 " search states; add %" PRIu64 " stored / %" PRIu64
	       " not stored, replace %" PRIu64 " / %" PRIu64 ", cas %" PRIu64 " stored / %" PRIu64 " exists / %" PRIu64
	       " not found, %" PRIu64 " read-modify-write retries; %" PRIu64 " segments reclaimed meanwhile (%" PRIu64
	       " items moved, %" PRIu64 " expired); %.1f s: 0 violations\n",
	       ITEM_SEEDS, t.ops, c->unknown, c->failed, t.states, c->add[0], c->add[1], c->repl[0], c->repl[1],
	       c->cas[0], c->cas[1], c->cas[2], c->rmw_retries, t.reclaimed, t.moved, t.expired, t.seconds);
}

/* The counter mix: numbers stored, incremented, decremented (to 0, and
 * across 2^64), touched, read, CASed, deleted, on a few hot keys, with TTLs
 * of a few milliseconds, connections broken now and then (unknown
 * outcomes), the reclaimer moving items underneath. */
#define COUNTER_SEEDS 8

Test(lincheck, counter_histories_with_incr_decr_touch_and_the_reclaimer, .timeout = 300)
{
	struct item_totals t;
	struct lc_rec_counts *c = &t.c;

	item_histories(1, COUNTER_SEEDS, &t);
	/* incr / decr and touch met items and missed them; the batch told uniques */
	cr_expect(c->arith[0] && c->arith[1] && c->touch[0] && c->touch[1] && c->gat[0] && c->gat[1] && c->arith_uniq &&
		  c->pairs && c->arith_modes);
	cr_expect(c->add[0] && c->cas[0] && c->cas[1]);
	printf("lincheck counters: %d histories, %" PRIu64 " operations (%" PRIu64 " unknown outcomes, %" PRIu64
	       " of them incr/decr/touch/gat; %" PRIu64 " failed and left out), %" PRIu64 " search states; incr/decr %" PRIu64
	       " done (%" PRIu64 " told their unique, %" PRIu64 " batches of two, %" PRIu64 " vivify/touch) / %" PRIu64
	       " not found, touch %" PRIu64 " / %" PRIu64
	       ", gat %" PRIu64 " / %" PRIu64 ", add %" PRIu64 " / %" PRIu64 ", replace %" PRIu64 " / %" PRIu64
	       ", cas %" PRIu64 " / %" PRIu64 " / %" PRIu64 "; %" PRIu64 " segments reclaimed (%" PRIu64
	       " items moved, %" PRIu64 " expired); %.1f s: 0 violations\n",
	       COUNTER_SEEDS, t.ops, c->unknown, c->rmw_unknown, c->failed, t.states, c->arith[0], c->arith_uniq,
	       c->pairs, c->arith_modes, c->arith[1], c->touch[0], c->touch[1], c->gat[0], c->gat[1], c->add[0], c->add[1], c->repl[0],
	       c->repl[1], c->cas[0], c->cas[1], c->cas[2], t.reclaimed, t.moved, t.expired, t.seconds);
}
