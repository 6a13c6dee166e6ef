/* What the listener's files share (listener.c, listener_device.c,
 * listener_ctrl.c, listener_peer.c): the listener itself, the control path's
 * geometry, and the few functions one file calls in another. Private to them:
 * everyone else uses listener.h. */
#ifndef KVI_LISTENER_IMPL_H
#define KVI_LISTENER_IMPL_H

#include "listener.h"
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

/* listener_device.c */
/* Bind o's address (where: as the operator wrote it) and settle the device:
 * l->ctx and l->attr. 0 or a KVC_ code, said in e. */
int kvi_listener_bind(struct kvi_listener *l, const struct kvi_listen_opts *o, const char *where,
		      struct kvi_errbuf *e);
/* a's address, numeric ("?" for another family). */
const char *kvi_listener_sa_addr(const struct sockaddr *a, char *buf, size_t n);

/* listener_ctrl.c */
/* The control path's completion channel and first CQ. */
int kvi_listener_ctrl_cq_create(struct kvi_listener *l, struct kvi_errbuf *e);
/* A control CQ with room for one more peer, counted as the peer's. */
int kvi_listener_cq_for_peer(struct kvi_listener *l, unsigned *cqi);
/* p's control buffer, registered, with its receives posted (before rdma_accept). */
int kvi_listener_ctrl_setup(struct kvi_listener *l, struct kvi_peer *p);
/* Every control-path completion that raised an event. */
int kvi_listener_cq_dispatch(struct kvi_listener *l, const struct kvi_listen_cb *cb);

/* listener_peer.c */
/* Destroy p's QP (it must have one). */
void kvi_listener_peer_drop_qp(struct kvi_listener *l, struct kvi_peer *p);
/* p's client id no longer finds it. */
void kvi_listener_peer_forget_id(struct kvi_listener *l, struct kvi_peer *p);
/* Off the peer list, and its client id forgotten. */
void kvi_listener_peer_unlink(struct kvi_listener *l, struct kvi_peer *p);
/* Stop serving p; it is freed at its DISCONNECTED event. */
void kvi_listener_peer_kill(struct kvi_peer *p);
/* QP, control buffer, id and p itself. */
void kvi_listener_peer_free(struct kvi_listener *l, struct kvi_peer *p);

#endif
