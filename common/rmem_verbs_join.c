/* Joining a kvserver over verbs (rmem_verbs.h "Joining"): resolving its
 * address and a route, creating the queue pair, and the connect handshake
 * whose private data carry our hello and the server's welcome -- as a state
 * machine stepped without blocking, on the rdma_cm channel's events, so that
 * a caller can join several servers at once or go on serving others while
 * one is slow to answer. kvi_rmem_verbs_connect is the blocking form. */
#define _GNU_SOURCE
#include "rmem_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "clock.h"
#include "kvclient_errors.h"
#include "rmem_verbs_impl.h"
#include "verbs_util.h"

enum join_phase { J_ADDR, J_ROUTE, J_CONNECT };

/* Attempts. A connect request or its reply lost on the wire is sent again by the
 * kernel's CM only after its response timeout (measured on Debian 6.1's
 * Soft-RoCE: ~6 s), longer than a whole default join. So while no attempt
 * has been answered, a new one starts from a fresh id KVI_JOIN_RETRY_FIRST_MS
 * after the first, then after twice as long, up to KVI_JOIN_ATTEMPTS in all,
 * within the join's deadline. The earlier attempts stay: a server that is
 * merely slow answers one of them, and the first answered wins. The others
 * are destroyed then (the server gets a reject, or a disconnect, and frees
 * what it set up for them). */
#define KVI_JOIN_RETRY_FIRST_MS 1000u
#define KVI_JOIN_ATTEMPTS 3

/* One attempt: its transport (whose rdma_cm id lives on the join's channel,
 * with the transport as its context) and how far it got. */
struct join_attempt {
	struct rmem_verbs *v; /* NULL: not started, or destroyed */
	enum join_phase phase;
	uint64_t t[J_CONNECT + 1]; /* ns: when it entered each phase (a timeout says) */
};

/* Copies of what kvi_verbs_opts pointed at: the join outlives the call that
 * started it. */
struct kvi_verbs_join {
	struct rdma_event_channel *ch; /* every attempt's; the winner's once it joined */
	struct join_attempt at[KVI_JOIN_ATTEMPTS];
	unsigned attempts;             /* started */
	int over;                      /* ended: handed over, or failed */
	struct rdma_addrinfo *ai;      /* looked up once, for every attempt */
	uint64_t start;      /* ns */
	uint64_t deadline;   /* ns: the whole join */
	uint64_t last;       /* ns: since when it waits for an event (its start, the last one's handling) */
	uint64_t max_gap;    /* ns: the longest wait for one event so far */
	uint64_t next_at;    /* ns: when another attempt starts, if none was answered */
	uint64_t retry_wait; /* ns: from then to the one after */
	int timeout_ms;
	struct ibv_device_attr attr;
	char host[256], port[16], device_buf[64];
	const char *device; /* device_buf, or NULL: the routed one */
	size_t lbuf_size;
	uint16_t role;
	int has_secret, has_raw;
	struct kvi_wire_hello raw;
	size_t secret_len;
	uint8_t secret[KVI_AUTH_SECRET_MAX]; /* each attempt proves afresh; wiped at free */
};

static const enum rdma_cm_event_type awaited[] = {
	[J_ADDR] = RDMA_CM_EVENT_ADDR_RESOLVED,
	[J_ROUTE] = RDMA_CM_EVENT_ROUTE_RESOLVED,
	[J_CONNECT] = RDMA_CM_EVENT_ESTABLISHED,
};

/* ev, which is not what the phase awaited (or a malformed welcome): why, in e. */
static int refused(const struct kvi_verbs_join *j, const struct rdma_cm_event *ev, struct kvi_errbuf *e)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_ERROR:
		kvi_errbuf_set(e, "no RDMA route to %s: the address is not reachable through any RDMA "
			       "device (is it on an RDMA-capable interface?)", j->host);
		return KVC_EUNREACHABLE;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		kvi_errbuf_set(e, "cannot resolve an RDMA route to %s (status %d)", j->host, ev->status);
		return KVC_EUNREACHABLE;
	case RDMA_CM_EVENT_REJECTED: {
		uint16_t why = kvi_wire_reject_decode(ev->param.conn.private_data,
						      ev->param.conn.private_data_len);
		if (why) {
			kvi_errbuf_set(e, "server %s:%s refused the connection: %s", j->host, j->port,
				       kvi_reject_reason_text(why));
			return kvi_reject_reason_code(why);
		}
		kvi_errbuf_set(e, "connection to %s:%s refused (rdma_cm status %d): no kvserver "
			       "listening on that port?", j->host, j->port, ev->status);
		return KVC_EUNREACHABLE;
	}
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		kvi_errbuf_set(e, "server %s:%s unreachable (%s, status %d): is kvserver running there?",
			       j->host, j->port, rdma_event_str(ev->event), ev->status);
		return KVC_EUNREACHABLE;
	default:
		kvi_errbuf_set(e, "unexpected rdma_cm event %s while connecting to %s:%s",
			       rdma_event_str(ev->event), j->host, j->port);
		return KVC_EPROTO;
	}
}

