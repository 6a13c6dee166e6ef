#include "listener.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"
#include "u32map.h"

/* Control-path geometry per peer. Every received request is answered by at
 * most one SEND, and the server adds at most one notice, so RECV_DEPTH + 1
 * send slots can only run out when a peer stops taking our SENDs; that peer
 * is then disconnected. */
#define CTRL_MSG ((uint32_t)sizeof(struct kvi_wire_ctrl))
#define SEND_SLOTS (KVI_CTRL_RECV_DEPTH + 1u)
#define CTRL_SLOTS (KVI_CTRL_RECV_DEPTH + SEND_SLOTS)
/* After them, the destination of kvi_listener_read_word (one at a time). */
#define READ_SLOT CTRL_SLOTS
#define BUF_SLOTS (CTRL_SLOTS + 1)
/* Completions one peer can have outstanding in the shared CQ. The CQ is
 * sized for twice that per peer: completions flushed from a peer that was
 * just freed may still sit in it. */
#define PEER_CQE (KVI_CTRL_RECV_DEPTH + SEND_SLOTS + 1)
#define CQ_INITIAL 128
/* A device caps a CQ's size (rxe: 32 767 entries, 963 peers): past that the
 * listener opens another CQ on the same completion channel. 256 of them hold
 * a quarter of a million peers on rxe. */
#define MAX_CQS 256u

/* One of the control path's CQs, and how many peers' QPs use it. */
struct ctrl_cq {
	struct ibv_cq *cq;
	unsigned peers;
	unsigned events; /* taken from the channel, not yet acked */
};

/* wr_id = serial << 8 | slot: the serial tells a completion of this peer from
 * one of a freed peer whose QP number the device has since reused. */
#define WR_SLOT_BITS 8
_Static_assert(BUF_SLOTS < (1u << WR_SLOT_BITS), "slot numbers fit wr_id");
_Static_assert(CTRL_MSG == 64, "control messages are one wire size");

struct kvi_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_context **devs; /* librdmacm's list; ctx points into it */
	struct ibv_context *ctx;
	struct ibv_device_attr attr;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cq_ch;
	/* The control path of every peer, send and receive: a peer's QP uses
	 * cqs[p->cqi]; all share cq_ch. */
	struct ctrl_cq cqs[MAX_CQS];
	unsigned ncq;
	int epfd;          /* ch->fd + cq_ch->fd: what the owner waits on */
	unsigned npeers;   /* peers holding a QP on one of cqs */
	uint64_t next_serial;
	struct kvi_peer *peers; /* doubly linked: a peer leaves in O(1) */
	/* Every control event finds its peer in O(1), however many there are:
	 * completions by QP number, the owner's requests by client id. */
	struct kvi_u32map by_qpn, by_id;
	struct kvi_auth_gate *auth; /* NULL: every peer is a client, no proof asked */
};

/* Choose the device for a wildcard bind: the named one, else the only one with
 * atomics. */
static int pick_device(struct kvi_listener *l, const struct kvi_listen_opts *o, struct kvi_errbuf *e)
{
	char names[256];
	int n = 0, usable = 0;

	l->devs = rdma_get_devices(&n);
	kvi_device_names(names, sizeof(names));
	for (int i = 0; l->devs && i < n; i++) {
		struct ibv_device_attr a;

		if (o->device) {
			if (strcmp(ibv_get_device_name(l->devs[i]->device), o->device) == 0)
				l->ctx = l->devs[i];
			continue;
		}
		if (ibv_query_device(l->devs[i], &a) == 0 && a.atomic_cap != IBV_ATOMIC_NONE) {
			usable++;
			if (!l->ctx)
				l->ctx = l->devs[i];
		}
	}
	if (o->device && !l->ctx) {
		kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s): name one of these with -d/--device",
			       o->device, names);
		return KVC_ENODEV;
	}
	if (n == 0) {
		kvi_errbuf_set(e, "no RDMA device found: attach an RDMA NIC or create Soft-RoCE "
			       "(deploy/rdma-env does it for tests)");
		return KVC_ENODEV;
	}
	if (!o->device && usable == 0) {
		/* Let the capability check say precisely what is missing. */
		l->ctx = l->devs[0];
	} else if (!o->device && usable > 1) {
		kvi_errbuf_set(e, "several RDMA devices can serve (%s): choose one with -d/--device "
			       "or bind an address on it with -l/--listen", names);
		return KVC_EINVAL;
	}
	return 0;
}

static int is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	return a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* Can a fresh id (on channel ch; NULL: its own) bind address a on some
 * port (port 0: any), and, with dev, on that device? */
