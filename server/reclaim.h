/* The reclaimer: turns the oldest sealed segments back into free memory
 * (docs/operations.md "Memory, as a cache"; Segcache's FIFO of segments with copy-forward of
 * what was read since it was written, i.e. FIFO-reinsertion / CLOCK).
 *
 * One segment at a time, work proportional to that segment, never to the
 * index:
 *   1. copy the segment's carved bytes to private memory and walk the objects
 *      in it (each verified by its checksum; a bad header skips 4 bytes);
 *   2. for each object, hash its key and look at its two buckets: no slot
 *      names this exact object -> superseded or deleted: dropped for free --
 *      unless a connected writer holds one of those buckets' locks: its
 *      commit naming the object may still land (a work request that
 *      executes late), so the walk is repeated after a moment, and the
 *      segment given back for later when that does not settle it;
 *   3. the rest, a batch of buckets at a time: CAS-lock each bucket and READ
 *      it (one doorbell), and with the lock held decide per object:
 *        slot changed meanwhile      -> dropped (never resurrected);
 *        expired                     -> slot cleared;
 *        read since written (access) -> copied into the server's own
 *                                       segment, slot switched old -> new;
 *        cold                        -> evicted: slot cleared -- unless
 *                                       live objects fill at most half the
 *                                       segment: then copied too (nothing
 *                                       needs to go to free it);
 *      then WRITE the changed slots and CAS-unlock (one doorbell);
 *   4. the segment is zeroed and quarantined (segtab.h).
 * Every bucket lock goes through the NIC on the server's loopback QP
 * (layout.h I1: a slot changes only under its bucket's lock; IBV_ATOMIC_HCA
 * makes CPU atomics useless against the NIC's). The CPU only reads the index
 * (a hint in step 2; the decision is made again under the lock).
 *
 * With eviction off (kvserver --no-evict) every live object is copied: the
 * reclaimer only compacts garbage away, and a segment with too little garbage
 * to be worth it is skipped.
 *
 * Owned by one thread (kvserver's reclaimer thread, or a test). */
#ifndef KVS_RECLAIM_H
#define KVS_RECLAIM_H

#include <stdint.h>

#include "core.h"
#include "rmem.h"

struct kvs_reclaim_hooks {
	void *arg;
	/* The segment was walked (live objects found by the unlocked look at
	 * the index), nothing locked yet. */
	void (*before_lock)(void *arg);
	/* Copies made, locks held, slots not yet switched: a test may run other
	 * clients' operations here to race the switch. */
	void (*before_switch)(void *arg);
};

struct kvs_reclaimer;

/* rm: a connection to the core's own region (the loopback; owned from now
 * on, also on failure). hooks may be NULL. 0 or KVC_ENOMEM. */
int kvs_reclaim_create(struct kvs_core *core, struct kvi_rmem *rm, const struct kvs_reclaim_hooks *hooks,
		       struct kvs_reclaimer **out);
/* Seals the reclaimer's own open segment; accepts NULL. */
void kvs_reclaim_destroy(struct kvs_reclaimer *r);

/* The migrator (migrate.h) that kvs_reclaim_run runs first, through this
 * reclaimer's loopback; not owned (it outlives reconnections); NULL: none. */
struct kvs_migrator;
void kvs_reclaim_set_migrator(struct kvs_reclaimer *r, struct kvs_migrator *m);

/* The flusher (flush.h) that kvs_reclaim_run runs first, through this
 * reclaimer's loopback; not owned (it outlives reconnections); NULL: none. */
struct kvs_flusher;
void kvs_reclaim_set_flusher(struct kvs_reclaimer *r, struct kvs_flusher *f);

/* Run a flush's next slice, if a walk is wanted or runs; then the
 * migrator's next slice, if any (while it migrates, nothing else);
 * then reclaim while the core wants memory (its watermarks, or a resize's
 * room) and a settled sealed segment exists. Returns the segments
 * reclaimed, or a negative code when the loopback broke (the caller
 * reconnects). kvs_reclaim_one does nothing during a migration. */
int kvs_reclaim_run(struct kvs_reclaimer *r);

/* Reclaim the oldest settled sealed segment whatever the watermarks say:
 * 1 done, 0 none ready, 2 given back (postponed, or not worth compacting),
 * 3 given back until a quarantine ends (no room to copy live objects to),
 * or a negative code. */
int kvs_reclaim_one(struct kvs_reclaimer *r);

/* Test hook (tests/fuzz): steps 1 and 2 over seg[0, len) as if it were the
 * segment at region offset off (len <= segment_size), read in place so that a
 * sanitizer sees any read outside it; the index is the core's. Returns how
 * many objects some slot names (the walk's items); the first max of them go
 * to pos[] and olen[]. */
uint32_t kvs_reclaim_walk_for_test(struct kvs_reclaimer *r, const void *seg, uint64_t off, uint64_t len,
				   uint32_t *pos, uint32_t *olen, uint32_t max);

#endif
