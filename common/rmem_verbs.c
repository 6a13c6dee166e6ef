#include "rmem_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"
#include "verbs_util.h"

/* One entry per batch in flight, in posting order. RC completes work requests
 * in order, so only the last request of a batch is signaled: its completion
 * proves the whole batch finished, with every READ and atomic result in place.
 * Every request of a batch carries the batch's slot index as wr_id, so an error
 * completion (which is generated even for unsignaled requests) names its batch. */
struct vslot {
	uint64_t cookie;
	int status;
	int done;
};

/* Control-path buffers live in their own small registration: CTRL_RECVS
 * receive slots (a response to each request we may have outstanding, and a
 * notice) and one send slot. */
#define CTRL_RECVS (KVI_CTRL_MAX_OUTSTANDING + 1u)
#define CTRL_MSG ((uint32_t)sizeof(struct kvi_wire_ctrl))
/* wr_id tags for control work requests; batch slots use 0..MAX_INFLIGHT-1. */
#define WR_CTRL_RECV (1ull << 32)
#define WR_CTRL_SEND (2ull << 32)

struct rmem_verbs {
	struct kvi_rmem rm; /* first: the generic view */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	/* Where the CQ signals a completion to a sleeping waiter (verbs_sleep_fds);
	 * armed: a notification was requested and its event not yet taken. */
	struct ibv_comp_channel *cc;
	int armed;
	struct ibv_mr *lmr;
	struct ibv_mr *xmr[KVI_RMEM_MAX_XBUF]; /* rm.xbuf[i]'s registration */
	uint64_t raddr; /* remote virtual address of region offset 0 */
	uint32_t rkey;
	uint32_t max_inline;
	int connected;
	struct vslot slots[KVI_RMEM_MAX_INFLIGHT];
	unsigned head, count; /* ring of slots: oldest at head */
	struct kvi_wire_ctrl *cbuf; /* [0..CTRL_RECVS) receives, [CTRL_RECVS] send */
	struct ibv_mr *cmr;
	int send_busy;       /* the send slot's SEND has not completed yet */
	uint32_t want_seq;   /* control response awaited, 0 = none */
	int resp_ready;
	struct kvi_ctrl resp;
};

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

static int post_ctrl_recv(struct rmem_verbs *v, unsigned i)
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
	if (!v->rm.broken && post_ctrl_recv(v, i))
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

static int verbs_set_lbuf(struct kvi_rmem *rm, size_t size)
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
	.set_lbuf = verbs_set_lbuf,
	.xbuf_reg = verbs_xbuf_reg,
	.xbuf_dereg = verbs_xbuf_dereg,
	.shutdown = verbs_shutdown,
	.destroy = verbs_destroy,
};

/* Wait for one specific set-up event; anything else is a failure described in e. */
static int expect_event(struct rmem_verbs *v, const struct kvi_verbs_opts *o,
			enum rdma_cm_event_type want, struct kvi_welcome *welcome, struct kvi_errbuf *e)
{
	struct rdma_cm_event *ev;
	int rc = kvi_cm_wait(v->ch, o->timeout_ms, &ev);

	if (rc == KVC_ETIMEDOUT) {
		kvi_errbuf_set(e, "server %s:%s did not answer within %d ms (%s): is kvserver running there?",
			       o->host, o->port, o->timeout_ms, rdma_event_str(want));
		return KVC_EUNREACHABLE;
	}
	if (rc) {
		kvi_errbuf_set(e, "waiting for rdma_cm event: %s", strerror(errno));
		return rc;
	}
	if (ev->event == want) {
		rc = 0;
		if (want == RDMA_CM_EVENT_ESTABLISHED) {
			const char *why = "";

			rc = kvi_wire_welcome_decode(ev->param.conn.private_data,
						     ev->param.conn.private_data_len, welcome, &why);
			if (rc)
				kvi_errbuf_set(e, "server %s:%s sent a malformed welcome (%u bytes: %s): "
					       "is it a kvserver of the same version?",
					       o->host, o->port, ev->param.conn.private_data_len, why);
		}
		rdma_ack_cm_event(ev);
		return rc;
	}
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_ERROR:
		kvi_errbuf_set(e, "no RDMA route to %s: the address is not reachable through any RDMA "
			       "device (is it on an RDMA-capable interface?)", o->host);
		rc = KVC_EUNREACHABLE;
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		kvi_errbuf_set(e, "cannot resolve an RDMA route to %s (status %d)", o->host, ev->status);
		rc = KVC_EUNREACHABLE;
		break;
	case RDMA_CM_EVENT_REJECTED: {
		uint16_t why = kvi_wire_reject_decode(ev->param.conn.private_data,
						      ev->param.conn.private_data_len);
		if (why) {
			kvi_errbuf_set(e, "server %s:%s refused the connection: %s", o->host, o->port,
				       kvi_reject_reason_text(why));
			rc = kvi_reject_reason_code(why);
		} else {
			kvi_errbuf_set(e, "connection to %s:%s refused (rdma_cm status %d): no kvserver "
				       "listening on that port?", o->host, o->port, ev->status);
			rc = KVC_EUNREACHABLE;
		}
		break;
	}
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		kvi_errbuf_set(e, "server %s:%s unreachable (%s, status %d): is kvserver running there?",
			       o->host, o->port, rdma_event_str(ev->event), ev->status);
		rc = KVC_EUNREACHABLE;
		break;
	default:
		kvi_errbuf_set(e, "unexpected rdma_cm event %s while connecting to %s:%s",
			       rdma_event_str(ev->event), o->host, o->port);
		rc = KVC_EPROTO;
	}
	rdma_ack_cm_event(ev);
	return rc;
}

