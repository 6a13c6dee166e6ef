/* The core: create and destroy, the layout, control-request dispatch
 * (core_impl.h lists the other files of the core). */
#include "core_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "kvclient_errors.h"
#include "log.h"

static int policy_opts(const struct kvs_core_opts *in, struct kvs_core_opts *o, struct kvi_errbuf *e);

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

int kvs_core_plan(uintptr_t base, uint64_t region_size, const struct kvs_core_opts *o,
		  struct kvi_geometry *g, struct kvi_errbuf *e)
{
	uint64_t seg = o && o->segment_size ? o->segment_size : KVS_DEFAULT_SEGMENT_SIZE;
	uint64_t buckets, index_end, heap_off, stride;

	if (seg < KVS_MIN_SEGMENT_SIZE || seg > KVS_MAX_SEGMENT_SIZE || (seg & (seg - 1))) {
		kvi_errbuf_set(e, "segment size %" PRIu64 " bytes: must be a power of two from %u KiB to %u KiB",
			       seg, KVS_MIN_SEGMENT_SIZE >> 10, KVS_MAX_SEGMENT_SIZE >> 10);
		return KVC_EINVAL;
	}
	/* Slots address objects in 4-byte units with 38 bits: 1 TiB. */
	if (region_size > KVI_MAX_REGION_SIZE || region_size <= KVI_SUPERBLOCK_SIZE) {
		kvi_errbuf_set(e, "region of %" PRIu64 " bytes: must be larger than %u bytes and at most 1 TiB",
			       region_size, KVI_SUPERBLOCK_SIZE);
		return KVC_EINVAL;
	}
	{
		struct kvs_core_opts full;

		if (policy_opts(o, &full, e))
			return KVC_EINVAL;
	}
	buckets = o && o->buckets ? o->buckets : region_size / KVS_BYTES_PER_BUCKET;
	if (!(o && o->buckets) && buckets < KVS_MIN_BUCKETS)
		buckets = KVS_MIN_BUCKETS;
	/* Every key has two distinct candidate buckets. An explicitly tiny index
	 * is allowed (tests fill buckets on purpose); it only limits the items. */
	if (buckets < 2) {
		kvi_errbuf_set(e, "a bucket count of %" PRIu64 " is too few: at least 2 (every key has two "
			       "candidate buckets)", buckets);
		return KVC_EINVAL;
	}
	if (buckets > (region_size - KVI_SUPERBLOCK_SIZE) / KVI_BUCKET_SIZE) {
		kvi_errbuf_set(e, "%" PRIu64 " buckets (%" PRIu64 " MiB of index) do not fit in a %" PRIu64
			       " MiB region", buckets, buckets * KVI_BUCKET_SIZE >> 20, region_size >> 20);
		return KVC_EINVAL;
	}
	index_end = KVI_SUPERBLOCK_SIZE + buckets * KVI_BUCKET_SIZE;
	/* The heap starts at the first page boundary after the index. Segments
	 * sit on a grid of kvs_heap_stride() bytes from there (heap.h: jemalloc's
	 * page of padding rules out segment-aligned segments without wasting half
	 * the heap), so aligning the heap start to the segment size would buy
	 * nothing; nor would 2 MiB: hugepage boundaries are a property of the
	 * mapping (kvserver's region starts on one), not of heap_off. */
	heap_off = align_up(base + index_end, 4096) - base;
	stride = kvs_heap_stride(seg);
	if (heap_off >= region_size || (region_size - heap_off) / stride == 0) {
		kvi_errbuf_set(e, "no room for one %" PRIu64 " KiB segment after an index of %" PRIu64
			       " buckets in a %" PRIu64 " MiB region: fewer buckets, smaller segments or more memory",
			       seg >> 10, buckets, region_size >> 20);
		return KVC_EINVAL;
	}
	*g = (struct kvi_geometry){
		.layout_version = KVI_LAYOUT_VERSION,
		.epoch = 1,
		.region_size = region_size,
		.index_off = KVI_SUPERBLOCK_SIZE,
		.bucket_count = buckets,
		.heap_off = heap_off,
		.heap_size = (region_size - heap_off) / stride * stride,
		.segment_size = seg,
		.hash_seed = o ? o->hash_seed : 0,
	};
	return 0;
}

