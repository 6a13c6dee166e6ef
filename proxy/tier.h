/* Reaching the tier: a handle per worker, on the servers of an rdma://
 * list, or on a whole kvcache server inside this process (local://MIB,
 * server/inproc.h) so that kvproxy runs and is tested without RDMA. */
#ifndef KVP_TIER_H
#define KVP_TIER_H

#include <limits.h>
#include <stddef.h>

#include "kvclient.h"

#define KVP_BUSY_POLL_LIBRARY INT_MIN /* busy_poll_us: the library's default */
/* Location cache entries per worker and server (32 bytes each, 2 MiB): a
 * GET of a key whose location is cached is one doorbell instead of two, and
 * a proxy's workers serve every key of their clients. */
#define KVP_CACHE_ENTRIES_DEFAULT (1u << 16)

struct kvp_tier_opts {
	const char *target;      /* rdma://HOST[:PORT][,...] or local://MIB */
	const char *device;      /* rdma: RDMA device, or NULL */
	const char *secret_file; /* rdma: the servers' shared secret, or NULL */
	unsigned depth;          /* ops in flight per handle */
	int busy_poll_us;        /* kvc_opts.busy_poll_us, or KVP_BUSY_POLL_LIBRARY */
	unsigned cache_entries;  /* rdma: kvc_opts.cache_entries */
};

/* 0, or -1 with one line in err: the target is not one kvproxy knows. */
int kvp_tier_check(const char *target, char *err, size_t errlen);
/* A new handle (one per worker thread); the first local:// one starts the
 * in-process server. 0, or a KVC_ code with one line in err. */
int kvp_tier_open(const struct kvp_tier_opts *o, kvc_t **out, char *err, size_t errlen);
/* Destroy h; the last local:// handle stops the in-process server. */
void kvp_tier_close(kvc_t *h);

#endif
