/* The migrator: the server's side of an online index resize (layout.h
 * "Resize" is the protocol; this file does it).
 *
 * It runs on the reclaimer's thread, through the reclaimer's loopback
 * connection (kvs_reclaim_run calls it first): when a resize is wanted it
 * migrates instead of reclaiming, so reclamation never runs during a
 * migration (reclaim.c only knows the current index).
 *
 * A resize, from an index of N buckets (epoch E) to one of 2N (E + 1):
 *  1 Memory: ceil(2N x 256 / segment) chunks from the core
 *    (kvs_core_chunks_take: home pieces, then free segments). Short of them,
 *    reclamation runs (evicting) until they fit; with eviction off and no room
 *    the resize is dropped (GROW said NO already when it saw that).
 *  2 Start: every chunk zeroed and every lock word UNMIGRATED (the CPU: nobody
 *    knows the chunks yet), then published (kvs_core_set_indexes: new current,
 *    old previous, MIGRATING). Log "resize: epoch E -> E+1, N -> 2N buckets".
 *  3 Buckets, a few per doorbell (MIG_BATCH): CAS-lock old b through the NIC;
 *    the CPU reads its slots and, for each, the whole object (bounds, version,
 *    key length, checksum: kvi_obj_verify on a private copy) and hashes its
 *    key: the slot goes to new b or b + N, the bucket of the choice that put it
 *    in old b. A slot whose object does not verify, whose key has neither
 *    choice in b, or whose fingerprint is not its key's is dropped (counted,
 *    logged once per pass). The CPU writes both new buckets' 31 slots (they are
 *    UNMIGRATED: nobody else writes them), a release fence, then one doorbell:
 *    CAS old b -> MOVED, new b and b + N UNMIGRATED -> 0.
 *    A bucket found held by a client is skipped and retried on the next pass
 *    (its writer finishes within a deadline, or is fenced by its lease). A
 *    bucket found MOVED was finished by a doorbell whose completion we never
 *    saw (the loopback broke): its new buckets are unlocked again (CAS
 *    UNMIGRATED -> 0 is harmless when already done). If the loopback breaks,
 *    kvs_migrate_run fails; the caller reconnects and calls again: the state
 *    is here, not in the connection, and a bucket locked by the dead
 *    connection's id is released by fencing and then simply retried.
 *  4 End: published STABLE (previous kept). Log "resize done: ... X ms".
 *
 * Retiring (the old index's memory is reused): once STABLE and every member
 * with a live lease acknowledged the new epoch (kvs_core_acked), nobody
 * places an operation in the old index any more: it is unpublished
 * (kvs_core_set_indexes: prev none) and the next resize may begin. Its
 * memory waits until quarantine_ms passed since the later of the end and
 * the last ack -- so no operation that began on it can still run -- and the
 * fence thread is idle (a pass that began before may still scan it); then
 * its chunks are zeroed and returned (segments quarantined, home pieces to
 * the pool). Log "index of epoch E retired". Up to KVS_MIGRATE_RETIRED_MAX
 * indexes wait so (a small index doubles faster than a quarantine passes);
 * with every slot taken, the next is unpublished only after the oldest went.
 *
 * Load: while idle, the migrator reads KVS_MIGRATE_SAMPLE_BUCKETS random
 * buckets of the current index with the CPU (a smaller index whole) and asks for a resize
 * (kvs_core_grow) when more than load_pct % of the slots of its last
 * KVS_MIGRATE_SAMPLE_WINDOW samples are used. How often it samples follows
 * the load: every KVS_MIGRATE_SAMPLE_MS near the line, rarer the farther
 * the load is from it and the slower it rose since the last sample, at
 * least every KVS_MIGRATE_SAMPLE_MAX_MS (sample_ms() has the rule).
 *
 * Owned by one thread at a time (the reclaimer's). */
#ifndef KVS_MIGRATE_H
#define KVS_MIGRATE_H

#include <stdint.h>

#include "core.h"
#include "rmem.h"

