/* The verbs transport: the remote-memory interface over one RC queue pair to a
 * kvserver (or any peer speaking the wire.h handshake).
 *
 * Connection set-up uses librdmacm with the event-channel flow; the server's
 * region address, rkey and size arrive in the accept private data. Queue depths
 * are sized from ibv_query_device, retry and RNR retry counts are 7 (rxe drops
 * packets under load; 0 would make the first drop fatal). The local buffer is
 * registered once at connect time; all data-path buffers are carved from it. */
#ifndef KVI_RMEM_VERBS_H
#define KVI_RMEM_VERBS_H

#include <stddef.h>

#include "errbuf.h"
#include "rmem.h"
#include "wire.h"

struct kvi_verbs_opts {
	const char *host;   /* server address or name */
	const char *port;   /* decimal port */
	const char *device; /* required RDMA device name, or NULL for the routed one */
	size_t lbuf_size;   /* bytes of registered local buffer */
	int timeout_ms;     /* for the whole join: resolve, route, connect */
	uint16_t role;      /* enum kvi_role; 0 means KVI_ROLE_CLIENT */
	/* Prove the join with this key (auth.h): the shared secret, or the
	 * server's loopback key for its own connections. NULL: no proof. */
	const uint8_t *secret;
	size_t secret_len;
	/* Tests only: send these hello bytes as they are (to replay a proof, or
	 * send a forged or stale one); role and secret are then ignored. */
	const struct kvi_wire_hello *raw_hello;
};

/* Connect, blocking until joined or o->timeout_ms is up. On success *out is
 * a ready connection and *welcome what the server said. On failure returns a
 * KVC_ code and e holds one line: what failed, where, and what to do about
 * it. */
int kvi_rmem_verbs_connect(const struct kvi_verbs_opts *o, struct kvi_rmem **out,
			   struct kvi_welcome *welcome, struct kvi_errbuf *e);

/* ---- Joining without blocking (rmem_verbs_join.c) --------------------------
 *
 * The same join as a state machine: start it (the address is looked up and
 * its resolution asked for), then step it whenever convenient -- each step
 * takes the rdma_cm events that arrived and starts the next phase, and never
 * waits. kvi_verbs_join_fd is readable when a step may advance, for a caller
 * that sleeps. A step returns KVI_JOIN_PENDING while under way, 0 with *out
 * connected (as kvi_rmem_verbs_connect's), or a KVC_ code with e set, also
 * once the join's deadline (start + o->timeout_ms) has passed. After 0 or a
 * code the join is over: free it (the connection is the caller's). Freeing
 * a join under way abandons it (its rdma_cm id is destroyed, which cancels
 * the handshake). While the server has not answered, a join makes further
 * attempts from fresh ids (rmem_verbs_join.c "attempts"): sleep no longer
 * than kvi_verbs_join_wake_ns says. */
struct kvi_verbs_join;
int kvi_verbs_join_start(const struct kvi_verbs_opts *o, struct kvi_verbs_join **out, struct kvi_errbuf *e);
int kvi_verbs_join_step(struct kvi_verbs_join *j, struct kvi_rmem **out, struct kvi_welcome *w,
			struct kvi_errbuf *e);
/* Step until the join ends, sleeping on its fd meanwhile (a blocking join). */
int kvi_verbs_join_wait(struct kvi_verbs_join *j, struct kvi_rmem **out, struct kvi_welcome *w,
			struct kvi_errbuf *e);
int kvi_verbs_join_fd(const struct kvi_verbs_join *j);
/* When the join must be stepped even if its fd stays quiet (kvi_mono_ns):
 * its deadline, or when its next attempt starts. */
uint64_t kvi_verbs_join_wake_ns(const struct kvi_verbs_join *j);
/* How long since the join last advanced (its start, or its last event),
 * at now (kvi_mono_ns); and the longest it has waited for one event, which
 * says how fast this peer answers (the wait includes the caller's delay in
 * stepping). */
uint64_t kvi_verbs_join_quiet_ns(const struct kvi_verbs_join *j, uint64_t now);
uint64_t kvi_verbs_join_max_gap_ns(const struct kvi_verbs_join *j);
void kvi_verbs_join_free(struct kvi_verbs_join *j);

/* Name of the RDMA device the connection runs on. */
const char *kvi_rmem_verbs_device(const struct kvi_rmem *rm);

#endif