/* Defaults filled in, and the combinations that cannot work refused. */
static int policy_opts(const struct kvs_core_opts *in, struct kvs_core_opts *o, struct kvi_errbuf *e)
{
	uint32_t margin = in && in->in_process ? 0 : KVS_QUARANTINE_MARGIN_MS;
	uint64_t least;

	*o = in ? *in : (struct kvs_core_opts){ 0 };
	if (!o->max_op_ms)
		o->max_op_ms = KVS_DEFAULT_MAX_OP_MS;
	if (o->max_op_ms > 600000u || o->exec_ms > 600000u) {
		kvi_errbuf_set(e, "an operation deadline of %u ms or an execution bound of %u ms is too long: at "
			       "most 600000", o->max_op_ms, o->exec_ms);
		return KVC_EINVAL;
	}
	/* A write posted just before its deadline executes up to exec_ms later
	 * (exec_bound.h); segtab.h says why twice the deadline. */
	least = 2ull * o->max_op_ms + o->exec_ms + margin;
	if (!o->quarantine_ms)
		o->quarantine_ms = o->max_op_ms == KVS_DEFAULT_MAX_OP_MS && least <= KVS_DEFAULT_QUARANTINE_MS
					   ? KVS_DEFAULT_QUARANTINE_MS
					   : (uint32_t)least;
	if (!o->reclaim_low_pct)
		o->reclaim_low_pct = KVS_DEFAULT_RECLAIM_LOW_PCT;
	if (!o->reclaim_high_pct)
		o->reclaim_high_pct = o->reclaim_low_pct + (KVS_DEFAULT_RECLAIM_HIGH_PCT - KVS_DEFAULT_RECLAIM_LOW_PCT);
	if (o->quarantine_ms < least) {
		kvi_errbuf_set(e, "a quarantine of %u ms is unsafe with operations of up to %u ms: it must be at "
			       "least twice that plus the execution bound (%u ms) plus %u ms", o->quarantine_ms,
			       o->max_op_ms, o->exec_ms, margin);
		return KVC_EINVAL;
	}
	if (!o->client_quota_pct)
		o->client_quota_pct = KVS_DEFAULT_CLIENT_QUOTA_PCT;
	if (o->client_quota_pct > 100) {
		kvi_errbuf_set(e, "a client quota of %u%% of the heap: must be 1..100", o->client_quota_pct);
		return KVC_EINVAL;
	}
	if (o->reclaim_low_pct > 90 || o->reclaim_high_pct > 95 || o->reclaim_high_pct <= o->reclaim_low_pct) {
		kvi_errbuf_set(e, "reclaim watermarks %u%% / %u%%: the low one must be 1..90 and below the high one "
			       "(at most 95)", o->reclaim_low_pct, o->reclaim_high_pct);
		return KVC_EINVAL;
	}
	return 0;
}

int kvs_core_create(void *region_base, uint64_t region_size, const struct kvs_core_opts *o,
		    struct kvs_core **out, struct kvi_errbuf *e)
{
	struct kvs_core *c;
	int rc;

