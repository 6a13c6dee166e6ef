#include "member_ctrl.h"

#include "clock.h"
#include "kvclient_errors.h"

int kvs_member_ctrl_renew(struct kvs_members *m, struct kvs_core *core, uint32_t id, uint32_t renew_ms,
			  const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	enum kvi_index_state state;
	uint64_t epoch;
	uint32_t lease;
	int readmitted;

	/* Where its idle word is; only ever READ over its own connection, so a
	 * wrong one costs only it. */
	kvs_members_set_probe(m, id, req->lease_renew.idle_addr, (uint32_t)req->lease_renew.idle_rkey);
	readmitted = kvs_members_is_lapsed(m, id);
	lease = kvs_members_renew(m, id, kvi_mono_ns());
	if (!lease) { /* expelled already, or a loopback */
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = req->seq, .status = KVC_EFENCED };
		return 0;
	}
	kvs_core_index_status(core, &epoch, &state);
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LEASE, .seq = req->seq,
				   .lease = { .lease_ms = lease,
					      .renew_ms = renew_ms,
					      .epoch = epoch,
					      .state = state,
					      .flags = readmitted ? KVI_LEASE_F_READMITTED : 0 } };
	/* The epoch it uses: its acknowledgement of a resize. */
	kvs_members_ack(m, id, req->lease_renew.epoch, kvi_mono_ns());
	kvs_member_ctrl_update_acks(m, core);
	return readmitted;
}

void kvs_member_ctrl_update_acks(struct kvs_members *m, struct kvs_core *core)
{
	uint64_t epoch, last;

	if (kvs_core_acks_wanted(core, &epoch) && kvs_members_acked(m, epoch, kvi_mono_ns(), &last))
		kvs_core_set_acked(core, epoch, last);
}

int kvs_member_ctrl_report(struct kvs_members *m, struct kvs_core *core, uint32_t reporter,
			   const struct kvi_ctrl *req, struct kvi_ctrl *resp, struct kvs_report_action *a,
			   uint64_t *off, uint64_t *current)
{
	const struct kvi_ctrl_lock_report *lr = &req->lock_report;
	enum kvi_index_state state;
	uint64_t epoch;

	*a = (struct kvs_report_action){ .verdict = KVI_REPORT_CHANGED };
	if (kvs_core_bucket_of_epoch(core, lr->epoch, lr->bucket, off)) {
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq,
					   .lock_reported = { .verdict = KVI_REPORT_CHANGED } };
		return 1;
	}
	/* Reading a lock word with the CPU is fine; changing it is the NIC's job. */
	*current = __atomic_load_n((const uint64_t *)(const void *)(kvs_core_region(core) + *off), __ATOMIC_SEQ_CST);
	kvs_core_index_status(core, &epoch, &state);
	kvs_members_judge(m, reporter, *off, lr->word, *current, lr->epoch == epoch && state == KVI_INDEX_STABLE,
			  kvi_mono_ns(), a);
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq,
				   .lock_reported = { .verdict = a->verdict } };
	return 0;
}
