/* A linearizability checker for histories of one key-value cache: the
 * Wing & Gong search with memoisation (as Lowe and Porcupine do), per key
 * (linearizability is local: a history is linearizable iff each key's
 * sub-history is), with TTLs modelled as common/layout.h "Expiry" defines
 * them, and memcached's items (kvclient.h kvc_store, kvc_get_item).
 *
 * The model of one key: absent, or an item -- a value v, a CAS unique u and
 * an expiry E_v. E_v is not observed directly: a store submitted at some
 * moment inside [invoke, complete] by the same clock sets E_v = that moment +
 * ttl rounded up to the next millisecond, so E_v lies in [invoke + ttl,
 * complete + ttl + 1 ms]. The search narrows that window as reads observe the
 * item alive (E_v > their point) or expired (E_v <= their point); an expired
 * item is absent to every operation, conditional stores included. Every
 * operation is given a linearization point inside its interval,
 * non-decreasing along the order: the earliest possible one, which is never
 * worse for what follows (an operation that needs the item expired takes the
 * earliest point after the window's start).
 *
 * Uniques: every store that took effect made an item with a unique no other
 * store has. A store's unique is the one its client was told (0: not
 * recorded, or its outcome is unknown); a GET that hit returns the item's.
 * So a GET's unique names the very store it saw, which is much stronger than
 * its value: it must be the current item's. A unique that no recorded store
 * of the key was told can only be that of a store whose outcome is unknown:
 * the first operation that sees such an item binds its unique, and later ones
 * must agree (that two such stores got distinct uniques is not checked: their
 * values tell them apart). Across the whole history, no two stores may have
 * been told the same unique, and a GET of one key cannot return a unique a
 * store of another key was told. Unique 0 in a GET: not recorded, only its
 * value is checked (histories without uniques check as they always did).
 *
 * Conditional stores decide at their linearization point: ADD stores only if
 * the key is absent (else LC_NOTSTORED), REPLACE only if it is present (else
 * LC_NOTSTORED), CAS only if the item's unique is the expected one (else
 * LC_EXISTS, or LC_ABSENT when there is no live item). A refused store
 * changes nothing.
 *
 * Read-modify-writes (kvclient.h kvc_incr, kvc_decr, kvc_touch, kvc_gat) decide at
 * their linearization point too, on a live item, else they report LC_ABSENT
 * and change nothing. The model holds the item's value as a number: the
 * recorders store decimal ASCII of the number they record, so an item
 * always is a counter (KVC_ENONNUMERIC is not modelled: a recorder treats it
 * as a failure of the test). INCR adds delta (wrapping at 2^64), DECR
 * subtracts it (stopping at 0); the client is told the new value (recorded
 * as the operation's value, which must be the item's current value + or -
 * delta) and the new item's unique, a unique like a store's; the item keeps
 * its expiry window. TOUCH gives the live item a new expiry, ttl from its
 * point (a window [invoke + ttl, complete + ttl + 1 ms] as a store's; ttl 0:
 * never), keeping value and unique; GAT (kvc_gat) is a GET that touches the
 * item it returns. The arithmetic's modes (kvc_op.mode): with LC_ARITH_TOUCH
 * a hit also touches the item (ttl_ns), with LC_VIVIFY a miss stores
 * `initial` (with ttl_ns, a new unique) and tells it as the new value, so it
 * is never LC_ABSENT; told LC_OK, it may have done either (the search tries
 * both). With an unknown outcome they take effect
 * on a live item at any point after invocation, or never (an INCR's new
 * unique, not told, is then learnt as an unknown store's is).
 *
 * Outcomes: a store, delete or read-modify-write with an unknown outcome (KVC_EUNKNOWN, or a
 * process killed mid-operation) completes at +infinity: it may take effect at
 * any point after its invocation, or never (placed last, it changes nothing
 * observed); a conditional one that takes effect does so at a point where its
 * condition holds. Operations that failed cleanly are left out of the history
 * by the caller. */
#ifndef KVT_LINCHECK_H
#define KVT_LINCHECK_H

#include <stddef.h>
#include <stdint.h>

#define LC_NEVER UINT64_MAX /* complete time of an operation whose outcome is unknown */

