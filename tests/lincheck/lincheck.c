/* Wing & Gong search with memoisation, per key; see lincheck.h for the model. */
#include "lincheck.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define MS 1000000ull

/* The model's state after some prefix of a linearization. The item is held
 * by value (not by the store that made it): an INCR's item has a value no
 * store wrote, a TOUCH's an expiry no store set. A plain struct without
 * padding, all of it meaningful (fields of an absent item, and lo/hi of
 * one without TTL, are 0): the memo hashes its bytes. */
struct lstate {
	uint64_t value;  /* the current item's value */
	uint64_t lo, hi; /* the current item's expiry lies in [lo, hi] (ns); 0 without TTL */
	uint64_t uniq;   /* the current item's unique; 0: not known yet (see lincheck.h) */
	uint64_t t;      /* linearization point of the last operation */
	uint32_t present; /* 1: an item (alive or not: its expiry window says) */
	uint32_t has_ttl; /* 1: it expires, somewhen in [lo, hi] */
};
_Static_assert(sizeof(struct lstate) == 6 * sizeof(uint64_t), "struct lstate has padding: the memo hashes it");

struct memo {
	uint64_t *k; /* pairs of 64-bit halves of a 128-bit hash; 0,0 = empty */
	size_t cap, n;
};

struct search {
	const struct lc_op *op; /* this key's operations, by invocation */
	/* GET and CAS: 1 when the unique they read or expect was told to a
	 * store (or INCR / DECR) of this key, so that an item whose unique is
	 * not known cannot have it */
	uint8_t *owned;
	size_t m, words;
	uint64_t *done; /* bitset: linearized */
	size_t ndone;
	struct memo memo;
	uint64_t states, budget;
	int out_of_memory;
};

static int memo_add(struct memo *mm, const XXH128_hash_t *h)
{
	uint64_t a = h->low64 | 1, b = h->high64; /* never 0,0 */
	size_t i;

	if (mm->n * 2 >= mm->cap) {
		struct memo g = { .cap = mm->cap ? mm->cap * 2 : 1024 };

		g.k = calloc(g.cap, 2 * sizeof(uint64_t));
		if (!g.k)
			return -1;
		for (size_t j = 0; j < mm->cap; j++) {
			if (!mm->k[2 * j])
				continue;
			for (i = mm->k[2 * j] & (g.cap - 1); g.k[2 * i]; i = (i + 1) & (g.cap - 1))
				;
			g.k[2 * i] = mm->k[2 * j];
			g.k[2 * i + 1] = mm->k[2 * j + 1];
			g.n++;
		}
		free(mm->k);
		*mm = g;
	}
	for (i = a & (mm->cap - 1); mm->k[2 * i]; i = (i + 1) & (mm->cap - 1))
		if (mm->k[2 * i] == a && mm->k[2 * i + 1] == b)
			return 0; /* seen */
	mm->k[2 * i] = a;
	mm->k[2 * i + 1] = b;
	mm->n++;
	return 1;
}

/* Seen this (linearized set, state) before? Marks it seen. */
static int seen(struct search *s, const struct lstate *st)
{
	XXH128_hash_t set = XXH3_128bits(s->done, s->words * sizeof(uint64_t));
	XXH128_hash_t h = XXH3_128bits_withSeed(st, sizeof(*st), set.low64);
	int r;

	h.high64 ^= set.high64;
	r = memo_add(&s->memo, &h);
	if (r < 0)
		s->out_of_memory = 1;
	return r != 1;
}

static int is_done(const struct search *s, size_t i)
{
	return (s->done[i / 64] >> (i % 64)) & 1;
}

static int is_store(int kind)
{
	return kind == LC_PUT || kind == LC_ADD || kind == LC_REPLACE || kind == LC_CAS;
}

static int is_arith(int kind)
{
	return kind == LC_INCR || kind == LC_DECR;
}

/* Reads that return the item's value and unique: GET, and GAT (which also
 * touches it). */
static int is_read(int kind)
{
	return kind == LC_GET || kind == LC_GAT;
}

