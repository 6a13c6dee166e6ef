/* The server's own writers watch the locks they wait for.
 *
 * The reclaimer and the migrator lock buckets as clients do, and find them
 * held as clients do. A legal lock word that stays the same for a quarter of
 * an operation deadline is reported, exactly as a client reports it
 * (members.h "Lock reports"): over the writer's own loopback, so the event
 * loop judges it (clears a word naming no member, expels an owner that keeps
 * it past every deadline). Without this, a lock kept by a live client on a
 * bucket nobody else writes would hold a segment, or a resize, up for good.
 *
 * Junk words are not reported here: each writer repairs the ones it may
 * (reclaim.c repair_junk, migrate.c). A mark (layout.h "Resize") is nobody's
 * lock. A watch lasts one wait: a bucket seen free, or taken, is forgotten,
 * so only a word seen without a break for a quarter deadline is reported.
 * One report in flight per watch; its answer is only collected.
 * Owned by the writer's thread; not thread-safe. */
#ifndef KVS_LOCKWATCH_H
#define KVS_LOCKWATCH_H

#include <stdint.h>

#include "rmem.h"

#define KVS_LOCKWATCH_MAX 16u /* buckets watched at once; a full list forgets its oldest */

struct kvs_lockwatch {
	struct {
		uint64_t bucket, epoch, word, since;
	} e[KVS_LOCKWATCH_MAX];
	unsigned n;
	uint32_t seq;  /* the report in flight (0: none) */
	uint64_t sent; /* when it went out */
	uint64_t reports;
};

/* rm's writer found `word` in the lock word of bucket (index `epoch`),
 * at CLOCK_MONOTONIC ns `now`: watch it, and report it once it has stayed. */
void kvs_lockwatch_seen(struct kvs_lockwatch *w, struct kvi_rmem *rm, uint64_t bucket, uint64_t epoch, uint64_t word,
			uint64_t now);

/* The writer found bucket (index `epoch`) free, or took it: a wait, and
 * its watch, end there (a later wait starts afresh, as a client's does). */
void kvs_lockwatch_forget(struct kvs_lockwatch *w, uint64_t bucket, uint64_t epoch);

#endif
