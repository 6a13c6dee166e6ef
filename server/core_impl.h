/* The core's private parts, shared by the files that make up the core
 * (core.h is its public face; one object, one mutex, one prefix):
 *  core.c          create and destroy, the layout, control-request dispatch
 *  core_grants.c   accounts, hosts and quotas; client grants and returns
 *  core_reclaim.c  the reclamation watermarks; the reclaimer's side
 *  core_resize.c   the published indexes, GROW, resize phases, the chunk
 *                  pool, acknowledgements
 *  core_stats.c    counters, STATS replies, the log summary
 *  core_flush.c    flush_all: what was asked, the walks' progress (flush.h)
 * Functions named _locked expect the caller to hold c->mu. */
#ifndef KVS_CORE_IMPL_H
#define KVS_CORE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "core.h"

#define KVS_CLIENT_BUCKETS 256u

struct kvs_client; /* core_grants.c */
struct kvs_host;

struct kvs_core {
	pthread_mutex_t mu; /* guards everything below */
	/* memcached's counters: the sums of what clients reported (COUNTS,
	 * common/item_counts.h); they outlive the clients. */
	uint64_t counts[KVI_COUNT_N];
	uint8_t *base;
	struct kvi_geometry geo; /* private: the region's superblock may be scribbled on */
	struct kvs_core_opts o;   /* with defaults filled in */
	struct kvs_heap *heap;
	struct kvs_segtab *segs;
	uint64_t nsegs;
	uint64_t stride; /* bytes from one segment to the next (heap.h) */
	uint64_t low, high; /* reclamation watermarks, in free + quarantined segments */
	/* Segments taken during the last quarantine-long window: reclamation
	 * must keep at least twice that many free or quarantined, or writers
	 * would wait for quarantines to end (segtab.h). */
	uint64_t win_start, win_taken, win_rate;
	int reclaiming;     /* between the watermarks: keep going until high */
	uint64_t full_at;   /* no-evict: when the reclaimer last found nothing to compact */
	int has_reclaimer;  /* without one, nothing will ever make room: refuse at once */
	uint64_t grants_refused, nclients;
	uint64_t accounts; /* clients given an account so far (account_of) */
	/* The first CAS unique of the next extent granted (layout.h "CAS
	 * uniques"): grows by each grant's length in 4-byte units, never
	 * wraps, never goes back; starts at 1. */
	uint64_t cas_next;
	uint64_t quota;       /* bytes one client may hold while others need memory */
	uint64_t starving_at; /* ns: a client within half its quota was last answered EAGAIN */
	uint32_t starving_id; /* ... that client */
	uint64_t starving_ns; /* how long that counts */
	uint64_t over_quota;  /* grants answered KVC_EQUOTA */
	uint64_t throttled;   /* grants answered KVC_EAGAIN for another's sake */
	struct kvs_reclaim_stats rc;
	uint64_t fencings, fence_released, fence_cpu_ns; /* the fencer's (kvs_core_add_fence) */
	struct kvs_client *clients[KVS_CLIENT_BUCKETS];
	struct kvs_host *hosts[KVS_CLIENT_BUCKETS];
	struct kvs_indexes ix; /* indexes.h */
	/* Old buckets an insert found full during a migration (GROW naming the
	 * previous index): the migrator splits them first (migrate.h). */
	uint64_t urgent[KVS_URGENT_MAX];
	unsigned urgent_n;
	/* Resizing (migrate.h): who may start one, and where it stands. */
	int has_migrator;
	enum kvs_resize_phase resize;
	uint64_t resize_need; /* chunks the wanted resize waits for (reclamation makes room) */
	int grow_pending;     /* a GROW came while one ran: the next begins at its retirement */
	uint64_t grow_rng;    /* picks the buckets a GROW's load check reads (grow_claim_holds) */
	/* Home area pieces free for index chunks (after the home index retired). */
	uint64_t *pool;
	uint32_t npool, pool_cap;
	/* Acknowledgements (kvs_core_set_acked): kvserver's members all use
	 * acked_epoch or later since acked_at (ns). */
	int acks_required;
	uint64_t acked_epoch, acked_at;
	/* flush_all (core_flush.c; flush.h is the walk). O(1) state whatever
	 * is asked: one pending delayed flush, one walk wanted, counters. */
	int has_flusher;
	int flush_wanted;      /* a walk must start (an immediate request, or the delayed one came due) */
	uint64_t flush_due_ns; /* the pending delayed flush takes effect then (mono ns; 0: none) */
	uint64_t flush_started, flush_done; /* walks started, completed */
	uint64_t flush_walked;              /* buckets the running walk has been over */
	uint64_t flush_requests, flush_items;
};

/* Free segments only the reclaimer may take (segtab opts.reserve). */
static inline uint64_t kvs_core_reserve(const struct kvs_core *c)
{
	return c->nsegs > 8 ? KVS_RESERVE_SEGMENTS : 0;
}

static inline void kvs_core_reply_error(const struct kvi_ctrl *req, struct kvi_ctrl *resp, int status)
{
	resp->type = KVI_CTRL_ERROR;
	resp->seq = req->seq;
	resp->status = status;
}

/* core_grants.c: segtab's accounting callback (opts.charge); free every
 * client and host record (destroy); SEG_REQ and SEG_RETURN. */
void kvs_core_charge(void *arg, uint64_t owner, int64_t bytes);
void kvs_core_clients_free(struct kvs_core *c);
int kvs_core_seg_request_locked(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp);
int kvs_core_seg_return_locked(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* core_reclaim.c: is reclamation wanted (hysteresis between the
 * watermarks)? has the no-evict reclaimer found the heap full of live data
 * lately? wake the reclaimer if reclamation is wanted. */
int kvs_core_wanted_locked(struct kvs_core *c);
int kvs_core_full_locked(const struct kvs_core *c);
void kvs_core_poke_locked(struct kvs_core *c);

/* core_resize.c: answer GROW. */
void kvs_core_grow_ctrl_locked(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* core_flush.c: answer FLUSH. */
void kvs_core_flush_ctrl_locked(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* core_stats.c: answer STATS_REQ. */
int kvs_core_stats_reply_locked(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp);
/* COUNTS: add a client's report to the totals (core_stats.c). */
int kvs_core_counts_locked(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

#endif
