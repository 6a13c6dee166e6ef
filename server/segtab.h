/* The segment table: the life cycle of every heap segment (docs/architecture.md
 * "Memory and reclamation: segments, extents, the reclaimer, eviction, expiry"). Server-private memory; nothing here is in the region.
 *
 *   FREE --grant--> OPEN --carving done, no open extent--> SEALED (two FIFOs)
 *        ^                                                   |
 *        |                                        settled: reclaim_begin
 *        |                                                   v
 *        +--quarantine over-- QUARANTINED <--reclaim_end-- RECLAIMING
 *        |                         ^                (failed: back to SEALED)
 *        +--index_take--> INDEX ---+ index_return (zeroed by the caller)
 *
 * INDEX: a whole segment holding one chunk of a grown index (layout.h
 * "Resize"; server/migrate.h). It never takes the reserve, is never sealed or
 * reclaimed, and comes back like a reclaimed segment: zeroed, then quarantined.
 *
 * Extents. Writers do not get whole segments: they get extents, carved from a
 * segment front to back. A writer's first extent is small (KVS_MIN_EXTENT) and
 * each next one doubles, up to a whole segment, so that a thousand one-shot
 * clients cost a few KiB each while a busy writer soon appends into whole
 * segments. Small extents of many writers share one "carving" segment; no two
 * writers ever get overlapping bytes. A writer holds at most one open extent:
 * asking for the next one seals the previous one (and gives back its unused
 * tail when nothing was carved after it), and so does leaving.
 *
 * Why a sealed segment must settle before it is reclaimed: a writer reserves
 * room for an object when its PUT starts and publishes the object (slot WRITE)
 * up to one operation deadline later, possibly after it moved to its next
 * extent. Clients never post anything past an operation's deadline (the server
 * tells them the longest deadline allowed, max_op), and what they post
 * executes within the transport's execution bound exec (exec_bound.h: a lost
 * packet is retransmitted for up to that long; the welcome states it and a
 * client whose QP cannot meet it refuses to run), so once a segment has been
 * sealed for settle_ns >= max_op + exec no new slot can come to point into it,
 * and a walk over its objects sees every object that will ever be referenced.
 * (The reclaimer also waits for an object no slot names whose bucket a live
 * writer has locked: reclaim.h.)
 *
 * Why quarantine (see also layout.h "Reuse"): a reader may have read a slot
 * pointing into a segment just before the reclaimer switched that slot away,
 * and read the object afterwards. Every read of an operation completes within
 * its deadline (max_op), so a segment is handed out again only after
 * quarantine_ns > 2 x max_op + exec (the factor covers a write posted just
 * before a deadline: its completion is waited for up to another max_op; exec
 * covers a write, such as a GET's access mark, that executes late).
 *
 * Not thread-safe: the core serialises every call. */
#ifndef KVS_SEGTAB_H
#define KVS_SEGTAB_H

#include <stdint.h>

#include "heap.h"

#define KVS_MIN_EXTENT (16u << 10)
/* S3-FIFO's small queue: clients' segments (new objects) are reclaimed first
 * while they hold more than this share of the heap; the reclaimer's own
 * segments (objects read since they were written: copied forward) form the
 * main FIFO. A key read once and never again spends little memory. */
#define KVS_SMALL_FIFO_PCT 10u
#define KVS_NO_SEG UINT32_MAX

/* A writer's open extent (embedded in the writer's record; zeroed = none). */
struct kvs_extent {
	uint64_t off;       /* region offset; 0 = no open extent */
	uint64_t len;       /* bytes */
	uint32_t seg;       /* segment number */
	uint32_t next_size; /* size of the next extent to ask for (grows) */
	uint64_t owner;     /* whom its bytes are charged to (opts.charge); 0 = nobody */
};

/* Who may take which free segments (kvs_segtab_grant). */
enum kvs_grant_kind {
	KVS_GRANT_CLIENT = 0, /* leaves the reserve to the reclaimer */
	KVS_GRANT_SERVER = 1, /* the reclaimer: a whole segment, may take the reserve */
	/* A client over its quota (core.h): leaves one more segment, so that a
	 * client within its share finds one even when a flooder got there first. */
	KVS_GRANT_OVER_QUOTA = 2,
};

