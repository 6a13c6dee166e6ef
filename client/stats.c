/* Statistics: what a connection counted, what the server says about itself
 * (kvc_server_stats), and the names of both for printing. */
#include <string.h>

#include "conn.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "lease.h"
#include "stats.h"

void kvi_conn_get_stats(const struct kvi_conn *h, struct kvc_stats *out)
{
	*out = h->stats;
}

/* The public struct is the wire's statistics in the wire's order. */
_Static_assert(sizeof(struct kvc_server_stats) == KVI_STAT_COUNT * sizeof(uint64_t),
	       "kvc_server_stats mirrors enum kvi_stat_id");

int kvi_conn_server_stats(struct kvi_conn *h, struct kvc_server_stats *out)
{
	uint64_t v[KVI_STATS_PAGES * 5], now = kvi_now_ns();
	int rc;

	if (!h || !out)
		return KVC_EINVAL;
	/* As a data call does: a handle idle past its lease renews it (or,
	 * expelled meanwhile, rejoins) before it asks anything. */
	rc = kvi_ensure_joined(h, &now);
	kvi_idle_update(h); /* nothing is posted for statistics */
	if (rc)
		return rc;
	for (unsigned p = 0; p < KVI_STATS_PAGES; p++) {
		struct kvi_ctrl req = { .type = KVI_CTRL_STATS_REQ, .arg = { p } }, resp;

		rc = kvi_rmem_ctrl_call(h->rm, &req, &resp, KVI_CTRL_TIMEOUT_MS);
		if (rc)
			return rc;
		if (resp.type != KVI_CTRL_STATS)
			return resp.type == KVI_CTRL_ERROR && resp.status < 0 ? resp.status : KVC_EPROTO;
		memcpy(v + 5 * p, resp.arg, sizeof(resp.arg));
	}
	memcpy(out, v, sizeof(*out));
	return 0;
}

const char *const *kvc_server_stat_names(size_t *n)
{
	static const char *const names[KVI_STAT_COUNT] = {
		[KVI_STAT_CPU_NS] = "cpu_ns",
		[KVI_STAT_SEGMENTS_USED] = "segments_used",
		[KVI_STAT_SEGMENTS_TOTAL] = "segments_total",
		[KVI_STAT_CLIENTS] = "clients",
		[KVI_STAT_BYTES_USED] = "bytes_used",
		[KVI_STAT_BYTES] = "bytes",
		[KVI_STAT_LIMIT_MAXBYTES] = "limit_maxbytes",
		[KVI_STAT_EVICTIONS] = "evictions",
		[KVI_STAT_RECLAIMED] = "reclaimed",
		[KVI_STAT_EXPIRED_UNFETCHED] = "expired_unfetched",
		[KVI_STAT_EVICTED_UNFETCHED] = "evicted_unfetched",
		[KVI_STAT_MOVED] = "moved",
		[KVI_STAT_EXPIRED] = "expired",
		[KVI_STAT_DROPPED] = "dropped",
		[KVI_STAT_SEGMENTS_FREE] = "segments_free",
		[KVI_STAT_SEGMENTS_OPEN] = "segments_open",
		[KVI_STAT_SEGMENTS_SEALED] = "segments_sealed",
		[KVI_STAT_SEGMENTS_QUARANTINED] = "segments_quarantined",
		[KVI_STAT_RECLAIM_CPU_NS] = "reclaim_cpu_ns",
		[KVI_STAT_GRANTS] = "grants",
		[KVI_STAT_GRANTS_DEFERRED] = "grants_deferred",
		[KVI_STAT_GRANTS_REFUSED] = "grants_refused",
		[KVI_STAT_RECLAIM_ABORTS] = "reclaim_aborts",
		[KVI_STAT_LOCK_RETRIES] = "reclaim_lock_retries",
		[KVI_STAT_FENCINGS] = "fencings",
		[KVI_STAT_FENCE_RELEASED] = "fence_released",
		[KVI_STAT_FENCE_CPU_NS] = "fence_cpu_ns",
		[KVI_STAT_RESIZES] = "resizes",
		[KVI_STAT_INDEX_BUCKETS] = "index_buckets",
		[KVI_STAT_INDEX_EPOCH] = "index_epoch",
	};

	if (n)
		*n = KVI_STAT_COUNT;
	return names;
}

void kvi_conn_reset_stats(struct kvi_conn *h)
{
	memset(&h->stats, 0, sizeof(h->stats));
}

const char *kvc_stat_name(int kind)
{
	static const char *const names[KVC_STAT_KINDS] = {
		[KVC_STAT_GET_HIT] = "get_hit",
		[KVC_STAT_GET_HIT_CACHED] = "get_hit_cached",
		[KVC_STAT_GET_MISS] = "get_miss",
		[KVC_STAT_PUT_INSERT] = "put_insert",
		[KVC_STAT_PUT_UPDATE] = "put_update",
		[KVC_STAT_PUT_UPDATE_CACHED] = "put_update_cached",
		[KVC_STAT_DELETE] = "delete",
		[KVC_STAT_DELETE_MISS] = "delete_miss",
		[KVC_STAT_FAILED] = "failed",
	};

	return kind >= 0 && kind < KVC_STAT_KINDS ? names[kind] : "unknown";
}
