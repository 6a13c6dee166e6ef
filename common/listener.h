/* The passive side of a connection: listen, admit or refuse joining peers, and
 * notice when they leave. Used by kvserver and by the test peers.
 *
 * The listener picks one RDMA device at start-up (the one its address is on, the
 * one named, or the only one with atomics) and allocates the protection domain
 * there, so the owner can register its region before the first client arrives.
 * Requests arriving on any other device are rejected.
 *
 * Event-driven: kvi_listener_fd() is one descriptor (an epoll set covering the
 * rdma_cm channel and the completion channel of the control path's CQ) that
 * becomes readable when there is news; the owner polls it (epoll, poll) and
 * calls kvi_listener_dispatch(). An idle listener, and one whose peers only use
 * one-sided operations, costs no CPU.
 *
 * The control path (two-sided, wire.h "Control messages"): every admitted peer
 * gets KVI_CTRL_RECV_DEPTH receives of sizeof(struct kvi_wire_ctrl) bytes,
 * posted before rdma_accept, in a small buffer that is the listener's own (not
 * in any region a peer can write to). Each request is decoded, handed to
 * on_ctrl, and answered with one SEND of exactly sizeof(struct kvi_wire_ctrl)
 * bytes. A malformed message, a request on_ctrl refuses, or a failed work
 * request costs that peer its connection, never the listener. Peers share a
 * few CQs (one, unless the device caps its size below what the peers need)
 * on one completion channel; completions find their peer by QP number (a hash
 * map: no event walks the peers) and a per-peer serial in wr_id (so a
 * completion left over from a freed peer whose QP number was reused is
 * recognised and dropped). */
#ifndef KVI_LISTENER_H
#define KVI_LISTENER_H

#include <stdint.h>

#include "auth_admit.h"
#include "verbs_util.h"
#include "wire.h"

struct kvi_listen_opts {
	const char *addr;   /* bind address; NULL or "" for all */
	const char *port;   /* decimal port */
	const char *device; /* required device name, or NULL */
	int backlog;
	/* Who may join and as what (auth_admit.h), decided before rdma_accept, so a
	 * refused peer never has a usable QP. NULL: no proof is asked and every
	 * peer is a client (test peers). Must outlive the listener. */
	struct kvi_auth_gate *auth;
};

/* A connected (or connecting) peer. Owned by the listener; valid from the
 * on_connect callback until on_disconnect returns. */
struct kvi_peer {
	struct kvi_peer *next, *prev;
	struct rdma_cm_id *id;
	uint32_t client_id;
	uint16_t role; /* enum kvi_role, as the admission decided (never the peer's word) */
	int established;
	int fenced; /* the owner's: fenced already (on_disconnect need not again) */
	uint64_t fence_ticket; /* the owner's: the fencer's pass that releases its locks (0: none) */
	void *user; /* owner's per-peer state */

	/* Control path; private to the listener's files (listener_impl.h). */
	uint64_t serial;                /* tags this peer's work requests (wr_id) */
	unsigned cqi;                   /* the control CQ its QP uses */
	struct kvi_wire_ctrl *ctrl_buf; /* receive slots, then send slots */
	struct ibv_mr *ctrl_mr;         /* LOCAL_WRITE only: peers cannot reach it */
	unsigned sends_out;             /* SENDs posted and not completed */
	unsigned send_next;             /* next send slot (a ring: RC completes in order) */
	int reading;                    /* a kvi_listener_read_word is under way */
	int dead; /* QP failed or disconnect started: ignore its traffic until DISCONNECTED */
	int disconnecting; /* rdma_disconnect was called */
};

/* The peer's IP address as text ("?" if unknown), in buf. */
const char *kvi_peer_addr(const struct kvi_peer *p, char *buf, size_t n);