static int bind_probe(struct rdma_event_channel *ch, const struct sockaddr *a, size_t len, struct ibv_device *dev)
{
	struct sockaddr_storage ss = { 0 };
	struct rdma_cm_id *id;
	int ok;

	if (len > sizeof(ss) || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 0;
	memcpy(&ss, a, len);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	ok = rdma_bind_addr(id, (struct sockaddr *)&ss) == 0 && (!dev || (id->verbs && id->verbs->device == dev));
	rdma_destroy_id(id);
	return ok;
}

/* Why rdma_bind_addr failed, as the operator needs it. rdma_cm reports a port
 * that another listener holds as EADDRNOTAVAIL, just like an address that is
 * on no RDMA interface (EADDRINUSE only when the exact address is taken), so
 * the address is tried again on another port to tell the two apart. */
static int bind_error(struct rdma_event_channel *ch, const struct rdma_addrinfo *ai, const char *where,
		      const char *port, int err, struct kvi_errbuf *e)
{
	if (err == EADDRINUSE || (err == EADDRNOTAVAIL && bind_probe(ch, ai->ai_src_addr, ai->ai_src_len, NULL))) {
		kvi_errbuf_set(e, "cannot listen on %s port %s: the port is in use (another kvserver?): stop "
			       "that one or choose another port with -p", where, port);
		return KVC_EINVAL;
	}
	if (err == EADDRNOTAVAIL || err == ENODEV) {
		kvi_errbuf_set(e, "cannot listen on %s: the address is not on an RDMA-capable interface here: give "
			       "-l the address of one (rdma link shows them)", where);
		return KVC_ENODEV;
	}
	kvi_errbuf_set(e, "cannot bind %s port %s: %s", where, port, strerror(err));
	return KVC_ESYS;
}

/* -d names a device the listen address is not on: say whether it exists. */
static int device_mismatch(const char *where, const char *bound, const char *want, struct kvi_errbuf *e)
{
	struct ibv_context **devs;
	char names[256];
	int n = 0, exists = 0;

	devs = rdma_get_devices(&n);
	for (int i = 0; devs && i < n; i++)
		exists |= strcmp(ibv_get_device_name(devs[i]->device), want) == 0;
	if (devs)
		rdma_free_devices(devs);
	kvi_device_names(names, sizeof(names));
	if (!exists)
		kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s): name one of these with -d/--device, "
			       "or drop -d (listen address %s is on %s)", want, names, where, bound);
	else
		kvi_errbuf_set(e, "listen address %s is on RDMA device %s, not %s: drop -d, or give -l an address "
			       "of %s", where, bound, want, want);
	return KVC_ENODEV;
}

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Another CQ on the control path's channel, armed: 0 or a code (errno set). */
static int ctrl_cq_add(struct kvi_listener *l)
{
	int cqe = CQ_INITIAL < l->attr.max_cqe ? CQ_INITIAL : l->attr.max_cqe;
	struct ctrl_cq *c = &l->cqs[l->ncq];

	if (l->ncq == MAX_CQS) {
		errno = ENOSPC;
		return KVC_ENOMEM;
	}
	/* Its context is its entry: an event names the CQ to ack and re-arm. */
	c->cq = ibv_create_cq(l->ctx, cqe, c, l->cq_ch, 0);
	if (!c->cq)
		return KVC_ESYS;
	if (ibv_req_notify_cq(c->cq, 0)) {
		ibv_destroy_cq(c->cq);
		c->cq = NULL;
		return KVC_ESYS;
	}
	c->peers = c->events = 0;
	l->ncq++;
	return 0;
}

/* The control path's completion channel and first CQ: armed once here and
 * re-armed after each batch of events, so completions wake the owner's
 * epoll instead of being polled for. */
static int ctrl_cq_create(struct kvi_listener *l, struct kvi_errbuf *e)
{
	l->cq_ch = ibv_create_comp_channel(l->ctx);
	if (!l->cq_ch) {
		kvi_errbuf_set(e, "ibv_create_comp_channel: %s", strerror(errno));
		return KVC_ESYS;
	}
	if (fcntl(l->cq_ch->fd, F_SETFL, fcntl(l->cq_ch->fd, F_GETFL) | O_NONBLOCK)) {
		kvi_errbuf_set(e, "fcntl(O_NONBLOCK): %s", strerror(errno));
		return KVC_ESYS;
	}
	if (ctrl_cq_add(l)) {
		kvi_errbuf_set(e, "ibv_create_cq: %s", strerror(errno));
		return KVC_ESYS;
	}
	return 0;
}