#define KVS_DEFAULT_RESIZE_LOAD_PCT 87u /* kvserver --resize-load-pct */
/* A sample is 256 bucket reads by the CPU: 1024 cache lines, tens of
 * microseconds on a server (hundreds in an emulated guest). Every 10 ms
 * catches a small index that fills fast near the threshold, not past it,
 * and 256 buckets (7936 slots) keep the sampled load within ~0.4 % of the
 * true one, so that sampling often does not trigger early on noise. Far
 * from the line, or with a load that is not rising, sampling every 10 ms
 * would cost the idle server a few % of a core (kvserver used 5-12 % of one
 * with the data path busy): then a sample every second at most. */
#define KVS_MIGRATE_SAMPLE_MS 10u
#define KVS_MIGRATE_SAMPLE_MAX_MS 1000u
#define KVS_MIGRATE_SAMPLE_BUCKETS 256u
/* ... and the trigger judges the last 4 samples together (40 ms): 31 744
 * slots, ~0.2 % of noise, so that of the hundreds of samples taken while the
 * load creeps up, the first over the line is not one a little lucky. */
#define KVS_MIGRATE_SAMPLE_WINDOW 4u
#define KVS_MIGRATE_RETIRED_MAX 8u

struct kvs_migrate_opts {
	/* Slot occupancy (%) of sampled buckets that asks for a resize; 0 = off. */
	unsigned load_pct;
	/* 1 when the fence thread is idle (kvs_fence_wait_idle(f, 0) == 0);
	 * NULL: there is no fencer. */
	int (*fence_idle)(void *arg);
	void *fence_arg;
};

/* What kvs_migrate_run did. */
enum kvs_migrate_verdict {
	KVS_MIGRATE_IDLE = 0,     /* nothing under way: reclaim as usual */
	KVS_MIGRATE_ROOM = 1,     /* waiting for memory: reclaim (it makes the room) */
	KVS_MIGRATE_BUSY = 2,     /* migrating: call again (no reclamation meanwhile) */
	KVS_MIGRATE_RETIRING = 3, /* waiting to retire the old index: reclaim as usual */
};

struct kvs_migrate_stats {
	uint64_t resizes;  /* completed migrations */
	uint64_t retired;  /* old indexes retired */
	uint64_t moved;    /* slots copied to the new index */
	uint64_t dropped;  /* garbage slots not copied */
	uint64_t held;     /* lock attempts that found a bucket held (retried) */
	uint64_t passes;   /* passes over the old index */
	uint64_t urgent;   /* buckets migrated first because an insert waited for them */
	uint64_t samples;  /* load samples taken */
	uint64_t repaired; /* junk lock words of old buckets repaired (no lock word at all) */
};

struct kvs_migrator;

/* Also tells the core that GROW can be answered STARTED. 0 or KVC_ENOMEM. */
int kvs_migrate_create(struct kvs_core *core, const struct kvs_migrate_opts *o, struct kvs_migrator **out);
/* Accepts NULL. A migration under way stays published as it is (the server
 * is going away). */
void kvs_migrate_destroy(struct kvs_migrator *m);

/* Do a bounded slice of work through rm (a loopback connection to the core's
 * region; work[0 .. work_len) a part of its local buffer, at least
 * KVS_MIGRATE_LBUF bytes, nothing in flight). Returns enum
 * kvs_migrate_verdict, or a negative code when rm broke (call again with a
 * new connection). */
#define KVS_MIGRATE_LBUF 512u
int kvs_migrate_run(struct kvs_migrator *m, struct kvi_rmem *rm, void *work, uint64_t work_len);

/* Milliseconds until the migrator wants to be called again (0: now), at
 * most max_ms. */
int kvs_migrate_next_ms(const struct kvs_migrator *m, int max_ms);

/* While held (a flush walk runs: flush.h), a migration under way goes on
 * and finishes, but no resize starts and no index is unpublished, so the
 * indexes the walk took stay published and in place. */
void kvs_migrate_hold(struct kvs_migrator *m, int hold);

/* Old buckets left to migrate (0 when none is under way). */
uint64_t kvs_migrate_left(const struct kvs_migrator *m);
void kvs_migrate_stats(const struct kvs_migrator *m, struct kvs_migrate_stats *out);

#endif
