/* The server's one memory region: allocated (hugepages when possible) and
 * registered once for the lifetime of the process. Everything clients touch
 * lives in it; the rkey published to them covers exactly [base, base + size).
 * base is always 2 MiB-aligned (hugepages or not). */
#ifndef KVS_REGION_H
#define KVS_REGION_H

#include <stddef.h>
#include <infiniband/verbs.h>

#include "errbuf.h"

enum kvs_hugepages { KVS_HUGE_AUTO, KVS_HUGE_ON, KVS_HUGE_OFF };

struct kvs_region {
	void *base;
	size_t size;     /* bytes published to clients */
	size_t map_size; /* bytes mapped (size rounded up to the page size) */
	int huge;        /* 1 when backed by 2 MiB hugepages */
	struct ibv_mr *mr;
};

/* Map and register. With KVS_HUGE_AUTO a missing hugepage pool falls back to
 * 4 KiB pages with a warning; with KVS_HUGE_ON it is an error. */
int kvs_region_create(struct kvs_region *r, size_t size, enum kvs_hugepages mode, struct ibv_pd *pd,
		      struct kvi_errbuf *e);
/* Deregister and unmap; accepts a zeroed or half-built region. */
void kvs_region_destroy(struct kvs_region *r);

#endif
