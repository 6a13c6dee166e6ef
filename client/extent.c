/* The extent a connection appends its PUTs' objects to: asking the server
 * for one (a segment grant, waited for or not), checking what it granted,
 * and telling it how much was used. The server owns the memory (server
 * core.h); an extent is ours to append to until the server seals it. */
#include "conn.h"
#include "engine.h"
#include "extent.h"
#include "kvclient_errors.h"
#include "op.h"
#include "post.h"

#define RETURN_TIMEOUT_MS 200

/* Is a grant for `bytes` well-formed: inside the heap, KVI_OBJ_ALIGN aligned, no
 * larger than a segment and large enough, with uniques that do not wrap? */
static int grant_ok(const struct kvi_conn *h, const struct kvi_ctrl *r, uint64_t bytes)
{
	const struct kvi_ctrl_seg_grant *g = &r->seg_grant;
	uint64_t heap_end = h->sb.heap_off + h->sb.heap_size;

	return r->type == KVI_CTRL_SEG_GRANT && g->len >= bytes && g->len <= h->sb.segment_size &&
	       g->off >= h->sb.heap_off && g->off <= heap_end && heap_end - g->off >= g->len &&
	       g->off % KVI_OBJ_ALIGN == 0 && g->cas_base != 0 && g->cas_base <= UINT64_MAX - g->len / KVI_OBJ_ALIGN;
}

/* Nothing more goes into our extent (the server sealed it, or may have). */
static void forget_extent(struct kvi_conn *h)
{
	h->seg_off = h->seg_size = h->seg_used = 0;
}

/* Take a segment request's answer (rc: how the call or the wait for it
 * went). 0 with a new extent, or a code; see kvi_reserve. */
static int grant_taken(struct kvi_conn *h, int rc, const struct kvi_ctrl *resp, uint64_t bytes)
{
	/* Not sent (the send failed at once): nothing changed; ask again. */
	if (rc == KVC_EAGAIN)
		return rc;
	if (rc) {
		/* No answer: the server may have sealed our extent at seg_used
		 * and carved its tail for others, or never seen the request.
		 * Writing on in it, or reporting less of it used, could
		 * overwrite another writer's objects: break the connection, so
		 * that the server keeps all of it (core.c kvs_core_client_left)
		 * and we rejoin with none. */
		if (!h->rm->broken)
			kvi_rmem_shutdown(h->rm, KVC_ESERVERGONE);
		forget_extent(h);
		return rc;
	}
	if (resp->type == KVI_CTRL_ERROR && resp->status == KVC_EAGAIN) {
		forget_extent(h); /* sealed either way */
		h->stats.grants_deferred++;
		return KVC_EAGAIN;
	}
	if (resp->type == KVI_CTRL_ERROR) {
		/* Only a quota refusal leaves our extent open (server core.h
		 * "Quota"); after any other answer the server may have sealed
		 * it, and a sealed segment can be reclaimed under our writes. */
		if (resp->status != KVC_EQUOTA)
			forget_extent(h);
		return resp->status < 0 ? resp->status : KVC_EPROTO;
	}
	if (!grant_ok(h, resp, bytes)) {
		forget_extent(h);
		return KVC_EPROTO;
	}
	h->seg_off = resp->seg_grant.off;
	h->seg_size = resp->seg_grant.len;
	h->seg_cas = resp->seg_grant.cas_base;
	h->seg_used = 0;
	h->stats.segments_granted++;
	return 0;
}

/* `bytes` of our extent for an object: its region offset, or KVC_EAGAIN
 * (the server has no memory free right now -- reclamation is making room --
 * or its answer is on its way: the caller waits and asks again), or another
 * code. A new extent comes from the server. With no operation holding locks,
 * the call waits for the answer (one round trip; then *nowp, if not NULL, is
 * read again, as kvi_ensure_joined does). Otherwise it must not: those
 * operations' commits are due before their deadlines, and a server slow to
 * answer would hold them up. The request then goes out without waiting, the
 * extent takes no more appends (the server seals it at what we said we
 * used), and the answer is taken by a later call (KVC_EAGAIN meanwhile). */
int64_t kvi_reserve(struct kvi_conn *h, uint64_t bytes, uint64_t *nowp, uint64_t *cas)
{
	uint64_t off;
	int rc = kvi_extent_room(h, bytes, nowp);

	if (rc)
		return rc;
	off = h->seg_off + h->seg_used;
	h->seg_used += bytes;
	*cas = kvi_obj_cas_of(h->seg_cas, h->seg_off, off);
	return (int64_t)off;
}

int kvi_extent_room(struct kvi_conn *h, uint64_t bytes, uint64_t *nowp)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seg_req = { .need = bytes, .used = h->seg_used } }, resp;
	int rc;

	if (h->grant_seq) {
		if (kvi_rmem_ctrl_take(h->rm, h->grant_seq, &resp)) {
			h->grant_seq = 0;
			rc = grant_taken(h, 0, &resp, bytes);
		} else if (kvi_now_ns() - h->grant_sent > (uint64_t)KVI_CTRL_TIMEOUT_MS * 1000000u || h->rm->broken) {
			h->grant_seq = 0;
			rc = grant_taken(h, KVC_ETIMEDOUT, NULL, bytes);
		} else {
			return KVC_EAGAIN; /* on its way */
		}
		if (rc)
			return rc;
	}
	if (h->seg_size - h->seg_used < bytes) {
		if (kvi_locks_in_flight(h)) {
			rc = kvi_rmem_ctrl_send(h->rm, &req);
			if (rc)
				return rc == KVC_EAGAIN ? KVC_EAGAIN : grant_taken(h, rc, NULL, bytes);
			h->grant_seq = req.seq;
			h->grant_sent = kvi_now_ns();
			/* No more appends into it: the server seals it at what we
			 * said we used (its offset and use stay known: a quota
			 * refusal leaves it open, and the next request says
			 * the same). */
			h->seg_size = h->seg_used;
			return KVC_EAGAIN;
		}
		rc = kvi_rmem_ctrl_call(h->rm, &req, &resp, KVI_CTRL_TIMEOUT_MS);
		if (nowp)
			*nowp = kvi_now_ns();
		return grant_taken(h, rc, &resp, bytes);
	}
	return 0;
}

/* Tell the server how much of our extent we used, so that its tail serves
 * the next client (one short control round trip; skipped when anything is in
 * flight or the connection is gone: the server then keeps the whole extent
 * until it is reclaimed). */
void kvi_return_extent(struct kvi_conn *h)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_RETURN, .seg_return = { .used = h->seg_used } }, resp;

	if (!h->seg_off || h->inflight || h->rm->broken)
		return;
	(void)kvi_rmem_ctrl_call(h->rm, &req, &resp, RETURN_TIMEOUT_MS);
}
