/* The verbs transport's data path: posting batches, polling completions,
 * the control path's SEND/RECV, sleeping on the completion channel, and
 * tearing the connection down. Its set-up is rmem_verbs_join.c. */
#include "rmem_verbs.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"
#include "rmem_verbs_impl.h"
#include "verbs_util.h"

static void fail_outstanding(struct rmem_verbs *v, unsigned failed_slot, int code, int others)
{
	for (unsigned i = 0; i < v->count; i++) {
		struct vslot *s = &v->slots[(v->head + i) % KVI_RMEM_MAX_INFLIGHT];

		if (s->done)
			continue;
		s->done = 1;
		s->status = ((v->head + i) % KVI_RMEM_MAX_INFLIGHT) == failed_slot ? code : others;
	}
}

/* Break the connection: move the QP to the error state so that nothing more is
 * executed (a late WRITE of an abandoned batch must never land), tell the peer. */
static void verbs_shutdown(struct kvi_rmem *rm, int reason)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	rm->broken = reason ? reason : KVC_ESERVERGONE;
	fail_outstanding(v, KVI_RMEM_MAX_INFLIGHT, 0, rm->broken);
	if (v->id && v->id->qp)
		ibv_modify_qp(v->id->qp, &attr, IBV_QP_STATE);
	if (v->connected) {
		rdma_disconnect(v->id);
		v->connected = 0;
	}
}

/* The key of the registered buffer holding p (rmem.c checked it is in one). */
static uint32_t lkey_of(const struct rmem_verbs *v, const void *p)
{
	const unsigned char *c = p, *lo = v->rm.lbuf;

	if (c >= lo && c < lo + v->rm.lbuf_size)
		return v->lmr->lkey;
	for (unsigned i = 0; i < v->rm.nxbuf; i++)
		if (v->xmr[i] && c >= v->rm.xbuf[i].p && c < v->rm.xbuf[i].p + v->rm.xbuf[i].size)
			return v->xmr[i]->lkey;
	return v->lmr->lkey;
}

static int verbs_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	struct ibv_send_wr wr[KVI_RMEM_MAX_BATCH], *bad = NULL;
	struct ibv_sge sge[KVI_RMEM_MAX_BATCH];
	unsigned slot = (v->head + v->count) % KVI_RMEM_MAX_INFLIGHT;
	int rc;

	memset(wr, 0, sizeof(wr[0]) * n);
	for (unsigned i = 0; i < n; i++) {
		const struct kvi_rop *op = &ops[i];

		sge[i].addr = (uintptr_t)op->local;
		sge[i].length = op->kind == KVI_ROP_READ || op->kind == KVI_ROP_WRITE ? op->len : 8;
		sge[i].lkey = lkey_of(v, op->local);
		wr[i].wr_id = slot;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		switch (op->kind) {
		case KVI_ROP_READ:
			wr[i].opcode = IBV_WR_RDMA_READ;
			break;
		case KVI_ROP_WRITE:
			wr[i].opcode = IBV_WR_RDMA_WRITE;
			/* Small payloads ride in the descriptor: no DMA read of our buffer. */
			if (op->len <= v->max_inline)
				wr[i].send_flags |= IBV_SEND_INLINE;
			break;
		case KVI_ROP_CAS:
			wr[i].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
			wr[i].wr.atomic.compare_add = op->compare_add;
			wr[i].wr.atomic.swap = op->swap;
			break;
		case KVI_ROP_FAA:
			wr[i].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
			wr[i].wr.atomic.compare_add = op->compare_add;
			break;
		}
		if (op->fence)
			wr[i].send_flags |= IBV_SEND_FENCE;
		if (op->kind == KVI_ROP_CAS || op->kind == KVI_ROP_FAA) {
			wr[i].wr.atomic.remote_addr = v->raddr + op->roff;
			wr[i].wr.atomic.rkey = v->rkey;
		} else {
			wr[i].wr.rdma.remote_addr = v->raddr + op->roff;
			wr[i].wr.rdma.rkey = v->rkey;
		}
	}
	wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
	rc = ibv_post_send(v->id->qp, wr, &bad);
	if (rc) {
		/* Nothing of a batch may be half-posted and then forgotten: if the first
		 * request went in and a later one did not, the QP state is unknown. */
		if (bad != wr) {
			verbs_shutdown(rm, KVC_EIO);
			return KVC_EIO;
		}
		return rc == ENOMEM ? KVC_EAGAIN : KVC_EIO;
	}
	v->slots[slot] = (struct vslot){ .cookie = cookie };
	v->count++;
	return 0;
}