	*out = NULL;
	if (!region_base || (uintptr_t)region_base % 4096) {
		kvi_errbuf_set(e, "region at %p is not page-aligned", region_base);
		return KVC_EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	c->base = region_base;
	rc = kvs_core_plan((uintptr_t)region_base, region_size, o, &c->geo, e);
	if (rc)
		goto clean_core;
	policy_opts(o, &c->o, e); /* checked by kvs_core_plan */
	if (kvi_geometry_check(&c->geo)) { /* what every client will check */
		kvi_errbuf_set(e, "internal error: planned layout fails the geometry check: %s",
			       kvi_geometry_check(&c->geo));
		rc = KVC_EINVAL;
		goto clean_core;
	}
	/* A fresh seed per start: key placement cannot be predicted (or
	 * flooded) by anyone who has not joined this server (hash.h). */
	if (!c->geo.hash_seed && getrandom(&c->geo.hash_seed, sizeof(c->geo.hash_seed), 0) !=
					 (ssize_t)sizeof(c->geo.hash_seed)) {
		kvi_errbuf_set(e, "getrandom for the hash seed: %s", strerror(errno));
		rc = KVC_ESYS;
		goto clean_core;
	}
	c->stride = kvs_heap_stride(c->geo.segment_size);
	c->nsegs = c->geo.heap_size / c->stride;
	c->low = c->nsegs * c->o.reclaim_low_pct / 100;
	if (c->low < KVS_RESERVE_SEGMENTS + 2)
		c->low = KVS_RESERVE_SEGMENTS + 2; /* the reserve, one to carve, one in quarantine */
	c->high = c->nsegs * c->o.reclaim_high_pct / 100;
	if (c->high <= c->low)
		c->high = c->low + 1;
	c->cas_next = 1; /* 0 is no unique (layout.h "CAS uniques") */
	c->quota = c->geo.heap_size / 100 * c->o.client_quota_pct;
	if (c->quota < 2 * c->geo.segment_size)
		c->quota = 2 * c->geo.segment_size;
	c->starving_ns = (uint64_t)(c->o.max_op_ms > KVS_STARVING_MIN_MS ? c->o.max_op_ms : KVS_STARVING_MIN_MS) *
			 1000000u;
	c->grow_rng = c->geo.hash_seed | 1;
	rc = kvs_heap_create(c->base + c->geo.heap_off, c->geo.heap_size, c->geo.segment_size, &c->heap, e);
	if (rc)
		goto clean_core;
	rc = kvs_segtab_create(&(struct kvs_segtab_opts){ .base = c->base, .heap = c->heap,
							  .heap_off = c->geo.heap_off,
							  .segment_size = c->geo.segment_size, .stride = c->stride,
							  .nsegs = c->nsegs,
							  /* Every write into a segment sealed at s was
							   * posted before s + max_op and executed
							   * within exec_ms of that (segtab.h). */
							  .settle_ns = ((uint64_t)c->o.max_op_ms + c->o.exec_ms +
									(c->o.in_process ? 0 : KVS_QUARANTINE_MARGIN_MS)) *
								       1000000u,
							  .quarantine_ns = (uint64_t)c->o.quarantine_ms * 1000000u,
							  .reserve = (unsigned)kvs_core_reserve(c),
							  .one_fifo = c->o.no_evict,
							  .charge = kvs_core_charge, .charge_arg = c },
			       &c->segs);
	if (rc) {
		kvi_errbuf_set(e, "out of memory for the table of %" PRIu64 " segments", c->nsegs);
		goto clean_heap;
	}
	rc = kvs_indexes_init(&c->ix, &c->geo);
	if (rc) {
		kvi_errbuf_set(e, "out of memory for the index's chunk table");
		kvs_segtab_destroy(c->segs);
		goto clean_heap;
	}
	pthread_mutex_init(&c->mu, NULL);
	/* Index first, superblock last: a reader that sees the magic sees an
	 * empty index (no client is connected yet anyway). */
	memset(c->base + c->geo.index_off, 0, c->geo.bucket_count * KVI_BUCKET_SIZE);
	memset(c->base, 0, KVI_SUPERBLOCK_SIZE);
	{
		struct kvi_superblock sb; /* for debugging tools only (layout.h "Geometry") */

		kvi_superblock_from_geometry(&sb, &c->geo);
		memcpy(c->base, &sb, sizeof(sb));
	}
	*out = c;
	return 0;
clean_heap:
	kvs_heap_destroy(c->heap);
clean_core:
	free(c);
	return rc;
}

void kvs_core_destroy(struct kvs_core *c)
{
	if (!c)
		return;
	kvs_core_clients_free(c);
	kvs_indexes_fini(&c->ix);
	free(c->pool);
	kvs_segtab_destroy(c->segs);
	kvs_heap_destroy(c->heap);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

int kvs_core_ctrl(void *core, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_core *c = core;
	int rc;

	memset(resp, 0, sizeof(*resp));
	resp->seq = req->seq;
	/* 0 is "no owner" in lock words; ids are assigned by the transport. */
	if (client_id == 0 || client_id > KVI_MAX_CLIENT_ID) {
		kvi_ev_warn("ctrl_refused", "client=%u reason=%s", client_id, "invalid client id");
		return KVC_EINVAL;
	}
	pthread_mutex_lock(&c->mu);
	switch (req->type) {
	case KVI_CTRL_SEG_REQ:
		rc = kvs_core_seg_request_locked(c, client_id, req, resp);
		break;
	case KVI_CTRL_SEG_RETURN:
		rc = kvs_core_seg_return_locked(c, client_id, req, resp);
		break;
	case KVI_CTRL_STATS_REQ:
		rc = kvs_core_stats_reply_locked(c, req, resp);
		break;
	case KVI_CTRL_INDEX_REQ:
		rc = kvs_indexes_describe(&c->ix, req, resp);
		break;
	case KVI_CTRL_GROW:
		kvs_core_grow_ctrl_locked(c, client_id, req, resp);
		rc = 0;
		break;
	case KVI_CTRL_COUNTS:
		rc = kvs_core_counts_locked(c, req, resp);
		break;
	case KVI_CTRL_FLUSH:
		kvs_core_flush_ctrl_locked(c, req, resp);
		rc = 0;
		break;
	case KVI_CTRL_LEASE_RENEW:
	case KVI_CTRL_LOCK_REPORT:
		/* Membership is kvserver's (members.h), not the core's: a core
		 * serving clients alone (the local transport) grants no leases. */
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = req->seq, .status = KVC_EPROTO };
		rc = 0;
		break;
	case KVI_CTRL_SEG_GRANT:
	case KVI_CTRL_ERROR:
	case KVI_CTRL_SHUTDOWN:
	case KVI_CTRL_STATS:
	case KVI_CTRL_SEG_RETURNED:
	case KVI_CTRL_LEASE:
	case KVI_CTRL_LOCK_REPORTED:
	case KVI_CTRL_INDEX:
	case KVI_CTRL_GROWING:
	case KVI_CTRL_FLUSHED:
	case KVI_CTRL_COUNTED:
		kvi_ev_warn("ctrl_refused", "client=%u type=%u reason=%s", client_id, req->type, "only the server sends this type");
		rc = KVC_EPROTO;
		break;
	default:
		kvi_ev_warn("ctrl_refused", "client=%u type=%u reason=%s", client_id, req->type, "unknown type");
		rc = KVC_EPROTO;
		break;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int kvs_core_no_evict(const struct kvs_core *c)
{
	return c->o.no_evict;
}

void kvs_core_limits(const struct kvs_core *c, uint32_t *max_op_ms, uint32_t *quarantine_ms, uint16_t *flags)
{
	*max_op_ms = c->o.max_op_ms;
	*quarantine_ms = c->o.quarantine_ms;
	*flags = c->o.no_evict ? KVI_WELCOME_NO_EVICT : 0;
}

uint8_t *kvs_core_region(const struct kvs_core *c)
{
	return c->base;
}

const struct kvi_geometry *kvs_core_geometry(const struct kvs_core *c)
{
	return &c->geo;
}

uint32_t kvs_core_exec_ms(const struct kvs_core *c)
{
	return c->o.exec_ms;
}

uint32_t kvs_core_quarantine_ms(const struct kvs_core *c)
{
	return c->o.quarantine_ms;
}

const struct kvs_heap *kvs_core_heap(const struct kvs_core *c)
{
	return c->heap;
}
