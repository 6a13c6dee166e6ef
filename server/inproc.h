/* A kvcache server inside the caller's process: a local region formatted by
 * the real core, control requests answered as kvserver answers them
 * (kvs_inproc_ctrl), membership when asked for (kvs_inproc_leases), the real
 * reclaimer on a loopback, and connections over the local transport
 * (common/rmem_local.h) instead of a NIC. kvbench's local:// target and the
 * unit tests' dpath_env are built on it.
 *
 * Who owns what: the struct owns the region, the core, the membership table
 * and the reclaimer it started; connections it makes belong to the caller
 * (a client handle, or a reclaimer the caller creates on one). */
#ifndef KVS_INPROC_H
#define KVS_INPROC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "flush.h"
#include "members.h"
#include "reclaim.h"
#include "rmem_local.h"

struct kvs_inproc {
	struct kvi_local_region *reg;
	struct kvs_core *core;
	/* Serialises control requests from the connections' threads, as
	 * kvserver's one event loop does. */
	pthread_mutex_t lock;
	uint32_t next_id;              /* the next connection's client id */
	/* Membership, as kvserver keeps it (NULL: no leases; renewals and lock
	 * reports then go to the bare core, as everything else does). */
	struct kvs_members *members;
	uint32_t renew_ms;
	uint64_t verdicts[4];          /* lock reports judged, by enum kvi_report_verdict */
	uint32_t fenced_owner;         /* the last owner a report condemned */
	/* The reclaimer kvs_inproc_run_reclaimer runs on its own thread. */
	struct kvs_reclaimer *rcl;
	pthread_t rcl_thread;
	int rcl_running, rcl_stop;
	/* flush_all's walks (flush.h): on the reclaimer's thread when it runs
	 * (kvs_inproc_run_reclaimer), else on a thread of their own started at
	 * the first FLUSH -- unless the caller attached a flusher of its own
	 * (a test that runs it beside its migrator). */
	struct kvs_flusher *fl;
	struct kvi_rmem *fl_rm; /* the flush thread's loopback */
	pthread_t fl_thread;
	pthread_mutex_t fl_mu;
	pthread_cond_t fl_cv;
	int fl_running, fl_stop, fl_kick;
};

/* A region of region_bytes formatted by kvs_core_create with o. 0, or a
 * code (e->msg says why). */
int kvs_inproc_init(struct kvs_inproc *s, uint64_t region_bytes, const struct kvs_core_opts *o,
		    struct kvi_errbuf *e);
/* Stops the reclaimer thread, if any, and frees what s owns. */
void kvs_inproc_fini(struct kvs_inproc *s);

/* Grant leases of lease_ms, renewed every renew_ms, and judge lock reports
 * (members.h), as kvserver does. */
int kvs_inproc_leases(struct kvs_inproc *s, uint32_t lease_ms, uint32_t renew_ms);

/* The control handler of every connection s makes (kvi_ctrl_handler; arg is
 * s): kvserver's answers -- a renewal extends the lease and states the index
 * epoch and state; a lock report is judged (kvs_members_judge) against the
 * bucket of the index epoch it names, a word it condemns is cleared with a
 * CPU CAS (the local transport's atomics are CPU atomics); the rest is the
 * core's (kvs_core_ctrl). */
int kvs_inproc_ctrl(void *arg, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* A new client id. */
uint32_t kvs_inproc_new_id(struct kvs_inproc *s);
/* A connection as client `id` with a local buffer of lbuf bytes and the
 * transport hooks (NULL: none): kvs_inproc_ctrl answers its control
 * requests, and it is told the core's limits and geometry, as kvserver's
 * welcome does. Not a member (a server loopback). */
int kvs_inproc_loopback(struct kvs_inproc *s, size_t lbuf, const struct kvi_local_hooks *hooks, uint32_t id,
			struct kvi_rmem **out);
/* The same with a new id, a member from now when s grants leases. */
int kvs_inproc_connect(struct kvs_inproc *s, size_t lbuf, const struct kvi_local_hooks *hooks, struct kvi_rmem **out);

/* What kvserver does when leases end (members.h "Idleness"): each member
 * whose lease ended is kept as lapsed if its idle word (read where it lies,
 * in this process) is 0 -- counted in *lapsed -- else expelled (returned). */
unsigned kvs_inproc_expire(struct kvs_inproc *s, unsigned *lapsed);

/* The server's reclaimer over a loopback of its own, run on a thread of its
 * own until kvs_inproc_fini: kvs_reclaim_run (flushes included, when no
 * flusher runs yet) and kvs_core_tick, every 100 us. */
int kvs_inproc_run_reclaimer(struct kvs_inproc *s);

/* One in-process server shared by a process's connections (kvbench's
 * local:// driver, kvproxy's local:// tier): the first kvs_inproc_share
 * creates it (region_bytes, o; prefault: touch every page first, so that
 * page faults are not timed) and starts its reclaimer; each returns a
 * deferred connection (rmem_local.h: a posted batch waits for its thread's
 * next poll, as on a wire, so memory is never reused under it); the last
 * kvs_inproc_unshare stops it. Define one with KVS_INPROC_SHARED_INIT. */
struct kvs_inproc_shared {
	pthread_mutex_t mu;
	unsigned users;
	struct kvs_inproc s;
};
#define KVS_INPROC_SHARED_INIT { .mu = PTHREAD_MUTEX_INITIALIZER }
/* 0 with *out, or -1 with err filled. */
int kvs_inproc_share(struct kvs_inproc_shared *sh, uint64_t region_bytes, const struct kvs_core_opts *o,
		     int prefault, struct kvi_rmem **out, char *err, size_t errlen);
/* A connection of it is gone (its handle closed it). */
void kvs_inproc_unshare(struct kvs_inproc_shared *sh);

#endif
