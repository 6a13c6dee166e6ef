/* Wing & Gong search with memoisation, per key; see lincheck.h for the model. */
#include "lincheck.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define MS 1000000ull
#define NONE UINT32_MAX

/* The model's state after some prefix of a linearization. */
struct lstate {
	uint64_t cur;    /* index of the PUT whose value is current, or NONE (absent) */
	uint64_t lo, hi; /* the current item's expiry lies in [lo, hi] (ns); unused without TTL */
	uint64_t t;      /* linearization point of the last operation */
};

struct memo {
	uint64_t *k; /* pairs of 64-bit halves of a 128-bit hash; 0,0 = empty */
	size_t cap, n;
};

struct search {
	const struct lc_op *op; /* this key's operations, by invocation */
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

static int has_ttl(const struct search *s, const struct lstate *st)
{
	return st->cur != NONE && s->op[st->cur].ttl_ns != 0;
}

/* Apply operation i at the earliest point >= max(t, its invocation) that its
 * result allows; 0 if its result is impossible in state st. */
static int step(const struct search *s, size_t i, const struct lstate *st, struct lstate *nx)
{
	const struct lc_op *o = &s->op[i];
	uint64_t g = st->t > o->inv ? st->t : o->inv;
	int unknown = o->cmp == LC_NEVER;

	*nx = *st;
	if (o->kind == LC_PUT) {
		nx->cur = i;
		nx->lo = o->inv + o->ttl_ns;
		nx->hi = unknown ? UINT64_MAX : o->cmp + o->ttl_ns + MS;
		nx->t = g;
		return 1;
	}
	if (o->kind == LC_DELETE && unknown) { /* removed, or found nothing: absent either way */
		nx->cur = NONE;
		nx->t = g;
		return 1;
	}
	if (o->result == LC_OK) { /* GET hit, or DELETE of a live item */
		if (st->cur == NONE || (o->kind == LC_GET && s->op[st->cur].value != o->value))
			return 0;
		if (has_ttl(s, st)) {
			if (st->hi <= g)
				return 0; /* expired by then for sure */
			if (nx->lo < g + 1)
				nx->lo = g + 1; /* E > g */
		}
		if (o->kind == LC_DELETE)
			nx->cur = NONE;
		nx->t = g;
		return 1;
	}
	/* Absent: no item, or the item had expired (E <= g). */
	if (st->cur != NONE) {
		if (!has_ttl(s, st))
			return 0;
		if (g < st->lo)
			g = st->lo; /* E <= g needs g >= the window's start */
	}
	nx->cur = NONE; /* an expired item is dead for every later point */
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
		struct lstate nx;
		int r;

		if (is_done(s, i))
			continue;
		if (s->op[i].inv > minc)
			break; /* ops are by invocation: none later can come next */
		if (!step(s, i, st, &nx) || nx.t > minc)
			continue; /* impossible, or some pending op would end before this point */
		s->done[i / 64] |= 1ull << (i % 64);
		s->ndone++;
		r = seen(s, &nx) ? 0 : dfs(s, &nx);
		s->done[i / 64] &= ~(1ull << (i % 64));
		s->ndone--;
		if (r)
			return r;
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

static int check_key(const struct lc_op *op, size_t m, uint64_t budget, struct lc_report *rep)
{
	struct search s = { .op = op, .m = m, .words = (m + 63) / 64, .budget = budget };
	struct lstate st = { .cur = NONE };
	int r;

	s.done = calloc(s.words, sizeof(uint64_t));
	if (!s.done)
		return -1;
	r = dfs(&s, &st);
	rep->states += s.states;
	free(s.done);
	free(s.memo.k);
	return r;
}

int lc_check(struct lc_op *ops, size_t n, uint64_t max_states, struct lc_report *rep)
{
	size_t i = 0;

	memset(rep, 0, sizeof(*rep));
	rep->ok = 1;
	rep->ops = n;
	qsort(ops, n, sizeof(*ops), by_key_then_inv);
	while (i < n) {
		size_t j = i;
		int r;

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

void lc_format(const struct lc_op *op, char *buf, size_t len)
{
	static const char kind[] = "?PDG";

	snprintf(buf, len, "c=%u k=%" PRIu32 " op=%c r=%u v=%" PRIu64 " ttl=%" PRIu64 " inv=%" PRIu64 " cmp=%" PRId64 "\n",
		 op->client, op->key, kind[op->kind & 3], op->result, op->value, op->ttl_ns, op->inv,
		 op->cmp == LC_NEVER ? (int64_t)-1 : (int64_t)op->cmp);
}

int lc_parse(const char *line, struct lc_op *op)
{
	unsigned c, r;
	char k;
	int64_t cmp;

	memset(op, 0, sizeof(*op));
	if (sscanf(line, "c=%u k=%" SCNu32 " op=%c r=%u v=%" SCNu64 " ttl=%" SCNu64 " inv=%" SCNu64 " cmp=%" SCNd64, &c,
		   &op->key, &k, &r, &op->value, &op->ttl_ns, &op->inv, &cmp) != 8)
		return -1;
	op->client = (uint16_t)c;
	op->result = (uint8_t)r;
	op->kind = k == 'P' ? LC_PUT : k == 'D' ? LC_DELETE : k == 'G' ? LC_GET : 0;
	op->cmp = cmp < 0 ? LC_NEVER : (uint64_t)cmp;
	if (!op->kind || r > LC_ABSENT || (cmp >= 0 && op->cmp < op->inv))
		return -1;
	return 0;
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