struct kvi_listen_cb {
	void *arg;
	/* A peer asks to join. Fill w (client id, region, epoch) and return 0, or
	 * return an enum kvi_reject_reason to refuse it. */
	int (*on_connect)(void *arg, struct kvi_peer *p, const struct kvi_hello *h, struct kvi_welcome *w);
	void (*on_established)(void *arg, struct kvi_peer *p); /* may be NULL */
	/* The peer is gone (disconnect, error, or listener shutdown). */
	void (*on_disconnect)(void *arg, struct kvi_peer *p); /* may be NULL */
	/* A well-formed control request from p. Fill resp (resp->seq is set to
	 * req->seq beforehand) and return 0 to send it, or return < 0 to
	 * disconnect p. May be NULL: every request is then answered with
	 * KVI_CTRL_ERROR / KVC_EPROTO ("this peer serves no control requests"),
	 * which tells a client why better than a dropped connection would. */
	int (*on_ctrl)(void *arg, struct kvi_peer *p, const struct kvi_ctrl *req, struct kvi_ctrl *resp);
	/* The word kvi_listener_read_word asked for: ok 1 with its value, or 0
	 * when the READ failed (the peer is then disconnected as for any
	 * failed work request). May be NULL. */
	void (*on_read)(void *arg, struct kvi_peer *p, uint64_t value, int ok);
};

struct kvi_listener;

int kvi_listener_create(const struct kvi_listen_opts *o, struct kvi_listener **out, struct kvi_errbuf *e);
/* Disconnects every peer (calling on_disconnect if cb is not NULL) and frees all.
 * Accepts NULL. */
void kvi_listener_destroy(struct kvi_listener *l, const struct kvi_listen_cb *cb);

/* Disconnect and free every peer, keeping the listener and its PD. The owner
 * calls this before deregistering memory from the PD. */
void kvi_listener_disconnect_all(struct kvi_listener *l, const struct kvi_listen_cb *cb);

/* SEND notice (e.g. KVI_CTRL_SHUTDOWN with seq 0) to every established peer.
 * Best effort: a peer without a free send slot or with a broken QP is skipped.
 * Returns the number of peers the notice was posted to. */
int kvi_listener_notify_all(struct kvi_listener *l, const struct kvi_ctrl *notice);

/* Wait up to timeout_ms for every posted SEND to complete (so that a notice
 * reaches its peers before kvi_listener_disconnect_all flushes it). Requests
 * arriving meanwhile are dropped unanswered: for shutdown only. 0, or
 * KVC_ETIMEDOUT when some peer did not take its messages in time. */
int kvi_listener_flush_sends(struct kvi_listener *l, int timeout_ms);

/* The peer holding client_id, or NULL. */
struct kvi_peer *kvi_listener_peer(struct kvi_listener *l, uint32_t client_id);
/* Disconnect p (the owner cut it off): on_disconnect follows, as for any
 * peer that leaves. */
void kvi_listener_drop(struct kvi_listener *l, struct kvi_peer *p);

/* Fence p: no operation of its may reach our memory from now on. Its QP is
 * moved to the error state (the state confirmed with ibv_query_qp, a few
 * tries), then destroyed, which drains what a software device was still
 * executing for it (the peer is then freed as usual when it disconnects).
 * Call before releasing anything the peer held. 0 when the error state was
 * confirmed (or there was no QP), 1 when the QP was destroyed without. */
int kvi_listener_fence_peer(struct kvi_listener *l, struct kvi_peer *p);

/* Read 8 bytes of p's own memory (addr, rkey: what p told us) with one RDMA
 * READ on its QP, into the listener's private buffer; the value reaches
 * cb->on_read from kvi_listener_dispatch. One at a time per peer: 0,
 * KVC_EAGAIN (one is under way), KVC_EIO (cannot post: p is failing). */
int kvi_listener_read_word(struct kvi_listener *l, struct kvi_peer *p, uint64_t addr, uint32_t rkey);

/* One descriptor to wait on (readable: call kvi_listener_dispatch). */
int kvi_listener_fd(const struct kvi_listener *l);
struct ibv_pd *kvi_listener_pd(const struct kvi_listener *l);
const char *kvi_listener_device(const struct kvi_listener *l);
/* The port actually bound (useful with port "0"). */
uint16_t kvi_listener_port(const struct kvi_listener *l);
/* An address this host's own connections (the server's loopback for fencing
 * and reclamation) can reach the listener at: the bound address, or for a
 * wildcard listener the first IPv4 (else IPv6) address of a local interface
 * that rdma_cm maps to the listener's device. 0, or KVC_ENODEV when the
 * device has no such address. */
int kvi_listener_self_addr(const struct kvi_listener *l, char *buf, size_t len);

/* Handle every pending rdma_cm event and control-path completion without
 * blocking. Returns 0, or a negative KVC_ code when the listener itself failed
 * (device removed, CQ broken). Trouble with one peer only ever costs that peer. */
int kvi_listener_dispatch(struct kvi_listener *l, const struct kvi_listen_cb *cb);

#endif
