/* The listener itself (listener.h): creating and destroying it, the rdma_cm
 * events kvi_listener_dispatch takes, and admission (a join request checked,
 * refused with a reason, or given its QP and control path and accepted).
 * The device and addresses are listener_device.c's, the control path
 * listener_ctrl.c's, the peers' lifecycle listener_peer.c's; what they share
 * is listener_impl.h. */
#include "listener_impl.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "kvclient_errors.h"
#include "log.h"

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

int kvi_listener_create(const struct kvi_listen_opts *o, struct kvi_listener **out, struct kvi_errbuf *e)
{
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
	rc = kvi_listener_bind(l, o, where, e);
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
	rc = kvi_listener_ctrl_cq_create(l, e);
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
	*out = l;
	return 0;
fail:
	kvi_listener_destroy(l, NULL);
	return rc;
}

static void reject(struct rdma_cm_id *id, uint16_t reason)
{
	struct kvi_wire_reject r;

	kvi_wire_reject_encode(&r, reason);
	rdma_reject(id, &r, sizeof(r));
}

static const char *id_addr(struct rdma_cm_id *id, char *buf, size_t n)
{
	return kvi_listener_sa_addr(rdma_get_peer_addr(id), buf, n);
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
	if (kvi_listener_cq_for_peer(l, &p->cqi)) {
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
	if (kvi_listener_ctrl_setup(l, p)) {
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
	kvi_listener_peer_drop_qp(l, p);
	if (p->ctrl_mr)
		ibv_dereg_mr(p->ctrl_mr);
	free(p->ctrl_buf);
undo_connect:
	kvi_listener_peer_forget_id(l, p);
	if (cb->on_disconnect)
		cb->on_disconnect(cb->arg, p);
	free(p);
	return -1;
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
			kvi_listener_peer_unlink(l, p);
			if (cb->on_disconnect)
				cb->on_disconnect(cb->arg, p);
			rdma_disconnect(p->id);
			kvi_listener_peer_free(l, p);
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
	return kvi_listener_cq_dispatch(l, cb);
}

void kvi_listener_destroy(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	if (!l)
		return;
	kvi_listener_disconnect_all(l, cb);
	/* Every retrieved CQ event was acked in kvi_listener_cq_dispatch, as ibv_destroy_cq
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