static int check_route_device(struct rmem_verbs *v, const struct kvi_verbs_join *j,
			      struct ibv_device_attr *attr, struct kvi_errbuf *e)
{
	const char *routed = ibv_get_device_name(v->id->verbs->device);

	if (j->device && strcmp(j->device, routed) != 0) {
		char names[256];
		int exists = 0, n = 0;
		struct ibv_context **devs = rdma_get_devices(&n);

		for (int i = 0; devs && i < n; i++)
			exists |= strcmp(ibv_get_device_name(devs[i]->device), j->device) == 0;
		if (devs)
			rdma_free_devices(devs);
		kvi_device_names(names, sizeof(names));
		if (!exists)
			kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s)", j->device, names);
		else
			kvi_errbuf_set(e, "server %s is reached through RDMA device %s, not %s: "
				       "drop the device option or use an address on %s",
				       j->host, routed, j->device, j->device);
		return KVC_ENODEV;
	}
	return kvi_check_device(v->id->verbs, attr, e);
}

static int create_resources(struct rmem_verbs *v, const struct kvi_verbs_join *j,
			    const struct ibv_device_attr *attr, struct kvi_errbuf *e)
{
	const char *dev = ibv_get_device_name(v->id->verbs->device);
	unsigned sq = KVI_RMEM_MAX_INFLIGHT * KVI_RMEM_MAX_BATCH;
	struct ibv_qp_init_attr qa;

	if ((int)sq > attr->max_qp_wr)
		sq = (unsigned)attr->max_qp_wr;
	v->pd = ibv_alloc_pd(v->id->verbs);
	if (!v->pd) {
		kvi_errbuf_set(e, "ibv_alloc_pd on %s: %s", dev, strerror(errno));
		return KVC_ESYS;
	}
	/* Every request may complete with an error when the QP fails, signaled or
	 * not, so the CQ must hold a full send queue plus the receives. */
	v->cc = ibv_create_comp_channel(v->id->verbs);
	if (!v->cc || fcntl(v->cc->fd, F_SETFL, fcntl(v->cc->fd, F_GETFL) | O_NONBLOCK)) {
		kvi_errbuf_set(e, "ibv_create_comp_channel on %s: %s", dev, strerror(errno));
		return KVC_ESYS;
	}
	v->cq = ibv_create_cq(v->id->verbs, (int)sq + 1 + CTRL_RECVS, NULL, v->cc, 0);
	if (!v->cq) {
		kvi_errbuf_set(e, "ibv_create_cq on %s: %s", dev, strerror(errno));
		return KVC_ESYS;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = v->cq;
	qa.recv_cq = v->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = sq + 1; /* + the control SEND */
	qa.cap.max_recv_wr = CTRL_RECVS;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = 64;
	if (rdma_create_qp(v->id, v->pd, &qa)) {
		qa.cap.max_inline_data = 0; /* some devices have no inline support */
		if (rdma_create_qp(v->id, v->pd, &qa)) {
			kvi_errbuf_set(e, "rdma_create_qp on %s (%u send WRs): %s", dev, sq, strerror(errno));
			return KVC_ESYS;
		}
	}
	v->max_inline = qa.cap.max_inline_data;
	if (kvi_verbs_set_lbuf(&v->rm, j->lbuf_size)) {
		kvi_errbuf_set(e, "cannot register %zu bytes with %s: %s (raise the locked-memory "
			       "limit: ulimit -l unlimited)", j->lbuf_size, dev, strerror(errno));
		return KVC_ENOMEM;
	}
	/* Receives, the send, and the idle word (rmem.h), which the server may
	 * READ: this registration is the only memory of ours it can reach,
	 * and only over this connection (our PD). */
	v->cbuf = aligned_alloc(64, (CTRL_RECVS + 2) * CTRL_MSG);
	if (v->cbuf)
		memset(v->cbuf, 0, (CTRL_RECVS + 2) * CTRL_MSG);
	v->cmr = v->cbuf ? ibv_reg_mr(v->pd, v->cbuf, (CTRL_RECVS + 2) * CTRL_MSG,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
			 : NULL;
	if (!v->cmr) {
		kvi_errbuf_set(e, "cannot register control buffers with %s: %s (raise the locked-memory limit: "
			       "ulimit -l unlimited)", dev, strerror(errno));
		return KVC_ENOMEM;
	}
	v->rm.idle_word = (uint64_t *)(void *)&v->cbuf[CTRL_RECVS + 1];
	v->rm.idle_addr = (uintptr_t)v->rm.idle_word;
	v->rm.idle_rkey = v->cmr->rkey;
	/* Receives must be posted before the server can send anything. */
	for (unsigned i = 0; i < CTRL_RECVS; i++) {
		if (kvi_verbs_post_ctrl_recv(v, i)) {
			kvi_errbuf_set(e, "ibv_post_recv on %s: %s", dev, strerror(errno));
			return KVC_ESYS;
		}
	}
	return 0;
}

/* The hello, with a fresh proof when we have a key: for the server at the
 * address we resolved and connect to (auth.h "kvi_auth_server"). */
static int make_hello(const struct kvi_verbs_join *j, struct rdma_cm_id *id, struct kvi_wire_hello *w,
		      struct kvi_errbuf *e)
{
	struct kvi_hello h = { .role = j->role ? j->role : KVI_ROLE_CLIENT };

	if (j->has_raw) {
		*w = j->raw;
		return 0;
	}
	if (j->has_secret) {
		int rc = kvi_auth_prove(&h, j->secret, j->secret_len, rdma_get_peer_addr(id), kvi_auth_now_ms());

		if (rc == KVC_EINVAL)
			kvi_errbuf_set(e, "cannot make the join proof: %s is not an IP address", j->host);
		else if (rc)
			kvi_errbuf_set(e, "cannot make the join proof: no random bytes (getrandom), or libcrypto's "
				       "HMAC failed");
		if (rc)
			return rc;
	}
	kvi_wire_hello_encode(w, &h);
	return 0;
}

/* The server reuses memory on the promise that what we post executes
 * within the bound it stated (exec_bound.h): read back what the QP was
 * really given, and refuse to run when it may retransmit for longer. */
static int check_exec_bound(struct rmem_verbs *v, const struct kvi_verbs_join *j, uint32_t server_ms,
			    struct kvi_errbuf *e)
{
	unsigned timeout, retry;
	uint32_t ours;
	int rc = kvi_qp_exec_bound(v->id->qp, &ours, &timeout, &retry, e);

	if (rc)
		return rc;
	if (ours > server_ms) {
		kvi_errbuf_set(e, "server %s:%s reuses memory assuming a work request executes within %u ms of "
			       "posting, but this QP (ACK timeout %u, retry count %u) may retransmit for %s%u ms: "
			       "refusing to run", j->host, j->port, server_ms, timeout, retry,
			       ours == UINT32_MAX ? "ever; bound " : "", ours);
		return KVC_ENOTSUP;
	}
	return 0;
}


/* The phase's event arrived for attempt a: start its next phase (0), or why not. */
static int advance(struct kvi_verbs_join *j, struct join_attempt *a, struct kvi_errbuf *e)
{
	struct rmem_verbs *v = a->v;
	struct rdma_conn_param cp;
	struct kvi_wire_hello hello;
	int rc, left = kvi_ms_until(kvi_mono_ns(), j->deadline, j->timeout_ms);

	if (a->phase == J_ADDR) {
		rc = check_route_device(v, j, &j->attr, e);
		if (rc)
			return rc;
		if (rdma_resolve_route(v->id, left > 0 ? left : 1)) {
			kvi_errbuf_set(e, "rdma_resolve_route to %s: %s", j->host, strerror(errno));
			return KVC_EUNREACHABLE;
		}
		a->phase = J_ROUTE;
		a->t[J_ROUTE] = kvi_mono_ns();
		return 0;
	}
	rc = create_resources(v, j, &j->attr, e);
	if (!rc)
		rc = kvi_set_ack_timeout(v->id, e);
	if (!rc)
		rc = make_hello(j, v->id, &hello, e);
	if (rc)
		return rc;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &hello;
	cp.private_data_len = sizeof(hello);
	/* Zero here would forbid READ and atomics on this QP: ask for all the device allows. */
	cp.initiator_depth = kvi_depth(j->attr.max_qp_init_rd_atom);
	cp.responder_resources = kvi_depth(j->attr.max_qp_rd_atom);
	cp.retry_count = KVI_RETRY_COUNT;
	cp.rnr_retry_count = 7;
	if (rdma_connect(v->id, &cp)) {
		kvi_errbuf_set(e, "rdma_connect to %s:%s: %s", j->host, j->port, strerror(errno));
		return KVC_EUNREACHABLE;
	}
	kvi_auth_wipe(&hello, sizeof(hello));
	a->phase = J_CONNECT;
	a->t[J_CONNECT] = kvi_mono_ns();
	return 0;
}

/* A new attempt: a fresh rdma_cm id on the join's channel, and the
 * address's resolution asked for. */
static int attempt(struct kvi_verbs_join *j, struct kvi_errbuf *e)
{
	struct join_attempt *a = &j->at[j->attempts];
	struct rmem_verbs *v = kvi_verbs_alloc();
	uint64_t now = kvi_mono_ns();
	int left = kvi_ms_until(now, j->deadline, j->timeout_ms);

	if (!v) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	a->v = v;
	a->phase = J_ADDR;
	a->t[J_ADDR] = now;
	j->attempts++;
	j->next_at = now + j->retry_wait;
	j->retry_wait *= 2;
	if (rdma_create_id(j->ch, &v->id, v, RDMA_PS_TCP)) {
		kvi_errbuf_set(e, "rdma_create_id: %s", strerror(errno));
		return KVC_ESYS;
	}
	if (rdma_resolve_addr(v->id, j->ai->ai_src_addr, j->ai->ai_dst_addr, left > 0 ? left : 1)) {
		kvi_errbuf_set(e, "no RDMA route to %s: %s (is the address on an RDMA-capable interface?)",
			       j->host, strerror(errno));
		return KVC_EUNREACHABLE;
	}
	return 0;
}

/* Destroys every attempt but keep (an index, or -1 for all): their ids go
 * before the channel they live on. */
static void drop_attempts(struct kvi_verbs_join *j, int keep)
{
	for (unsigned i = 0; i < j->attempts; i++) {
		if ((int)i != keep) {
			kvi_verbs_free(j->at[i].v); /* v->ch is NULL: the channel is the join's */
			j->at[i].v = NULL;
		}
	}
}

/* ESTABLISHED, with the server's welcome: the connection is ours. */
static int established(struct kvi_verbs_join *j, struct rmem_verbs *v, const struct rdma_cm_event *ev,
		       struct kvi_welcome *w, struct kvi_errbuf *e)
{
	const char *why = "";
	int rc = kvi_wire_welcome_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, w, &why);

	if (rc) {
		kvi_errbuf_set(e, "server %s:%s sent a malformed welcome (%u bytes: %s): "
			       "is it a kvserver of the same version?",
			       j->host, j->port, ev->param.conn.private_data_len, why);
		return rc;
	}
	v->connected = 1;
	rc = check_exec_bound(v, j, w->exec_ms, e);
	if (rc)
		return rc;
	v->rm.client_id = w->client_id;
	v->rm.max_op_ms = w->max_op_ms;
	v->rm.quarantine_ms = w->quarantine_ms;
	v->rm.server_flags = w->flags;
	v->raddr = w->region_addr;
	v->rkey = w->rkey;
	v->rm.lease_ms = w->lease_ms;
	v->rm.geo = w->geo;
	v->rm.region_size = w->geo.region_size;
	return 0;
}

void kvi_verbs_join_free(struct kvi_verbs_join *j)
{
	if (!j)
		return;
	drop_attempts(j, -1);
	if (j->ch)
		rdma_destroy_event_channel(j->ch);
	if (j->ai)
		rdma_freeaddrinfo(j->ai);
	kvi_auth_wipe(j->secret, sizeof(j->secret));
	free(j);
}

int kvi_verbs_join_start(const struct kvi_verbs_opts *o, struct kvi_verbs_join **out, struct kvi_errbuf *e)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP };
	struct kvi_verbs_join *j;
	int rc;

	*out = NULL;
	if (!o->host || !o->port || o->lbuf_size < 64 || o->timeout_ms <= 0 || strlen(o->host) >= sizeof(j->host) ||
	    strlen(o->port) >= sizeof(j->port) || (o->device && strlen(o->device) >= sizeof(j->device_buf)) ||
	    (o->secret && o->secret_len > sizeof(j->secret))) {
		kvi_errbuf_set(e, "invalid connection options");
		return KVC_EINVAL;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	j->timeout_ms = o->timeout_ms;
	j->start = j->last = kvi_mono_ns();
	j->deadline = j->last + (uint64_t)o->timeout_ms * 1000000u;
	j->retry_wait = (uint64_t)KVI_JOIN_RETRY_FIRST_MS * 1000000u;
	snprintf(j->host, sizeof(j->host), "%s", o->host);
	snprintf(j->port, sizeof(j->port), "%s", o->port);
	if (o->device) {
		snprintf(j->device_buf, sizeof(j->device_buf), "%s", o->device);
		j->device = j->device_buf;
	}
	j->lbuf_size = o->lbuf_size;
	j->role = o->role;
	if (o->raw_hello) {
		j->raw = *o->raw_hello;
		j->has_raw = 1;
	} else if (o->secret) {
		memcpy(j->secret, o->secret, o->secret_len);
		j->secret_len = o->secret_len;
		j->has_secret = 1;
	}
	/* A host name is looked up here, synchronously (the resolver has no
	 * event to step on); numeric addresses, as server lists usually hold,
	 * cost nothing. */
	rc = rdma_getaddrinfo(o->host, o->port, &hints, &j->ai);
	if (rc) {
		kvi_errbuf_set(e, "cannot resolve server address %s:%s: %s", o->host, o->port,
			       rc == -1 ? strerror(errno) : gai_strerror(rc));
		j->ai = NULL;
		rc = KVC_EUNREACHABLE;
		goto fail;
	}
	j->ch = rdma_create_event_channel();
	if (!j->ch) {
		kvi_errbuf_set(e, "cannot open the RDMA connection manager (/dev/infiniband/rdma_cm: %s): "
			       "no RDMA device or rdma_ucm not loaded; run under deploy/rdma-env",
			       strerror(errno));
		rc = KVC_ENODEV;
		goto fail;
	}
	/* Never blocked on: the join is stepped, and later the channel is only
	 * looked at while idle. */
	if (fcntl(j->ch->fd, F_SETFL, fcntl(j->ch->fd, F_GETFL) | O_NONBLOCK)) {
		kvi_errbuf_set(e, "fcntl(O_NONBLOCK) on the rdma_cm channel: %s", strerror(errno));
		rc = KVC_ESYS;
		goto fail;
	}
	rc = attempt(j, e);
	if (rc)
		goto fail;
	j->last = kvi_mono_ns();
	*out = j;
	return 0;
fail:
	kvi_verbs_join_free(j);
	return rc;
}