/* Operations that make an item with a new unique, the one their client was
 * told: stores and arithmetic (TOUCH keeps the item's). */
static int makes_unique(int kind)
{
	return is_store(kind) || is_arith(kind);
}

/* Can the current item be alive at g? Then narrow its expiry (E > g). */
static int alive_at(const struct lstate *st, uint64_t g, struct lstate *nx)
{
	if (!st->present)
		return 0;
	if (st->has_ttl) {
		if (st->hi <= g)
			return 0; /* expired by then for sure */
		if (nx->lo < g + 1)
			nx->lo = g + 1;
	}
	return 1;
}

/* Can the key be absent at a point >= *g: no item, or it expired (E <= the
 * point, which must then be at least the window's start)? Moves *g there. */
static int absent_from(const struct lstate *st, uint64_t *g)
{
	if (!st->present)
		return 1;
	if (!st->has_ttl)
		return 0;
	if (*g < st->lo)
		*g = st->lo;
	return 1;
}

/* Could the current item's unique be u? Once known it is; before (a store
 * whose outcome is unknown made it), any unique no store of the key was told. */
static int uniq_may_be(const struct lstate *st, uint64_t u, int owned)
{
	return st->uniq ? st->uniq == u : !owned;
}

static void set_absent(struct lstate *nx)
{
	uint64_t t = nx->t;

	memset(nx, 0, sizeof(*nx)); /* an expired item is dead for every later point */
	nx->t = t;
}

/* Operation o, submitted somewhen in [inv, cmp], gives the item an expiry
 * ttl from then, rounded up to the next millisecond (0: never). */
static void expiry_from(const struct lc_op *o, struct lstate *nx)
{
	nx->has_ttl = o->ttl_ns != 0;
	nx->lo = nx->has_ttl ? o->inv + o->ttl_ns : 0;
	nx->hi = !nx->has_ttl ? 0 : o->cmp == LC_NEVER ? UINT64_MAX : o->cmp + o->ttl_ns + MS;
}

/* Store i takes effect at g: its item is current. */
static void store_at(const struct search *s, size_t i, uint64_t g, struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];

	nx->present = 1;
	nx->value = o->value;
	expiry_from(o, nx);
	nx->uniq = o->uniq;
	nx->t = g;
}

/* memcached's arithmetic on the item's number: INCR wraps at 2^64, DECR
 * stops at 0. */
static uint64_t arith(const struct lc_op *o, uint64_t v)
{
	if (o->kind == LC_INCR)
		return v + o->delta;
	return o->delta > v ? 0 : v - o->delta;
}

/* A store whose outcome is unknown: it takes effect where its condition can
 * hold, else it changes nothing (never taking effect at all is the same as
 * being placed last: see lincheck.h). */
static int step_unknown_store(const struct search *s, size_t i, const struct lstate *st, uint64_t g,
			      struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];
	uint64_t ga = g;

	if (o->kind == LC_PUT || (o->kind == LC_ADD && absent_from(st, &ga))) {
		store_at(s, i, o->kind == LC_ADD ? ga : g, nx);
		return 1;
	}
	if ((o->kind == LC_REPLACE || (o->kind == LC_CAS && uniq_may_be(st, o->expect, s->owned[i]))) &&
	    alive_at(st, g, nx)) {
		store_at(s, i, g, nx);
		return 1;
	}
	*nx = *st; /* refused: nothing changes */
	nx->t = g;
	return 1;
}

/* An INCR, DECR, TOUCH or GAT whose outcome is unknown: on a live item it
 * may take effect (the arithmetic's unique was never told: 0, learnt
 * later), else it found nothing and changed nothing. */
static int step_unknown_rmw(const struct search *s, size_t i, const struct lstate *st, uint64_t g,
			    struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];

	if (alive_at(st, g, nx)) {
		if (o->kind == LC_TOUCH || o->kind == LC_GAT || (o->mode & LC_ARITH_TOUCH))
			expiry_from(o, nx);
		if (is_arith(o->kind)) {
			nx->value = arith(o, st->value);
			nx->uniq = 0;
		}
	} else if (is_arith(o->kind) && (o->mode & LC_VIVIFY)) {
		return 0; /* it stored its initial value: step_vivify */
	}
	nx->t = g;
	return 1;
}

