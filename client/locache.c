#include "locache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvclient_errors.h"

#define HUGE (2u << 20)

int kvi_locache_init(struct kvi_locache *c, uint32_t entries)
{
	size_t bytes;

	c->e = NULL;
	c->n = 0;
	if (entries == 0)
		return 0;
	c->n = 1;
	while (c->n <= entries / 2)
		c->n *= 2;
	bytes = (size_t)c->n * sizeof(*c->e);
	if (bytes >= HUGE) {
		/* Lookups are random over the whole table: on 4 KiB pages
		 * nearly each is a TLB miss as well as a cache miss, and a TLB
		 * miss stalls even a prefetch (measured: a third of a GET's
		 * time in a VM). On 2 MiB boundaries, transparent hugepages can
		 * back it where the system allows (madvise mode). */
		c->e = aligned_alloc(HUGE, bytes);
		if (c->e)
			madvise(c->e, bytes, MADV_HUGEPAGE);
	} else {
		/* aligned_alloc wants a multiple of the alignment (one entry: 32). */
		c->e = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	}
	if (!c->e) {
		c->n = 0;
		return KVC_ENOMEM;
	}
	memset(c->e, 0, (size_t)c->n * sizeof(*c->e));
	return 0;
}

void kvi_locache_fini(struct kvi_locache *c)
{
	free(c->e);
	c->e = NULL;
	c->n = 0;
}

void kvi_locache_clear(struct kvi_locache *c)
{
	if (c->e)
		memset(c->e, 0, (size_t)c->n * sizeof(*c->e));
}

static struct kvi_loc *slot_for(const struct kvi_locache *c, uint64_t hlo)
{
	/* hlo also picks the first bucket; the high bits spread entries
	 * independently. (kvi_locache_prefetch in locache.h computes the same.) */
	return &c->e[(hlo >> 32 ^ hlo) & (c->n - 1)];
}

const struct kvi_loc *kvi_locache_get(const struct kvi_locache *c, uint64_t hlo, uint64_t hhi)
{
	const struct kvi_loc *l;

	if (c->n == 0)
		return NULL;
	l = slot_for(c, hlo);
	return l->slot && l->hlo == hlo && l->hhi32 == (uint32_t)hhi ? l : NULL;
}

void kvi_locache_put(struct kvi_locache *c, uint64_t hlo, uint64_t hhi, uint64_t bucket, uint32_t idx,
		     uint64_t slot, uint64_t seen_ns)
{
	struct kvi_loc *l;

	if (c->n == 0)
		return;
	l = slot_for(c, hlo);
	if (bucket > UINT32_MAX) { /* not cacheable: forget what this key had */
		if (l->hlo == hlo && l->hhi32 == (uint32_t)hhi)
			l->slot = 0;
		return;
	}
	*l = (struct kvi_loc){ .hlo = hlo, .hhi32 = (uint32_t)hhi, .slot = slot, .bucket = (uint32_t)bucket,
			       .idx = (uint16_t)idx, .seen = (uint32_t)(seen_ns / KVI_LOC_TICK_NS) };
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

	if (c->n == 0)
		return;
	l = slot_for(c, hlo);
	if (l->hlo == hlo && l->hhi32 == (uint32_t)hhi)
		l->slot = 0;
}