int kvi_listener_create(const struct kvi_listen_opts *o, struct kvi_listener **out, struct kvi_errbuf *e)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *ai = NULL;
	const char *where = o->addr && o->addr[0] ? o->addr : "0.0.0.0";
	struct kvi_listener *l;
	int rc;

	*out = NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	l->epfd = -1;
	l->auth = o->auth;
	l->ch = rdma_create_event_channel();
	if (!l->ch) {
		kvi_errbuf_set(e, "cannot open the RDMA connection manager (/dev/infiniband/rdma_cm: %s): "
			       "no RDMA device or rdma_ucm not loaded", strerror(errno));
		rc = KVC_ENODEV;
		goto fail;
	}
	if (rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP)) {
		kvi_errbuf_set(e, "rdma_create_id: %s", strerror(errno));
		rc = KVC_ESYS;
		goto fail;
	}
	rc = rdma_getaddrinfo(where, o->port, &hints, &ai);
	if (rc) {
		kvi_errbuf_set(e, "cannot use listen address %s port %s: %s", where, o->port,
			       rc == -1 ? strerror(errno) : gai_strerror(rc));
		rc = KVC_EINVAL;
		goto fail;
	}
	if (rdma_bind_addr(l->id, ai->ai_src_addr)) {
		rc = bind_error(l->ch, ai, where, o->port, errno, e);
		goto fail;
	}
	if (is_loopback(ai->ai_src_addr)) {
		/* rdma_cm binds it (with no device: the only one with atomics
		 * is then picked), but no client can reach it and the
		 * reclaimer's own connection to it fails forever. */
		kvi_errbuf_set(e, "cannot listen on %s: it is a loopback address, which RDMA cannot connect to: "
			       "give -l the address of an RDMA-capable interface (rdma link shows them)", where);
		rc = KVC_ENODEV;
		goto fail;
	}
	if (l->id->verbs) {
		/* Bound to one address: its device is the device. */
		l->ctx = l->id->verbs;
		if (o->device && strcmp(o->device, ibv_get_device_name(l->ctx->device)) != 0) {
			rc = device_mismatch(where, ibv_get_device_name(l->ctx->device), o->device, e);
			goto fail;
		}
	} else {
		rc = pick_device(l, o, e);
		if (rc)
			goto fail;
	}
	rc = kvi_check_device(l->ctx, &l->attr, e);
	if (rc)
		goto fail;
	l->pd = ibv_alloc_pd(l->ctx);
	if (!l->pd) {
		kvi_errbuf_set(e, "ibv_alloc_pd on %s: %s", ibv_get_device_name(l->ctx->device), strerror(errno));
		rc = KVC_ESYS;
		goto fail;
	}
	if (rdma_listen(l->id, o->backlog > 0 ? o->backlog : 64)) {
		kvi_errbuf_set(e, "rdma_listen on %s port %s: %s", where, o->port, strerror(errno));
		rc = KVC_ESYS;
		goto fail;
	}
	rc = ctrl_cq_create(l, e);
	if (rc)
		goto fail;
	if (fcntl(l->ch->fd, F_SETFL, fcntl(l->ch->fd, F_GETFL) | O_NONBLOCK)) {
		kvi_errbuf_set(e, "fcntl(O_NONBLOCK): %s", strerror(errno));
		rc = KVC_ESYS;
		goto fail;
	}
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0 || epoll_add(l->epfd, l->ch->fd) || epoll_add(l->epfd, l->cq_ch->fd)) {
		kvi_errbuf_set(e, "epoll: %s", strerror(errno));
		rc = KVC_ESYS;
		goto fail;
	}
	rdma_freeaddrinfo(ai);
	*out = l;
	return 0;
fail:
	if (ai)
		rdma_freeaddrinfo(ai);
	kvi_listener_destroy(l, NULL);
	return rc;
}

/* Destroy p's QP (it must have one): no completion of it is looked up again. */
static void peer_drop_qp(struct kvi_listener *l, struct kvi_peer *p)
{
	kvi_u32map_del(&l->by_qpn, p->id->qp->qp_num);
	rdma_destroy_qp(p->id);
	l->cqs[p->cqi].peers--;
	l->npeers--;
}

/* p's client id no longer finds it (a recycled id may find its next holder). */
static void peer_forget_id(struct kvi_listener *l, struct kvi_peer *p)
{
	if (kvi_u32map_get(&l->by_id, p->client_id) == p)
		kvi_u32map_del(&l->by_id, p->client_id);
}

/* The QP goes first: once it is destroyed the device no longer writes into
 * the control buffer, which can then be deregistered and freed. */
static void peer_free(struct kvi_listener *l, struct kvi_peer *p)
{
	if (p->id->qp)
		peer_drop_qp(l, p);
	if (p->ctrl_mr)
		ibv_dereg_mr(p->ctrl_mr);
	free(p->ctrl_buf);
	rdma_destroy_id(p->id);
	free(p);
}

/* Stop serving p: its QP goes to the error state (late requests are flushed)
 * and rdma_cm reports DISCONNECTED, where p is freed. */
static void peer_kill(struct kvi_peer *p)
{
	p->dead = 1;
	if (p->disconnecting)
		return;
	/* Also after a fence destroyed its QP: the DREQ is what gets it a
	 * DISCONNECTED event, and freed, even when the peer never answers. */
	p->disconnecting = 1;
	rdma_disconnect(p->id);
}

