/* The server core: formats the region and answers control requests.
 * Transport-independent: kvserver feeds it requests received over verbs, the
 * local in-process transport calls kvs_core_ctrl directly.
 *
 * What the core owns and trusts:
 *  - The geometry (kvs_core_geometry): where index and heap are, and the
 *    random hash seed; what kvserver states in every welcome. The region's
 *    superblock is written from it once at create and never read back: clients can
 *    RDMA-WRITE anywhere in the region, so nothing in it is trusted by the
 *    server, and no server decision depends on region contents.
 *  - The segment table (heap-private memory): which segment is free, granted
 *    to which client and still open for appends, or sealed.
 *  - The heap allocator (heap.h), whose metadata is outside the region too.
 * The region memory itself belongs to the caller (kvserver's kvs_region) and
 * must outlive the core.
 *
 * Segment life cycle: segtab.h (extents, sealing, settling, quarantine).
 * Reclaiming sealed segments is the reclaimer's job (reclaim.h); the core
 * hands it segments, gives it a segment to copy live objects into, and keeps
 * its counters, so that one STATS request reports everything.
 *
 * Threading: every function may be called from any thread; one mutex inside
 * serialises them (the control loop and the reclaimer thread share the core;
 * neither holds it across an RDMA operation).
 *
 * Code: core.c (create, layout, control-request dispatch), core_grants.c
 * (accounts, hosts, quotas, client grants), core_reclaim.c (watermarks, the
 * reclaimer's side), core_resize.c (the published indexes, GROW, resize
 * phases, the chunk pool, acks), core_stats.c (counters, STATS); core_impl.h
 * is what they share. This one header declares them all: they are one object
 * under one mutex, and every caller takes it whole. */
#ifndef KVS_CORE_H
#define KVS_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "errbuf.h"
#include "heap.h"
#include "indexes.h"
#include "segtab.h"
#include "layout.h"
#include "wire.h"

#define KVS_DEFAULT_SEGMENT_SIZE (1u << 20)
#define KVS_MIN_SEGMENT_SIZE KVI_MIN_SEGMENT_SIZE
#define KVS_MAX_SEGMENT_SIZE KVI_MAX_SEGMENT_SIZE
#define KVS_MIN_BUCKETS 64u /* floor of the default; an explicit count may go down to 2 */
/* Default index size: one bucket (31 slots) per KVS_BYTES_PER_BUCKET bytes of
 * region, i.e. the index takes 1/16 of the region and there is one slot per
 * ~132 bytes: about one per object for small items (16 B keys, 100 B values
 * take 140 bytes), so the index fills up around when the heap does. */
#define KVS_BYTES_PER_BUCKET 4096u
/* Operation deadline clients must keep (they clamp their own to it), and the
 * quarantine of reclaimed segments, which must exceed twice that plus the
 * transport's execution bound (segtab.h; kvserver's: 2 x 1000 + 587 + 10). */
#define KVS_DEFAULT_MAX_OP_MS 1000u
#define KVS_DEFAULT_QUARANTINE_MS 3000u
/* Slack for packets already on the wire when a deadline passes. */
#define KVS_QUARANTINE_MARGIN_MS 10u
/* Reclamation starts when free (plus quarantined) segments fall below
 * low_pct of the heap and stops at high_pct. */
#define KVS_DEFAULT_RECLAIM_LOW_PCT 2u
#define KVS_DEFAULT_RECLAIM_HIGH_PCT 4u
/* Free segments client grants leave to the reclaimer (it needs somewhere to
 * copy live objects to). */
#define KVS_RESERVE_SEGMENTS 1u
/* A client's quota (see kvs_core_ctrl): this share of the heap, and at least
 * two segments (a writer alone holds its open extent, up to a segment, and
 * the segment it just sealed: less would refuse it for moving on). A quarter
 * leaves three quarters to everyone else and the reclaimer even when one
 * client floods, and is far above what a client holds among a handful of
 * equal writers, where a quota should never bite. */
