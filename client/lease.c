/* Keeping a connection joined: its lease, the idle word the server reads
 * when the lease ends, and rejoining after the connection broke. */
#include "conn.h"
#include "counts.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "lease.h"
#include "log.h"
#include "post.h"

/* ---- Lease ---------------------------------------------------------------
 *
 * The server expels a client whose lease ran out (server/members.h). We count
 * our lease from when we SENT the renewal the server answered -- earlier than
 * when the server got it, from which it counts -- so we never believe in a
 * lease the server has ended. Nothing is posted at or after lease_end: an
 * operation that would post then fails KVC_EFENCED (and, holding locks,
 * breaks the connection, as on a deadline). Renewals go out without waiting,
 * every renew_ns, from kvc_submit and kvc_poll: a handle whose application
 * does not call it for a whole lease is expelled and rejoins on its next call
 * ("Rejoin"). Nothing here makes a hidden thread or a timer. */

/* Take a LEASE answer to a renewal sent at `sent`; 0, or KVC_EFENCED when
 * the server refused (our lease had already ended there). */
static int lease_granted(struct kvi_conn *h, const struct kvi_ctrl *r, uint64_t sent)
{
	const struct kvi_ctrl_lease *l = &r->lease;
	uint64_t end;

	if (r->type == KVI_CTRL_ERROR && r->status == KVC_EFENCED)
		return KVC_EFENCED;
	/* A server that never heard of leases answers EPROTO: it grants none. */
	if (r->type == KVI_CTRL_ERROR && r->status == KVC_EPROTO && !h->lease_ns)
		return 0;
	if (r->type != KVI_CTRL_LEASE || l->lease_ms == 0 || l->lease_ms > 3600000u || l->renew_ms == 0 ||
	    l->renew_ms > l->lease_ms)
		return KVC_EPROTO;
	h->lease_ns = l->lease_ms * 1000000u;
	h->renew_ns = l->renew_ms * 1000000u;
	h->stats.lease_renewals++;
	if (l->flags & KVI_LEASE_F_READMITTED) {
		/* Our lease had lapsed while we were idle (members.h "Idleness"):
		 * the server sealed our extent, may have retired indexes and
		 * reused memory we knew of. Nothing of ours was in flight. */
		h->seg_off = h->seg_size = h->seg_used = 0;
		h->mark_count = 0;
		h->index_stale = 1;
		h->stats.readmissions++;
	}
	end = sent + h->lease_ns;
	if (end > h->lease_end)
		h->lease_end = end;
	/* A resize began or ended since we last looked: fetch the indexes --
	 * except when the server only says that the migration we know of is
	 * over (STABLE, our epoch) while it still publishes the old index until
	 * every client acknowledged: nothing of the old index is needed any
	 * more (no bucket is UNMIGRATED; operations under way keep the offsets
	 * they placed), so it is dropped here instead of fetched again at every
	 * renewal until its retirement. */
	if (l->epoch != h->cur.ix.epoch)
		h->index_stale = 1;
	else if (l->state != h->index_state) {
		if (l->state == KVI_INDEX_STABLE && h->prev.ix.epoch) {
			h->prev.ix.epoch = 0;
			h->index_state = KVI_INDEX_STABLE;
		} else {
			h->index_stale = 1;
		}
	}
	return 0;
}

/* A renewal: the epoch we use, which the server counts as our
 * acknowledgement of it (index_view.c), and where our idle word is. */
static struct kvi_ctrl renew_request(const struct kvi_conn *h)
{
	return (struct kvi_ctrl){ .type = KVI_CTRL_LEASE_RENEW,
				  .lease_renew = { .epoch = h->cur.ix.epoch,
						   .idle_addr = h->rm->idle_addr,
						   .idle_rkey = h->rm->idle_rkey } };
}

/* Renew now, waiting for the answer: at join, and when an idle handle comes
 * back after its lease ran out (the server may not have expelled it yet). */
int kvi_lease_renew_sync(struct kvi_conn *h, int timeout_ms)
{
	struct kvi_ctrl req = renew_request(h), resp;
	uint64_t sent = kvi_now_ns();
	int rc = kvi_rmem_ctrl_call(h->rm, &req, &resp, timeout_ms);

	h->renew_epoch = req.lease_renew.epoch;
	return rc ? rc : lease_granted(h, &resp, sent);
}

/* The server's index changed (a LEASE said so, or an operation met a MOVED
 * bucket): fetch it now, before anything else is placed. A client that
 * cannot learn where the buckets are cannot go on: 0, or the code the
 * connection was broken with. */
