#include "verbs_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvclient_errors.h"
#include "log.h"

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

int kvi_set_ack_timeout(struct rdma_cm_id *id, struct kvi_errbuf *e)
{
	uint8_t t = KVI_ACK_TIMEOUT;

	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t))) {
		kvi_errbuf_set(e, "cannot set the RDMA ACK timeout (rdma_set_option: %s): without it a lost "
			       "packet is retransmitted after ~1 s and a write could land after the server reused "
			       "its memory; a kernel with RDMA_OPTION_ID_ACK_TIMEOUT (4.15+) is needed",
			       strerror(errno));
		return KVC_ENOTSUP;
	}
	return 0;
}

int kvi_qp_exec_bound(struct ibv_qp *qp, uint32_t *bound_ms, unsigned *timeout, unsigned *retry,
		      struct kvi_errbuf *e)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &ia)) {
		kvi_errbuf_set(e, "cannot read back the QP's ACK timeout and retry count (ibv_query_qp: %s)",
			       strerror(errno));
		return KVC_ESYS;
	}
	*timeout = a.timeout;
	*retry = a.retry_cnt;
	*bound_ms = kvi_exec_bound_ms(a.timeout, a.retry_cnt);
	return 0;
}
