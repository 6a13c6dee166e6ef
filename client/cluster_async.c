/* The asynchronous interface over several servers: kvc_submit routes each
 * operation to its key's member (cluster_route.c) and submits it on that
 * member's connection; kvc_poll polls each connection in turn without
 * blocking, and waits as kvi_rmem_wait does over one: it polls all of them
 * as long as the waiting policy says (rmem.h kvi_rmem_spin_ns), then sleeps
 * on all of them at once (kvi_conns_block).
 * With one server (cluster.h "single"), every call goes straight to the
 * connection. The blocking calls are kvc_submit and kvc_poll of one
 * operation (kvclient.c). */
#include <sched.h>

#include "clock.h"
#include "cluster.h"
#include "cluster_list.h"
#include "cluster_member.h"
#include "engine.h"
#include "lease.h"
#include "rmem.h"

#define IDLE_NS 200000ull    /* while waiting: let connections notice a vanished peer */
#define SLEEP_MAX_MS 10      /* one sleep of kvc_poll over several servers */

int kvc_submit(kvc_t *h, struct kvc_op *op)
{
	struct kvi_member *m;
	uint64_t now;
	int i, rc;

	if (!h)
		return KVC_EINVAL;
	if (h->single)
		return kvi_conn_submit(h->m[0]->c, op);
	if (!op || (op->key_len && !op->key))
		return KVC_EINVAL;
	if (op->key_len == 0 || op->key_len > KVI_MAX_KEY)
		return KVC_EKEYSIZE;
	now = kvi_now_ns();
	kvi_list_check_file(h, now);
	kvi_member_return_ejected(h, now);
	if (h->inflight >= h->o.depth)
		return KVC_EAGAIN;
	i = kvi_ring_pick(&h->ring, kvi_ring_key_hash(op->key, op->key_len));
	if (i < 0)
		return KVC_ESERVERGONE; /* every server ejected */
	m = h->m[i];
	rc = kvi_member_ready(h, m, now); /* joined now, or fail fast */
	if (rc)
		return rc;
	/* Its connection rejoins in the background (cluster.h "Joining"):
	 * stepped by this submit when due, failing fast, not a failure. */
	if (kvi_conn_rejoining(m->c) && now < m->step_at)
		return KVC_ESERVERGONE;
	rc = kvi_conn_submit(m->c, op);
	if (rc == 0) {
		m->inflight++;
		h->inflight++;
	} else if (kvi_conn_rejoining(m->c)) {
		m->step_at = now + KVI_JOIN_STEP_NS;
	} else {
		kvi_member_account(h, m, rc, now);
	}
	return rc;
}

int kvc_submit_many(kvc_t *h, struct kvc_op *const *ops, unsigned n)
{
	unsigned started = 0;
	int why = 0;

	if (!h || (n && !ops))
		return KVC_EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!ops[i])
			return KVC_EINVAL;
	if (h->single) {
		started = kvi_conn_submit_many(h->m[0]->c, ops, n, &why);
	} else {
		/* Each key to its own server: one at a time. */
		while (started < n && (why = kvc_submit(h, ops[started])) == 0)
			started++;
	}
	if (started < n)
		ops[started]->status = why;
	return (int)started;
}

/* Every member's connection (NULL where none) into cs: how many. */
static unsigned member_conns(const kvc_t *h, struct kvi_conn **cs)
{
	unsigned all = h->n + h->ndrain;

	for (unsigned k = 0; k < all; k++)
		cs[k] = h->m[k]->c;
	return all;
}

/* Sleep on every member's connection (kvi_conns_block) until the deadline,
 * at most SLEEP_MAX_MS at a time: an operation waiting on a timer (a backoff,
 * a resize) and the leases are looked after between sleeps. */
static int sleep_members(kvc_t *h, uint64_t now, uint64_t deadline)
{
	struct kvi_conn *cs[2 * KVI_RING_MAX];
	unsigned all = member_conns(h, cs);

	if (now >= deadline)
		return 0;
	return kvi_conns_block(cs, all, kvi_ms_until(now, deadline, SLEEP_MAX_MS));
}

/* How long kvc_poll polls before it sleeps: the waiting policy (rmem.h
 * kvi_rmem_spin_ns) of the members with operations in flight. */
static uint64_t members_spin_ns(const kvc_t *h)
{
	struct kvi_conn *cs[2 * KVI_RING_MAX];
	unsigned all = member_conns(h, cs);
	uint64_t base = (uint64_t)h->o.busy_poll_us * 1000u, s;

	if (h->o.busy_poll_us < 0)
		return UINT64_MAX;
	s = kvi_conns_spin_ns(cs, all); /* 0 when none has a batch posted: busy_poll_us then */
	return s > base ? s : base;
}

int kvc_poll(kvc_t *h, struct kvc_op **done, unsigned max, int timeout_ms)
{
	uint64_t now, start, deadline, last_idle, spin_ns;
	unsigned spins = 0;
	int slept = 0, polling = 1;

	if (!h || !done || max == 0)
		return KVC_EINVAL;
	if (h->single)
		return kvi_conn_poll(h->m[0]->c, done, max, timeout_ms);
	now = start = last_idle = kvi_now_ns();
	kvi_member_step_joins(h, now); /* cluster.h "Joining" */
	deadline = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000u;
	spin_ns = members_spin_ns(h);
	kvi_rmem_spinning(1);
	for (;;) {
		unsigned got = 0, all = h->n + h->ndrain;

		/* Every connection once, idle ones included (their leases are
		 * renewed from here), starting with a different one each time so
		 * that a small max does not starve the last. */
		for (unsigned k = 0; k < all && got < max; k++) {
			struct kvi_member *m = h->m[(h->rr + k) % all];
			int r;

			if (!m->c)
				continue;
			r = kvi_conn_poll(m->c, done + got, max - got, 0);
			for (int j = 0; j < r; j++) {
				kvi_member_account(h, m, done[got + (unsigned)j]->status, now);
				m->inflight--;
				h->inflight--;
			}
			if (r > 0) {
				got += (unsigned)r;
				if (timeout_ms != 0 && m->c) /* a wait, not a look: size the next (rmem.h) */
					kvi_conn_waited(m->c, now - start);
			}
		}
		h->rr++;
		if (h->ndrain)
			kvi_list_reap_drained(h);
		if (got > 0 || h->inflight == 0 || now >= deadline) {
			if (polling)
				kvi_rmem_spinning(-1);
			kvi_list_check_file(h, now);
			return (int)got;
		}
		if (++spins % KVI_RMEM_SPIN_LOOK)
			continue;
		now = kvi_now_ns();
		if (now - last_idle >= IDLE_NS) {
			kvi_member_step_joins(h, now);
			for (unsigned k = 0; k < all; k++)
				if (h->m[k]->c && h->m[k]->inflight)
					kvi_conn_idle(h->m[k]->c);
			if (!slept) /* polling only: let others run now and then */
				sched_yield();
			last_idle = now;
		}
		/* Polled long enough (the waiting policy, rmem.h): sleep until a
		 * completion, a control message or a departing peer on any member
		 * (as one connection's wait does, kvi_rmem_wait). */
		slept = now - start >= spin_ns && sleep_members(h, now, deadline);
		if (slept) {
			if (polling)
				kvi_rmem_spinning(-1);
			polling = 0;
			now = kvi_now_ns();
		}
	}
}

unsigned kvc_inflight(const kvc_t *h)
{
	return h->single ? kvi_conn_inflight(h->m[0]->c) : h->inflight;
}
