/* The heap allocator: jemalloc, confined to the heap area of the region.
 *
 * An arena with custom extent hooks over the region: one dedicated
 * jemalloc arena per heap; its extent hooks hand out memory only from
 * [lo, lo + size), in whole segments, and never give any back to the kernel
 * (the region is registered with the NIC: an madvise(DONTNEED) under an MR
 * would leave the NIC and the process looking at different pages).
 *
 * jemalloc's own metadata (arena struct, extent descriptors, radix tree) never
 * lives in the region: clients may RDMA-WRITE anywhere in it, and a client must
 * never be able to corrupt the server's allocator. See heap.c for how that is
 * guaranteed and test_server_core.c for the proof.
 *
 * Segment grid. jemalloc 5.3 pads every large allocation with one page
 * ("cache-oblivious" placement; Debian's build has it on and 5.3.0 cannot turn
 * it off at run time), so a segment of S bytes occupies an extent of S + 4 KiB.
 * Asking for S-aligned segments would then waste almost half the heap (every
 * extent straddles two alignment units). Instead segments are page-aligned and
 * laid out on a fixed grid of stride S + pad (kvs_heap_stride): segment k is
 * at lo + k * stride, its last page (the pad) is never granted. Cost: one
 * page per segment (0.4 % at 1 MiB, 6 % at 64 KiB); no alignment gaps.
 *
 * Ownership: the heap borrows the memory range (the region owns it) and must
 * be destroyed before the range is unmapped. Single-threaded: the server's
 * control loop is the only caller. */
#ifndef KVS_HEAP_H
#define KVS_HEAP_H

#include <stdint.h>

#include "errbuf.h"

struct kvs_heap;

struct kvs_heap_stats {
	unsigned arena;            /* jemalloc arena index */
	uint64_t hook_allocs;      /* extents handed to jemalloc by the alloc hook */
	uint64_t hook_bytes;       /* bytes handed to jemalloc, all inside the heap */
	uint64_t hook_refused;     /* alloc hook calls refused (no room, wrong shape) */
	uint64_t hook_allocs_at_create; /* hook allocations while the arena was being
				     * created: jemalloc metadata would show up here */
};

/* Distance between consecutive segments of segment_size bytes: the size of
 * the extent jemalloc gives each (segment_size + its large-allocation pad). */
uint64_t kvs_heap_stride(uint64_t segment_size);

/* Create the arena over [lo, lo + size). lo must be page-aligned,
 * segment_size a power of two of at least a page, and size a multiple of
 * kvs_heap_stride(segment_size). 0, or KVC_EINVAL / KVC_ENOTSUP (a jemalloc
 * without experimental.arenas_create_ext) / KVC_ESYS with a message in e. */
int kvs_heap_create(void *lo, uint64_t size, uint64_t segment_size, struct kvs_heap **out,
		    struct kvi_errbuf *e);

/* Destroy the arena (discarding every segment still allocated); accepts NULL. */
void kvs_heap_destroy(struct kvs_heap *h);

/* One segment: segment_size bytes at lo + k * stride for some k (page-aligned).
 * NULL when the heap is exhausted. Its contents are whatever was there. */
void *kvs_heap_alloc_segment(struct kvs_heap *h);

/* Give back a segment from kvs_heap_alloc_segment; it may be returned by the
 * next kvs_heap_alloc_segment. Quarantine (layout.h "Reuse") is the caller's business. */
void kvs_heap_free_segment(struct kvs_heap *h, void *seg);

void kvs_heap_stats(const struct kvs_heap *h, struct kvs_heap_stats *out);

#endif
