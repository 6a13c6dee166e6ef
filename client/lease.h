/* libkvclient internals: keeping a connection joined (lease.c) -- its lease,
 * the idle word, and rejoining once it broke. Nothing here is exported. */
#ifndef KVI_LEASE_H
#define KVI_LEASE_H

#include <stdint.h>

#include "conn.h"

/* Has our lease run out at now (never, when the server grants none)? Every
 * post asks (post.c): inline. */
static inline int kvi_lease_lapsed(const struct kvi_conn *h, uint64_t now)
{
	return h->lease_ns && now >= h->lease_end;
}

/* Renew now, waiting for the answer up to timeout_ms: 0, or a code
 * (KVC_EFENCED: the server had ended our lease already). */
int kvi_lease_renew_sync(struct kvi_conn *h, int timeout_ms);
/* Collect a renewal's answer; send the next one when due (kvc_poll, and
 * kvi_ensure_joined). Fetches the indexes first when a LEASE said they
 * changed. */
void kvi_lease_tick(struct kvi_conn *h, uint64_t now);
/* Before admitting an operation (or asking for statistics): a usable
 * connection with a live lease, renewing or rejoining as needed. 0 or a
 * code; *nowp is read again after anything slow. */
int kvi_ensure_joined(struct kvi_conn *h, uint64_t *nowp);
/* A rejoin whose join goes on (h->rejoining, several servers): step it
 * without an operation (kvc_poll). 0 when none was stepped or it joined, else
 * the code an operation would have failed with. */
int kvi_conn_step_rejoin(struct kvi_conn *h, uint64_t now);
static inline int kvi_conn_rejoining(const struct kvi_conn *h)
{
	return h->rejoining;
}
/* Our lease lapsed in the middle of an operation (kvi_st_post): renew it,
 * waiting until `deadline` at most, when nothing of ours is posted and no
 * operation may hold locks. 0 when the lease is live again (*nowp read
 * again), otherwise the caller breaks the connection. */
int kvi_lease_revive(struct kvi_conn *h, uint64_t deadline, uint64_t *nowp);
/* Nothing in flight and nothing posted: tell the server we are idle (lease.c
 * "Idle word"). */
void kvi_idle_update(struct kvi_conn *h);

#endif