enum lc_kind {
	LC_PUT = 1,     /* a plain store (SET): value (any, 0 too), ttl_ns (0 = none), uniq; result ignored */
	LC_DELETE = 2,  /* result: LC_OK (removed a live item) or LC_ABSENT */
	LC_GET = 3,     /* result: LC_OK with value and uniq (0: not recorded), or LC_ABSENT */
	LC_ADD = 4,     /* as LC_PUT if absent; result LC_OK (stored) or LC_NOTSTORED */
	LC_REPLACE = 5, /* as LC_PUT if present; result LC_OK (stored) or LC_NOTSTORED */
	LC_CAS = 6,     /* as LC_PUT if the item's unique is expect; result LC_OK (stored),
			 * LC_EXISTS (another unique) or LC_ABSENT (no live item) */
	LC_INCR = 7,    /* delta; result LC_OK with value (the new number told) and uniq,
			 * or LC_ABSENT */
	LC_DECR = 8,    /* as LC_INCR, subtracting (at 0 it stops) */
	LC_TOUCH = 9,   /* ttl_ns (0 = never); result LC_OK (a live item got it) or LC_ABSENT */
	LC_GAT = 10,    /* get and touch: as LC_GET, and a hit gives the item ttl_ns as TOUCH */
};
/* LC_INCR / LC_DECR: bits of mode, as kvclient.h's KVC_ARITH_* */
enum lc_arith_mode {
	LC_VIVIFY = 1,      /* on a miss store initial (ttl_ns), told as the new value */
	LC_ARITH_TOUCH = 2, /* on a hit give the item ttl_ns as TOUCH does */
};
/* KVC_ codes: 0, KVC_ENOTFOUND, KVC_ENOTSTORED, KVC_EEXISTS. A result is
 * ignored when the outcome is unknown (cmp = LC_NEVER). */
enum lc_result { LC_OK = 0, LC_ABSENT = 1, LC_NOTSTORED = 2, LC_EXISTS = 3 };

struct lc_op {
	uint32_t key;   /* any id: histories are split by it */
	uint8_t kind;   /* enum lc_kind */
	uint8_t result; /* enum lc_result */
	uint16_t client;
	uint64_t value;  /* stores: the value written; GET, GAT: the value read (LC_OK);
			  * INCR, DECR: the new value told (LC_OK) */
	uint64_t ttl_ns; /* stores, TOUCH, GAT; INCR / DECR with a mode */
	uint64_t inv, cmp; /* CLOCK_REALTIME ns; cmp = LC_NEVER if unknown */
	uint64_t uniq;   /* stores that stored, INCR / DECR (LC_OK): the new item's unique;
			  * GET, GAT (LC_OK): the one read; 0 = not known */
	uint64_t expect; /* LC_CAS: the unique the item must have */
	uint64_t delta;  /* LC_INCR, LC_DECR */
	uint64_t initial; /* LC_INCR, LC_DECR with LC_VIVIFY */
	uint32_t mode;   /* LC_INCR, LC_DECR: enum lc_arith_mode bits */
	uint32_t spare;  /* 0 (no padding: records are compared bytewise) */
};

struct lc_report {
	uint64_t ops, keys;
	uint64_t states;         /* search states explored */
	int ok;                  /* 1: linearizable */
	int truncated;           /* 1: gave up (state budget): neither proven nor refuted */
	uint32_t bad_key;        /* when !ok */
	char why[160];
};

/* Check ops[0..n) (any order; the array is sorted in place). max_states
 * bounds the search per key (0 = 50 million). Returns 1 linearizable,
 * 0 not (report says which key), -1 budget exhausted or out of memory. */
int lc_check(struct lc_op *ops, size_t n, uint64_t max_states, struct lc_report *rep);

/* For history recorders: the clock of invoke/complete times (CLOCK_REALTIME
 * ns, the clock expiries are decided by) and a seeded xorshift generator. */
uint64_t lc_now_ns(void);
uint64_t lc_rand(uint64_t *state);

/* A history file: one operation per line, as lc_format writes it, so that
 * processes record separately and one checker reads them all:
 *
 *   c=CLIENT k=KEY op=KIND r=RESULT v=VALUE ttl=TTL_NS inv=NS cmp=NS [u=UNIQ] [cas=EXPECT]
 *   [d=DELTA [m=MODE [n=INITIAL]]]
 *
 * KIND: P (store), D (delete), G (get), A (add), R (replace), C (cas), I
 * (incr), E (decr), T (touch: ttl= its new TTL), K (gat: G with ttl= as T);
 * RESULT: enum lc_result;
 * cmp=-1: outcome unknown. u= is written only when not 0, so a history
 * without items reads as it always did, and never on T; cas= only and
 * always on C, d= only and always on I and E; m= (I and E, when not 0) and
 * n= (exactly when m= has LC_VIVIFY) follow it.
 * lc_parse returns -1 for a line that is not one of these. LC_LINE_MAX bounds
 * a line. */
#define LC_LINE_MAX 256
void lc_format(const struct lc_op *op, char *buf, size_t len);
int lc_parse(const char *line, struct lc_op *op);

#endif
