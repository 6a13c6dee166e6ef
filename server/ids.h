/* Client ids: who may be named in a lock word, handed out at admission and
 * recycled, so that they never run out however long the server runs.
 *
 * An id is a lock owner (layout.h: 22 bits of the lock word), so it may be
 * handed out again only once nothing can name its previous holder any more:
 *  - the holder left (disconnected or expelled) and its queue pair was fenced
 *    or destroyed: no late WRITE or CAS of it can land (listener.h);
 *  - the fencer's pass that releases its lock words has finished
 *    (fence.h "tickets"): no lock word names it;
 *  - a hold time has passed since (the server's quarantine: longer than any
 *    operation or control request of the old holder can still be under way,
 *    and what a lock report about it can refer to).
 * The membership table (members.h) forgets the id, and the core charges
 * memory to an account that is not the bare id (core_grants.c), at the holder's
 * leave; so a recycled id inherits nothing.
 *
 * Order: a recycled id whose hold is over is preferred to one never used, so
 * the table of released ids stays as small as the joins of one hold time;
 * ids never used are taken only when none is ready. With ids < 2^22 and one
 * join per millisecond for ever, every join finds an id as long as fewer than
 * 2^22 - 1 clients are connected (or leaving) at once.
 *
 * Single-threaded (the control loop). Times are CLOCK_MONOTONIC ns passed in. */
#ifndef KVS_IDS_H
#define KVS_IDS_H

#include <stdint.h>

struct kvs_ids;

/* Ids 1..max_id; released ids wait hold_ns (and their fence ticket) before
 * they are handed out again. 0 or KVC_ENOMEM / KVC_EINVAL (max_id 0). */
int kvs_ids_create(struct kvs_ids **out, uint32_t max_id, uint64_t hold_ns);
void kvs_ids_destroy(struct kvs_ids *ids);

/* An id for a joining client, or 0 when every id is in use or still held.
 * fence_done: the fencer's finished tickets (kvs_fence_done). */
uint32_t kvs_ids_take(struct kvs_ids *ids, uint64_t now, uint64_t fence_done);

/* id's holder left at `now`; its locks are released once the fencer's
 * ticket `fence_ticket` is done (0: it held none, or nothing to wait for).
 * Tickets must not decrease from one call to the next (the fencer's grow).
 * 0, or KVC_EINVAL for an id that is not in use (nothing changes). */
int kvs_ids_put(struct kvs_ids *ids, uint32_t id, uint64_t now, uint64_t fence_ticket);

struct kvs_ids_stats {
	uint64_t taken;   /* ids handed out */
	uint64_t fresh;   /* ... of those, never used before */
	uint64_t reused;  /* ... recycled */
	uint64_t refused; /* kvs_ids_take found none */
	uint64_t in_use;  /* handed out and not put back */
	uint64_t waiting; /* put back, not handed out again yet */
};
void kvs_ids_stats(const struct kvs_ids *ids, struct kvs_ids_stats *out);

#endif