int kvi_verbs_post_ctrl_recv(struct rmem_verbs *v, unsigned i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)&v->cbuf[i], .length = CTRL_MSG, .lkey = v->cmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = WR_CTRL_RECV | i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(v->id->qp, &wr, &bad);
}

/* A control message arrived in receive slot i: a response we wait for, or a
 * notice. Anything malformed breaks the connection (the server is not one of
 * ours, or memory is corrupt). */
static void on_ctrl_recv(struct rmem_verbs *v, unsigned i, uint32_t byte_len)
{
	struct kvi_ctrl c;

	if (i >= CTRL_RECVS || kvi_wire_ctrl_decode(&v->cbuf[i], byte_len, &c)) {
		verbs_shutdown(&v->rm, KVC_EPROTO);
		return;
	}
	if (c.seq == 0) {
		if (c.type == KVI_CTRL_SHUTDOWN)
			verbs_shutdown(&v->rm, KVC_ESERVERGONE);
	} else if (c.seq == v->want_seq) {
		v->resp = c;
		v->resp_ready = 1;
	} else {
		kvi_rmem_ctrl_stash(&v->rm, &c); /* sent without waiting, or a late answer */
	}
	if (!v->rm.broken && kvi_verbs_post_ctrl_recv(v, i))
		verbs_shutdown(&v->rm, KVC_EIO);
}

/* Move every available completion into its batch slot or the control
 * state; returns how many there were. */
static unsigned drain_cq(struct rmem_verbs *v)
{
	struct ibv_wc wc[16];
	unsigned taken = 0;
	int got = 0;

	while (!v->rm.broken && (got = ibv_poll_cq(v->cq, 16, wc)) > 0) {
		taken += (unsigned)got;
		for (int i = 0; i < got && !v->rm.broken; i++) {
			uint64_t id = wc[i].wr_id;

			if (wc[i].status != IBV_WC_SUCCESS) {
				/* The QP is in the error state now; every later request flushes. */
				unsigned slot = id < KVI_RMEM_MAX_INFLIGHT ? (unsigned)id : KVI_RMEM_MAX_INFLIGHT;

				fail_outstanding(v, slot, kvi_wc_status_code(wc[i].status), KVC_ESERVERGONE);
				verbs_shutdown(&v->rm, KVC_ESERVERGONE);
			} else if (id < KVI_RMEM_MAX_INFLIGHT) {
				v->slots[id].done = 1;
				v->slots[id].status = 0;
			} else if ((id & ~0xffffffffull) == WR_CTRL_RECV) {
				on_ctrl_recv(v, (unsigned)(id & 0xffffffffu), wc[i].byte_len);
			} else if (id == WR_CTRL_SEND) {
				v->send_busy = 0;
			}
		}
		if (got < 16)
			break; /* the CQ is empty: not one more call to find that out */
	}
	if (got < 0)
		verbs_shutdown(&v->rm, KVC_EIO);
	return taken;
}

/* Sleep until the CQ signals, the rdma_cm channel has an event (the peer
 * left), or timeout_ms passed. Arming and then draining once more closes the
 * race with a completion that arrived before the notification was asked
 * for (it raised no event). Every event taken is acknowledged at once, so
 * destroying the CQ never waits for one. */
static int verbs_sleep_fds(struct kvi_rmem *rm, struct pollfd pf[2])
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;

	if (rm->broken)
		return 0;
	if (!v->armed) {
		if (ibv_req_notify_cq(v->cq, 0)) {
			verbs_shutdown(rm, KVC_EIO);
			return 0;
		}
		v->armed = 1;
	}
	if (drain_cq(v) || rm->broken)
		return 0; /* something came in meanwhile: no sleep */
	pf[0] = (struct pollfd){ .fd = v->cc->fd, .events = POLLIN };
	pf[1] = (struct pollfd){ .fd = v->ch->fd, .events = POLLIN };
	return 2;
}

