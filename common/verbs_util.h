/* Small helpers shared by the active (client) and passive (server) verbs code:
 * device lookup with useful error text, capability checks, completion-status
 * mapping, and rdma_cm event waiting with a deadline. */
#ifndef KVI_VERBS_UTIL_H
#define KVI_VERBS_UTIL_H

#include <stddef.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* A fixed-size message buffer for "what failed, where, what to do". */
struct kvi_errbuf {
	char msg[320];
};
void kvi_errbuf_set(struct kvi_errbuf *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Comma-separated names of the RDMA devices librdmacm sees ("none" if empty). */
void kvi_device_names(char *buf, size_t len);

/* Fail with KVC_ENOTSUP (and a message) when ctx cannot do what the data path
 * needs: RDMA atomics. On success fills attr. */
int kvi_check_device(struct ibv_context *ctx, struct ibv_device_attr *attr, struct kvi_errbuf *e);

/* Map a completion status to a KVC_ code. */
int kvi_wc_status_code(enum ibv_wc_status st);

/* Wait up to timeout_ms (negative: forever) for the next event on ch.
 * 0 with *ev set, KVC_ETIMEDOUT, or KVC_ESYS. */
/* Set the QP's local ACK timeout (retransmission timer) on a CM id before it
 * connects or accepts: 4.096 us x 2^KVI_ACK_TIMEOUT. rdma_cm's RoCE default
 * is 2^18 (~1 s): one lost packet (a loaded host, a dropping switch) then
 * stalls a QP for a second, longer than an operation's deadline, and the
 * connection is broken. 14 (~67 ms, perftest's default) retries in time;
 * with retry_count 7 a dead peer is still noticed within ~0.5 s. Failure to
 * set it (an old kernel) leaves the default: logged, not fatal. */
#define KVI_ACK_TIMEOUT 14
void kvi_set_ack_timeout(struct rdma_cm_id *id);

int kvi_cm_wait(struct rdma_event_channel *ch, int timeout_ms, struct rdma_cm_event **ev);

/* Largest value an rdma_conn_param depth field can carry. */
static inline unsigned char kvi_depth(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : (unsigned char)v;
}

#endif
