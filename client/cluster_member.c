/* One member of the handle's list and its failures: joining it (with a
 * back-off while joins fail), failing an operation fast while it cannot be
 * joined, ejecting it from the hash after server_failure_limit failures in a
 * row (auto-eject) and giving it its keys back after retry_timeout_ms, and
 * closing it. A joined member's connection rejoins by itself (lease.c
 * "Rejoin"); what is here is for a member that has no connection, or whose
 * operations keep failing. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "cluster.h"
#include "cluster_member.h"
#include "cluster_route.h"
#include "cluster_stats.h"
#include "dial.h"
#include "engine.h"
#include "lease.h"
#include "log.h"
#include "stats.h"

#define JOIN_MIN_MS 10u      /* back-off of the joins of a member that has no connection */
#define JOIN_MAX_MS 1000u

void kvi_member_free(kvc_t *h, struct kvi_member *m)
{
	if (m->c) {
		struct kvc_stats s;

		kvi_conn_get_stats(m->c, &s);
		kvi_stats_fold(&h->gone, &s);
		kvi_conn_destroy(m->c);
	}
	if (m->dial_free)
		m->dial_free(m->dial_arg);
	kvi_dial_free(m->d); /* abandons a join under way */
	free(m);
}

/* Refusals that retrying cannot cure: passed on as they are, where other
 * join failures fail an operation fast with KVC_ESERVERGONE. */
static int incurable(int rc)
{
	return rc == KVC_EAUTH || rc == KVC_ENOAUTH || rc == KVC_EPROTO || rc == KVC_ENOMEM || rc == KVC_EINVAL ||
	       rc == KVC_ENODEV || rc == KVC_ENOTSUP || rc == KVC_ESTALE || rc == KVC_EREPLAY;
}

/* Start or step m's join (c is NULL; cluster.h "Joining"): 0 joined,
 * KVI_JOIN_PENDING while it goes on, or the join's code (one line in err). */
int kvi_member_join(kvc_t *h, struct kvi_member *m, uint64_t now, char *err, size_t errlen)
{
	int timeout_ms = h->o.connect_timeout_ms;
	char msg[640];
	int rc;

	if (m->d) {
		m->d->async = !h->single;
		rc = kvi_dial_open(m->d, &h->o, timeout_ms, &m->c, msg, sizeof(msg));
	} else {
		struct kvi_rmem *rm;

		rc = m->dial ? m->dial(m->dial_arg, timeout_ms, &rm) : KVC_ESERVERGONE;
		if (rc == 0)
			rc = kvi_conn_open(rm, &h->o, &m->c);
		if (rc == 0)
			kvi_conn_set_dial(m->c, m->dial, m->dial_arg, NULL);
		snprintf(msg, sizeof(msg), "server %s: %s", m->name, kvc_strerror(rc));
	}
	m->joining = rc == KVI_JOIN_PENDING;
	m->step_at = now + KVI_JOIN_STEP_NS;
	if (m->joining)
		return rc;
	if (rc == 0) {
		m->backoff_ms = 0;
		kvi_info("joined server %s", m->name);
		return 0;
	}
	kvi_set_err(err, errlen, msg);
	kvi_info("joining server %s: %s", m->name, msg);
	m->backoff_ms = m->backoff_ms ? m->backoff_ms * 2 : JOIN_MIN_MS;
	if (m->backoff_ms > JOIN_MAX_MS)
		m->backoff_ms = JOIN_MAX_MS;
	m->join_at = now + (uint64_t)m->backoff_ms * 1000000u;
	return rc;
}

/* Ejected members whose time is up take their keys back. libmemcached's
 * retry_timeout: one more failure ejects the member again. */
void kvi_member_return_ejected(kvc_t *h, uint64_t now)
{
	if (now < h->next_return)
		return;
	for (unsigned i = 0; i < h->n; i++) {
		struct kvi_member *m = h->m[i];

		if (m->ejected_until && m->ejected_until <= now) {
			m->ejected_until = 0;
			m->fails = h->o.server_failure_limit ? h->o.server_failure_limit - 1 : 0;
			kvi_info("server %s takes its keys back (retry after ejection)", m->name);
		}
	}
	kvi_route_rebuild(h);
}

