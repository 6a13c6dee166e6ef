/* Small helpers shared by the active (client) and passive (server) verbs code:
 * device lookup with useful error text, capability checks, completion-status
 * mapping, and rdma_cm event waiting with a deadline. */
#ifndef KVI_VERBS_UTIL_H
#define KVI_VERBS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "errbuf.h"
#include "exec_bound.h"

/* Comma-separated names of the RDMA devices librdmacm sees ("none" if empty). */
void kvi_device_names(char *buf, size_t len);

/* Fail with KVC_ENOTSUP (and a message) when ctx cannot do what the data path
 * needs: RDMA atomics. On success fills attr. */
int kvi_check_device(struct ibv_context *ctx, struct ibv_device_attr *attr, struct kvi_errbuf *e);

/* Map a completion status to a KVC_ code. */
int kvi_wc_status_code(enum ibv_wc_status st);

/* Set the QP's local ACK timeout (retransmission timer) on a CM id before it
 * connects or accepts: 4.096 us x 2^KVI_ACK_TIMEOUT (exec_bound.h). rdma_cm's
 * RoCE default is 2^18 (~1 s): one lost packet then stalls a QP for a second,
 * and a work request may execute seconds after it was posted, past what the
 * server's settle and quarantine allow. So failing to set it is fatal:
 * KVC_ENOTSUP with a message (an old kernel without the option). */
int kvi_set_ack_timeout(struct rdma_cm_id *id, struct kvi_errbuf *e);

/* Read back the connected QP's local ACK timeout and retry count and the
 * execution bound they give (exec_bound.h) into *bound_ms: 0, or KVC_ESYS
 * (ibv_query_qp failed) with a message. */
int kvi_qp_exec_bound(struct ibv_qp *qp, uint32_t *bound_ms, unsigned *timeout, unsigned *retry,
		      struct kvi_errbuf *e);


/* Largest value an rdma_conn_param depth field can carry. */
static inline unsigned char kvi_depth(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : (unsigned char)v;
}

#endif