int kvi_verbs_join_fd(const struct kvi_verbs_join *j)
{
	return j->over ? -1 : j->ch->fd;
}

uint64_t kvi_verbs_join_wake_ns(const struct kvi_verbs_join *j)
{
	return j->attempts < KVI_JOIN_ATTEMPTS && j->next_at < j->deadline ? j->next_at : j->deadline;
}

uint64_t kvi_verbs_join_quiet_ns(const struct kvi_verbs_join *j, uint64_t now)
{
	return now > j->last ? now - j->last : 0;
}

uint64_t kvi_verbs_join_max_gap_ns(const struct kvi_verbs_join *j)
{
	return j->max_gap;
}

/* The furthest phase any attempt reached: what the join still waits for. */
static enum join_phase furthest(const struct kvi_verbs_join *j)
{
	enum join_phase p = J_ADDR;

	for (unsigned i = 0; i < j->attempts; i++)
		if (j->at[i].v && j->at[i].phase > p)
			p = j->at[i].phase;
	return p;
}

/* A timeout's line: where each attempt got to and when (ms since the join
 * started), so that a slow phase shows which it was. */
static void timed_out(const struct kvi_verbs_join *j, struct kvi_errbuf *e)
{
	static const char *const names[] = { "started", "address resolved", "connect request sent" };
	char what[256];
	size_t n = 0;

	what[0] = '\0';
	for (unsigned i = 0; i < j->attempts; i++) {
		const struct join_attempt *a = &j->at[i];

		for (int p = J_ADDR; p <= (int)a->phase && n < sizeof(what); p++) {
			unsigned long long ms = (a->t[p] - j->start) / 1000000u;

			if (p == J_ADDR)
				n += (size_t)snprintf(what + n, sizeof(what) - n, "%sattempt %u started at %llu ms",
						      i ? "; " : "", i + 1, ms);
			else
				n += (size_t)snprintf(what + n, sizeof(what) - n, ", %s at %llu", names[p], ms);
		}
	}
	kvi_errbuf_set(e, "server %s:%s did not answer within %d ms (%s awaited; %s): is kvserver running there?",
		       j->host, j->port, j->timeout_ms, rdma_event_str(awaited[furthest(j)]), what);
}

