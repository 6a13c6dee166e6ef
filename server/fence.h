/* Fencing: when a client is gone, release the bucket locks it still holds.
 *
 * A client that dies between locking a bucket and unlocking it would leave the
 * bucket locked for good. The server knows every client's id (= its lock owner
 * id, assigned at admission). When a client is gone, the control loop first
 * confirms its queue pair in the error state or destroys it
 * (kvi_listener_fence_peer: none of its late WRITEs can land), then queues
 * its id here; this module's thread releases every lock word naming it. What
 * the client had written under the lock is consistent either way: objects are
 * written before the slot that publishes them (layout.h I3).
 *
 * The thread owns everything slow, so that the control loop never waits:
 *  - Finding the locks: a scan of the index's lock words with the CPU (a
 *    read is fine; changing a word is the NIC's job), in slices of
 *    KVS_FENCE_SLICE buckets. Every client queued when a pass starts shares
 *    that pass; clients queued during it wait for the next one. Between
 *    slices the thread serves single-word clear requests and checks for stop.
 *  - Releasing: RDMA CAS(word -> word & MOVED) through the thread's own
 *    loopback connection (layout.h: with IBV_ATOMIC_HCA a CPU atomic is not
 *    atomic against the NIC's), batched per doorbell. The CAS compares the
 *    whole word, so a retried CAS can never release a lock someone took since.
 *  - Never skipping: a failed batch (post or completion error, timeout)
 *    drops the loopback, reconnects with backoff (forever, until destroy) and
 *    redoes the slice from fresh CPU reads. Connecting needs the control loop
 *    to accept, which it does while this thread waits.
 *
 * The queue cannot overflow: pending clients are a bitmap over every possible
 * id (ids are < 2^22: 512 KiB), so queueing never blocks, never allocates and
 * never drops a client (queueing one twice before its pass is one fencing).
 * Single-word clear requests go to a ring of KVS_FENCE_CLEAR_MAX; when it is
 * full the request is refused with KVC_EAGAIN (a lock waiter that still waits
 * reports again) instead of growing without bound on reports from clients.
 *
 * Geometry (bucket count, index offset) is the core's private copy
 * (kvs_core_geometry), read when a pass starts; the lock words are read at
 * kvs_core_region. Counters go to the core's statistics (kvs_core_add_fence).
 *
 * Transport-independent: the loopback comes from a connect function, the
 * verbs loopback in kvserver (kvs_fence_start) and the local transport in
 * unit tests, where faults can break it mid-pass. */
#ifndef KVS_FENCE_H
#define KVS_FENCE_H

#include <stdint.h>

#include "core.h"
#include "rmem.h"

#define KVS_FENCE_SLICE 65536u     /* buckets per scan slice (8 MiB of index) */
#define KVS_FENCE_CLEAR_MAX 4096u  /* queued single-word clear requests */

struct kvs_fence;

struct kvs_fence_opts {
	struct kvs_core *core; /* geometry, region, statistics */
	/* Make a loopback connection to the core's region: 0 with *out set (its
	 * client_id the id the server gave it), or a negative code (retried with
	 * backoff). Called on the fence thread only. */
	int (*connect)(void *arg, struct kvi_rmem **out);
	void *connect_arg;
	void (*connect_arg_free)(void *arg); /* at destroy; may be NULL */
	int op_timeout_ms;  /* one batch of CAS; 0 = 5000 */
	uint64_t slice;     /* buckets per slice; 0 = KVS_FENCE_SLICE */
};

/* What the fencer has done since it started. */
struct kvs_fence_stats {
	uint64_t fencings;   /* clients fenced (each queued id, once per pass) */
	uint64_t released;   /* lock words released for them */
	uint64_t cleared;    /* single words cleared (kvs_fence_clear_word) */
	uint64_t passes;     /* index scans */
	uint64_t retries;    /* batches redone after the loopback broke */
	uint64_t connects;   /* loopback connections made */
	uint64_t cpu_ns;     /* fence thread CPU time in passes and clears */
	uint64_t wall_ns;    /* wall time of those */
};

/* Start the thread (it connects the loopback at once). 0 or a code. */
int kvs_fence_create(const struct kvs_fence_opts *o, struct kvs_fence **out);

/* kvserver's fencer: a verbs loopback to host:port (the server's own
 * listening address) through device. */
int kvs_fence_start(struct kvs_fence **out, struct kvs_core *core, const char *host, const char *port,
		    const char *device);

/* Queue client_id for release of every lock word naming it. Never blocks;
 * call it only after the client's QP is confirmed in error (or destroyed).
 * 0, KVC_EINVAL (id 0 or > KVI_MAX_CLIENT_ID), KVC_ESERVERGONE (f is NULL:
 * no fencer). */
int kvs_fence_client(struct kvs_fence *f, uint32_t client_id);
/* The same, and *ticket (when not NULL) names the pass that releases its
 * locks: once kvs_fence_done(f) >= *ticket, no lock word names client_id
 * (server/ids.h recycles the id then). Passes are numbered from 1 in the
 * order they start; a pass that starts after a client was queued takes it. */
int kvs_fence_client_ticket(struct kvs_fence *f, uint32_t client_id, uint64_t *ticket);
/* The number of the last pass that finished (0: none yet, or f is NULL). */
uint64_t kvs_fence_done(struct kvs_fence *f);

/* Queue the release of one lock word that names no live client: the lock
 * word at region offset off (a bucket's first word, of an index the caller
 * found it in) becomes word & KVI_LOCK_MOVED, only if it still equals word
 * (which must be LOCKED with an owner). Never blocks. 0, KVC_EINVAL (off not
 * a bucket's, word not locked), KVC_EAGAIN (too many requests queued: ask
 * again later), KVC_ESERVERGONE (f is NULL). */
int kvs_fence_clear_word(struct kvs_fence *f, uint64_t off, uint64_t word);
/* The same for a word that is not a lock word at all (!kvi_lock_legal: a
 * stray WRITE's junk): CAS word -> to (a legal word: what the bucket's
 * index state says it must be). KVC_EINVAL for a legal word or an illegal to. */
int kvs_fence_repair_word(struct kvs_fence *f, uint64_t off, uint64_t word, uint64_t to);

/* Is client_id one of the fencer's own loopback connections (present or
 * past)? They never hold a lock and are not fenced. 0 for NULL. */
int kvs_fence_is_own(const struct kvs_fence *f, uint32_t client_id);
/* client_id left: if it was one of the fencer's own, forget it, so that the
 * id, once recycled (ids.h), is fenced like any client's. */
void kvs_fence_forget_own(struct kvs_fence *f, uint32_t client_id);

/* Wait until nothing is queued or running, up to timeout_ms: 0 or
 * KVC_ETIMEDOUT. For tests and shutdown. */
int kvs_fence_wait_idle(struct kvs_fence *f, int timeout_ms);

void kvs_fence_stats(struct kvs_fence *f, struct kvs_fence_stats *out);

/* Stop and join the thread (queued work is abandoned), close the loopback.
 * Accepts NULL. */
void kvs_fence_destroy(struct kvs_fence *f);

#endif
