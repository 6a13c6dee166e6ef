/* The listener's control path (listener.h): its completion queues and their
 * channel, each peer's control buffer with the receives and sends posted from
 * it, the READ of an idle word, and the completions: decoded, handed to the
 * owner's on_ctrl and answered. Private parts: listener_impl.h. */
#include "listener_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"

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
int kvi_listener_ctrl_cq_create(struct kvi_listener *l, struct kvi_errbuf *e)
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
int kvi_listener_cq_for_peer(struct kvi_listener *l, unsigned *cqi)
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
int kvi_listener_ctrl_setup(struct kvi_listener *l, struct kvi_peer *p)
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
		kvi_listener_peer_kill(p);
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
			kvi_listener_peer_kill(p);
			return;
		}
	}
	rc = post_send(p, &resp);
	if (rc == 0)
		rc = post_recv(p, slot);
	if (rc) {
		kvi_ev_warn("client_dropped", "client=%u reason=%s", p->client_id,
			    rc == KVC_EAGAIN ? "it takes no responses" : "cannot post to its queue pair");
		kvi_listener_peer_kill(p);
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
		kvi_listener_peer_kill(p);
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

int kvi_listener_cq_dispatch(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	return cq_dispatch_all(l, cb, 0);
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
