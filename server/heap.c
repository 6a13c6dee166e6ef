#include "heap.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <jemalloc/jemalloc.h>

#include "kvclient_errors.h"
#include "log.h"

#if JEMALLOC_VERSION_MAJOR < 5 || (JEMALLOC_VERSION_MAJOR == 5 && JEMALLOC_VERSION_MINOR < 3)
#error "jemalloc >= 5.3 is needed (experimental.arenas_create_ext keeps metadata out of the region)"
#endif

/* Mirrors jemalloc 5.3's internal arena_config_t, the argument of
 * experimental.arenas_create_ext. jemalloc checks the size we pass, so a
 * changed layout is refused (EINVAL), not misread. */
struct kvs_arena_config {
	extent_hooks_t *extent_hooks;
	bool metadata_use_hooks;
};

struct kvs_heap {
	/* First member: jemalloc passes this pointer back to every hook, and the
	 * hooks find their heap from it. Must outlive the arena. */
	extent_hooks_t hooks;
	uintptr_t lo, hi; /* the only memory the hooks ever hand out */
	uintptr_t next;   /* [lo, next) has been handed to jemalloc (it never returns any) */
	uint64_t segment_size;
	uint64_t stride; /* segment_size + jemalloc's pad: the extent of one segment */
	uint64_t page;   /* jemalloc's page size */
	unsigned arena;
	int have_arena;
	int creating; /* counting hook calls made during arena creation */
	struct kvs_heap_stats st;
};

static struct kvs_heap *heap_of(extent_hooks_t *eh)
{
	return (struct kvs_heap *)((char *)eh - offsetof(struct kvs_heap, hooks));
}

/* The alloc hook: bump allocation of whole grid cells out of the heap.
 *
 * Every extent starts on the segment grid (lo + k * stride) and is a multiple
 * of the stride. jemalloc serves a segment from the lowest address of a free
 * extent (page alignment needs no lead), so every segment it returns is on the
 * grid too, and nothing is lost between segments. jemalloc asks in two shapes:
 * "grow retained" requests (sizes from its own exponential series such as
 * 2.5 MiB) and, when those fail, exact requests (one segment's extent). We
 * refuse sizes that are not whole cells and it falls back to the exact request.
 * In-place expansion (new_addr) is refused: segments are never reallocated.
 *
 * The memory is committed (it is the registered region) but not known to be
 * zero: clients may have written anywhere in it. */
static void *heap_extent_alloc(extent_hooks_t *eh, void *new_addr, size_t size, size_t alignment,
			       bool *zero, bool *commit, unsigned arena_ind)
{
	struct kvs_heap *h = heap_of(eh);
	uintptr_t at = h->next;

	(void)arena_ind;
	if (new_addr || size == 0 || size % h->stride || alignment > h->page || size > h->hi - at) {
		h->st.hook_refused++;
		return NULL;
	}
	h->next = at + size;
	if (*zero)
		memset((void *)at, 0, size);
	*commit = true;
	h->st.hook_allocs++;
	h->st.hook_bytes += size;
	if (h->creating)
		h->st.hook_allocs_at_create++;
	return (void *)at;
}

/* Splitting and merging extents is bookkeeping inside one mapping that we
 * own: always allowed (false = success). Without split, jemalloc could not
 * cut segments out of a larger retained extent. */
static bool heap_extent_split(extent_hooks_t *eh, void *addr, size_t size, size_t size_a, size_t size_b,
			      bool committed, unsigned arena_ind)
{
	(void)eh, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
	return false;
}

static bool heap_extent_merge(extent_hooks_t *eh, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
			      bool committed, unsigned arena_ind)
{
	(void)eh, (void)addr_a, (void)size_a, (void)addr_b, (void)size_b, (void)committed, (void)arena_ind;
	return false;
}

/* dalloc, destroy, commit, decommit and both purges are NULL: jemalloc then
 * keeps every extent it was given (retained, committed, untouched) and never
 * unmaps or madvises a page of the registered region. */
static const extent_hooks_t heap_hooks = {
	.alloc = heap_extent_alloc,
	.split = heap_extent_split,
	.merge = heap_extent_merge,
};

static int set_decay(unsigned arena, const char *which)
{
	char name[64];
	ssize_t never = -1;

	snprintf(name, sizeof(name), "arena.%u.%s_decay_ms", arena, which);
	return mallctl(name, NULL, NULL, &never, sizeof(never));
}

static uint64_t jemalloc_page(void)
{
	size_t page = 0, len = sizeof(page);

	if (mallctl("arenas.page", &page, &len, NULL, 0) || page == 0)
		page = 4096;
	return page;
}

