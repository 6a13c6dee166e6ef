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
	out->wait_sleeps += h->rm->sleeps; /* this connection's; earlier ones' are in stats */
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
		struct kvi_ctrl req = { .type = KVI_CTRL_STATS_REQ, .stats_req = { .page = p } }, resp;

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
#define KVI_STAT_NAME(id, name, ...) [KVI_STAT_##id] = name,
		KVI_SERVER_STATS(KVI_STAT_NAME)
#undef KVI_STAT_NAME
	};

	if (n)
		*n = KVI_STAT_COUNT;
	return names;
}

void kvi_conn_reset_stats(struct kvi_conn *h)
{
	memset(&h->stats, 0, sizeof(h->stats));
	h->rm->sleeps = 0;
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
		[KVC_STAT_STORE_REFUSED] = "store_refused",
		[KVC_STAT_RMW] = "rmw",
		[KVC_STAT_RMW_CACHED] = "rmw_cached",
		[KVC_STAT_RMW_MISS] = "rmw_miss",
	};

	return kind >= 0 && kind < KVC_STAT_KINDS ? names[kind] : "unknown";
}
