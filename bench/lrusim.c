#include "lrusim.h"

#include <stdlib.h>

#define NIL UINT32_MAX

struct node {
	uint64_t key;
	uint32_t prev, next; /* recency list: head = most recent */
	uint32_t hnext;      /* hash chain */
};

struct kvb_lru {
	struct node *n;
	uint32_t *bucket;
	uint64_t mask;
	uint32_t cap, used, head, tail;
};

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

int kvb_lru_create(uint64_t capacity, struct kvb_lru **out)
{
	struct kvb_lru *l;
	uint64_t nb = 1;

	*out = NULL;
	if (capacity == 0 || capacity >= NIL)
		return -1;
	while (nb < 2 * capacity)
		nb <<= 1;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -1;
	l->n = malloc(capacity * sizeof(*l->n));
	l->bucket = malloc(nb * sizeof(*l->bucket));
	if (!l->n || !l->bucket) {
		kvb_lru_destroy(l);
		return -1;
	}
	for (uint64_t i = 0; i < nb; i++)
		l->bucket[i] = NIL;
	l->mask = nb - 1;
	l->cap = (uint32_t)capacity;
	l->head = l->tail = NIL;
	*out = l;
	return 0;
}

void kvb_lru_destroy(struct kvb_lru *l)
{
	if (!l)
		return;
	free(l->n);
	free(l->bucket);
	free(l);
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

int kvb_lru_access(struct kvb_lru *l, uint64_t key)
{
	uint32_t *pp = &l->bucket[mix(key) & l->mask], i;

	for (i = *pp; i != NIL; i = l->n[i].hnext) {
		if (l->n[i].key == key) {
			unlink_node(l, i);
			push_front(l, i);
			return 1;
		}
	}
	if (l->used < l->cap) {
		i = l->used++;
	} else {
		uint32_t *vp;

		i = l->tail; /* the victim's node is reused */
		unlink_node(l, i);
		for (vp = &l->bucket[mix(l->n[i].key) & l->mask]; *vp != i; vp = &l->n[*vp].hnext)
			;
		*vp = l->n[i].hnext;
	}
	l->n[i].key = key;
	l->n[i].hnext = *pp;
	*pp = i;
	push_front(l, i);
	return 0;
}