/* The other way an INCR or DECR with LC_VIVIFY may have gone: it found no
 * live item and stored its initial value (told as the new value). */
static int step_vivify(const struct search *s, size_t i, const struct lstate *st, struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];
	uint64_t g = st->t > o->inv ? st->t : o->inv;
	int unknown = o->cmp == LC_NEVER;

	if (!absent_from(st, &g) || (!unknown && (o->result != LC_OK || o->value != o->initial)))
		return 0;
	*nx = *st;
	set_absent(nx);
	nx->present = 1;
	nx->value = o->initial;
	expiry_from(o, nx);
	nx->uniq = unknown ? 0 : o->uniq;
	nx->t = g;
	return 1;
}

/* How many ways operation o may have gone, each a step of its own: an
 * arithmetic that vivifies may have found the item or stored its initial
 * value; the rest (by their results, and unknown ones by the state) one. */
static unsigned ways(const struct lc_op *o)
{
	return is_arith(o->kind) && (o->mode & LC_VIVIFY) ? 2 : 1;
}

/* Operation i found the live item st holds and told LC_OK: can it have,
 * and what did it make of the item (in nx)? */
static int on_live_item(const struct search *s, size_t i, const struct lstate *st, struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];

	switch (o->kind) {
	case LC_DELETE:
		set_absent(nx);
		return 1;
	case LC_TOUCH: /* value and unique stay */
		expiry_from(o, nx);
		return 1;
	case LC_INCR:
	case LC_DECR: /* a new item, with the old one's expiry (or ttl_ns) */
		if (arith(o, st->value) != o->value)
			return 0;
		nx->value = o->value;
		nx->uniq = o->uniq;
		if (o->mode & LC_ARITH_TOUCH)
			expiry_from(o, nx);
		return 1;
	}
	/* GET, GAT: the item's value, and its unique -- known, or learnt here */
	if (st->value != o->value)
		return 0;
	if (o->uniq) {
		if (!uniq_may_be(st, o->uniq, s->owned[i]))
			return 0;
		nx->uniq = o->uniq;
	}
	if (o->kind == LC_GAT) /* and touched it */
		expiry_from(o, nx);
	return 1;
}

/* Apply operation i at the earliest point >= max(t, its invocation) that its
 * result allows; 0 if its result is impossible in state st. */
static int step(const struct search *s, size_t i, const struct lstate *st, struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];
	uint64_t g = st->t > o->inv ? st->t : o->inv;
	int unknown = o->cmp == LC_NEVER;

	*nx = *st;
	if (is_store(o->kind) && unknown)
		return step_unknown_store(s, i, st, g, nx);
	if ((is_arith(o->kind) || o->kind == LC_TOUCH || o->kind == LC_GAT) && unknown)
		return step_unknown_rmw(s, i, st, g, nx);
	if (o->kind == LC_DELETE && unknown) { /* removed, or found nothing: absent either way */
		set_absent(nx);
		nx->t = g;
		return 1;
	}
	switch (o->kind) {
	case LC_PUT:
		store_at(s, i, g, nx);
		return 1;
	case LC_ADD:
		if (o->result == LC_OK) {
			if (!absent_from(st, &g))
				return 0;
			store_at(s, i, g, nx);
			return 1;
		}
		if (!alive_at(st, g, nx)) /* LC_NOTSTORED: a live item */
			return 0;
		nx->t = g;
		return 1;
	case LC_REPLACE:
	case LC_CAS:
		if (o->result == LC_OK || o->result == LC_EXISTS) {
			if (!alive_at(st, g, nx))
				return 0;
			if (o->kind == LC_CAS && o->result == LC_OK && !uniq_may_be(st, o->expect, s->owned[i]))
				return 0;
			if (o->kind == LC_CAS && o->result == LC_EXISTS && st->uniq == o->expect)
				return 0; /* (an item whose unique is not known may have another) */
			if (o->result == LC_OK)
				store_at(s, i, g, nx);
			else
				nx->t = g;
			return 1;
		}
		break; /* refused for want of an item (REPLACE: LC_NOTSTORED, CAS: LC_ABSENT) */
	case LC_GET:
	case LC_GAT:
	case LC_DELETE:
	case LC_INCR:
	case LC_DECR:
	case LC_TOUCH:
		if (o->result != LC_OK) {
			if (is_arith(o->kind) && (o->mode & LC_VIVIFY))
				return 0; /* a miss stores: never LC_ABSENT */
			break;
		}
		if (!alive_at(st, g, nx) || !on_live_item(s, i, st, nx))
			return 0;
		nx->t = g;
		return 1;
	}
	/* Absent: no item, or the item had expired. */
	if (!absent_from(st, &g))
		return 0;
	set_absent(nx);
	nx->t = g;
	return 1;
}

