/* kvc_flush_all: memcached's flush_all, sent to every server of the handle.
 *
 * The server does the work (server/flush.h): FLUSH is answered at once,
 * with the ticket of the walk that carries an immediate flush out; the
 * client then asks how that ticket stands until the server says the walk is
 * done, as it waits for a deferred grant. Round trips: one FLUSH per server
 * for a delayed flush; for an immediate one, one FLUSH and then one each
 * poll (every 0.2 ms at first, the interval doubling up to 20 ms) until the
 * walk is done. Every server's flush is asked for first and then waited for,
 * so that the walks of several servers run at the same time.
 *
 * The wait has no fixed bound -- a walk takes time in proportion to the
 * index -- but it ends with KVC_ETIMEDOUT when a server's walk stops moving
 * for longer than a walk may wait for held locks (twice the server's
 * patience, server/flush.h, plus 5 s). */
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "cluster_member.h"
#include "conn.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "lease.h"
#include "wire.h"

#define POLL_FIRST_US 200u
#define POLL_MAX_US 20000u
#define STALL_SLACK_MS 5000u

struct wait {
	struct kvi_conn *c; /* NULL: nothing to wait for (delayed, or failed) */
	uint64_t ticket;
	uint64_t done, walked; /* as last answered */
	uint64_t moved_ns;     /* when they last changed */
};

/* One FLUSH on c and its answer. 0, or a code: the transport's, the
 * server's refusal (KVC_ENOTSUP: it has no flusher), or KVC_EPROTO. */
static int ask(struct kvi_conn *c, uint64_t delay_ms, uint64_t ticket, struct kvi_ctrl_flushed *out)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_FLUSH, .flush = { .delay_ms = delay_ms, .ticket = ticket } }, resp;
	uint64_t now = kvi_now_ns();
	int rc;

	/* As a data call does: a handle idle past its lease renews it (or,
	 * expelled meanwhile, rejoins) before it asks anything. */
	rc = kvi_ensure_joined(c, &now);
	kvi_idle_update(c); /* nothing is posted for a flush */
	if (rc)
		return rc;
	rc = kvi_rmem_ctrl_call(c->rm, &req, &resp, KVI_CTRL_TIMEOUT_MS);
	if (rc)
		return rc;
	if (resp.type == KVI_CTRL_ERROR)
		return resp.status < 0 ? resp.status : KVC_EPROTO;
	if (resp.type != KVI_CTRL_FLUSHED)
		return KVC_EPROTO;
	*out = resp.flushed;
	return 0;
}

/* Ask c for a flush; an immediate one is then waited for in w. */
static int request(struct kvi_conn *c, uint64_t delay_ms, struct wait *w)
{
	struct kvi_ctrl_flushed r;
	int rc = ask(c, delay_ms, 0, &r);

	if (rc)
		return rc;
	if (delay_ms)
		return 0;
	if (r.ticket == 0)
		return KVC_EPROTO; /* an immediate flush has a walk */
	*w = (struct wait){ .c = c, .ticket = r.ticket, .done = r.done, .walked = r.walked, .moved_ns = kvi_now_ns() };
	if (r.done >= r.ticket)
		w->c = NULL;
	return 0;
}

/* One look at w: 0 (done, or still moving), or a code (w is then over). */
static int poll_one(struct wait *w)
{
	struct kvi_ctrl_flushed r;
	uint64_t now, stall_ns;
	int rc = ask(w->c, 0, w->ticket, &r);

	if (rc) {
		w->c = NULL;
		return rc;
	}
	now = kvi_now_ns();
	if (r.done >= w->ticket) {
		w->c = NULL;
		return 0;
	}
	if (r.done != w->done || r.walked != w->walked) {
		w->done = r.done;
		w->walked = r.walked;
		w->moved_ns = now;
	}
	stall_ns = (2ull * (2ull * w->c->rm->max_op_ms + 1000u) + STALL_SLACK_MS) * 1000000u;
	if (now - w->moved_ns > stall_ns) {
		w->c = NULL;
		return KVC_ETIMEDOUT;
	}
	return 0;
}

int kvc_flush_all(kvc_t *h, uint64_t delay_ms)
{
	struct wait w[KVI_RING_MAX];
	unsigned waiting = 0, poll_us = POLL_FIRST_US;
	int first = 0;

	if (!h)
		return KVC_EINVAL;
	if (!h->n)
		return KVC_ESERVERGONE;
	/* Every server of the list, ejected ones too: their items would come
	 * back with them. */
	for (unsigned i = 0; i < h->n && i < KVI_RING_MAX; i++) {
		struct kvi_member *m = h->m[i];
		int rc = kvi_member_join_wait(h, m); /* a server still joining is flushed too */

		if (rc == 0)
			rc = kvi_member_ready(h, m, kvi_now_ns());

		w[i].c = NULL;
		if (rc == 0)
			rc = request(m->c, delay_ms, &w[i]);
		if (rc && !first)
			first = rc;
		waiting += w[i].c != NULL;
	}
	while (waiting) {
		nanosleep(&(struct timespec){ .tv_nsec = (long)poll_us * 1000 }, NULL);
		poll_us = poll_us * 2 > POLL_MAX_US ? POLL_MAX_US : poll_us * 2;
		waiting = 0;
		for (unsigned i = 0; i < h->n && i < KVI_RING_MAX; i++) {
			int rc;

			if (!w[i].c)
				continue;
			rc = poll_one(&w[i]);
			if (rc && !first)
				first = rc;
			waiting += w[i].c != NULL;
		}
	}
	return first;
}
