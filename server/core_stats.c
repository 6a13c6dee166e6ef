/* The core's counters: kvs_core_stats, STATS replies (wire.h), the log
 * summary, and the fencer's counters it keeps for them. */
#include "core_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "kvclient_errors.h"

static void kvs_core_stats_locked(struct kvs_core *c, struct kvs_core_stats *out)
{
	struct kvs_segtab_counts n;

	kvs_segtab_counts(c->segs, &n);
	*out = (struct kvs_core_stats){
		.segments_total = c->nsegs,
		.segments_granted = n.open + n.sealed + n.reclaiming,
		.segments_free = n.free,
		.segments_open = n.open,
		.segments_sealed = n.sealed + n.reclaiming,
		.segments_quarantined = n.quarantined,
		.heap_bytes = c->geo.heap_size,
		.index_bytes = (c->ix.cur.bucket_count + c->ix.prev.bucket_count) * KVI_BUCKET_SIZE,
		.segments_index = n.index,
		.carved_bytes = n.carved_bytes,
		.grants = n.grants,
		.grants_deferred = n.grants_deferred + c->throttled,
		.grants_refused = c->grants_refused,
		.grants_over_quota = c->over_quota,
		.grants_throttled = c->throttled,
		.quota_bytes = c->quota,
		.tails_returned = n.tails_returned,
		.clients = c->nclients,
		.rc = c->rc,
		.fencings = c->fencings,
		.fence_released = c->fence_released,
		.fence_cpu_ns = c->fence_cpu_ns,
		.resizes = c->ix.resizes,
		.index_buckets = c->ix.cur.bucket_count,
		.index_epoch = c->ix.cur.epoch,
	};
	memcpy(out->counts, c->counts, sizeof(out->counts));
}

/* A client's COUNTS report: add it. The increments are statistics, acted on
 * by nothing, so a client can only skew its own share; each is 32 bits. */
int kvs_core_counts_locked(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	uint64_t page = req->counts.page;

	if (page >= KVI_COUNTS_PAGES) {
		kvs_core_reply_error(req, resp, KVC_EINVAL);
		return 0;
	}
	for (unsigned i = 0; i < KVI_COUNTS_PER_PAGE; i++) {
		uint64_t id = page * KVI_COUNTS_PER_PAGE + i;
		uint32_t inc = (uint32_t)(req->counts.inc[i / 2] >> (32 * (i % 2)));

		if (id < KVI_COUNT_N)
			c->counts[id] += inc;
	}
	resp->type = KVI_CTRL_COUNTED;
	return 0;
}

void kvs_core_stats(struct kvs_core *c, struct kvs_core_stats *out)
{
	pthread_mutex_lock(&c->mu);
	kvs_core_stats_locked(c, out);
	pthread_mutex_unlock(&c->mu);
}

void kvs_core_summary(struct kvs_core *c, char *buf, size_t len)
{
	struct kvs_core_stats st;

	kvs_core_stats(c, &st);
	snprintf(buf, len, "segments_open=%" PRIu64 " segments_sealed=%" PRIu64 " segments_quarantined=%" PRIu64
		 " segments_free=%" PRIu64 " segments=%" PRIu64 " segment_kib=%" PRIu64 " reclaimed=%" PRIu64
		 " evictions=%" PRIu64,
		 st.segments_open, st.segments_sealed, st.segments_quarantined, st.segments_free, c->nsegs,
		 c->geo.segment_size >> 10, st.rc.segments, st.rc.evictions);
}