struct kvi_peer *kvi_listener_peer(struct kvi_listener *l, uint32_t client_id)
{
	return kvi_u32map_get(&l->by_id, client_id);
}

void kvi_listener_drop(struct kvi_listener *l, struct kvi_peer *p)
{
	(void)l;
	peer_kill(p);
}

static uint64_t wr_id(const struct kvi_peer *p, unsigned slot)
{
	return p->serial << WR_SLOT_BITS | slot;
}

static int post_recv(struct kvi_peer *p, unsigned slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)&p->ctrl_buf[slot], .length = CTRL_MSG,
			       .lkey = p->ctrl_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id(p, slot), .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(p->id->qp, &wr, &bad) ? KVC_EIO : 0;
}

/* Encode c into the next send slot and post it, signaled: the completion
 * frees the slot. */
static int post_send(struct kvi_peer *p, const struct kvi_ctrl *c)
{
	unsigned slot = KVI_CTRL_RECV_DEPTH + p->send_next;
	struct ibv_sge sge = { .addr = (uintptr_t)&p->ctrl_buf[slot], .length = CTRL_MSG,
			       .lkey = p->ctrl_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id(p, slot), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (p->sends_out == SEND_SLOTS)
		return KVC_EAGAIN;
	kvi_wire_ctrl_encode(&p->ctrl_buf[slot], c);
	if (ibv_post_send(p->id->qp, &wr, &bad))
		return KVC_EIO;
	p->send_next = (p->send_next + 1) % SEND_SLOTS;
	p->sends_out++;
	return 0;
}

/* Room for one more peer in c, growing it if needed (and the device allows). */
static int cq_room(struct kvi_listener *l, struct ctrl_cq *c)
{
	int need = (int)((c->peers + 1) * PEER_CQE * 2), want;

	if (need <= c->cq->cqe)
		return 1;
	want = need > 2 * c->cq->cqe ? need : 2 * c->cq->cqe;
	if (want > l->attr.max_cqe)
		want = l->attr.max_cqe;
	return want >= need && ibv_resize_cq(c->cq, want) == 0;
}

/* A control CQ with room for one more peer (one of those there, or a new
 * one: a join looks at each CQ once, and there are few). Its index in *cqi,
 * counted as the peer's; 0 or KVC_ENOMEM. */
static int cq_for_peer(struct kvi_listener *l, unsigned *cqi)
{
	unsigned i;

	for (i = 0; i < l->ncq && !cq_room(l, &l->cqs[i]); i++)
		;
	if (i == l->ncq && ctrl_cq_add(l)) {
		kvi_ev_warn("ctrl_cq_full", "cqs=%u peers=%u reason=%s", l->ncq, l->npeers + 1, strerror(errno));
		return KVC_ENOMEM;
	}
	l->cqs[i].peers++;
	*cqi = i;
	return 0;
}

/* The peer's control buffer: receive slots, then send slots. Server-private
 * memory registered with LOCAL_WRITE only, so no peer can write it remotely. */
static int ctrl_setup(struct kvi_listener *l, struct kvi_peer *p)
{
	p->ctrl_buf = aligned_alloc(64, BUF_SLOTS * CTRL_MSG);
	if (!p->ctrl_buf)
		return KVC_ENOMEM;
	memset(p->ctrl_buf, 0, BUF_SLOTS * CTRL_MSG);
	p->ctrl_mr = ibv_reg_mr(l->pd, p->ctrl_buf, BUF_SLOTS * CTRL_MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!p->ctrl_mr)
		return KVC_ESYS;
	/* Before rdma_accept: a request sent right after the client's ESTABLISHED
	 * must find a receive (an RNR would stall it). */
	for (unsigned i = 0; i < KVI_CTRL_RECV_DEPTH; i++) {
		if (post_recv(p, i))
			return KVC_EIO;
	}
	return 0;
}

static void peer_unlink(struct kvi_listener *l, struct kvi_peer *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		l->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->next = p->prev = NULL;
	peer_forget_id(l, p);
}

static void reject(struct rdma_cm_id *id, uint16_t reason)
{
	struct kvi_wire_reject r;

	kvi_wire_reject_encode(&r, reason);
	rdma_reject(id, &r, sizeof(r));
}

/* a's address, numeric ("?" for another family). */
static const char *sa_addr(const struct sockaddr *a, char *buf, size_t n)
{
	snprintf(buf, n, "?");
	if (a->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, buf, (socklen_t)n);
	else if (a->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, buf, (socklen_t)n);
	return buf;
}

static const char *id_addr(struct rdma_cm_id *id, char *buf, size_t n)
{
	return sa_addr(rdma_get_peer_addr(id), buf, n);
}

const char *kvi_peer_addr(const struct kvi_peer *p, char *buf, size_t n)
{
	return id_addr(p->id, buf, n);
}

/* One line for the operator: who was refused and why. */
static void refuse_log(struct rdma_cm_id *id, const struct kvi_hello *h, int why)
{
	char addr[INET6_ADDRSTRLEN];
	const char *what;

	id_addr(id, addr, sizeof(addr));
	switch (why) {
	case KVI_REJECT_NOAUTH:
		what = "no proof of the secret (client without --secret-file?)";
		break;
	case KVI_REJECT_AUTH:
		what = h->role == KVI_ROLE_LOOPBACK ? "claims to be our loopback without its key"
						    : "wrong proof (a different secret, or made for another server?)";
		break;
	case KVI_REJECT_STALE:
		what = "proof timestamp outside the +-30 s window (clocks apart?)";
		break;
	case KVI_REJECT_REPLAY:
		what = "replayed proof (this nonce was already used)";
		break;
	case KVI_REJECT_FULL:
		what = "replay cache full of live proofs (too many joins within 30 s); refusing rather "
		       "than forgetting one";
		break;
	default:
		what = "refused";
	}
	kvi_ev_warn("auth_refused", "addr=%s role=%s reason=%s", addr,
		    h->role == KVI_ROLE_LOOPBACK ? "loopback" : "client", what);
}

/* A join request. The child id is destroyed by the caller when this fails. */
static int admit(struct kvi_listener *l, struct rdma_cm_event *ev, const struct kvi_listen_cb *cb)
{
	struct rdma_cm_id *id = ev->id;
	struct kvi_wire_welcome ww;
	struct kvi_welcome w = { 0 };
	struct kvi_hello h;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	struct kvi_peer *p;
	struct kvi_errbuf ack_err;
	uint16_t role = KVI_ROLE_CLIENT;
	char addr[INET6_ADDRSTRLEN];
	int why;

	if (id->verbs != l->ctx) {
		kvi_ev_warn("client_refused", "addr=%s device=%s serving=%s reason=%s",
			    id_addr(id, addr, sizeof(addr)), ibv_get_device_name(id->verbs->device),
			    ibv_get_device_name(l->ctx->device), "arrived on a device this server does not serve");
		reject(id, KVI_REJECT_DEVICE);
		return -1;
	}
	if (kvi_wire_hello_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &h)) {
		kvi_ev_warn("client_refused", "addr=%s hello_bytes=%u reason=%s", id_addr(id, addr, sizeof(addr)),
			    ev->param.conn.private_data_len, "malformed hello");
		reject(id, KVI_REJECT_VERSION);
		return -1;
	}
	/* The proof must be for the address this request arrived at (auth.h
	 * "kvi_auth_server"): one sniffed on its way to another server is not. */
	why = l->auth ? kvi_auth_admit(l->auth, &h, rdma_get_local_addr(id), kvi_auth_now_ms(), &role) : 0;
	if (why) {
		refuse_log(id, &h, why);
		reject(id, (uint16_t)why);
		return -1;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		reject(id, KVI_REJECT_FULL);
		return -1;
	}
	p->id = id;
	p->role = role;
	why = cb->on_connect(cb->arg, p, &h, &w);
	if (why) {
		reject(id, (uint16_t)why);
		free(p);
		return -1;
	}
	p->client_id = w.client_id;
	p->serial = ++l->next_serial;
	if (kvi_u32map_put(&l->by_id, p->client_id, p)) {
		kvi_ev_err("client_setup_failed", "client=%u call=u32map_put reason=%s", w.client_id, "out of memory");
		reject(id, KVI_REJECT_FULL);
		goto undo_connect;
	}
	if (cq_for_peer(l, &p->cqi)) {
		kvi_ev_err("client_setup_failed", "client=%u call=cq_for_peer reason=%s", w.client_id,
			   "no completion queue has room");
		reject(id, KVI_REJECT_FULL);
		goto undo_connect;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = l->cqs[p->cqi].cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 16;
	qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	_Static_assert(KVI_CTRL_RECV_DEPTH <= 16 && SEND_SLOTS + 1 <= 16, "QP holds the control slots and a READ");
	if (rdma_create_qp(id, l->pd, &qa)) {
		kvi_ev_err("client_setup_failed", "client=%u call=rdma_create_qp reason=%s", w.client_id, strerror(errno));
		reject(id, KVI_REJECT_FULL);
		l->cqs[p->cqi].peers--;
		goto undo_connect;
	}
	l->npeers++;
	if (kvi_u32map_put(&l->by_qpn, id->qp->qp_num, p)) {
		kvi_ev_err("client_setup_failed", "client=%u call=u32map_put reason=%s", w.client_id, "out of memory");
		reject(id, KVI_REJECT_FULL);
		goto clean_qp;
	}
	if (ctrl_setup(l, p)) {
		kvi_ev_err("client_setup_failed", "client=%u call=ctrl_setup reason=%s", w.client_id, strerror(errno));
		reject(id, KVI_REJECT_FULL);
		goto clean_qp;
	}
	kvi_wire_welcome_encode(&ww, &w);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &ww;
	cp.private_data_len = sizeof(ww);
	/* Answer the peer's initiator depth with as many responder resources as we
	 * have: fewer would stall its READs and atomics. */
	cp.responder_resources = kvi_depth(ev->param.conn.initiator_depth < l->attr.max_qp_rd_atom
						   ? ev->param.conn.initiator_depth
						   : l->attr.max_qp_rd_atom);
	cp.initiator_depth = kvi_depth(ev->param.conn.responder_resources < l->attr.max_qp_init_rd_atom
					       ? ev->param.conn.responder_resources
					       : l->attr.max_qp_init_rd_atom);
	cp.retry_count = KVI_RETRY_COUNT;
	cp.rnr_retry_count = 7;
	if (kvi_set_ack_timeout(id, &ack_err)) {
		kvi_ev_err("client_setup_failed", "client=%u call=rdma_set_option reason=%s", w.client_id, ack_err.msg);
		reject(id, KVI_REJECT_FULL);
		goto clean_qp;
	}
	if (rdma_accept(id, &cp)) {
		kvi_ev_err("client_setup_failed", "client=%u call=rdma_accept reason=%s", w.client_id, strerror(errno));
		goto clean_qp;
	}
	id->context = p;
	p->next = l->peers;
	if (l->peers)
		l->peers->prev = p;
	l->peers = p;
	return 0;
clean_qp:
	peer_drop_qp(l, p);
	if (p->ctrl_mr)
		ibv_dereg_mr(p->ctrl_mr);
	free(p->ctrl_buf);
undo_connect:
	peer_forget_id(l, p);
	if (cb->on_disconnect)
		cb->on_disconnect(cb->arg, p);
	free(p);
	return -1;
}

static struct kvi_peer *peer_by_qpn(struct kvi_listener *l, uint32_t qpn)
{
	return kvi_u32map_get(&l->by_qpn, qpn);
}

/* One request in receive slot `slot`: decode, answer, re-post the receive. */
static void on_request(struct kvi_peer *p, const struct kvi_listen_cb *cb, unsigned slot, uint32_t len)
{
	struct kvi_ctrl req, resp;
	int rc;

	rc = kvi_wire_ctrl_decode(&p->ctrl_buf[slot], len, &req);
	if (rc) {
		kvi_ev_warn("client_dropped", "client=%u bytes=%u reason=%s", p->client_id, len,
			    "malformed control message");
		peer_kill(p);
		return;
	}
	memset(&resp, 0, sizeof(resp));
	resp.seq = req.seq;
	if (!cb || !cb->on_ctrl) {
		resp.type = KVI_CTRL_ERROR;
		resp.status = KVC_EPROTO;
	} else {
		rc = cb->on_ctrl(cb->arg, p, &req, &resp);
		if (rc < 0) {
			kvi_ev_warn("client_dropped", "client=%u type=%u error=%s reason=%s", p->client_id, req.type,
				    kvc_err_name(rc), "control request refused");
			peer_kill(p);
			return;
		}
	}
	rc = post_send(p, &resp);
	if (rc == 0)
		rc = post_recv(p, slot);
	if (rc) {
		kvi_ev_warn("client_dropped", "client=%u reason=%s", p->client_id,
			    rc == KVC_EAGAIN ? "it takes no responses" : "cannot post to its queue pair");
		peer_kill(p);
	}
}

/* cb == NULL: only account for SENDs (shutdown flush); requests are dropped. */
static void on_completion(struct kvi_listener *l, const struct kvi_listen_cb *cb, const struct ibv_wc *wc)
{
	struct kvi_peer *p = peer_by_qpn(l, wc->qp_num);
	unsigned slot = (unsigned)(wc->wr_id & ((1u << WR_SLOT_BITS) - 1));

	if (!p || p->serial != wc->wr_id >> WR_SLOT_BITS || slot >= BUF_SLOTS)
		return; /* left over from a peer already freed */
	if (slot == READ_SLOT) {
		uint64_t v;

		memcpy(&v, &p->ctrl_buf[READ_SLOT], sizeof(v));
		p->reading = 0;
		if (cb && cb->on_read)
			cb->on_read(cb->arg, p, v, wc->status == IBV_WC_SUCCESS);
	} else if (slot >= KVI_CTRL_RECV_DEPTH) {
		p->sends_out--;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		/* A flush means the QP already failed or is being torn down; say
		 * why only for the first real error. */
		if (!p->dead && wc->status != IBV_WC_WR_FLUSH_ERR)
			kvi_ev_info("client_dropped", "client=%u op=%s status=%s reason=%s", p->client_id,
				    slot == READ_SLOT ? "read" : slot >= KVI_CTRL_RECV_DEPTH ? "send" : "receive",
				    ibv_wc_status_str(wc->status),
				    "control completion failed");
		peer_kill(p);
		return;
	}
	if (slot < KVI_CTRL_RECV_DEPTH && !p->dead && cb)
		on_request(p, cb, slot, wc->byte_len);
}

/* Take every completion-channel event, re-arm, then drain the CQ. Re-arming
 * before draining means a completion that lands after the drain raises a new
 * event: none is ever left unseen. */
static int cq_drain(struct kvi_listener *l, const struct kvi_listen_cb *cb, struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	int n;

	do {
		n = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < n; i++)
			on_completion(l, cb, &wc[i]);
	} while (n == 16);
	if (n < 0) {
		kvi_ev_err("ctrl_cq_failed", "call=ibv_poll_cq");
		return KVC_EIO;
	}
	return 0;
}

