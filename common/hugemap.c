#include "hugemap.h"

#include <stdint.h>
#include <sys/mman.h>

void *kvi_map_huge(size_t len)
{
	/* Over-map by 2 MiB, trim both ends to the aligned range. */
	size_t over = len + KVI_HUGEPAGE_SIZE;
	uint8_t *p, *a;

	p = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (uint8_t *)(((uintptr_t)p + KVI_HUGEPAGE_SIZE - 1) & ~(uintptr_t)(KVI_HUGEPAGE_SIZE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (p + over > a + len)
		munmap(a + len, (size_t)(p + over - (a + len)));
	madvise(a, len, MADV_HUGEPAGE); /* advice: refused where THP is off, and then 4 KiB pages */
	return a;
}

void kvi_unmap_huge(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}