/* core.h; fill_stats adds the process's CPU time. */
void kvs_core_stat_values(const struct kvs_core_stats *st, uint64_t v[KVI_STAT_COUNT])
{
	v[KVI_STAT_CPU_NS] = 0;
	v[KVI_STAT_SEGMENTS_USED] = st->segments_total - st->segments_free;
	v[KVI_STAT_SEGMENTS_TOTAL] = st->segments_total;
	v[KVI_STAT_CLIENTS] = st->clients;
	/* Memory holding items: the index and every byte handed to writers that
	 * has not been reclaimed (live items and garbage alike). */
	v[KVI_STAT_BYTES_USED] = st->index_bytes + st->carved_bytes;
	v[KVI_STAT_BYTES] = st->carved_bytes;
	v[KVI_STAT_LIMIT_MAXBYTES] = st->heap_bytes;
	v[KVI_STAT_EVICTIONS] = st->rc.evictions;
	v[KVI_STAT_RECLAIMED] = st->rc.segments;
	v[KVI_STAT_EXPIRED_UNFETCHED] = st->rc.expired_unfetched;
	v[KVI_STAT_EVICTED_UNFETCHED] = st->rc.evicted_unfetched;
	v[KVI_STAT_MOVED] = st->rc.moved;
	v[KVI_STAT_EXPIRED] = st->rc.expired;
	v[KVI_STAT_DROPPED] = st->rc.dropped;
	v[KVI_STAT_SEGMENTS_FREE] = st->segments_free;
	v[KVI_STAT_SEGMENTS_OPEN] = st->segments_open;
	v[KVI_STAT_SEGMENTS_SEALED] = st->segments_sealed;
	v[KVI_STAT_SEGMENTS_QUARANTINED] = st->segments_quarantined;
	v[KVI_STAT_RECLAIM_CPU_NS] = st->rc.cpu_ns;
	v[KVI_STAT_GRANTS] = st->grants;
	v[KVI_STAT_GRANTS_DEFERRED] = st->grants_deferred;
	v[KVI_STAT_GRANTS_REFUSED] = st->grants_refused;
	v[KVI_STAT_RECLAIM_ABORTS] = st->rc.aborted;
	v[KVI_STAT_LOCK_RETRIES] = st->rc.lock_retries;
	v[KVI_STAT_FENCINGS] = st->fencings;
	v[KVI_STAT_FENCE_RELEASED] = st->fence_released;
	v[KVI_STAT_FENCE_CPU_NS] = st->fence_cpu_ns;
	v[KVI_STAT_RESIZES] = st->resizes;
	v[KVI_STAT_INDEX_BUCKETS] = st->index_buckets;
	v[KVI_STAT_INDEX_EPOCH] = st->index_epoch;
	/* memcached's counters, from the clients' reports. A client's insert
	 * that evicts from a full bucket pair is an eviction too. */
	v[KVI_STAT_EVICTIONS] += st->counts[KVI_COUNT_INDEX_EVICTIONS];
#define KVS_COUNTED_STAT(id) v[KVI_STAT_##id] = st->counts[KVI_COUNT_##id];
	KVS_COUNTED_STAT(CMD_GET)
	KVS_COUNTED_STAT(GET_HITS)
	KVS_COUNTED_STAT(GET_MISSES)
	KVS_COUNTED_STAT(GET_EXPIRED)
	KVS_COUNTED_STAT(CMD_SET)
	KVS_COUNTED_STAT(CMD_TOUCH)
	KVS_COUNTED_STAT(TOUCH_HITS)
	KVS_COUNTED_STAT(TOUCH_MISSES)
	KVS_COUNTED_STAT(DELETE_HITS)
	KVS_COUNTED_STAT(DELETE_MISSES)
	KVS_COUNTED_STAT(INCR_HITS)
	KVS_COUNTED_STAT(INCR_MISSES)
	KVS_COUNTED_STAT(DECR_HITS)
	KVS_COUNTED_STAT(DECR_MISSES)
	KVS_COUNTED_STAT(CAS_HITS)
	KVS_COUNTED_STAT(CAS_MISSES)
	KVS_COUNTED_STAT(CAS_BADVAL)
	KVS_COUNTED_STAT(TOTAL_ITEMS)
#undef KVS_COUNTED_STAT
	/* Items in the index: what clients linked, less what they and the
	 * reclaimer removed (item_counts.h). Before every client has reported
	 * the difference may dip below 0: shown as 0. */
	{
		uint64_t gone = st->counts[KVI_COUNT_ITEMS_UNLINKED] + st->rc.expired + st->rc.evictions;

		v[KVI_STAT_CURR_ITEMS] = st->counts[KVI_COUNT_ITEMS_LINKED] > gone
						 ? st->counts[KVI_COUNT_ITEMS_LINKED] - gone : 0;
	}
}

static void fill_stats(struct kvs_core *c, uint64_t *v)
{
	struct kvs_core_stats st;
	struct rusage ru;

	kvs_core_stats_locked(c, &st);
	kvs_core_stat_values(&st, v);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		v[KVI_STAT_CPU_NS] =
			((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
			((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* The process's CPU time lets a benchmark on another machine show that the
 * data path costs the server nothing. */
int kvs_core_stats_reply_locked(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	uint64_t v[KVI_STATS_PAGES * 5] = { 0 };

	if (req->stats_req.page >= KVI_STATS_PAGES) {
		kvs_core_reply_error(req, resp, KVC_EINVAL);
		return 0;
	}
	fill_stats(c, v);
	resp->type = KVI_CTRL_STATS;
	memcpy(resp->arg, v + 5 * req->stats_req.page, sizeof(resp->arg));
	return 0;
}

void kvs_core_add_fence(struct kvs_core *c, uint64_t fencings, uint64_t released, uint64_t cpu_ns)
{
	pthread_mutex_lock(&c->mu);
	c->fencings += fencings;
	c->fence_released += released;
	c->fence_cpu_ns += cpu_ns;
	pthread_mutex_unlock(&c->mu);
}