#define KVS_DEFAULT_CLIENT_QUOTA_PCT 25u
/* How long a client that was refused memory while within half its quota
 * counts as starving (below: the window is at least this, and at least
 * max-op-ms): longer than a waiting client's gaps between asking again. */
#define KVS_STARVING_MIN_MS 200u

struct kvs_core_opts {
	uint64_t buckets;      /* 0 = default: region_size / KVS_BYTES_PER_BUCKET, at least 64; else >= 2 */
	uint64_t segment_size; /* bytes, 0 = default 1 MiB; power of two, 64 KiB .. 1 MiB */
	uint32_t max_op_ms;    /* 0 = default */
	uint32_t quarantine_ms; /* 0 = default (at least 2 x max_op_ms + exec_ms + margin) */
	/* The transport's execution bound (exec_bound.h): how long after it
	 * was posted a client's work request may still execute. Settle and
	 * quarantine add it; the welcome states it. kvserver: KVI_EXEC_BOUND_MS;
	 * 0 for the in-process transport, which executes at once. */
	uint32_t exec_ms;
	unsigned reclaim_low_pct, reclaim_high_pct; /* 0 = defaults; 1..90, low < high */
	int no_evict; /* keep every live item: reclamation only compacts garbage away */
	unsigned client_quota_pct; /* 0 = default (KVS_DEFAULT_CLIENT_QUOTA_PCT); 1..100 of the heap */
	/* Clients reach the region in-process (the local transport): no packet
	 * can be on a wire when a deadline passes, so the quarantine needs no
	 * margin over twice the operation deadline. */
	int in_process;
	/* Seed of every key hash (hash.h). 0 = random, from getrandom(2), as a
	 * server should; tests fix it to place keys on purpose. */
	uint64_t hash_seed;
	/* Called (with the core's lock held: do not call back into the core)
	 * when reclamation is wanted, so that kvserver can wake its reclaimer. */
	void (*wake)(void *arg);
	void *wake_arg;
};

struct kvs_core;

/* Compute the layout for a region of region_size bytes at address base
 * without touching memory: fills g as kvs_core_create would (but for a
 * random hash seed, which only kvs_core_create draws). Any
 * page-aligned base gives the same layout, so kvserver validates its flags
 * with base 0 before mapping anything. 0, or KVC_EINVAL with the reason in e. */
int kvs_core_plan(uintptr_t base, uint64_t region_size, const struct kvs_core_opts *o,
		  struct kvi_geometry *g, struct kvi_errbuf *e);

/* Format [region_base, +region_size) (superblock, zeroed index) and set up the
 * heap allocator over its heap area. region_base must be page-aligned; o may be
 * NULL for defaults. 0, or a negative KVC_ code with the reason in e. */
int kvs_core_create(void *region_base, uint64_t region_size, const struct kvs_core_opts *o,
		    struct kvs_core **out, struct kvi_errbuf *e);

/* Free everything the core owns (not the region); accepts NULL. */
void kvs_core_destroy(struct kvs_core *c);

