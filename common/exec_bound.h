/* The execution bound: how long after it was posted a one-sided work request
 * can still execute at the server.
 *
 * A client checks its operation's deadline before every doorbell, but RC
 * executes a WR when a packet carrying it arrives: one that is lost is sent
 * again after the QP's local ACK timeout, up to retry_cnt times, before the
 * requester gives up (IBV_WC_RETRY_EXC_ERR). So a WR posted at t executes
 * before t + (retry_cnt + 1) x 4.096 us x 2^timeout, plus the time on the
 * wire. The server's settle and quarantine (segtab.h) add this bound to the
 * operation deadline; it states the bound in the welcome (wire.h exec_ms),
 * and a client whose QP cannot meet it (read back after connecting) refuses
 * to run. The in-process transport executes at once: its bound is 0. */
#ifndef KVI_EXEC_BOUND_H
#define KVI_EXEC_BOUND_H

#include <stdint.h>

/* What every QP of ours is set to (rdma_cm: RDMA_OPTION_ID_ACK_TIMEOUT and
 * rdma_conn_param.retry_count). 14: ~67 ms per try (perftest's default);
 * rdma_cm's RoCE default 2^18 (~1 s a try) would make the bound ~8.6 s. */
#define KVI_ACK_TIMEOUT 14
#define KVI_RETRY_COUNT 7
/* Over the formula: timers that fire a tick late (Soft-RoCE counts in
 * jiffies: up to 4 ms a try at HZ=250) and the last try's time on the wire. */
#define KVI_EXEC_SLACK_MS 50u

/* The bound in ms for a QP's timeout and retry count; UINT32_MAX when there
 * is none (timeout 0 waits forever) or it does not fit. */
static inline uint32_t kvi_exec_bound_ms(unsigned timeout, unsigned retry_cnt)
{
	uint64_t ns;

	if (timeout == 0 || timeout > 31 || retry_cnt > 7)
		return UINT32_MAX;
	ns = (uint64_t)(retry_cnt + 1) * 4096u << timeout;
	return (uint32_t)((ns + 999999u) / 1000000u) + KVI_EXEC_SLACK_MS;
}

/* Ours: 537 + 50 = 587 ms. */
#define KVI_EXEC_BOUND_MS kvi_exec_bound_ms(KVI_ACK_TIMEOUT, KVI_RETRY_COUNT)

#endif