static int dfs(struct search *s, const struct lstate *st)
{
	uint64_t minc = UINT64_MAX;

	if (s->ndone == s->m)
		return 1;
	if (++s->states > s->budget || s->out_of_memory)
		return -1;
	for (size_t i = 0; i < s->m; i++)
		if (!is_done(s, i) && s->op[i].cmp < minc)
			minc = s->op[i].cmp;
	for (size_t i = 0; i < s->m; i++) {
		if (is_done(s, i))
			continue;
		if (s->op[i].inv > minc)
			break; /* ops are by invocation: none later can come next */
		for (unsigned way = 0; way < ways(&s->op[i]); way++) {
			struct lstate nx;
			int r;

			if (!(way ? step_vivify(s, i, st, &nx) : step(s, i, st, &nx)) || nx.t > minc)
				continue; /* impossible, or some pending op would end before this point */
			s->done[i / 64] |= 1ull << (i % 64);
			s->ndone++;
			r = seen(s, &nx) ? 0 : dfs(s, &nx);
			s->done[i / 64] &= ~(1ull << (i % 64));
			s->ndone--;
			if (r)
				return r;
		}
	}
	return 0;
}

static int by_key_then_inv(const void *a, const void *b)
{
	const struct lc_op *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->inv != y->inv)
		return x->inv < y->inv ? -1 : 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* s->owned: which GETs and CASes read or expect a unique told to a store
 * (or INCR / DECR) of this key. */
static int find_owned(struct search *s)
{
	uint64_t *told = malloc(sizeof(uint64_t) * (s->m ? s->m : 1));
	size_t nt = 0;

	s->owned = calloc(s->m ? s->m : 1, 1);
	if (!told || !s->owned) {
		free(told);
		return -1;
	}
	for (size_t i = 0; i < s->m; i++)
		if (makes_unique(s->op[i].kind) && s->op[i].uniq)
			told[nt++] = s->op[i].uniq;
	qsort(told, nt, sizeof(*told), cmp_u64);
	for (size_t i = 0; i < s->m; i++) {
		uint64_t u = is_read(s->op[i].kind) ? s->op[i].uniq : s->op[i].kind == LC_CAS ? s->op[i].expect : 0;

		s->owned[i] = u && bsearch(&u, told, nt, sizeof(*told), cmp_u64) != NULL;
	}
	free(told);
	return 0;
}

static int check_key(const struct lc_op *op, size_t m, uint64_t budget, struct lc_report *rep)
{
	struct search s = { .op = op, .m = m, .words = (m + 63) / 64, .budget = budget };
	struct lstate st = { .present = 0 };
	int r = -1;

	s.done = calloc(s.words ? s.words : 1, sizeof(uint64_t));
	if (s.done && find_owned(&s) == 0)
		r = dfs(&s, &st);
	rep->states += s.states;
	free(s.done);
	free(s.owned);
	free(s.memo.k);
	return r;
}

/* Uniques across the whole history (lincheck.h): no two stores (INCR and
 * DECR count as stores here) told the same one, and every operation that
 * names one -- the store told it, GETs that returned it -- is of one key.
 * 1 if so; 0 with rep filled; -1 out of memory. */
