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
	c->set_mask = (uint64_t)(c->n - 1) & ~(uint64_t)(KVI_LOC_WAYS - 1);
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
		/* A set's two lines in one 128-byte block; aligned_alloc wants a
		 * multiple of the alignment (one entry: 32). */
		c->e = aligned_alloc(128, (bytes + 127) & ~(size_t)127);
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

/* Entries are grouped in sets of KVI_LOC_WAYS, two adjacent 64-byte lines
 * (a lookup is two misses at most, started together by the prefetch, and up
 * to four keys whose hashes pick the same set all stay: with two ways a set of
 * one line, 20 000 keys in 65 536 entries lost 4.5 % of their locations to
 * full sets, in theory and measured; with four, 0.8 %); a cache of fewer
 * entries is one set of them. hlo also picks the first bucket; the high bits
 * spread sets independently (kvi_locache_prefetch in locache.h computes the
 * same lines). */
static struct kvi_loc *set_for(const struct kvi_locache *c, uint64_t hlo, unsigned *ways)
{
	*ways = c->n < KVI_LOC_WAYS ? c->n : KVI_LOC_WAYS;
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
	for (unsigned i = 0; i < ways; i++)
		if (holds(&l[i], hlo, hhi))
			return &l[i];
	return NULL;
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
	 * longest ago (every GET that uses an entry confirms it again, so
	 * this is the least recently used, to the tick: within one tick, the
	 * lowest way goes). */
	to = NULL;
	for (unsigned i = 0; i < ways && !(to && holds(to, hlo, hhi)); i++)
		if (holds(&l[i], hlo, hhi) || !to || (to->slot && (!l[i].slot || (int32_t)(l[i].seen - to->seen) < 0)))
			to = &l[i];
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