static int refresh_if_stale(struct kvi_conn *h)
{
	int rc;

	if (!h->index_stale)
		return 0;
	h->index_stale = 0;
	rc = kvi_index_refresh(h);
	if (rc)
		kvi_rmem_shutdown(h->rm, rc == KVC_ETIMEDOUT ? KVC_ESERVERGONE : rc);
	return rc;
}

/* Collect a renewal's answer; send the next one when due. */
void kvi_lease_tick(struct kvi_conn *h, uint64_t now)
{
	struct kvi_ctrl r;

	if (h->rm->broken || refresh_if_stale(h))
		return;
	kvi_counts_tick(h, now);
	/* Lapsed: the next post breaks the connection, or kvc_submit renews. */
	if (!h->lease_ns || kvi_lease_lapsed(h, now))
		return;
	if (h->renew_seq) {
		if (kvi_rmem_ctrl_take(h->rm, h->renew_seq, &r)) {
			h->renew_seq = 0;
			if (lease_granted(h, &r, h->renew_sent)) {
				kvi_rmem_shutdown(h->rm, KVC_EFENCED);
				return;
			}
		} else if (now - h->renew_sent < h->renew_ns) {
			return; /* still on its way */
		} else {
			h->renew_seq = 0; /* lost or very late: send another */
		}
	}
	/* Due, or a new index is in use: say so at once -- the server
	 * retires the old index (and may begin the next resize) only once
	 * every client acknowledged the new one. */
	if (now + h->lease_ns >= h->lease_end + h->renew_ns || h->renew_epoch != h->cur.ix.epoch) {
		struct kvi_ctrl req = renew_request(h);

		if (kvi_rmem_ctrl_send(h->rm, &req) == 0) {
			h->renew_seq = req.seq;
			h->renew_sent = now;
			h->renew_epoch = req.lease_renew.epoch;
		}
	}
}

/* ---- Lapsed mid-way ----------------------------------------------------------
 *
 * A wait for the server inside an operation (a segment grant, an index
 * fetch) can outlast our lease when the server or the machine is loaded,
 * and the operation's next post would then find the lease over. If nothing
 * of ours is posted and no operation holds or takes bucket locks, nothing we
 * did can land after the server ends our lease: ask for a new one, waiting
 * at most until the operation's deadline, as an idle handle does. Our idle
 * word says busy (kvi_ensure_joined set it), so a server whose lease for us
 * had ended meanwhile expelled us and answers KVC_EFENCED. A readmission
 * (the server read the word idle) would have sealed the extent this
 * operation placed its object in: that is not taken either. */
int kvi_lease_revive(struct kvi_conn *h, uint64_t deadline, uint64_t *nowp)
{
	uint64_t readmitted = h->stats.readmissions, now = *nowp;
	int rc;

	if (h->rm->broken || h->rm->inflight || kvi_locks_in_flight(h) || now >= deadline)
		return KVC_EFENCED;
	rc = kvi_lease_renew_sync(h, (int)((deadline - now + 999999u) / 1000000u));
	now = kvi_now_ns();
	*nowp = now;
	if (h->step_now)
		h->step_now = now;
	if (rc || h->stats.readmissions != readmitted || kvi_lease_lapsed(h, now))
		return KVC_EFENCED;
	h->stats.lease_revivals++;
	return 0;
}

/* ---- Idle word -------------------------------------------------------------
 *
 * A word of our memory the server may RDMA-READ (rmem.h idle_word; its
 * address goes with every renewal) when our lease ends (server/members.h
 * "Idleness"): 0 says that nothing of ours is in flight and nothing will be
 * posted before we have renewed, so the server keeps us connected instead of
 * expelling us. It is set, with a full barrier, before an operation looks at
 * the lease (kvi_ensure_joined), and cleared only when no operation is left and
 * no batch is posted. So whenever the server reads 0 after our lease ended
 * (it ended earlier for us than for the server), every later post is
 * preceded by a lease check that finds the lease over, and a renewal. A
 * thread stalled between its check and its doorbell holds the word at 1:
 * the server expels it, as it must. */
static void idle_busy(struct kvi_conn *h)
{
	if (h->rm->idle_word)
		__atomic_store_n(h->rm->idle_word, 1, __ATOMIC_SEQ_CST);
}

void kvi_idle_update(struct kvi_conn *h)
{
	if (h->rm->idle_word && h->inflight == 0 && h->rm->inflight == 0)
		__atomic_store_n(h->rm->idle_word, 0, __ATOMIC_RELEASE);
}