struct told {
	uint64_t uniq;
	uint32_t key;
	uint8_t store;
};

static int by_uniq_stores_first(const void *a, const void *b)
{
	const struct told *x = a, *y = b;

	if (x->uniq != y->uniq)
		return x->uniq < y->uniq ? -1 : 1;
	return (int)y->store - (int)x->store;
}

static int check_uniques(const struct lc_op *ops, size_t n, struct lc_report *rep)
{
	struct told *t = malloc(sizeof(*t) * (n ? n : 1));
	size_t nt = 0;
	int r = 1;

	if (!t)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (ops[i].uniq && (makes_unique(ops[i].kind) || (is_read(ops[i].kind) && ops[i].result == LC_OK)))
			t[nt++] = (struct told){ .uniq = ops[i].uniq, .key = ops[i].key,
						 .store = (uint8_t)makes_unique(ops[i].kind) };
	qsort(t, nt, sizeof(*t), by_uniq_stores_first);
	for (size_t i = 1; i < nt && r == 1; i++) {
		if (t[i].uniq != t[i - 1].uniq)
			continue;
		if (t[i].store) {
			rep->bad_key = t[i].key;
			snprintf(rep->why, sizeof(rep->why), "two stores (keys %" PRIu32 " and %" PRIu32
				 ") were told one unique %" PRIu64, t[i - 1].key, t[i].key, t[i].uniq);
			r = 0;
		} else if (t[i].key != t[i - 1].key) {
			rep->bad_key = t[i].key;
			snprintf(rep->why, sizeof(rep->why), "a GET of key %" PRIu32 " returned unique %" PRIu64
				 " of key %" PRIu32 "'s item", t[i].key, t[i].uniq, t[i - 1].key);
			r = 0;
		}
	}
	free(t);
	return r;
}

int lc_check(struct lc_op *ops, size_t n, uint64_t max_states, struct lc_report *rep)
{
	size_t i = 0;
	int r;

	memset(rep, 0, sizeof(*rep));
	rep->ok = 1;
	rep->ops = n;
	qsort(ops, n, sizeof(*ops), by_key_then_inv);
	r = check_uniques(ops, n, rep);
	if (r != 1) {
		rep->ok = 0;
		rep->truncated = r < 0;
		if (r < 0)
			snprintf(rep->why, sizeof(rep->why), "out of memory");
		return r;
	}
	while (i < n) {
		size_t j = i;

		while (j < n && ops[j].key == ops[i].key)
			j++;
		rep->keys++;
		r = check_key(ops + i, j - i, max_states ? max_states : 50000000ull, rep);
		if (r != 1) {
			rep->ok = 0;
			rep->truncated = r < 0;
			rep->bad_key = ops[i].key;
			snprintf(rep->why, sizeof(rep->why), "key %" PRIu32 " (%zu operations): %s", ops[i].key,
				 j - i, r < 0 ? "search budget exhausted" : "no linearization exists");
			return r < 0 ? -1 : 0;
		}
		i = j;
	}
	return 1;
}

static const char kind_letter[] = "?PDGARCIETK"; /* by enum lc_kind */
_Static_assert(sizeof(kind_letter) == LC_GAT + 2, "a letter for every kind");

void lc_format(const struct lc_op *op, char *buf, size_t len)
{
	int w = snprintf(buf, len,
			 "c=%u k=%" PRIu32 " op=%c r=%u v=%" PRIu64 " ttl=%" PRIu64 " inv=%" PRIu64 " cmp=%" PRId64,
			 op->client, op->key, op->kind <= LC_GAT ? kind_letter[op->kind] : '?', op->result, op->value,
			 op->ttl_ns, op->inv, op->cmp == LC_NEVER ? (int64_t)-1 : (int64_t)op->cmp);

	/* item fields only when set: histories without items keep their lines */
	if (w >= 0 && (size_t)w < len && op->uniq)
		w += snprintf(buf + w, len - (size_t)w, " u=%" PRIu64, op->uniq);
	if (w >= 0 && (size_t)w < len && op->kind == LC_CAS)
		w += snprintf(buf + w, len - (size_t)w, " cas=%" PRIu64, op->expect);
	if (w >= 0 && (size_t)w < len && is_arith(op->kind))
		w += snprintf(buf + w, len - (size_t)w, " d=%" PRIu64, op->delta);
	if (w >= 0 && (size_t)w < len && is_arith(op->kind) && op->mode)
		w += snprintf(buf + w, len - (size_t)w, " m=%" PRIu32, op->mode);
	if (w >= 0 && (size_t)w < len && is_arith(op->kind) && (op->mode & LC_VIVIFY))
		w += snprintf(buf + w, len - (size_t)w, " n=%" PRIu64, op->initial);
	if (w >= 0 && (size_t)w < len)
		snprintf(buf + w, len - (size_t)w, "\n");
}

