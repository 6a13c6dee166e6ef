/* The passive side of a connection: listen, admit or refuse joining peers, and
 * notice when they leave. Used by kvserver and by the test peers.
 *
 * The listener picks one RDMA device at start-up (the one its address is on, the
 * one named, or the only one with atomics) and allocates the protection domain
 * there, so the owner can register its region before the first client arrives.
 * Requests arriving on any other device are rejected.
 *
 * Event-driven: kvi_listener_fd() becomes readable when rdma_cm has news; the
 * owner polls it (epoll, poll) and calls kvi_listener_dispatch(). An idle
 * listener, and one whose peers only use one-sided operations, costs no CPU. */
#ifndef KVI_LISTENER_H
#define KVI_LISTENER_H

#include <stdint.h>

#include "verbs_util.h"
#include "wire.h"

struct kvi_listen_opts {
	const char *addr;   /* bind address; NULL or "" for all */
	const char *port;   /* decimal port */
	const char *device; /* required device name, or NULL */
	int backlog;
};

/* A connected (or connecting) peer. Owned by the listener; valid from the
 * on_connect callback until on_disconnect returns. */
struct kvi_peer {
	struct kvi_peer *next;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	uint32_t client_id;
	uint16_t role;
	int established;
	void *user; /* owner's per-peer state */
};

struct kvi_listen_cb {
	void *arg;
	/* A peer asks to join. Fill w (client id, region, epoch) and return 0, or
	 * return an enum kvi_reject_reason to refuse it. */
	int (*on_connect)(void *arg, struct kvi_peer *p, const struct kvi_hello *h, struct kvi_welcome *w);
	void (*on_established)(void *arg, struct kvi_peer *p); /* may be NULL */
	/* The peer is gone (disconnect, error, or listener shutdown). */
	void (*on_disconnect)(void *arg, struct kvi_peer *p); /* may be NULL */
};

struct kvi_listener;

int kvi_listener_create(const struct kvi_listen_opts *o, struct kvi_listener **out, struct kvi_errbuf *e);
/* Disconnects every peer (calling on_disconnect if cb is not NULL) and frees all.
 * Accepts NULL. */
void kvi_listener_destroy(struct kvi_listener *l, const struct kvi_listen_cb *cb);

/* Disconnect and free every peer, keeping the listener and its PD. The owner
 * calls this before deregistering memory from the PD. */
void kvi_listener_disconnect_all(struct kvi_listener *l, const struct kvi_listen_cb *cb);

int kvi_listener_fd(const struct kvi_listener *l);
struct ibv_pd *kvi_listener_pd(const struct kvi_listener *l);
const char *kvi_listener_device(const struct kvi_listener *l);
/* The port actually bound (useful with port "0"). */
uint16_t kvi_listener_port(const struct kvi_listener *l);

/* Handle every pending rdma_cm event without blocking. Returns 0, or a negative
 * KVC_ code when the listener itself failed (device removed). Trouble with one
 * peer only ever costs that peer. */
int kvi_listener_dispatch(struct kvi_listener *l, const struct kvi_listen_cb *cb);

#endif
