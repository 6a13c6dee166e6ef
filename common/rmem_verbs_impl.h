/* The verbs transport's insides, shared by its data path (rmem_verbs.c) and
 * its set-up (rmem_verbs_join.c). Nothing else includes this. */
#ifndef KVI_RMEM_VERBS_IMPL_H
#define KVI_RMEM_VERBS_IMPL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rmem.h"
#include "wire.h"

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

/* A transport not yet connected (type set, nothing else), and its
 * destruction at any stage of the set-up or after. */
struct rmem_verbs *kvi_verbs_alloc(void);
void kvi_verbs_free(struct rmem_verbs *v);
/* Post control receive slot i; 0 or an errno. */
int kvi_verbs_post_ctrl_recv(struct rmem_verbs *v, unsigned i);
/* (Re)register the local buffer of size bytes: 0 or KVC_ENOMEM. */
int kvi_verbs_set_lbuf(struct kvi_rmem *rm, size_t size);

#endif
