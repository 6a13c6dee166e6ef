/* The flusher: the server's side of flush_all, the walk that clears the index.
 *
 * Flush. memcached's flush_all [delay]: every item written before the flush
 * takes effect is gone for every client -- at once, or delay_ms from now.
 * The core keeps what clients asked (core.h "flush_all": requests coalesce,
 * the latest decides when a delayed one takes effect) and answers at once;
 * this walk carries a flush out, and a client that asked for an immediate
 * one waits by asking how it stands until the walk that started after its
 * request is done (kvc_flush_all).
 *
 * The walk: every bucket of the published indexes -- during a migration the
 * previous index first, then the current one -- in slices, a batch of
 * FLUSH_BATCH buckets per doorbell: CAS-lock each and READ it (one
 * doorbell), then WRITE zeros over the slots of those that hold any and
 * CAS-unlock (one more). So a bucket lock is held for one loopback round
 * trip, and every lock goes through the NIC on the reclaimer's loopback,
 * like the reclaimer's (layout.h I1). The CPU reads a bucket first, as a
 * hint: one with no slot in use (or MOVED: its items are in the current
 * index, walked later) is not locked -- an item written into it after that
 * read overlaps the flush. A bucket of the current index still UNMIGRATED
 * holds nothing yet; its old bucket was walked before it.
 *
 * What is guaranteed: every item whose write completed before the flush was
 * asked for is gone when the walk is done (when kvc_flush_all returns); an
 * item written during the walk survives if its bucket had already been
 * walked, and per key the outcome is that of a flush taking effect between
 * two of its writes. Across keys written during the walk it is not one
 * instant (the walk is bucket by bucket, as memcached's flush_all is second
 * by second); GETs never wait for it: a cleared slot is a miss, and a
 * client's cached location fails its check and falls back.
 *
 * Locks it does not own: a bucket found held is tried again later (kept in
 * a short list; a full list is retried, with a back-off, before the walk
 * goes on), its word watched and reported as any writer's (lockwatch.h),
 * so a client that keeps it is fenced. A word that is no lock at all (junk)
 * is repaired while the current index is the only one (as the reclaimer
 * does), else left to the migrator. A bucket still held after the
 * reclaimer's patience (2 x max-op + 1 s) is given up: logged
 * ("flush_bucket_skipped") and counted in the walk's skipped.
 *
 * With resizing: the migrator runs on the same thread and is held while a
 * walk runs (kvs_migrate_hold): it goes on migrating, but starts no resize
 * and retires no index, so the indexes the walk took at its start stay
 * published and in place. Migrating a bucket the walk has not reached moves
 * its items into the current index, which the walk reaches later -- and
 * the walk leaves the previous index only once every bucket of it that it
 * found held is done, so that none is migrated into buckets already walked.
 *
 * Owned by one thread (the reclaimer's, or a test's); survives reconnections
 * of the loopback (a walk resumes where it was). Memory is not freed by a
 * flush: the cleared items' bytes are garbage the reclaimer drops for free. */
#ifndef KVS_FLUSH_H
#define KVS_FLUSH_H

#include <stdint.h>

#include "core.h"
#include "rmem.h"

/* What kvs_flush_run did. */
enum kvs_flush_verdict {
	KVS_FLUSH_IDLE = 0, /* no walk runs */
	KVS_FLUSH_BUSY = 1, /* a walk runs: call again (kvs_flush_next_ms says when) */
};

struct kvs_flush_stats {
	uint64_t walks;   /* walks completed */
	uint64_t cleared; /* slots cleared */
	uint64_t locked;  /* buckets locked and looked at */
	uint64_t held;    /* lock attempts that found a bucket held (retried) */
	uint64_t skipped; /* buckets given up (held past the patience) */
	uint64_t repaired; /* junk lock words repaired */
	uint64_t doorbells; /* loopback round trips */
	uint64_t last_ms;   /* wall time of the last walk */
	uint64_t cpu_ns;    /* CPU time of the walks (the calling thread's, from begin to end) */
};

struct kvs_flusher;

/* Also tells the core that FLUSH can be answered. 0 or KVC_ENOMEM. */
int kvs_flush_create(struct kvs_core *core, struct kvs_flusher **out);
void kvs_flush_destroy(struct kvs_flusher *f); /* accepts NULL */

/* Local buffer the walk needs in work (below). */
#define KVS_FLUSH_LBUF 2560u
/* A bounded slice of the walk (at most KVS_FLUSH_SLICE buckets looked at)
 * through rm, a loopback to the core's region; work[0 .. work_len) is a
 * part of its local buffer (>= KVS_FLUSH_LBUF bytes, nothing in flight).
 * Starts a walk when the core wants one. enum kvs_flush_verdict, or a
 * negative code when rm broke (call again with a new connection). */
#define KVS_FLUSH_SLICE 16384u
int kvs_flush_run(struct kvs_flusher *f, struct kvi_rmem *rm, void *work, uint64_t work_len);

/* A walk is under way (the migrator is held meanwhile). */
int kvs_flush_active(const struct kvs_flusher *f);
/* Milliseconds until the flusher wants to be called again (0: now), at most max_ms. */
int kvs_flush_next_ms(const struct kvs_flusher *f, int max_ms);
void kvs_flush_stats(const struct kvs_flusher *f, struct kvs_flush_stats *out);

#endif