static int check_route_device(struct rmem_verbs *v, const struct kvi_verbs_opts *o,
			      struct ibv_device_attr *attr, struct kvi_errbuf *e)
{
	const char *routed = ibv_get_device_name(v->id->verbs->device);

	if (o->device && strcmp(o->device, routed) != 0) {
		char names[256];
		int exists = 0, n = 0;
		struct ibv_context **devs = rdma_get_devices(&n);

		for (int i = 0; devs && i < n; i++)
			exists |= strcmp(ibv_get_device_name(devs[i]->device), o->device) == 0;
		if (devs)
			rdma_free_devices(devs);
		kvi_device_names(names, sizeof(names));
		if (!exists)
			kvi_errbuf_set(e, "RDMA device '%s' not found (available: %s)", o->device, names);
		else
			kvi_errbuf_set(e, "server %s is reached through RDMA device %s, not %s: "
				       "drop the device option or use an address on %s",
				       o->host, routed, o->device, o->device);
		return KVC_ENODEV;
	}
	return kvi_check_device(v->id->verbs, attr, e);
}

static int create_resources(struct rmem_verbs *v, const struct kvi_verbs_opts *o,
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
	if (verbs_set_lbuf(&v->rm, o->lbuf_size)) {
		kvi_errbuf_set(e, "cannot register %zu bytes with %s: %s (raise the locked-memory "
			       "limit: ulimit -l unlimited)", o->lbuf_size, dev, strerror(errno));
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
		if (post_ctrl_recv(v, i)) {
			kvi_errbuf_set(e, "ibv_post_recv on %s: %s", dev, strerror(errno));
			return KVC_ESYS;
		}
	}
	return 0;
}

/* The hello, with a fresh proof when we have a key: for the server at the
 * address we resolved and connect to (auth.h "kvi_auth_server"). */
static int make_hello(const struct kvi_verbs_opts *o, struct rdma_cm_id *id, struct kvi_wire_hello *w,
		      struct kvi_errbuf *e)
{
	struct kvi_hello h = { .role = o->role ? o->role : KVI_ROLE_CLIENT };

	if (o->raw_hello) {
		*w = *o->raw_hello;
		return 0;
	}
	if (o->secret) {
		int rc = kvi_auth_prove(&h, o->secret, o->secret_len, rdma_get_peer_addr(id), kvi_auth_now_ms());

		if (rc == KVC_EINVAL)
			kvi_errbuf_set(e, "cannot make the join proof: %s is not an IP address", o->host);
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
static int check_exec_bound(struct rmem_verbs *v, const struct kvi_verbs_opts *o, uint32_t server_ms,
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
			       "refusing to run", o->host, o->port, server_ms, timeout, retry,
			       ours == UINT32_MAX ? "ever; bound " : "", ours);
		return KVC_ENOTSUP;
	}
	return 0;
}

