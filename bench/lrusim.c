#include "lrusim.h"

#include <stdlib.h>

#define NIL UINT32_MAX

/* One cached object. Nodes live in one array that grows; freed ones (deleted
 * or evicted keys) are chained through hnext for reuse. */
struct node {
	uint64_t key, size;
	uint32_t prev, next; /* recency list: head = most recent */
	uint32_t hnext;      /* hash chain, or the free list */
};

struct kvb_lru {
	struct node *n;
	uint32_t *bucket;
	uint64_t mask;     /* buckets - 1; they double when nodes outnumber them */
	uint64_t cap, bytes; /* capacity and what is held, in size units */
	uint32_t nodes, used, free, head, tail, live;
	int oom; /* an insert found no memory: the simulation is wrong from then on */
};

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

int kvb_lru_create_bytes(uint64_t capacity_bytes, struct kvb_lru **out)
{
	struct kvb_lru *l;

	*out = NULL;
	if (capacity_bytes == 0)
		return -1;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -1;
	l->mask = 1023;
	l->bucket = malloc((l->mask + 1) * sizeof(*l->bucket));
	if (!l->bucket) {
		free(l);
		return -1;
	}
	for (uint64_t i = 0; i <= l->mask; i++)
		l->bucket[i] = NIL;
	l->cap = capacity_bytes;
	l->head = l->tail = l->free = NIL;
	*out = l;
	return 0;
}

int kvb_lru_create(uint64_t capacity, struct kvb_lru **out)
{
	if (capacity >= NIL) {
		*out = NULL;
		return -1;
	}
	return kvb_lru_create_bytes(capacity, out);
}

void kvb_lru_destroy(struct kvb_lru *l)
{
	if (!l)
		return;
	free(l->n);
	free(l->bucket);
	free(l);
}

uint64_t kvb_lru_bytes(const struct kvb_lru *l)
{
	return l->bytes;
}

int kvb_lru_failed(const struct kvb_lru *l)
{
	return l->oom;
}

static void unlink_node(struct kvb_lru *l, uint32_t i)
{
	struct node *x = &l->n[i];

	if (x->prev != NIL)
		l->n[x->prev].next = x->next;
	else
		l->head = x->next;
	if (x->next != NIL)
		l->n[x->next].prev = x->prev;
	else
		l->tail = x->prev;
}

static void push_front(struct kvb_lru *l, uint32_t i)
{
	l->n[i].prev = NIL;
	l->n[i].next = l->head;
	if (l->head != NIL)
		l->n[l->head].prev = i;
	l->head = i;
	if (l->tail == NIL)
		l->tail = i;
}

static uint32_t *slot_of(struct kvb_lru *l, uint64_t key)
{
	uint32_t *pp = &l->bucket[mix(key) & l->mask];

	while (*pp != NIL && l->n[*pp].key != key)
		pp = &l->n[*pp].hnext;
	return pp;
}

/* Take node *pp out of the table and the list, onto the free list. */
static void drop(struct kvb_lru *l, uint32_t *pp)
{
	uint32_t i = *pp;

	*pp = l->n[i].hnext;
	unlink_node(l, i);
	l->bytes -= l->n[i].size;
	l->live--;
	l->n[i].hnext = l->free;
	l->free = i;
}

static void evict_until_fits(struct kvb_lru *l, uint64_t size)
{
	while (l->tail != NIL && l->bytes + size > l->cap)
		drop(l, slot_of(l, l->n[l->tail].key));
}

/* Twice the buckets, chains rebuilt. -1 when out of memory (the table then
 * stays as it was: longer chains, same answers). */
static int grow_table(struct kvb_lru *l)
{
	uint64_t nb = 2 * (l->mask + 1);
	uint32_t *b = malloc(nb * sizeof(*b));

	if (!b)
		return -1;
	for (uint64_t i = 0; i < nb; i++)
		b[i] = NIL;
	for (uint32_t i = l->head; i != NIL; i = l->n[i].next) {
		uint64_t h = mix(l->n[i].key) & (nb - 1);

		l->n[i].hnext = b[h];
		b[h] = i;
	}
	free(l->bucket);
	l->bucket = b;
	l->mask = nb - 1;
	return 0;
}

/* Insert key (absent) with size, most recent. 0, or -1 out of memory. */
static int insert(struct kvb_lru *l, uint64_t key, uint64_t size)
{
	uint32_t i, *pp;

	if (size > l->cap)
		return 0;
	evict_until_fits(l, size);
	if (l->free == NIL && l->used == l->nodes) {
		uint32_t want = l->nodes ? 2 * l->nodes : 1024;
		struct node *n;

		if (l->nodes >= NIL / 2 || !(n = realloc(l->n, (size_t)want * sizeof(*n)))) {
			l->oom = 1;
			return -1;
		}
		l->n = n;
		l->nodes = want;
	}
	if (l->free != NIL) {
		i = l->free;
		l->free = l->n[i].hnext;
	} else {
		i = l->used++;
	}
	if (l->live + 1 > l->mask + 1)
		(void)grow_table(l);
	pp = &l->bucket[mix(key) & l->mask];
	l->n[i].key = key;
	l->n[i].size = size;
	l->n[i].hnext = *pp;
	*pp = i;
	push_front(l, i);
	l->bytes += size;
	l->live++;
	return 0;
}

int kvb_lru_get(struct kvb_lru *l, uint64_t key, uint64_t size)
{
	uint32_t *pp = slot_of(l, key);

	if (*pp != NIL) {
		uint32_t i = *pp;

		unlink_node(l, i);
		push_front(l, i);
		if (size && size != l->n[i].size)
			kvb_lru_set(l, key, size);
		return 1;
	}
	(void)insert(l, key, size);
	return 0;
}

void kvb_lru_set(struct kvb_lru *l, uint64_t key, uint64_t size)
{
	uint32_t *pp = slot_of(l, key);

	if (*pp != NIL)
		drop(l, pp);
	(void)insert(l, key, size);
}

void kvb_lru_delete(struct kvb_lru *l, uint64_t key)
{
	uint32_t *pp = slot_of(l, key);

	if (*pp != NIL)
		drop(l, pp);
}

int kvb_lru_access(struct kvb_lru *l, uint64_t key)
{
	return kvb_lru_get(l, key, 1);
}
