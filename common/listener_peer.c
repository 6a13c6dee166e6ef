/* The listener's peers once admitted: finding one by client id, cutting one
 * off, fencing its QP, and freeing it (QP, control buffer, id) when it is
 * gone. Private parts: listener_impl.h. */
#include "listener_impl.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Destroy p's QP (it must have one): no completion of it is looked up again. */
void kvi_listener_peer_drop_qp(struct kvi_listener *l, struct kvi_peer *p)
{
	kvi_u32map_del(&l->by_qpn, p->id->qp->qp_num);
	rdma_destroy_qp(p->id);
	l->cqs[p->cqi].peers--;
	l->npeers--;
}

/* p's client id no longer finds it (a recycled id may find its next holder). */
void kvi_listener_peer_forget_id(struct kvi_listener *l, struct kvi_peer *p)
{
	if (kvi_u32map_get(&l->by_id, p->client_id) == p)
		kvi_u32map_del(&l->by_id, p->client_id);
}

/* The QP goes first: once it is destroyed the device no longer writes into
 * the control buffer, which can then be deregistered and freed. */
void kvi_listener_peer_free(struct kvi_listener *l, struct kvi_peer *p)
{
	if (p->id->qp)
		kvi_listener_peer_drop_qp(l, p);
	if (p->ctrl_mr)
		ibv_dereg_mr(p->ctrl_mr);
	free(p->ctrl_buf);
	rdma_destroy_id(p->id);
	free(p);
}

/* Stop serving p: its QP goes to the error state (late requests are flushed)
 * and rdma_cm reports DISCONNECTED, where p is freed. */
void kvi_listener_peer_kill(struct kvi_peer *p)
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
	kvi_listener_peer_kill(p);
}

void kvi_listener_peer_unlink(struct kvi_listener *l, struct kvi_peer *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		l->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->next = p->prev = NULL;
	kvi_listener_peer_forget_id(l, p);
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
	kvi_listener_peer_drop_qp(l, p);
	return confirmed ? 0 : 1;
}

void kvi_listener_disconnect_all(struct kvi_listener *l, const struct kvi_listen_cb *cb)
{
	while (l->peers) {
		struct kvi_peer *p = l->peers;

		kvi_listener_peer_unlink(l, p);
		if (cb && cb->on_disconnect)
			cb->on_disconnect(cb->arg, p);
		rdma_disconnect(p->id);
		kvi_listener_peer_free(l, p);
	}
}