/* all: drain every CQ, not only those that raised an event (shutdown flush). */
static int cq_dispatch_all(struct kvi_listener *l, const struct kvi_listen_cb *cb, int all)
{
	struct ctrl_cq *ready[MAX_CQS];
	unsigned nready = 0;
	struct ibv_cq *cq;
	void *ctx;

	while (ibv_get_cq_event(l->cq_ch, &cq, &ctx) == 0) {
		struct ctrl_cq *c = ctx;

		if (c->events++ == 0)
			ready[nready++] = c;
	}
	for (unsigned i = 0; i < nready; i++) {
		ibv_ack_cq_events(ready[i]->cq, ready[i]->events);
		ready[i]->events = 0;
		if (ibv_req_notify_cq(ready[i]->cq, 0)) {
			kvi_ev_err("ctrl_cq_failed", "call=ibv_req_notify_cq reason=%s", strerror(errno));
			return KVC_ESYS;
		}
	}
	for (unsigned i = 0; i < (all ? l->ncq : nready); i++)
		if (cq_drain(l, cb, all ? l->cqs[i].cq : ready[i]->cq))
			return KVC_EIO;
	return 0;
}

static int cq_dispatch(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	return cq_dispatch_all(l, cb, 0);
}

int kvi_listener_dispatch(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(l->ch, &ev) == 0) {
		struct rdma_cm_id *id = ev->id;
		struct kvi_peer *p = id == l->id ? NULL : id->context;

		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			if (admit(l, ev, cb)) {
				rdma_ack_cm_event(ev);
				rdma_destroy_id(id);
				continue;
			}
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (p) {
				p->established = 1;
				if (cb->on_established)
					cb->on_established(cb->arg, p);
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
			if (!p)
				break;
			/* The event must be acked before its id can be destroyed. */
			rdma_ack_cm_event(ev);
			peer_unlink(l, p);
			if (cb->on_disconnect)
				cb->on_disconnect(cb->arg, p);
			rdma_disconnect(p->id);
			peer_free(l, p);
			continue;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			rdma_ack_cm_event(ev);
			return KVC_ENODEV;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return KVC_ESYS;
	/* After the cm events: a peer's ESTABLISHED is reported before its first
	 * request whenever both are pending. */
	return cq_dispatch(l, cb);
}

int kvi_listener_read_word(struct kvi_listener *l, struct kvi_peer *p, uint64_t addr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)&p->ctrl_buf[READ_SLOT], .length = sizeof(uint64_t),
			       .lkey = p->ctrl_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id(p, READ_SLOT), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = addr, .rkey = rkey } }, *bad;

	(void)l;
	if (p->reading)
		return KVC_EAGAIN;
	if (p->dead || !p->id->qp || !p->ctrl_mr)
		return KVC_EIO;
	memset(&p->ctrl_buf[READ_SLOT], 0xff, sizeof(uint64_t)); /* nothing read reads as busy */
	if (ibv_post_send(p->id->qp, &wr, &bad))
		return KVC_EIO;
	p->reading = 1;
	return 0;
}

