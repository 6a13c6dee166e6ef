/* Anonymous memory that transparent hugepages can back: a private mapping
 * starting on a 2 MiB boundary, advised MADV_HUGEPAGE (honoured where the
 * system allows: THP "always" or "madvise"). For tables read at random
 * (the server's region, the client's location cache), where 4 KiB pages
 * would make nearly every access a TLB miss. A mapping of its own, not heap
 * memory: the advice must not outlive it on memory the allocator reuses. */
#ifndef KVI_HUGEMAP_H
#define KVI_HUGEMAP_H

#include <stddef.h>

#define KVI_HUGEPAGE_SIZE (2u << 20)

/* len bytes (a multiple of 4 KiB), zeroed; NULL with errno on failure. */
void *kvi_map_huge(size_t len);
void kvi_unmap_huge(void *p, size_t len);

#endif