/* The outcome of one of m's operations (or joins). */
void kvi_member_account(kvc_t *h, struct kvi_member *m, int status, uint64_t now)
{
	if (status != KVC_ESERVERGONE && status != KVC_EUNREACHABLE && status != KVC_ETIMEDOUT) {
		if (status == 0 || status == KVC_ENOTFOUND)
			m->fails = 0;
		return;
	}
	m->fails++;
	if (h->o.server_failure_limit && m->fails >= h->o.server_failure_limit && !m->ejected_until) {
		m->ejected_until = now + (uint64_t)h->o.retry_timeout_ms * 1000000u;
		kvi_warn("server %s ejected after %u failures in a row: its keys go to the other servers for %d ms",
			 m->name, m->fails, h->o.retry_timeout_ms);
		kvi_route_rebuild(h);
	}
}

/* m's connection for an operation routed to it: a member without one has
 * its join started (once its back-off has run out) or stepped (at most every
 * KVI_JOIN_STEP_NS). 0, or the code the operation fails with at once
 * (fail-fast): KVC_ESERVERGONE, or a refusal that retrying cannot cure. A
 * join under way is no failure of the member's (cluster.h "Joining"). */
int kvi_member_ready(kvc_t *h, struct kvi_member *m, uint64_t now)
{
	int rc;

	if (m->c)
		return 0;
	if (m->joining && now < m->step_at)
		return KVC_ESERVERGONE;
	if (!m->joining && now < m->join_at) {
		kvi_member_account(h, m, KVC_ESERVERGONE, now);
		return KVC_ESERVERGONE;
	}
	rc = kvi_member_join(h, m, now, NULL, 0);
	if (rc == KVI_JOIN_PENDING)
		return KVC_ESERVERGONE;
	if (rc && !incurable(rc))
		rc = KVC_ESERVERGONE;
	if (rc)
		kvi_member_account(h, m, rc, now);
	return rc;
}

int kvi_member_joining(const struct kvi_member *m)
{
	return m->joining || (m->c && kvi_conn_rejoining(m->c));
}

/* One step of m's join under way: its own, or its connection's rejoin. */
static int step_join(kvc_t *h, struct kvi_member *m, uint64_t now)
{
	return m->joining ? kvi_member_join(h, m, now, NULL, 0) : kvi_conn_step_rejoin(m->c, now);
}

/* kvc_poll: the joins under way advance even when no key is routed to them
 * (an rdma_cm handshake must be answered in time), every KVI_JOIN_STEP_NS:
 * a look costs a system call, and the scan one pass over the list. */
void kvi_member_step_joins(kvc_t *h, uint64_t now)
{
	if (now < h->steps_at)
		return;
	h->steps_at = now + KVI_JOIN_STEP_NS;
	for (unsigned i = 0; i < h->n; i++) {
		struct kvi_member *m = h->m[i];
		int rc;

		if (!kvi_member_joining(m))
			continue;
		rc = step_join(h, m, now);
		if (rc < 0 && !kvi_member_joining(m)) /* a join failed */
			kvi_member_account(h, m, incurable(rc) ? rc : KVC_ESERVERGONE, now);
	}
}

int kvi_member_join_wait(kvc_t *h, struct kvi_member *m)
{
	int rc = 0;

	while (kvi_member_joining(m)) {
		struct pollfd p;

		if (m->c && kvi_conn_inflight(m->c))
			return 0; /* its operations fail first: the caller polls them */
		rc = step_join(h, m, kvi_now_ns());
		p = (struct pollfd){ .fd = m->d ? kvi_dial_fd(m->d) : -1, .events = POLLIN };
		if (kvi_member_joining(m))
			(void)poll(&p, 1, 1); /* the join's own deadline ends it */
	}
	return rc < 0 ? rc : 0;
}