#define FENCE_TRIES 3

int kvi_listener_fence_peer(struct kvi_listener *l, struct kvi_peer *p)
{
	int confirmed = 0;

	for (int i = 0; i < FENCE_TRIES && p->id->qp && !confirmed; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		struct ibv_qp_init_attr ia;
		int rc = ibv_modify_qp(p->id->qp, &a, IBV_QP_STATE);

		memset(&a, 0, sizeof(a));
		confirmed = ibv_query_qp(p->id->qp, &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_ERR;
		if (!confirmed)
			kvi_ev_warn("fence_qp_pending", "client=%u modify=%s state=%d msg=%s", p->client_id,
				    rc ? strerror(rc) : "ok", (int)a.qp_state,
				    "queue pair not in the error state yet: trying again");
	}
	if (!p->id->qp)
		return 0;
	if (!confirmed)
		kvi_ev_err("fence_qp_destroyed", "client=%u msg=%s", p->client_id,
			   "queue pair not confirmed in the error state: destroying it");
	/* In the error state a QP takes no new request, but a software device
	 * (rxe) may still be executing ones it took before, on its own tasks:
	 * destroying the QP waits for those to stop. Only then may the caller
	 * release what the peer held. The peer is dead to us anyway; its
	 * control path's last completions are dropped with it. */
	p->dead = 1;
	peer_drop_qp(l, p);
	return confirmed ? 0 : 1;
}

int kvi_listener_notify_all(struct kvi_listener *l, const struct kvi_ctrl *notice)
{
	int n = 0;

	for (struct kvi_peer *p = l->peers; p; p = p->next) {
		if (p->established && !p->dead && post_send(p, notice) == 0)
			n++;
	}
	return n;
}

static int sends_pending(const struct kvi_listener *l)
{
	for (const struct kvi_peer *p = l->peers; p; p = p->next) {
		if (p->sends_out && !p->dead)
			return 1;
	}
	return 0;
}

int kvi_listener_flush_sends(struct kvi_listener *l, int timeout_ms)
{
	uint64_t deadline = kvi_mono_ns() + (uint64_t)timeout_ms * 1000000u;

	for (;;) {
		struct pollfd pf = { .fd = l->cq_ch->fd, .events = POLLIN };
		int left;

		if (cq_dispatch_all(l, NULL, 1))
			return KVC_EIO;
		if (!sends_pending(l))
			return 0;
		left = kvi_ms_until(kvi_mono_ns(), deadline, timeout_ms);
		if (left <= 0)
			return KVC_ETIMEDOUT;
		if (poll(&pf, 1, left) < 0 && errno != EINTR)
			return KVC_ESYS;
	}
}

void kvi_listener_disconnect_all(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	while (l->peers) {
		struct kvi_peer *p = l->peers;

		peer_unlink(l, p);
		if (cb && cb->on_disconnect)
			cb->on_disconnect(cb->arg, p);
		rdma_disconnect(p->id);
		peer_free(l, p);
	}
}

void kvi_listener_destroy(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	if (!l)
		return;
	kvi_listener_disconnect_all(l, cb);
	/* Every retrieved CQ event was acked in cq_dispatch, as ibv_destroy_cq
	 * requires; the QPs using the CQ are gone with their peers. */
	kvi_u32map_free(&l->by_qpn);
	kvi_u32map_free(&l->by_id);
	for (unsigned i = 0; i < l->ncq; i++)
		ibv_destroy_cq(l->cqs[i].cq);
	if (l->cq_ch)
		ibv_destroy_comp_channel(l->cq_ch);
	if (l->epfd >= 0)
		close(l->epfd);
	if (l->pd)
		ibv_dealloc_pd(l->pd);
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->devs)
		rdma_free_devices(l->devs);
	if (l->ch)
		rdma_destroy_event_channel(l->ch);
	free(l);
}