uint64_t kvs_heap_stride(uint64_t segment_size)
{
	bool oblivious = true;
	size_t len = sizeof(oblivious);

	/* jemalloc's sz_large_pad: one page when cache-oblivious placement is on
	 * (read-only at run time in 5.3). Assume it on if we cannot ask. */
	if (mallctl("opt.cache_oblivious", &oblivious, &len, NULL, 0))
		oblivious = true;
	return segment_size + (oblivious ? jemalloc_page() : 0);
}

int kvs_heap_create(void *lo, uint64_t size, uint64_t segment_size, struct kvs_heap **out,
		    struct kvi_errbuf *e)
{
	uint64_t page = jemalloc_page(), stride = kvs_heap_stride(segment_size);
	struct kvs_arena_config cfg;
	struct kvs_heap *h;
	size_t len = sizeof(unsigned);
	int err;

	*out = NULL;
	if (segment_size < page || (segment_size & (segment_size - 1)) || size < stride || size % stride ||
	    (uintptr_t)lo % page || (uintptr_t)lo + size < (uintptr_t)lo) {
		kvi_errbuf_set(e, "heap [%p, +%llu) is not made of whole %llu-byte segments", lo,
			       (unsigned long long)size, (unsigned long long)segment_size);
		return KVC_EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	h->hooks = heap_hooks;
	h->lo = h->next = (uintptr_t)lo;
	h->hi = (uintptr_t)lo + size;
	h->segment_size = segment_size;
	h->stride = stride;
	h->page = page;

	/* The metadata guarantee. A plain arenas.create with hooks makes jemalloc
	 * allocate the arena's "base" (the arena struct, extent descriptors,
	 * per-arena caches) through those hooks, i.e. inside the region. With
	 * metadata_use_hooks = false the base is mapped with jemalloc's default
	 * hooks (its own mmap), and the global radix tree always lives in base 0.
	 * The hooks then only ever serve data extents, which become segments. */
	cfg = (struct kvs_arena_config){ .extent_hooks = &h->hooks, .metadata_use_hooks = false };
	h->creating = 1;
	err = mallctl("experimental.arenas_create_ext", &h->arena, &len, &cfg, sizeof(cfg));
	h->creating = 0;
	if (err) {
		kvi_errbuf_set(e, "jemalloc cannot create the heap arena (experimental.arenas_create_ext: %s)%s",
			       strerror(err), err == ENOENT || err == EINVAL
						      ? ": this jemalloc is not 5.3-compatible" : "");
		free(h);
		return err == ENOENT || err == EINVAL ? KVC_ENOTSUP : KVC_ESYS;
	}
	h->have_arena = 1;
	h->st.arena = h->arena;
	/* Freed segments stay in jemalloc's dirty cache for reuse: with the purge
	 * hooks NULL purging would fail anyway; this spares jemalloc the attempts. */
	if (set_decay(h->arena, "dirty") || set_decay(h->arena, "muzzy")) {
		kvi_errbuf_set(e, "jemalloc refused to disable decay on the heap arena");
		kvs_heap_destroy(h);
		return KVC_ESYS;
	}
	*out = h;
	return 0;
}

void kvs_heap_destroy(struct kvs_heap *h)
{
	char name[64];

	if (!h)
		return;
	if (h->have_arena) {
		/* Discards every allocation and the arena's metadata. The destroy hook
		 * is NULL, so the extents themselves are left alone (the region owns
		 * that memory). */
		snprintf(name, sizeof(name), "arena.%u.destroy", h->arena);
		if (mallctl(name, NULL, NULL, NULL, 0))
			kvi_ev_warn("heap_arena_leaked", "arena=%u msg=%s", h->arena, "jemalloc could not destroy the arena");
	}
	free(h);
}

void *kvs_heap_alloc_segment(struct kvs_heap *h)
{
	/* Page alignment: the allocation starts at its extent's first byte (below
	 * a page jemalloc would shift it by a random cache-line offset). */
	void *p = mallocx(h->segment_size, MALLOCX_ARENA(h->arena) | MALLOCX_ALIGN(h->page) |
						   MALLOCX_TCACHE_NONE);

	/* Only the hooks feed this arena, on the grid; anything else would be a
	 * jemalloc surprise that we refuse to turn into a client writing outside
	 * its segment. */
	if (p && ((uintptr_t)p < h->lo || (uintptr_t)p + h->stride > h->hi ||
		  ((uintptr_t)p - h->lo) % h->stride)) {
		kvi_ev_err("segment_refused", "addr=%p lo=%#lx hi=%#lx msg=%s", p, (unsigned long)h->lo,
			   (unsigned long)h->hi, "jemalloc returned memory off the segment grid");
		return NULL;
	}
	return p;
}

void kvs_heap_free_segment(struct kvs_heap *h, void *seg)
{
	dallocx(seg, MALLOCX_TCACHE_NONE);
	(void)h;
}

void kvs_heap_stats(const struct kvs_heap *h, struct kvs_heap_stats *out)
{
	*out = h->st;
}
