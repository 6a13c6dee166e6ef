#include "locache.h"

#include <stdlib.h>
#include <string.h>

#include "hugemap.h"
#include "kvclient_errors.h"

int kvi_locache_init(struct kvi_locache *c, uint32_t entries)
{
	size_t bytes;

	c->e = NULL;
	c->n = 0;
	c->set_mask = 0;
	c->mapped = 0;
	if (entries == 0)
		return 0;
	c->n = 1;
	while (c->n <= entries / 2)
		c->n *= 2;
	c->set_mask = (uint64_t)(c->n - 1) & ~(uint64_t)1;
	bytes = (size_t)c->n * sizeof(*c->e);
	if (bytes >= KVI_HUGEPAGE_SIZE) {
		/* Lookups are random over the whole table: on 4 KiB pages
		 * nearly each is a TLB miss as well as a cache miss, and a TLB
		 * miss stalls even a prefetch (measured: a third of a GET's
		 * time in a VM). A power of two this large is a whole number
		 * of hugepages. */
		c->e = kvi_map_huge(bytes);
		c->mapped = c->e ? bytes : 0;
	} else {
		/* aligned_alloc wants a multiple of the alignment (one entry: 32). */
		c->e = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
		if (c->e)
			memset(c->e, 0, bytes);
	}
	if (!c->e) {
		c->n = 0;
		c->set_mask = 0;
		return KVC_ENOMEM;
	}
	return 0;
}

void kvi_locache_fini(struct kvi_locache *c)
{
	if (c->mapped)
		kvi_unmap_huge(c->e, c->mapped);
	else
		free(c->e);
	c->e = NULL;
	c->n = 0;
	c->set_mask = 0;
	c->mapped = 0;
}

void kvi_locache_clear(struct kvi_locache *c)
{
	if (c->e)
		memset(c->e, 0, (size_t)c->n * sizeof(*c->e));
}

/* Entries are grouped in sets of two, one 64-byte line each (a lookup is one
 * miss at most, and two keys whose hashes pick the same set both stay); a
 * one-entry cache is one set of one. hlo also picks the first bucket; the
 * high bits spread sets independently (kvi_locache_prefetch in locache.h
 * computes the same line). */
static struct kvi_loc *set_for(const struct kvi_locache *c, uint64_t hlo, unsigned *ways)
{
	*ways = c->n > 1 ? 2 : 1;
	return &c->e[(hlo >> 32 ^ hlo) & c->set_mask];
}

static int holds(const struct kvi_loc *l, uint64_t hlo, uint64_t hhi)
{
	return l->slot && l->hlo == hlo && l->hhi32 == (uint32_t)hhi;
}

const struct kvi_loc *kvi_locache_get(const struct kvi_locache *c, uint64_t hlo, uint64_t hhi)
{
	const struct kvi_loc *l;
	unsigned ways;

	if (c->n == 0)
		return NULL;
	l = set_for(c, hlo, &ways);
	if (holds(&l[0], hlo, hhi))
		return &l[0];
	return ways > 1 && holds(&l[1], hlo, hhi) ? &l[1] : NULL;
}

void kvi_locache_put(struct kvi_locache *c, uint64_t hlo, uint64_t hhi, uint64_t bucket, uint32_t idx,
		     uint64_t slot, uint64_t seen_ns)
{
	uint32_t seen = (uint32_t)(seen_ns / KVI_LOC_TICK_NS);
	struct kvi_loc *l, *to;
	unsigned ways;

	if (bucket > UINT32_MAX) { /* not cacheable: forget what this key had */
		kvi_locache_drop(c, hlo, hhi);
		return;
	}
	if (c->n == 0)
		return;
	l = set_for(c, hlo, &ways);
	/* The key's own entry; else an empty one; else the one confirmed
	 * longer ago (every GET that uses an entry confirms it again, so
	 * this is the least recently used, to the tick: within one tick,
	 * way 0 goes). */
	to = &l[0];
	if (ways > 1 && !holds(&l[0], hlo, hhi) &&
	    (holds(&l[1], hlo, hhi) || (l[0].slot && (!l[1].slot || (int32_t)(l[1].seen - l[0].seen) < 0))))
		to = &l[1];
	*to = (struct kvi_loc){ .hlo = hlo, .hhi32 = (uint32_t)hhi, .slot = slot, .bucket = (uint32_t)bucket,
				.idx = (uint16_t)idx, .seen = seen };
}

int kvi_locache_fresh(const struct kvi_loc *l, uint64_t now_ns, uint64_t max_age_ns)
{
	uint32_t age = (uint32_t)(now_ns / KVI_LOC_TICK_NS) - l->seen;

	/* seen was rounded down, so the true age may be up to a tick less than
	 * age ticks, or up to a tick more: count one tick extra. */
	return ((uint64_t)age + 1) * KVI_LOC_TICK_NS < max_age_ns;
}

void kvi_locache_drop(struct kvi_locache *c, uint64_t hlo, uint64_t hhi)
{
	struct kvi_loc *l;
	unsigned ways;

	if (c->n == 0)
		return;
	l = set_for(c, hlo, &ways);
	for (unsigned i = 0; i < ways; i++)
		if (holds(&l[i], hlo, hhi))
			l[i].slot = 0;
}