int kvi_listener_fd(const struct kvi_listener *l)
{
	return l->epfd;
}

struct ibv_pd *kvi_listener_pd(const struct kvi_listener *l)
{
	return l->pd;
}

const char *kvi_listener_device(const struct kvi_listener *l)
{
	return ibv_get_device_name(l->ctx->device);
}

int kvi_listener_self_addr(const struct kvi_listener *l, char *buf, size_t len)
{
	struct ifaddrs *ifs, *i;
	int found = 0;

	if (l->id->verbs) { /* bound to one address */
		sa_addr(rdma_get_local_addr(l->id), buf, len);
		return 0;
	}
	if (getifaddrs(&ifs))
		return KVC_ENODEV;
	/* IPv4 first: a link-local IPv6 address would need its scope named. */
	for (int fam = 0; fam < 2 && !found; fam++)
		for (i = ifs; i && !found; i = i->ifa_next) {
			struct sockaddr *a = i->ifa_addr;

			if (!a || a->sa_family != (fam ? AF_INET6 : AF_INET) || is_loopback(a) ||
			    (a->sa_family == AF_INET6 &&
			     IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)a)->sin6_addr)))
				continue;
			/* Its own event channel: no event reaches the loop's. */
			found = bind_probe(NULL, a, fam ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
					   l->ctx->device);
			if (found)
				sa_addr(a, buf, len);
		}
	freeifaddrs(ifs);
	return found ? 0 : KVC_ENODEV;
}

uint16_t kvi_listener_port(const struct kvi_listener *l)
{
	return ntohs(rdma_get_src_port(l->id));
}