/* Which results each kind may have (bit per enum lc_result). P keeps
 * accepting LC_ABSENT, which it always did (its result is ignored). */
static unsigned results_of(int kind)
{
	switch (kind) {
	case LC_PUT:
	case LC_DELETE:
	case LC_GET:
	case LC_GAT:
	case LC_INCR:
	case LC_DECR:
	case LC_TOUCH:
		return 1u << LC_OK | 1u << LC_ABSENT;
	case LC_ADD:
	case LC_REPLACE:
		return 1u << LC_OK | 1u << LC_NOTSTORED;
	case LC_CAS:
		return 1u << LC_OK | 1u << LC_ABSENT | 1u << LC_EXISTS;
	}
	return 0;
}

int lc_parse(const char *line, struct lc_op *op)
{
	unsigned c, r;
	char k, *kp;
	int64_t cmp;
	int end = 0;
	const char *p;

	memset(op, 0, sizeof(*op));
	if (sscanf(line, "c=%u k=%" SCNu32 " op=%c r=%u v=%" SCNu64 " ttl=%" SCNu64 " inv=%" SCNu64 " cmp=%" SCNd64 "%n",
		   &c, &op->key, &k, &r, &op->value, &op->ttl_ns, &op->inv, &cmp, &end) != 8 || !end)
		return -1;
	op->client = (uint16_t)c;
	op->result = (uint8_t)r;
	kp = k ? strchr(kind_letter + 1, k) : NULL;
	op->kind = kp ? (uint8_t)(kp - kind_letter) : 0;
	op->cmp = cmp < 0 ? LC_NEVER : (uint64_t)cmp;
	if (!op->kind || r > LC_EXISTS || !(results_of(op->kind) >> r & 1) || (cmp >= 0 && op->cmp < op->inv))
		return -1;
	/* then the optional fields, in order, and nothing else */
	p = line + end;
	end = 0;
	if (sscanf(p, " u=%" SCNu64 "%n", &op->uniq, &end) == 1 && end) {
		if (op->kind == LC_TOUCH)
			return -1; /* a TOUCH keeps the item's unique and is told none */
		p += end;
	}
	end = 0;
	if (op->kind == LC_CAS) {
		if (sscanf(p, " cas=%" SCNu64 "%n", &op->expect, &end) != 1 || !end)
			return -1;
		p += end;
	}
	end = 0;
	if (is_arith(op->kind)) {
		if (sscanf(p, " d=%" SCNu64 "%n", &op->delta, &end) != 1 || !end)
			return -1;
		p += end;
		end = 0;
		if (sscanf(p, " m=%" SCNu32 "%n", &op->mode, &end) == 1 && end) {
			if (!op->mode || op->mode > (LC_VIVIFY | LC_ARITH_TOUCH))
				return -1;
			p += end;
		}
		end = 0;
		if (op->mode & LC_VIVIFY) {
			if (sscanf(p, " n=%" SCNu64 "%n", &op->initial, &end) != 1 || !end)
				return -1;
			p += end;
		}
	}
	p += strspn(p, " \t\r\n");
	return *p ? -1 : 0;
}

uint64_t lc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t lc_rand(uint64_t *r)
{
	*r ^= *r << 13;
	*r ^= *r >> 7;
	*r ^= *r << 17;
	return *r;
}
