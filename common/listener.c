#include "listener.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"
#include "log.h"

struct kvi_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_context **devs; /* librdmacm's list; ctx points into it */
	struct ibv_context *ctx;
	struct ibv_device_attr attr;
	struct ibv_pd *pd;
	struct kvi_peer *peers;
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
		kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s)", o->device, names);
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
		kvi_errbuf_set(e, "cannot bind %s port %s: %s%s", where, o->port, strerror(errno),
			       errno == EADDRINUSE ? " (another kvserver on this port?)"
			       : errno == EADDRNOTAVAIL || errno == ENODEV
				       ? " (the address is not on an RDMA-capable interface)" : "");
		rc = errno == EADDRINUSE ? KVC_EINVAL : KVC_ENODEV;
		goto fail;
	}
	if (l->id->verbs) {
		/* Bound to one address: its device is the device. */
		l->ctx = l->id->verbs;
		if (o->device && strcmp(o->device, ibv_get_device_name(l->ctx->device)) != 0) {
			kvi_errbuf_set(e, "listen address %s is on RDMA device %s, not %s", where,
				       ibv_get_device_name(l->ctx->device), o->device);
			rc = KVC_ENODEV;
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
	if (fcntl(l->ch->fd, F_SETFL, fcntl(l->ch->fd, F_GETFL) | O_NONBLOCK)) {
		kvi_errbuf_set(e, "fcntl(O_NONBLOCK): %s", strerror(errno));
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

static void peer_free(struct kvi_peer *p)
{
	if (p->id->qp)
		rdma_destroy_qp(p->id);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	rdma_destroy_id(p->id);
	free(p);
}

static void peer_unlink(struct kvi_listener *l, struct kvi_peer *p)
{
	for (struct kvi_peer **pp = &l->peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

static void reject(struct rdma_cm_id *id, uint16_t reason)
{
	struct kvi_wire_reject r;

	kvi_wire_reject_encode(&r, reason);
	rdma_reject(id, &r, sizeof(r));
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
	int why;

	if (id->verbs != l->ctx) {
		kvi_warn("refusing a client that arrived on device %s (serving %s)",
			 ibv_get_device_name(id->verbs->device), ibv_get_device_name(l->ctx->device));
		reject(id, KVI_REJECT_DEVICE);
		return -1;
	}
	if (kvi_wire_hello_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &h)) {
		kvi_warn("refusing a client with a malformed hello (%u bytes)", ev->param.conn.private_data_len);
		reject(id, KVI_REJECT_VERSION);
		return -1;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		reject(id, KVI_REJECT_FULL);
		return -1;
	}
	p->id = id;
	p->role = h.role;
	why = cb->on_connect(cb->arg, p, &h, &w);
	if (why) {
		reject(id, (uint16_t)why);
		free(p);
		return -1;
	}
	p->client_id = w.client_id;
	/* The control path (later) posts receives here; the data path needs none. */
	p->cq = ibv_create_cq(l->ctx, 64, NULL, NULL, 0);
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = p->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 16;
	qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!p->cq || rdma_create_qp(id, l->pd, &qa)) {
		kvi_err("cannot create a queue pair for client %u: %s", w.client_id, strerror(errno));
		if (p->cq)
			ibv_destroy_cq(p->cq);
		reject(id, KVI_REJECT_FULL);
		goto fail;
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
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp)) {
		kvi_err("rdma_accept for client %u: %s", w.client_id, strerror(errno));
		rdma_destroy_qp(id);
		ibv_destroy_cq(p->cq);
		goto fail;
	}
	id->context = p;
	p->next = l->peers;
	l->peers = p;
	return 0;
fail:
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
			peer_unlink(l, p);
			if (cb->on_disconnect)
				cb->on_disconnect(cb->arg, p);
			rdma_disconnect(p->id);
			peer_free(p);
			continue;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			rdma_ack_cm_event(ev);
			return KVC_ENODEV;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : KVC_ESYS;
}

void kvi_listener_disconnect_all(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	while (l->peers) {
		struct kvi_peer *p = l->peers;

		l->peers = p->next;
		if (cb && cb->on_disconnect)
			cb->on_disconnect(cb->arg, p);
		rdma_disconnect(p->id);
		peer_free(p);
	}
}

void kvi_listener_destroy(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	if (!l)
		return;
	kvi_listener_disconnect_all(l, cb);
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
	return l->ch->fd;
}

struct ibv_pd *kvi_listener_pd(const struct kvi_listener *l)
{
	return l->pd;
}

const char *kvi_listener_device(const struct kvi_listener *l)
{
	return ibv_get_device_name(l->ctx->device);
}

uint16_t kvi_listener_port(const struct kvi_listener *l)
{
	return ntohs(rdma_get_src_port(l->id));
}
