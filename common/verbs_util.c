#include "verbs_util.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvclient_errors.h"
#include "log.h"

void kvi_errbuf_set(struct kvi_errbuf *e, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
}

void kvi_device_names(char *buf, size_t len)
{
	struct ibv_context **devs;
	size_t used = 0;
	int n = 0;

	buf[0] = '\0';
	devs = rdma_get_devices(&n);
	for (int i = 0; devs && i < n && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
					 ibv_get_device_name(devs[i]->device));
	if (devs)
		rdma_free_devices(devs);
	if (n == 0)
		snprintf(buf, len, "none");
}

int kvi_check_device(struct ibv_context *ctx, struct ibv_device_attr *attr, struct kvi_errbuf *e)
{
	const char *name = ibv_get_device_name(ctx->device);

	if (ibv_query_device(ctx, attr)) {
		kvi_errbuf_set(e, "cannot query RDMA device %s: %s", name, strerror(errno));
		return KVC_ESYS;
	}
	/* siw and some iWARP NICs report NONE: no remote compare-and-swap, so no
	 * bucket locks. Refuse up front instead of failing the first PUT. */
	if (attr->atomic_cap == IBV_ATOMIC_NONE) {
		kvi_errbuf_set(e,
			       "RDMA device %s has no remote atomics (atomic_cap NONE); the data path "
			       "needs compare-and-swap: use an InfiniBand/RoCE NIC or Soft-RoCE (rxe), not siw",
			       name);
		return KVC_ENOTSUP;
	}
	if (attr->max_qp_rd_atom == 0 || attr->max_qp_init_rd_atom == 0) {
		kvi_errbuf_set(e, "RDMA device %s allows no outstanding READ/atomic operations", name);
		return KVC_ENOTSUP;
	}
	return 0;
}

int kvi_wc_status_code(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_REM_ACCESS_ERR: /* rkey/bounds/permission check failed at the server */
		return KVC_ERANGE;
	case IBV_WC_RETRY_EXC_ERR:     /* no ACK: peer gone or unreachable */
	case IBV_WC_RNR_RETRY_EXC_ERR: /* peer stopped posting receives */
	case IBV_WC_WR_FLUSH_ERR:      /* QP already in error */
	case IBV_WC_REM_ABORT_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return KVC_ESERVERGONE;
	case IBV_WC_REM_INV_REQ_ERR: /* e.g. READ/atomics with zero responder resources */
	case IBV_WC_REM_OP_ERR:
		return KVC_EPROTO;
	case IBV_WC_LOC_LEN_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_QP_OP_ERR:
	case IBV_WC_MW_BIND_ERR:
		return KVC_EINVAL;
	default:
		return KVC_EIO;
	}
}

int kvi_cm_wait(struct rdma_event_channel *ch, int timeout_ms, struct rdma_cm_event **ev)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return KVC_ETIMEDOUT;
	if (r < 0)
		return KVC_ESYS;
	if (rdma_get_cm_event(ch, ev))
		return errno == EAGAIN ? KVC_ETIMEDOUT : KVC_ESYS;
	return 0;
}

void kvi_set_ack_timeout(struct rdma_cm_id *id)
{
	uint8_t t = KVI_ACK_TIMEOUT;

	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)))
		kvi_warn("cannot set the RDMA ACK timeout (%s): retransmissions wait the default ~1 s",
			 strerror(errno));
}
