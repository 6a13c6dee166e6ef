/* A linearizability checker for histories of one key-value cache: the
 * Wing & Gong search with memoisation (as Lowe and Porcupine do), per key
 * (linearizability is local: a history is linearizable iff each key's
 * sub-history is), with TTLs modelled as common/layout.h "Expiry" defines
 * them.
 *
 * The model of one key: absent, or a value v with an expiry E_v. E_v is not
 * observed directly: a PUT submitted at some moment inside [invoke, complete]
 * by the same clock sets E_v = that moment + ttl rounded up to the next
 * millisecond, so E_v lies in [invoke + ttl, complete + ttl + 1 ms]. The search
 * narrows that window as reads observe the item alive (E_v > their point) or
 * expired (E_v <= their point). Every operation is given a linearization point
 * inside its interval, non-decreasing along the order: the earliest possible
 * one, which is never worse for what follows (a read that needs the item
 * expired takes the earliest point after the window's start).
 *
 * Outcomes: a write with an unknown outcome (KVC_EUNKNOWN, or a process killed
 * mid-operation) completes at +infinity: it may take effect at any point after
 * its invocation, or never (placed last, it changes nothing observed).
 * Operations that failed cleanly are left out of the history by the caller. */
#ifndef KVT_LINCHECK_H
#define KVT_LINCHECK_H

#include <stddef.h>
#include <stdint.h>

#define LC_NEVER UINT64_MAX /* complete time of an operation whose outcome is unknown */

enum lc_kind {
	LC_PUT = 1,    /* value (!= 0), ttl_ns (0 = none); result ignored */
	LC_DELETE = 2, /* result: LC_OK (removed a live item) or LC_ABSENT */
	LC_GET = 3,    /* result: LC_OK with value, or LC_ABSENT */
};
enum lc_result { LC_OK = 0, LC_ABSENT = 1 };

struct lc_op {
	uint32_t key;   /* any id: histories are split by it */
	uint8_t kind;   /* enum lc_kind */
	uint8_t result; /* enum lc_result */
	uint16_t client;
	uint64_t value;  /* PUT: the value written; GET: the value read (LC_OK) */
	uint64_t ttl_ns; /* PUT */
	uint64_t inv, cmp; /* CLOCK_REALTIME ns; cmp = LC_NEVER if unknown */
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
 * processes record separately and one checker reads them all. */
void lc_format(const struct lc_op *op, char *buf, size_t len);
int lc_parse(const char *line, struct lc_op *op);

#endif