/* Handle one control request from client_id (a kvi_ctrl_handler; core is a
 * struct kvs_core *). Fills resp (its seq echoes req->seq) and returns 0 --
 * including for refusals the client should hear about, such as
 * KVI_CTRL_ERROR/KVC_ENOMEM -- or returns a negative code for a request no
 * well-behaved client sends (a server-to-client type, an unknown type, client
 * id 0): the transport then disconnects that client, never the server.
 *
 *   SEG_REQ    seg_req (wire.h): the current extent's tail past `used` may
 *              be given back
 *           -> SEG_GRANT seg_grant: off 4-byte aligned, len >= need, and
 *              the extent's CAS uniques from cas_base (layout.h "CAS uniques")
 *           -> ERROR status = KVC_EAGAIN (no free segment right now:
 *              reclamation is running; ask again shortly), KVC_ENOMEM (live
 *              data fills the heap and eviction is off, or no reclaimer
 *              exists), KVC_EINVAL (need larger than a segment),
 *              KVC_EQUOTA (over quota while another client starves, below)

 *   SEG_RETURN seg_return (the client leaves)
 *           -> SEG_RETURNED
 *   STATS_REQ  stats_req -> STATS arg[0..4] as kvi_stats_page() lays out.
 *
 * Quota. What a client holds is every byte granted to it that is not back:
 * its open extent, and its sealed extents until their segment is reclaimed
 * (garbage and live items alike: the server cannot tell them apart before
 * reclaiming, and a segment's bytes are only free again then). One client
 * alone may fill the whole heap -- a cache with one writer is full of that
 * writer's items, and reclamation frees them in FIFO order, not by client --
 * so the quota binds only when it takes memory from others:
 *  - a client over its quota never takes the last free segment before the
 *    reserve (KVS_GRANT_OVER_QUOTA): it waits (KVC_EAGAIN) instead, so a
 *    newcomer's first grant finds room even after a flood;
 *  - while a client within half its quota is starving (it was answered
 *    KVC_EAGAIN in the last max(max-op-ms, KVS_STARVING_MIN_MS)), any other
 *    client over its quota gets nothing, so that what reclamation frees goes
 *    to the starving one: KVC_EQUOTA if it asks while it has used less than
 *    half of its open extent (the extent stays open: it asks for memory it
 *    does not need), else KVC_EAGAIN (a writer that fills what it gets --
 *    or claims to -- waits its turn; its PUT is delayed, not failed: equal
 *    writers in a small heap hold unequal shares for moments, and that must
 *    not fail their PUTs).
 * A grant may take a client past its quota by one extent (at most a segment).
 * A client that reconnects is a new client (ids are never reused). With one
 * shared secret there is no identity beyond the peer's address, so where the
 * transport knows it (kvs_core_client_host) "what a client holds" is what
 * every connection from that host holds together: N connections of one
 * process share one quota. Without an address (the in-process transport)
 * the quota bounds the connection alone. The server's own loopbacks
 * (reclaimer, fencer) take no client grants and name no host. */
