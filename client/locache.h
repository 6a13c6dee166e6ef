/* The location cache: for recently used keys, where their slot was and what it
 * held. Four-way set-associative (a set is two adjacent cache lines), least
 * recently used out, fixed size (bounded memory), owned by one handle.
 *
 * An entry is only a hint, found by the key's hash (96 of its bits), and
 * every use checks the key bytes of the object it leads to (a hash is not a
 * key). It is trusted for one thing: if the slot still holds
 * the cached word, the key's current object is the one that word points at
 * (objects are immutable and a key lives in at most one slot, layout.h I2).
 * Every use re-reads the slot word in the same doorbell as the object.
 *
 * With memory reuse that holds only for a while: once the segment the word
 * points into is reclaimed and reused, the same word may come back naming
 * another key's object (layout.h "Reuse"). A GET and a cached PUT check the
 * key bytes of that object anyway (the entry is found by the key's hash, and
 * a hash is not a key: a crafted collision shares the entry); a cached PUT
 * also trusts an entry only while it is younger than the server's quarantine
 * minus an operation deadline, so it rarely reads a reused segment: `seen`
 * is when the word was last confirmed (the start of the operation that saw
 * it), in units of KVI_LOC_TICK_NS, wrapping after 2^32 ticks (2.2 years). */
#ifndef KVI_LOCACHE_H
#define KVI_LOCACHE_H

#include <stddef.h>
#include <stdint.h>

struct kvi_loc {
	uint64_t hlo;    /* the key's 128-bit hash, low half ... */
	uint64_t slot;   /* slot word last seen; 0 = entry empty */
	uint32_t hhi32;  /* ... and 32 bits of the high half: enough for a hint */
	uint32_t bucket; /* bucket index (buckets past 2^32 are not cached) */
	uint32_t seen;   /* KVI_LOC_TICK_NS ticks (see above) */
	uint16_t idx;    /* slot index in the bucket */
	uint16_t pad;
};
#define KVI_LOC_TICK_NS (1ull << 24) /* ~16.8 ms */
/* Two entries a cache line, none across two; a set is KVI_LOC_WAYS of them. */
_Static_assert(sizeof(struct kvi_loc) == 32, "kvc_opts.cache_entries documents 32 bytes an entry");
#define KVI_LOC_WAYS 4u

struct kvi_locache {
	struct kvi_loc *e; /* 64-byte aligned */
	uint32_t n;        /* entries, a power of two; 0 = disabled */
	uint64_t set_mask; /* hash bits to a set's first entry: (n - 1) & ~3; 0 when n < 4 */
	size_t mapped;     /* bytes of e's own mapping (hugemap.h), 0 = heap memory */
};

/* entries is rounded down to a power of two (an index is a mask, not a
 * division). */
int kvi_locache_init(struct kvi_locache *c, uint32_t entries);
void kvi_locache_fini(struct kvi_locache *c);
/* Forget every entry (a new connection: the server may have a new layout). */
void kvi_locache_clear(struct kvi_locache *c);
/* Start loading the entry for this hash (a lookup that follows soon finds
 * it in the CPU's cache instead of waiting for memory). */
static inline void kvi_locache_prefetch(const struct kvi_locache *c, uint64_t hlo)
{
	/* The set's two lines (locache.c), from a mask fixed at init (a disabled
	 * cache: address 0; a prefetch never faults). On x86 in asm volatile:
	 * GCC 12 deleted __builtin_prefetch here twice -- under `if (c->n)`,
	 * and with a comparison in the address -- and a lookup that waits for
	 * memory was then a fifth of a GET. */
	uintptr_t at = (uintptr_t)c->e + ((hlo >> 32 ^ hlo) & c->set_mask) * sizeof(struct kvi_loc);

#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetcht0 (%0)\n\tprefetcht0 64(%0)" : : "r"(at));
#else
	__builtin_prefetch((const void *)at);
	__builtin_prefetch((const void *)(at + 64));
#endif
}
/* The entry for this hash, or NULL. */
const struct kvi_loc *kvi_locache_get(const struct kvi_locache *c, uint64_t hlo, uint64_t hhi);
void kvi_locache_put(struct kvi_locache *c, uint64_t hlo, uint64_t hhi, uint64_t bucket, uint32_t idx,
		     uint64_t slot, uint64_t seen_ns);
/* Is l younger than max_age_ns at now_ns (rounded against trusting it)? */
int kvi_locache_fresh(const struct kvi_loc *l, uint64_t now_ns, uint64_t max_age_ns);
void kvi_locache_drop(struct kvi_locache *c, uint64_t hlo, uint64_t hhi);

#endif
