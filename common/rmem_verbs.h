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
	int timeout_ms;     /* for each set-up step (resolve, route, connect) */
	uint16_t role;      /* enum kvi_role; 0 means KVI_ROLE_CLIENT */
	/* Prove the join with this key (auth.h): the shared secret, or the
	 * server's loopback key for its own connections. NULL: no proof. */
	const uint8_t *secret;
	size_t secret_len;
	/* Tests only: send these hello bytes as they are (to replay a proof, or
	 * send a forged or stale one); role and secret are then ignored. */
	const struct kvi_wire_hello *raw_hello;
};

/* Connect. On success *out is a ready connection and *welcome what the server
 * said. On failure returns a KVC_ code and e holds one line: what failed, where,
 * and what to do about it. */
int kvi_rmem_verbs_connect(const struct kvi_verbs_opts *o, struct kvi_rmem **out,
			   struct kvi_welcome *welcome, struct kvi_errbuf *e);

/* Name of the RDMA device the connection runs on. */
const char *kvi_rmem_verbs_device(const struct kvi_rmem *rm);

#endif