struct kvs_segtab_opts {
	uint8_t *base;         /* region base */
	struct kvs_heap *heap; /* where free segments come from */
	uint64_t heap_off, segment_size, stride, nsegs;
	uint64_t settle_ns, quarantine_ns;
	unsigned reserve; /* free segments only privileged grants may take */
	int one_fifo;     /* no eviction: reclaim the oldest sealed segment of either FIFO */
	/* Per-owner accounting: called (may be NULL) with +bytes when an extent
	 * is granted to an owner, -bytes when its unused tail comes back, and
	 * -bytes when the segment it lies in is reclaimed. So the sum an owner
	 * got is what it holds: its open extent plus whatever it wrote that is
	 * not reclaimed yet. Called inside segtab calls: must not call back. */
	void (*charge)(void *arg, uint64_t owner, int64_t bytes);
	void *charge_arg;
};

struct kvs_segtab_counts {
	uint64_t free, open, sealed, reclaiming, quarantined;
	uint64_t index; /* segments holding index chunks (INDEX) */
	uint64_t carved_bytes; /* bytes handed out in segments that are not free */
	uint64_t grants, grants_deferred;
	uint64_t tails_returned; /* bytes given back from leaving writers' extents */
	uint64_t taken;          /* segments taken from the heap, ever */
};

struct kvs_segtab;

int kvs_segtab_create(const struct kvs_segtab_opts *o, struct kvs_segtab **out);
void kvs_segtab_destroy(struct kvs_segtab *t);

/* Seal x (if open), keeping the first `used` bytes (clamped to the extent),
 * then grant a new extent of at least need bytes (need <= segment size) and
 * store it in x, charged to x->owner. kind: enum kvs_grant_kind (SERVER: a
 * whole segment, and may take the reserve). The extent grows (doubles) only
 * when x's writer used at least half of its previous one; one that asks again
 * with less used gets half the size back (never below KVS_MIN_EXTENT), so a
 * client that does not fill what it has is not given ever more. 0, or
 * KVC_EAGAIN when no free segment is left for this grant (x is then sealed
 * and empty), or KVC_ENOMEM (no memory for the accounting; x unchanged). */
int kvs_segtab_grant(struct kvs_segtab *t, struct kvs_extent *x, uint64_t need, uint64_t used, int kind,
		     uint64_t now);

/* Seal x; its bytes after `used` go back to the carving segment when nothing
 * was carved after them. x becomes empty. */
void kvs_segtab_release(struct kvs_segtab *t, struct kvs_extent *x, uint64_t used, uint64_t now);

/* The oldest settled sealed segment of the small FIFO (clients' writes) while
 * it holds more than KVS_SMALL_FIFO_PCT of the heap or the main FIFO (the
 * reclaimer's copies) has none settled, else of the main one: moves it to RECLAIMING and
 * returns 0 with its region offset and the bytes ever carved from it (objects
 * lie only there). KVC_ENOTFOUND if there is none. */
int kvs_segtab_reclaim_begin(struct kvs_segtab *t, uint64_t now, uint64_t *off, uint64_t *len);

/* Finish reclaiming off. done: every slot pointing into it was switched away
 * and the reclaimer zeroed it: it is quarantined. Otherwise it goes back to the sealed
 * FIFO (at the tail when `rotate`, else at the head, to be tried first). */
void kvs_segtab_reclaim_end(struct kvs_segtab *t, uint64_t off, int done, int rotate, uint64_t now);

/* A free segment for an index chunk (not the reserve): 0 with its region
 * offset, or KVC_EAGAIN when no free segment beyond the reserve is left. */
int kvs_segtab_index_take(struct kvs_segtab *t, uint64_t *off);
/* Give back an index chunk taken with kvs_segtab_index_take, zeroed by the
 * caller: it is quarantined. KVC_EINVAL (nothing changed) when off is not one. */
int kvs_segtab_index_return(struct kvs_segtab *t, uint64_t off, uint64_t now);

/* Hand quarantined segments whose time is over back to the heap. */
void kvs_segtab_tick(struct kvs_segtab *t, uint64_t now);

/* Nanoseconds until the next quarantined segment leaves quarantine or (with
 * sealed_too) the oldest sealed one settles; UINT64_MAX if none is waiting. */
uint64_t kvs_segtab_next_due(const struct kvs_segtab *t, uint64_t now, int sealed_too);

void kvs_segtab_counts(const struct kvs_segtab *t, struct kvs_segtab_counts *out);

/* Segment number of a region offset inside the heap, or KVS_NO_SEG. */
uint32_t kvs_segtab_seg_of(const struct kvs_segtab *t, uint64_t off);

#endif
