/* The tier (tier.h). local://MIB runs the real server core and reclaimer
 * in this process over the local transport, with MIB MiB of 1 MiB
 * segments (values up to about 1 MiB, as memcached's default item size),
 * as kvbench's local:// driver does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "core.h"
#include "heap.h"
#include "inproc.h"
#include "tier.h"

#define LOCAL_PREFIX "local://"
#define RDMA_PREFIX "rdma://"
#define LOCAL_SEGMENT (1u << 20)
/* A worker preempted on a busy machine (tens of ms) must not miss its
 * deadline, or its handle breaks and its ops fail (50 ms did, under a loaded
 * test suite); but reclaimed segments wait twice this before reuse, so a
 * small heap under a burst of writes wants it short, and reclamation to
 * start early (LOCAL_RECLAIM_*: per cent of the heap free). */
#define LOCAL_MAX_OP_MS 250u
#define LOCAL_RECLAIM_LOW_PCT 10u
#define LOCAL_RECLAIM_HIGH_PCT 20u
#define LOCAL_ITEM_BYTES 256u   /* index sized for items of this footprint */
#define LOCAL_CACHE_ENTRIES (1u << 14)

static struct kvs_inproc_shared local = KVS_INPROC_SHARED_INIT;

static int local_mib(const char *target, unsigned long *mib)
{
	char *end;

	*mib = strtoul(target + strlen(LOCAL_PREFIX), &end, 10);
	return *end || *mib < 2 || *mib > 65536 ? -1 : 0;
}

int kvp_tier_check(const char *target, char *err, size_t errlen)
{
	unsigned long mib;

	if (!strncmp(target, LOCAL_PREFIX, strlen(LOCAL_PREFIX))) {
		if (local_mib(target, &mib)) {
			snprintf(err, errlen, "local://MIB: MiB of item memory, 2..65536, not '%s'", target);
			return -1;
		}
		return 0;
	}
	if (strncmp(target, RDMA_PREFIX, strlen(RDMA_PREFIX)) || !target[strlen(RDMA_PREFIX)]) {
		snprintf(err, errlen, "target '%s': expected rdma://HOST[:PORT][,HOST[:PORT]...] or local://MIB", target);
		return -1;
	}
	return 0;
}

static int local_open(const struct kvp_tier_opts *to, kvc_t **out, char *err, size_t errlen)
{
	struct kvi_rmem *rm = NULL;
	struct kvc_opts o;
	unsigned long mib;
	uint64_t seg, nsegs, buckets, index;
	int rc;

	if (local_mib(to->target, &mib)) {
		snprintf(err, errlen, "bad local:// target '%s'", to->target);
		return KVC_EINVAL;
	}
	seg = mib >= 16 ? LOCAL_SEGMENT : 64u << 10;
	nsegs = ((uint64_t)mib << 20) / seg;
	buckets = ((uint64_t)mib << 20) / LOCAL_ITEM_BYTES / KVI_SLOTS_PER_BUCKET * 2 + 64;
	index = (KVI_SUPERBLOCK_SIZE + buckets * KVI_BUCKET_SIZE + 4095) & ~4095ull;
	{
		struct kvs_core_opts co = { .buckets = buckets, .segment_size = seg, .max_op_ms = LOCAL_MAX_OP_MS,
					    .quarantine_ms = 2 * LOCAL_MAX_OP_MS + KVS_QUARANTINE_MARGIN_MS,
					    .reclaim_low_pct = LOCAL_RECLAIM_LOW_PCT,
					    .reclaim_high_pct = LOCAL_RECLAIM_HIGH_PCT };

		if (kvs_inproc_share(&local, index + nsegs * kvs_heap_stride(seg), &co, 0, &rm, err, errlen))
			return KVC_ENOMEM;
	}
	kvc_opts_init(&o);
	o.depth = to->depth;
	if (to->busy_poll_us != KVP_BUSY_POLL_LIBRARY) /* the in-process transport never sleeps: checked, not used */
		o.busy_poll_us = to->busy_poll_us;
	o.cache_entries = LOCAL_CACHE_ENTRIES;
	rc = kvi_client_open(rm, &o, out);
	if (rc) {
		snprintf(err, errlen, "cannot open a handle on the in-process server: %s", kvc_strerror(rc));
		kvs_inproc_unshare(&local);
	}
	return rc;
}

int kvp_tier_open(const struct kvp_tier_opts *to, kvc_t **out, char *err, size_t errlen)
{
	struct kvc_opts o;
	char *list, *w;
	const char *r;
	int rc;

	if (kvp_tier_check(to->target, err, errlen))
		return KVC_EINVAL;
	if (!strncmp(to->target, LOCAL_PREFIX, strlen(LOCAL_PREFIX)))
		return local_open(to, out, err, errlen);
	/* rdma://a,rdma://b or rdma://a,b: the library's list, without schemes */
	list = malloc(strlen(to->target) + 1);
	if (!list) {
		snprintf(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	for (r = to->target, w = list; *r;) {
		if (!strncmp(r, RDMA_PREFIX, strlen(RDMA_PREFIX)))
			r += strlen(RDMA_PREFIX);
		else
			*w++ = *r++;
	}
	*w = '\0';
	kvc_opts_init(&o);
	o.server = list;
	o.device = to->device;
	o.secret_file = to->secret_file;
	o.depth = to->depth;
	if (to->busy_poll_us != KVP_BUSY_POLL_LIBRARY)
		o.busy_poll_us = to->busy_poll_us;
	o.cache_entries = to->cache_entries;
	rc = kvc_create(&o, out, err, errlen);
	free(list);
	return rc;
}

void kvp_tier_close(kvc_t *h)
{
	if (!h) /* a worker whose tier never opened holds no share */
		return;
	kvc_destroy(h);
	kvs_inproc_unshare(&local); /* nothing unless the tier is local:// */
}