int kvs_core_ctrl(void *core, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* Bytes client_id holds (core.h "Quota"); 0 for an unknown client. */
uint64_t kvs_core_client_held(struct kvs_core *c, uint32_t client_id);

/* client_id connected from `host` (its IP address as text; NULL, "" or "?":
 * unknown): from now on its holdings count toward that host's (core.h
 * "Quota"). 0, or KVC_ENOMEM (then it stays alone). */
int kvs_core_client_host(struct kvs_core *c, uint32_t client_id, const char *host);
/* What the quota compares for client_id: its host's holdings, or its own. */
uint64_t kvs_core_host_held(struct kvs_core *c, uint32_t client_id);

/* client_id is gone: seal its open extent (objects stay readable until their
 * segment is reclaimed). */
void kvs_core_client_left(struct kvs_core *c, uint32_t client_id);

/* What reclaiming one segment did (reclaim.c fills it, the core adds it up). */
struct kvs_reclaim_stats {
	uint64_t segments;          /* reclaimed and quarantined */
	uint64_t aborted;           /* walks that had to give a segment back */
	uint64_t dropped;           /* objects no slot pointed to: superseded or deleted */
	uint64_t moved;             /* live and accessed: copied forward */
	uint64_t evictions;         /* live and cold: slot cleared */
	uint64_t evicted_unfetched; /* evicted without ever having been read */
	uint64_t expired;           /* expired items whose slot was cleared */
	uint64_t expired_unfetched; /* of those, never read */
	uint64_t lock_retries;      /* bucket locks found held by a client */
	uint64_t junk_repaired;     /* lock words holding junk (no lock word at all), repaired */
	uint64_t cpu_ns;            /* reclaimer thread CPU time */
};

/* The reclaimer's side. Segments are named by their region offset. */
int kvs_core_reclaim_wanted(struct kvs_core *c);
/* kvs_segtab_reclaim_begin / _end, under the core's lock; end also adds st. */
int kvs_core_reclaim_begin(struct kvs_core *c, uint64_t *off, uint64_t *len);
void kvs_core_reclaim_end(struct kvs_core *c, uint64_t off, int done, int rotate,
			  const struct kvs_reclaim_stats *st);
/* The fencer's counters (fence.h), for STATS: clients fenced, lock words
 * released for them, fence thread CPU time. */
void kvs_core_add_fence(struct kvs_core *c, uint64_t fencings, uint64_t released, uint64_t cpu_ns);
/* The reclaimer's own append extent (whole segments, may use the reserve).
 * 0 or KVC_EAGAIN. */
int kvs_core_server_extent(struct kvs_core *c, struct kvs_extent *x, uint64_t used);
void kvs_core_server_release(struct kvs_core *c, struct kvs_extent *x, uint64_t used);
/* Release quarantined segments whose time is over; returns ms until
 * something is due (a quarantine ends; or, while reclamation is wanted, the
 * oldest sealed segment settles), at most max_ms. */
int kvs_core_tick(struct kvs_core *c, int max_ms);
int kvs_core_no_evict(const struct kvs_core *c);
/* A reclaimer exists (kvs_reclaim_create says so): until then a heap with
 * no free segment answers grants KVC_ENOMEM, since nothing would make room. */
void kvs_core_attach_reclaimer(struct kvs_core *c);
/* What clients are told at join (wire.h welcome). */
void kvs_core_limits(const struct kvs_core *c, uint32_t *max_op_ms, uint32_t *quarantine_ms, uint16_t *flags);
/* The execution bound settle and quarantine assume (opts.exec_ms): the
 * welcome states it, and a client whose QP cannot meet it refuses to run. */
uint32_t kvs_core_exec_ms(const struct kvs_core *c);
/* The compaction (no-evict) reclaimer found nothing worth compacting: client
 * grants that find no room answer KVC_ENOMEM instead of KVC_EAGAIN for the
 * next 200 ms (then the reclaimer is asked to look again). */
void kvs_core_set_full(struct kvs_core *c);

/* The region's first byte (the caller's memory; the reclaimer reads objects
 * and copies live ones with the CPU, and changes slots only through the NIC). */
uint8_t *kvs_core_region(const struct kvs_core *c);

/* The layout as the core formatted it (its private copy, never the region's). */
const struct kvi_geometry *kvs_core_geometry(const struct kvs_core *c);

/* The indexes (indexes.h): the most chunks any index of this region can have
 * (room to give kvs_core_index); a copy of index `which` (0 current, 1
 * previous; KVC_ENOTFOUND when there is none); the current epoch and state
 * (what a LEASE states); byte offset of a bucket of the current index. */
uint32_t kvs_core_max_chunks(const struct kvs_core *c);
int kvs_core_index(struct kvs_core *c, int which, struct kvi_index *out, uint64_t *chunks, uint32_t cap);
void kvs_core_index_status(struct kvs_core *c, uint64_t *epoch, enum kvi_index_state *state);
uint64_t kvs_core_bucket_off(struct kvs_core *c, uint64_t bucket);
/* kvs_indexes_set under the core's lock: what INDEX answers and LEASEs
 * state from now on (the migrator's, and tests' that stage a resize). */
int kvs_core_set_indexes(struct kvs_core *c, const struct kvi_index *cur, const struct kvi_index *prev,
			 enum kvi_index_state state);
/* kvs_indexes_bucket under the core's lock. */
int kvs_core_bucket_of_epoch(struct kvs_core *c, uint64_t epoch, uint64_t bucket, uint64_t *off);

/* Resizing (migrate.h "Resize"). A resize is wanted (a client's GROW, or the
 * load sampler), then running (migrating, then waiting to retire the old
 * index); the next may be wanted only once the previous one retired. */
enum kvs_resize_phase {
	KVS_RESIZE_IDLE = 0,
	KVS_RESIZE_WANTED,  /* the migrator starts it once its memory is there */
	KVS_RESIZE_RUNNING, /* migrating, or the old index not yet retired */
};
/* A migrator exists (kvs_migrate_create says so): until then GROW answers
 * KVI_GROW_NO. */
void kvs_core_attach_migrator(struct kvs_core *c);
/* GROW (kvs_core_ctrl) from a client: grow.epoch = the epoch of the index it
 * found full, grow.full_pair = the full pair's buckets + 1 (0: none; wire.h).
 * Nothing it claims is believed: the index grows only when every bucket it
 * names is full now (read with the CPU) and a sample of
 * KVS_GROW_SAMPLE_BUCKETS buckets (a smaller index whole) has at least
 * KVS_GROW_MIN_LOAD_PCT % of its slots in use -- two-choice hashing fills
 * ~90 % of them before a pair overflows, so a real need is never refused,
 * while GROWs against an index that is not full double nothing. A refused
 * GROW is answered KVI_GROW_NO, which the client takes as "cannot grow"
 * (evict, or KVC_EINDEXFULL). The load sampler (migrate.h) asks with
 * kvs_core_grow, which checks only memory. */
#define KVS_GROW_SAMPLE_BUCKETS 64u
#define KVS_GROW_MIN_LOAD_PCT 50u
/* Ask for a resize of the index of `epoch` (what GROW does): enum
 * kvi_grow_verdict. STARTED also while one is under way; NO when memory
 * cannot hold the next index even by eviction (see can_grow in core_resize.c), or
 * with no migrator; STALE when epoch is not the current one. */
uint64_t kvs_core_grow(struct kvs_core *c, uint64_t epoch);
enum kvs_resize_phase kvs_core_resize_phase(struct kvs_core *c);
/* Old buckets clients found full while they wait for their migration (a
 * GROW naming the previous index and a bucket), newest first, up to max;
 * at most KVS_URGENT_MAX are kept (more are dropped: the pass reaches them). */
#define KVS_URGENT_MAX 64u
unsigned kvs_core_urgent_take(struct kvs_core *c, uint64_t *buckets, unsigned max);
void kvs_core_set_resize_phase(struct kvs_core *c, enum kvs_resize_phase p);
/* The resize's old index is unpublished: IDLE, or WANTED at once when a GROW
 * came while it ran (and the index can grow). */
void kvs_core_resize_done(struct kvs_core *c);
/* Take n index chunks (all or none): home pieces first, then free segments
 * beyond the reserve (segtab INDEX). 0; KVC_EAGAIN when there is not room
 * yet (reclamation is asked to make it: kvs_core_reclaim_wanted says so
 * until the chunks would fit); KVC_ENOMEM when eviction is off and the
 * room will not come. */
int kvs_core_chunks_take(struct kvs_core *c, uint32_t n, uint64_t *chunks);
/* Give back zeroed chunks of a retired index: segments are quarantined,
 * home pieces go to the pool. 0, or a code (a chunk was not ours: logged). */
int kvs_core_chunks_return(struct kvs_core *c, const uint64_t *chunks, uint32_t n);
/* Acknowledgements of the current epoch (kvserver: its members renew their
 * leases naming the epoch they use). Once required, an old index retires only
 * when kvs_core_set_acked said that every member uses the new epoch (and
 * when: the later ack); without, only its quarantine counts (local
 * transport, tests). kvs_core_acks_wanted: 1 while a previous index waits for
 * the acks of *epoch (the current one). kvs_core_acked: may the index before
 * `epoch` retire as far as acks go, and since when (*at_ns, 0 if always). */
void kvs_core_require_acks(struct kvs_core *c);
int kvs_core_acks_wanted(struct kvs_core *c, uint64_t *epoch);
void kvs_core_set_acked(struct kvs_core *c, uint64_t epoch, uint64_t at_ns);
int kvs_core_acked(struct kvs_core *c, uint64_t epoch, uint64_t *at_ns);
uint32_t kvs_core_quarantine_ms(const struct kvs_core *c);

/* flush_all (flush.h "Flush" has the semantics; FLUSH in wire.h). The
 * core keeps what was asked and answers FLUSH at once, in O(1) whatever is
 * asked (requests coalesce: one walk wanted, one delayed flush pending);
 * the walk is the flusher's (flush.c), on the reclaimer's thread. Without
 * a flusher (kvs_core_attach_flusher), FLUSH is answered KVC_ENOTSUP.
 *   FLUSH flush{delay_ms 0, ticket 0}  -> FLUSHED{ticket = the next walk to
 *         start, done}: done >= ticket once it is over
 *   FLUSH flush{delay_ms > 0, ticket 0} -> FLUSHED{ticket 0, due_ms}: the
 *         pending flush is replaced (the latest request decides)
 *   FLUSH flush{ticket t}              -> FLUSHED{t, done, walked}: how it stands
 *   (t beyond the next walk, or a delay with a ticket: KVC_EINVAL). */
void kvs_core_attach_flusher(struct kvs_core *c);
int kvs_core_has_flusher(struct kvs_core *c);
/* The flusher's side: start a walk if one is wanted (or the delayed flush
 * is due at mono ns `now`): 1 with its ticket, else 0; its progress; its
 * end (items: the slots it cleared). */
int kvs_core_flush_begin(struct kvs_core *c, uint64_t now, uint64_t *ticket);
void kvs_core_flush_progress(struct kvs_core *c, uint64_t walked);
void kvs_core_flush_end(struct kvs_core *c, uint64_t items);
/* Milliseconds until a walk should start (0: now), at most max_ms. */
int kvs_core_flush_next_ms(struct kvs_core *c, uint64_t now, int max_ms);

struct kvs_core_stats {
	uint64_t segments_total; /* heap_bytes / stride (segment size + one page, heap.h) */
	uint64_t segments_granted; /* open + sealed + reclaiming (holding objects) */
	uint64_t segments_free, segments_open, segments_sealed, segments_quarantined;
	uint64_t heap_bytes;
	uint64_t index_bytes; /* current and previous index */
	uint64_t segments_index; /* heap segments holding index chunks */
	uint64_t carved_bytes;   /* handed out to writers and not yet reclaimed */
	uint64_t grants, grants_deferred, grants_refused; /* refused: KVC_ENOMEM or KVC_EQUOTA */
	uint64_t grants_over_quota;                        /* of those, KVC_EQUOTA */
	uint64_t grants_throttled; /* deferred (counted there too): over quota while another starves */
	uint64_t quota_bytes;                              /* one client's quota */
	uint64_t tails_returned;
	uint64_t clients; /* clients holding an open extent */
	struct kvs_reclaim_stats rc;
	uint64_t fencings, fence_released, fence_cpu_ns; /* kvs_core_add_fence */
	uint64_t resizes;       /* index resizes completed */
	uint64_t index_buckets; /* of the current index */
	uint64_t index_epoch;
	/* memcached's counters, as the clients reported them (COUNTS). */
	uint64_t counts[KVI_COUNT_N];
	uint64_t flush_requests, flushes, flushed; /* FLUSH requests accepted; walks done; slots cleared */
};
void kvs_core_stats(struct kvs_core *c, struct kvs_core_stats *out);
/* The wire's statistics (server_stats.h) from st, as STATS reports them and
 * the metrics endpoint shows them; all but KVI_STAT_CPU_NS (0 here), which
 * STATS takes from the process. */
void kvs_core_stat_values(const struct kvs_core_stats *st, uint64_t v[KVI_STAT_COUNT]);

/* Log fields (logfmt): "segments_open=3 segments_sealed=1 ... evictions=0". */
void kvs_core_summary(struct kvs_core *c, char *buf, size_t len);

/* The heap allocator, for its statistics (tests prove with them where
 * jemalloc's memory came from). */
const struct kvs_heap *kvs_core_heap(const struct kvs_core *c);

#endif