/* ---- Rejoin ----------------------------------------------------------------
 *
 * A broken connection (expelled, server restarted, path lost) fails what was
 * in flight; the next kvc_submit with nothing in flight dials again: a new
 * client id, a new lease, an empty location cache (the server may have
 * restarted with another layout) and no extent. Attempts back off from 10 ms
 * to 1 s while they fail; meanwhile calls fail fast. With several servers a
 * dial never holds the caller: it returns KVI_JOIN_PENDING while the join
 * goes on, each call steps it, and the calls fail fast until it is done. A
 * handle whose lease ran out while idle first just asks for a new one. */
#define REJOIN_MIN_MS 10u
#define REJOIN_MAX_MS 1000u

static int rejoin(struct kvi_conn *h, uint64_t now)
{
	struct kvi_rmem *rm;
	int was = h->rm->broken ? h->rm->broken : KVC_EFENCED, rc, timeout;

	if (!h->dial)
		return was;
	if (now < h->rejoin_not_before)
		return was == KVC_EFENCED ? KVC_EFENCED : KVC_ESERVERGONE;
	timeout = h->op_timeout_ms > 200 ? (int)h->op_timeout_ms : 200;
	rc = h->dial(h->dial_arg, timeout, &rm);
	h->rejoining = rc == KVI_JOIN_PENDING;
	if (h->rejoining) /* joining in the background (dial.h "async"): fail fast meanwhile */
		return was == KVC_EFENCED ? KVC_EFENCED : KVC_ESERVERGONE;
	if (rc == 0) {
		/* Nothing is in flight: the old connection's buffers are free. */
		h->stats.wait_sleeps += h->rm->sleeps;
		kvi_rmem_destroy(h->rm);
		kvi_locache_clear(&h->cache);
		h->mark_count = 0;
		h->seg_off = h->seg_size = h->seg_used = 0;
		rc = kvi_conn_attach(h, rm); /* h->rm = rm, whatever happens */
		if (rc == 0) {
			h->rejoin_backoff_ms = 0;
			h->stats.rejoins++;
			kvi_info("rejoined the server as client %u", h->rm->client_id);
			return 0;
		}
		kvi_rmem_shutdown(h->rm, KVC_ESERVERGONE); /* broken until the next try */
	}
	h->rejoin_backoff_ms = h->rejoin_backoff_ms ? h->rejoin_backoff_ms * 2 : REJOIN_MIN_MS;
	if (h->rejoin_backoff_ms > REJOIN_MAX_MS)
		h->rejoin_backoff_ms = REJOIN_MAX_MS;
	h->rejoin_not_before = now + (uint64_t)h->rejoin_backoff_ms * 1000000u;
	/* Refusals that retrying cannot cure are worth passing on as they are. */
	if (rc == KVC_EAUTH || rc == KVC_EPROTO || rc == KVC_ENOMEM)
		return rc;
	return was == KVC_EFENCED ? KVC_EFENCED : KVC_ESERVERGONE;
}

int kvi_conn_step_rejoin(struct kvi_conn *h, uint64_t now)
{
	return h->rejoining && !h->inflight ? rejoin(h, now) : 0;
}

/* Before admitting an operation: a usable connection with a live lease.
 * *nowp is the clock read just before; anything slower than the usual
 * check (fetching a new index, a renewal waited for, a rejoin) reads it
 * again for the caller. */
int kvi_ensure_joined(struct kvi_conn *h, uint64_t *nowp)
{
	uint64_t now = *nowp;
	int rc;

	idle_busy(h); /* before the lease is looked at ("Idle word") */
	if (!h->rm->broken && !kvi_lease_lapsed(h, now)) {
		int fetches = h->index_stale;

		kvi_lease_tick(h, now);
		if (fetches)
			*nowp = kvi_now_ns();
		return 0;
	}
	if (h->inflight) /* they fail first; the caller polls them, then we rejoin */
		return h->rm->broken ? (kvi_lease_lapsed(h, now) ? KVC_EFENCED : KVC_ESERVERGONE) : 0;
	if (!h->rm->broken && kvi_lease_renew_sync(h, (int)h->op_timeout_ms) == 0 && !kvi_lease_lapsed(h, kvi_now_ns())) {
		/* Readmitted after a lapse, or a resize meanwhile: learn the
		 * index before anything is placed. */
		rc = refresh_if_stale(h);
	} else {
		if (!h->rm->broken)
			kvi_rmem_shutdown(h->rm, KVC_EFENCED);
		rc = rejoin(h, now);
		idle_busy(h); /* the new connection's word */
	}
	*nowp = kvi_now_ns();
	return rc;
}