int kvi_rmem_verbs_connect(const struct kvi_verbs_opts *o, struct kvi_rmem **out,
			   struct kvi_welcome *welcome, struct kvi_errbuf *e)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *ai = NULL;
	struct rdma_conn_param cp;
	struct kvi_wire_hello hello;
	struct ibv_device_attr attr;
	struct rmem_verbs *v;
	int rc;

	*out = NULL;
	if (!o->host || !o->port || o->lbuf_size < 64 || o->timeout_ms <= 0) {
		kvi_errbuf_set(e, "invalid connection options");
		return KVC_EINVAL;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	v->rm.type = &verbs_type;
	v->rm.spin_us = KVI_RMEM_SPIN_US;
	v->ch = rdma_create_event_channel();
	if (!v->ch) {
		kvi_errbuf_set(e, "cannot open the RDMA connection manager (/dev/infiniband/rdma_cm: %s): "
			       "no RDMA device or rdma_ucm not loaded; run under deploy/rdma-env",
			       strerror(errno));
		rc = KVC_ENODEV;
		goto clean_v;
	}
	if (rdma_create_id(v->ch, &v->id, v, RDMA_PS_TCP)) {
		kvi_errbuf_set(e, "rdma_create_id: %s", strerror(errno));
		rc = KVC_ESYS;
		goto clean_v;
	}
	rc = rdma_getaddrinfo(o->host, o->port, &hints, &ai);
	if (rc) {
		kvi_errbuf_set(e, "cannot resolve server address %s:%s: %s", o->host, o->port,
			       rc == -1 ? strerror(errno) : gai_strerror(rc));
		rc = KVC_EUNREACHABLE;
		goto clean_v;
	}
	if (rdma_resolve_addr(v->id, ai->ai_src_addr, ai->ai_dst_addr, o->timeout_ms)) {
		kvi_errbuf_set(e, "no RDMA route to %s: %s (is the address on an RDMA-capable interface?)",
			       o->host, strerror(errno));
		rc = KVC_EUNREACHABLE;
		goto clean_ai;
	}
	rc = expect_event(v, o, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, e);
	if (rc)
		goto clean_ai;
	rc = check_route_device(v, o, &attr, e);
	if (rc)
		goto clean_ai;
	if (rdma_resolve_route(v->id, o->timeout_ms)) {
		kvi_errbuf_set(e, "rdma_resolve_route to %s: %s", o->host, strerror(errno));
		rc = KVC_EUNREACHABLE;
		goto clean_ai;
	}
	rc = expect_event(v, o, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, e);
	if (rc)
		goto clean_ai;
	rc = create_resources(v, o, &attr, e);
	if (rc)
		goto clean_ai;
	rc = kvi_set_ack_timeout(v->id, e);
	if (rc)
		goto clean_ai;

	rc = make_hello(o, v->id, &hello, e);
	if (rc)
		goto clean_ai;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &hello;
	cp.private_data_len = sizeof(hello);
	/* Zero here would forbid READ and atomics on this QP: ask for all the device allows. */
	cp.initiator_depth = kvi_depth(attr.max_qp_init_rd_atom);
	cp.responder_resources = kvi_depth(attr.max_qp_rd_atom);
	cp.retry_count = KVI_RETRY_COUNT;
	cp.rnr_retry_count = 7;
	if (rdma_connect(v->id, &cp)) {
		kvi_errbuf_set(e, "rdma_connect to %s:%s: %s", o->host, o->port, strerror(errno));
		rc = KVC_EUNREACHABLE;
		goto clean_ai;
	}
	rc = expect_event(v, o, RDMA_CM_EVENT_ESTABLISHED, welcome, e);
	if (rc)
		goto clean_ai;
	v->connected = 1;
	rc = check_exec_bound(v, o, welcome->exec_ms, e);
	if (rc)
		goto clean_ai;
	/* From now on the channel is only looked at while idle, never blocked on. */
	if (fcntl(v->ch->fd, F_SETFL, fcntl(v->ch->fd, F_GETFL) | O_NONBLOCK)) {
		kvi_errbuf_set(e, "fcntl(O_NONBLOCK) on the rdma_cm channel: %s", strerror(errno));
		rc = KVC_ESYS;
		goto clean_ai;
	}
	v->rm.client_id = welcome->client_id;
	v->rm.max_op_ms = welcome->max_op_ms;
	v->rm.quarantine_ms = welcome->quarantine_ms;
	v->rm.server_flags = welcome->flags;
	v->raddr = welcome->region_addr;
	v->rkey = welcome->rkey;
	v->rm.lease_ms = welcome->lease_ms;
	v->rm.geo = welcome->geo;
	v->rm.region_size = welcome->geo.region_size;
	rdma_freeaddrinfo(ai);
	*out = &v->rm;
	return 0;

clean_ai:
	rdma_freeaddrinfo(ai);
clean_v:
	verbs_destroy(&v->rm);
	return rc;
}

const char *kvi_rmem_verbs_device(const struct kvi_rmem *rm)
{
	const struct rmem_verbs *v = (const struct rmem_verbs *)rm;

	return ibv_get_device_name(v->id->verbs->device);
}