static void verbs_woke(struct kvi_rmem *rm, const struct pollfd pf[2])
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	struct ibv_cq *cq;
	void *ctx;

	if ((pf[0].revents & POLLIN) && ibv_get_cq_event(v->cc, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		v->armed = 0;
	}
}

static int verbs_poll(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	unsigned n = 0;

	drain_cq(v);
	while (n < max && v->count > 0 && v->slots[v->head].done) {
		out[n].cookie = v->slots[v->head].cookie;
		out[n].status = v->slots[v->head].status;
		n++;
		v->head = (v->head + 1) % KVI_RMEM_MAX_INFLIGHT;
		v->count--;
	}
	return (int)n;
}

static uint64_t now_ms(void)
{
	return kvi_mono_ns() / 1000000u;
}

static void verbs_idle(struct kvi_rmem *rm);

/* What a control call waits for: the send slot, or its answer. */
static int ctrl_waited(const struct rmem_verbs *v, int answer)
{
	return answer ? v->resp_ready : !v->send_busy;
}

/* One step of a control call's wait (for the answer, or for the send
 * slot), begun at since_ns: look at the CQ and the peer; once the wait lasted
 * rm->spin_us, sleep until something comes (at most 10 ms at a time). */
static void ctrl_wait_step(struct rmem_verbs *v, int answer, uint64_t since_ns)
{
	drain_cq(v);
	if (ctrl_waited(v, answer) || v->rm.broken)
		return;
	verbs_idle(&v->rm);
	if (v->rm.spin_us >= 0 && kvi_mono_ns() - since_ns >= (uint64_t)v->rm.spin_us * 1000u) {
		struct kvi_rmem *rm = &v->rm;

		kvi_rmem_block(&rm, 1, 10);
	}
}

static int verbs_ctrl_call(struct kvi_rmem *rm, const struct kvi_ctrl *req, struct kvi_ctrl *resp,
			   int timeout_ms)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	struct kvi_wire_ctrl *sbuf = &v->cbuf[CTRL_RECVS];
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = CTRL_MSG, .lkey = v->cmr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_CTRL_SEND, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	uint64_t since = kvi_mono_ns(), deadline = since / 1000000u + (uint64_t)(timeout_ms < 0 ? 3600000 : timeout_ms);

	/* One request at a time: the send slot is reused only after its SEND completed. */
	while (!ctrl_waited(v, 0) && !rm->broken && now_ms() < deadline)
		ctrl_wait_step(v, 0, since);
	if (rm->broken)
		return KVC_ESERVERGONE;
	if (v->send_busy)
		return KVC_ETIMEDOUT;
	kvi_wire_ctrl_encode(sbuf, req);
	if (CTRL_MSG <= v->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	v->want_seq = req->seq;
	v->resp_ready = 0;
	if (ibv_post_send(v->id->qp, &wr, &bad)) {
		v->want_seq = 0;
		return KVC_EAGAIN;
	}
	v->send_busy = 1;
	while (!ctrl_waited(v, 1) && !rm->broken && now_ms() < deadline)
		ctrl_wait_step(v, 1, since);
	v->want_seq = 0;
	if (v->resp_ready) {
		*resp = v->resp;
		v->resp_ready = 0; /* or the next call's wait for the send slot would end each step at once */
		return 0;
	}
	return rm->broken ? KVC_ESERVERGONE : KVC_ETIMEDOUT;
}

static int verbs_ctrl_send(struct kvi_rmem *rm, const struct kvi_ctrl *req)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	struct kvi_wire_ctrl *sbuf = &v->cbuf[CTRL_RECVS];
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = CTRL_MSG, .lkey = v->cmr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_CTRL_SEND, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (v->send_busy)
		drain_cq(v);
	if (rm->broken)
		return rm->broken;
	if (v->send_busy)
		return KVC_EAGAIN;
	kvi_wire_ctrl_encode(sbuf, req);
	if (CTRL_MSG <= v->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	if (ibv_post_send(v->id->qp, &wr, &bad))
		return KVC_EAGAIN;
	v->send_busy = 1;
	return 0;
}

/* A vanished server shows up first as an rdma_cm DISCONNECTED event (its kernel
 * tore the connection down) or, if the host itself died, as retry-exceeded
 * completions after the transport timeout. Look for the former while idle. */