/* The join's end: the connection handed over (rc 0, attempt i), or none. */
static int end(struct kvi_verbs_join *j, int rc, int i, struct kvi_rmem **out)
{
	drop_attempts(j, rc ? -1 : i);
	if (!rc) {
		struct rmem_verbs *v = j->at[i].v;

		v->ch = j->ch; /* the connection's now: its disconnect arrives there */
		j->ch = NULL;
		j->at[i].v = NULL;
		*out = &v->rm;
	}
	j->over = 1;
	return rc;
}

int kvi_verbs_join_step(struct kvi_verbs_join *j, struct kvi_rmem **out, struct kvi_welcome *w, struct kvi_errbuf *e)
{
	*out = NULL;
	if (j->over) {
		kvi_errbuf_set(e, "this join has ended");
		return KVC_EINVAL;
	}
	for (;;) {
		struct rdma_cm_event *ev;
		struct join_attempt *a = NULL;
		uint64_t now = kvi_mono_ns();
		int rc, i;

		/* Past the deadline nothing more is done, not even with an event
		 * that came in time but was taken late. */
		if (now >= j->deadline) {
			timed_out(j, e);
			return end(j, KVC_EUNREACHABLE, -1, out);
		}
		if (rdma_get_cm_event(j->ch, &ev)) {
			if (errno != EAGAIN && errno != EINTR) {
				kvi_errbuf_set(e, "waiting for rdma_cm event: %s", strerror(errno));
				return end(j, KVC_ESYS, -1, out);
			}
			if (j->attempts == KVI_JOIN_ATTEMPTS || now < j->next_at)
				return KVI_JOIN_PENDING;
			rc = attempt(j, e); /* none answered yet: the peer is still quiet, last stays */
			if (rc)
				return end(j, rc, -1, out);
			continue;
		}
		for (i = 0; i < (int)j->attempts; i++)
			if (j->at[i].v && ev->id == j->at[i].v->id)
				a = &j->at[i];
		if (!a) { /* cannot be: an id's events go with it */
			rdma_ack_cm_event(ev);
			continue;
		}
		i = (int)(a - j->at);
		if (now - j->last > j->max_gap)
			j->max_gap = now - j->last;
		j->last = now;
		/* Any attempt's refusal is the server's (or the network's) answer
		 * for all of them. */
		if (ev->event != awaited[a->phase])
			rc = refused(j, ev, e);
		else if (a->phase == J_CONNECT)
			rc = established(j, a->v, ev, w, e);
		else
			rc = 0;
		rdma_ack_cm_event(ev);
		if (rc || a->phase == J_CONNECT)
			return end(j, rc, i, out);
		rc = advance(j, a, e);
		if (rc)
			return end(j, rc, -1, out);
		j->last = kvi_mono_ns(); /* waits from here: our own set-up work is not the peer's */
	}
}

int kvi_verbs_join_wait(struct kvi_verbs_join *j, struct kvi_rmem **out, struct kvi_welcome *w, struct kvi_errbuf *e)
{
	int rc;

	while ((rc = kvi_verbs_join_step(j, out, w, e)) == KVI_JOIN_PENDING) {
		struct pollfd p = { .fd = kvi_verbs_join_fd(j), .events = POLLIN };

		(void)poll(&p, 1, kvi_ms_until(kvi_mono_ns(), kvi_verbs_join_wake_ns(j), 1000));
	}
	return rc;
}

int kvi_rmem_verbs_connect(const struct kvi_verbs_opts *o, struct kvi_rmem **out, struct kvi_welcome *welcome,
			   struct kvi_errbuf *e)
{
	struct kvi_verbs_join *j;
	int rc = kvi_verbs_join_start(o, &j, e);

	*out = NULL;
	if (rc)
		return rc;
	rc = kvi_verbs_join_wait(j, out, welcome, e);
	kvi_verbs_join_free(j);
	return rc;
}
