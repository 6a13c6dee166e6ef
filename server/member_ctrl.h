/* The membership half of the control path: lease renewals and lock reports.
 * What a request means and what the answer is, shared by kvserver's event
 * loop (main.c) and the in-process server (inproc.c) so that both judge
 * alike. What to do about a verdict -- log it, change a lock word (kvserver:
 * through the fencer's NIC; in-process: the CPU), expel an owner -- is the
 * caller's. Called with whatever serialises the core and the members (the
 * event loop; inproc's lock). */
#ifndef KVS_MEMBER_CTRL_H
#define KVS_MEMBER_CTRL_H

#include <stdint.h>

#include "core.h"
#include "members.h"
#include "wire.h"

/* LEASE_RENEW from member id (members.h "Leases", "Idleness"): fills resp
 * (LEASE, or ERROR KVC_EFENCED for an expelled member or a loopback) and
 * takes the epoch it names as its acknowledgement of a resize. Returns 1
 * when its lease had lapsed while it was idle (readmitted), else 0. */
int kvs_member_ctrl_renew(struct kvs_members *m, struct kvs_core *core, uint32_t id, uint32_t renew_ms,
			  const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* While an old index waits to retire (migrate.h "Retiring"), tell the core
 * once every member with a live lease uses the new epoch. */
void kvs_member_ctrl_update_acks(struct kvs_members *m, struct kvs_core *core);

/* LOCK_REPORT from reporter (members.h "Lock reports"), judged against the
 * word now in the bucket the report names, in the index of its epoch. Fills
 * resp and *a (a->set: change the word at region offset *off from
 * a->set_from to a->set_to; a->fence_owner: expel it); *current is the word
 * read. Returns 0, or 1 when that index is retired or never was ours (resp
 * says CHANGED; nothing to do). */
int kvs_member_ctrl_report(struct kvs_members *m, struct kvs_core *core, uint32_t reporter,
			   const struct kvi_ctrl *req, struct kvi_ctrl *resp, struct kvs_report_action *a,
			   uint64_t *off, uint64_t *current);

#endif