static void verbs_idle(struct kvi_rmem *rm)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	struct rdma_cm_event *ev;

	if (rm->broken || rdma_get_cm_event(v->ch, &ev))
		return;
	switch (ev->event) {
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		rdma_ack_cm_event(ev);
		verbs_shutdown(rm, KVC_ESERVERGONE);
		return;
	default:
		rdma_ack_cm_event(ev);
	}
}

int kvi_verbs_set_lbuf(struct kvi_rmem *rm, size_t size)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;
	size_t rounded = (size + 63) & ~(size_t)63;
	void *p = rounded >= size ? aligned_alloc(64, rounded) : NULL;
	struct ibv_mr *mr;

	if (!p)
		return KVC_ENOMEM;
	memset(p, 0, rounded);
	mr = ibv_reg_mr(v->pd, p, size, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		kvi_err("cannot register a %zu-byte local buffer on %s: %s (ulimit -l?)", size,
			ibv_get_device_name(v->id->verbs->device), strerror(errno));
		free(p);
		return KVC_ENOMEM;
	}
	if (v->lmr)
		ibv_dereg_mr(v->lmr);
	free(rm->lbuf);
	v->lmr = mr;
	rm->lbuf = p;
	rm->lbuf_size = size;
	return 0;
}

static int verbs_xbuf_reg(struct kvi_rmem *rm, unsigned idx)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;

	v->xmr[idx] = ibv_reg_mr(v->pd, rm->xbuf[idx].p, rm->xbuf[idx].size, IBV_ACCESS_LOCAL_WRITE);
	if (!v->xmr[idx]) {
		kvi_err("cannot register a %zu-byte local buffer on %s: %s (the memlock limit? ulimit -l)",
			rm->xbuf[idx].size, ibv_get_device_name(v->id->verbs->device), strerror(errno));
		return KVC_ENOMEM;
	}
	return 0;
}

static void verbs_xbuf_dereg(struct kvi_rmem *rm, unsigned idx)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;

	if (v->xmr[idx])
		ibv_dereg_mr(v->xmr[idx]);
	v->xmr[idx] = NULL;
}

static void verbs_destroy(struct kvi_rmem *rm)
{
	struct rmem_verbs *v = (struct rmem_verbs *)rm;

	if (v->connected)
		rdma_disconnect(v->id);
	if (v->id && v->id->qp)
		rdma_destroy_qp(v->id);
	if (v->cq)
		ibv_destroy_cq(v->cq);
	if (v->cc)
		ibv_destroy_comp_channel(v->cc);
	if (v->lmr)
		ibv_dereg_mr(v->lmr);
	free(rm->lbuf);
	if (v->cmr)
		ibv_dereg_mr(v->cmr);
	free(v->cbuf);
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	if (v->id)
		rdma_destroy_id(v->id);
	if (v->ch)
		rdma_destroy_event_channel(v->ch);
	free(v);
}

static const struct kvi_rmem_type verbs_type = {
	.name = "verbs",
	.post = verbs_post,
	.poll = verbs_poll,
	.idle = verbs_idle,
	.sleep_fds = verbs_sleep_fds,
	.woke = verbs_woke,
	.ctrl_call = verbs_ctrl_call,
	.ctrl_send = verbs_ctrl_send,
	.set_lbuf = kvi_verbs_set_lbuf,
	.xbuf_reg = verbs_xbuf_reg,
	.xbuf_dereg = verbs_xbuf_dereg,
	.shutdown = verbs_shutdown,
	.destroy = verbs_destroy,
};

struct rmem_verbs *kvi_verbs_alloc(void)
{
	struct rmem_verbs *v = calloc(1, sizeof(*v));

	if (v) {
		v->rm.type = &verbs_type;
		v->rm.spin_us = KVI_RMEM_SPIN_US;
	}
	return v;
}

void kvi_verbs_free(struct rmem_verbs *v)
{
	if (v)
		verbs_destroy(&v->rm);
}

const char *kvi_rmem_verbs_device(const struct kvi_rmem *rm)
{
	const struct rmem_verbs *v = (const struct rmem_verbs *)rm;

	return ibv_get_device_name(v->id->verbs->device);
}
