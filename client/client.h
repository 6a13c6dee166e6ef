/* libkvclient internals: the handle, the per-operation state machines and the
 * engine that drives them. Nothing here is exported.
 *
 * Every operation is a small state machine. Each state posts exactly one batch
 * (one doorbell) through the remote-memory interface and waits for it; the
 * batch's completion is one round trip and moves the machine on. Operations of
 * one handle run interleaved (up to `depth` at once), each with its own slice
 * of the registered local buffer, so nothing is shared between them but the
 * handle's segment cursor and location cache, both touched only by the thread
 * that owns the handle.
 *
 * Ownership: the handle owns its kvi_rmem (and so the local buffer); an
 * operation state (kvi_opst) owns its scratch slice from kvc_submit until the
 * operation completes; the caller's kvc_op and its buffers are the library's
 * for the same span. */
#ifndef KVI_CLIENT_H
#define KVI_CLIENT_H

#include <stdint.h>

#include "hash.h"
#include "kvclient.h"
#include "layout.h"
#include "locache.h"
#include "rmem.h"

#define KVI_MAX_CAND (2 * KVI_SLOTS_PER_BUCKET)
#define KVI_VERIFY_TRIES 8 /* reads that fail verification before KVC_ECORRUPT */
#define KVI_MARKS 32       /* access marks waiting for a doorbell to ride in */
/* Each operation slot's object area starts this small (in the handle's main
 * buffer) and grows, in its own registered buffer, only when the slot meets a
 * larger object: a handle pins memory for what it carries, not depth times
 * the largest object a server could hold. */
#define KVI_OBJ_AREA_MIN 4096u
/* A cached PUT reads the header and key of the object its cached slot names
 * (op_write.c), in the lock doorbell: room for the longest key, 64-byte rounded. */
#define KVI_KEYHEAD_AREA 320u
_Static_assert(sizeof(struct kvi_obj_hdr) + KVI_MAX_KEY <= KVI_KEYHEAD_AREA, "a header and key fit");

/* An access mark: a GET read an object whose access byte was 0, and will set
 * it (layout.h "Access tracking") by a 1-byte WRITE posted in the next
 * doorbell this handle rings anyway. A mark rides only while the GET that
 * made it could still have posted it (its deadline): later, the object's
 * segment might have been reclaimed and reused (segtab.h), and the WRITE
 * would land in someone else's bytes. Late marks are dropped (sampling). */
struct kvi_mark {
	uint64_t off;      /* region offset of the access byte */
	uint64_t deadline; /* ns */
};

enum kvi_state {
	KVI_ST_FREE = 0,
	KVI_ST_GET_CACHED,   /* READ cached slot word + object */
	KVI_ST_GET_BUCKETS,  /* READ both buckets */
	KVI_ST_GET_OBJECTS,  /* READ fingerprint-matching objects */
	KVI_ST_W_LOCK,       /* [WRITE object] + CAS-lock and READ both buckets */
	KVI_ST_W_LOCK_CACHED, /* [WRITE object] + CAS-lock and READ the cached bucket */
	KVI_ST_W_KEYCHECK,   /* READ fingerprint-matching objects under the locks */
	KVI_ST_W_COMMIT,     /* WRITE slot + CAS-unlock */
	KVI_ST_W_RELEASE,    /* CAS-unlock without change */
	KVI_ST_W_EXPCHECK,   /* both buckets full: READ the headers of their objects for an expired one */
	KVI_ST_W_GRANT,      /* PUT waiting for the server to have memory (nothing posted yet) */
	KVI_ST_BACKOFF,      /* waiting to retry after a lock conflict */
	/* Resize (op_resize.c; layout.h "Resize"). */
	KVI_ST_GET_OLD,      /* mixed mode: READ the old bucket(s) of unmigrated choices */
	KVI_ST_GET_RENEW,    /* an old bucket was MOVED meanwhile: READ the new one(s) again */
	KVI_ST_W_LOCK_OLD,   /* mixed mode: CAS-lock and READ the old bucket(s) of unmigrated choices */
	KVI_ST_STALE,        /* met a mark its index view cannot explain: wait for a new view (nothing posted) */
	KVI_ST_GROW,         /* both buckets full: asked the server to grow; wait for a new index (nothing posted) */
};

/* What a writer does once its locks are released (KVI_ST_W_RELEASE). */
enum kvi_after_release {
	KVI_AFTER_FINISH = 0, /* finish with st->result / st->kind */
	KVI_AFTER_RETRY,      /* a lock conflict: back off (none after a stale cache hint: lock_tries 0) */
	KVI_AFTER_RETRY_NOW,  /* an old bucket migrated under us: start over at once */
	KVI_AFTER_STALE,      /* wait for a new index view, then start over (KVI_ST_STALE) */
	KVI_AFTER_GROW,       /* ask the server to grow, wait (KVI_ST_GROW) */
};

/* What a lock word read (or returned by a lock CAS) in an operation's bucket
 * means for it (kvi_lock_mark). */
enum kvi_rmark {
	KVI_RMARK_NONE,   /* no resize mark: free, or held by a writer */
	KVI_RMARK_FOLLOW, /* UNMIGRATED in a new bucket, MOVED in an old one: go to the other index */
	KVI_RMARK_STALE,  /* a mark our view of the indexes cannot explain: fetch them, start over */
};

/* A slot whose fingerprint matched: an object to read and check. */
struct kvi_cand {
	uint64_t slot;
	uint32_t which; /* 0 or 1: which of the operation's buckets */
	uint32_t idx;   /* slot index in that bucket */
	uint32_t len;   /* bytes to READ */
	uint32_t loff;  /* where in the object area it was read to */
};

/* What an object read says about our key. */
enum kvi_objcheck {
	KVI_OBJ_BAD,     /* failed verification: torn, zeroed or corrupt */
	KVI_OBJ_OTHER,   /* another key's object */
	KVI_OBJ_MATCH,   /* our key, alive */
	KVI_OBJ_EXPIRED, /* our key, expired */
	KVI_OBJ_UNSURE,  /* our key; it expired while the READ was in flight: read again */
};

struct kvi_opst {
	struct kvc_op *op; /* NULL when free */
	int state;
	unsigned index; /* in the handle's table; the batches' cookie */
	struct kvi_keyhash kh;
	unsigned rtt;          /* round trips so far */
	unsigned verify_tries; /* reads that failed verification */
	unsigned lock_tries;   /* lock attempts that found a bucket held */
	uint64_t start;        /* ns: when the operation was submitted */
	uint64_t deadline;     /* ns: the operation fails KVC_ETIMEDOUT after this */
	uint64_t not_before;   /* ns: KVI_ST_BACKOFF retries at this time */
	uint64_t posted;       /* ns: when the batch in flight was posted */
	uint64_t slot_posted;  /* GET: when the READ of the slot word(s) it uses was posted */
	/* Writer: the lock word it keeps finding, where, and since when (engine.c
	 * "Lock reports"). */
	uint64_t wait_bucket, wait_word, wait_since;

	/* Scratch slice of the local buffer, owned while the op is in flight. */
	struct kvi_bucket *bk; /* [2] */
	uint64_t *w;           /* [8]: CAS results, slot word to write, slot re-read */
	unsigned char *khead;  /* [KVI_KEYHEAD_AREA]: header + key of a cached PUT's slot object */
	unsigned char *obj;    /* object area: new object (PUT), objects read */
	uint32_t obj_cap;      /* its bytes: KVI_OBJ_AREA_MIN, grown for large values (kvi_obj_room) */

	/* Buckets this attempt works on: bucket indices, their lock words' region
	 * offsets (fixed when chosen: a new index may arrive meanwhile), the epoch
	 * of the index of each, how many (1 when the key's two choices coincide,
	 * or resolve to one old bucket), which are held. Bucket i serves choice i
	 * (both choices when nb is 1). */
	uint64_t b[2];
	uint64_t boff[2];
	uint64_t bep[2];
	uint64_t epoch; /* of the current index when placed (kvi_place) */
	unsigned nb;
	unsigned held; /* bit i: lock on b[i] held */
	unsigned old;  /* bit i: b[i] is a bucket of the previous index (mixed mode) */
	/* Where kvi_place put the key: its choices in the current index
	 * (nchoice of them) and, in mixed mode (oepoch != 0), in the previous
	 * one; and the view of the indexes it placed with (epoch, and whether
	 * mixed), which KVI_ST_STALE and KVI_ST_GROW wait to see change. */
	unsigned nchoice;
	uint64_t nbk[2], noff[2];
	uint64_t obk[2], ooff[2], oepoch;
	uint64_t grow_epoch;  /* KVI_ST_GROW: the index epoch it asked to grow */
	uint64_t grow_bucket; /* ... or, in the index being emptied, the full bucket + 1 to split first */
	uint64_t grow_pair[2]; /* the full pair's buckets + 1 (0: none), which the server checks */
	int grow_asked;       /* asked already: a full pair now evicts or fails */
	int grow_sent;        /* its GROW went out (or another insert's for the same index) */
	uint32_t stale_pause_us; /* KVI_ST_STALE: look again this long after without a new view */

	unsigned ncand, cand_next, cand_round, cand_bad;

	int cached; /* this attempt uses the location cache entry below */
	struct kvi_loc loc;

	/* PUT: the new object in our segment. */
	uint64_t obj_off;
	uint32_t obj_len;
	int obj_written;

	/* Commit decision, and the result reported once the locks are released. */
	uint32_t commit_which, commit_idx;
	uint64_t commit_slot;
	unsigned exp_next; /* KVI_ST_W_EXPCHECK: next slot (0..2 x slots) to read */
	unsigned grant_pause_us; /* KVI_ST_W_GRANT: pause before asking again */
	int result;
	int kind;  /* enum kvc_stat_kind for the statistics */
	int retry; /* after KVI_ST_W_RELEASE: enum kvi_after_release */

	/* Last, and not cleared when an operation starts (kvi_conn_submit clears
	 * the fields above): an entry is always written before it is read (those
	 * below ncand by kvi_collect_cands, cand[0] by the cached paths), and
	 * clearing it (720 bytes with 15-slot buckets, 1488 now) per operation
	 * was a tenth of a GET's CPU. */
	struct kvi_cand cand[KVI_MAX_CAND];
};

/* How a handle gets a new connection to its server (rejoining after a
 * fencing, a lost path or a server restart): 0 with *rm connected, or a
 * negative code. NULL when the transport cannot be re-made. */
typedef int (*kvi_dial_fn)(void *arg, int timeout_ms, struct kvi_rmem **rm);

/* An index as the server stated it (wire.h INDEX), with room for its chunks. */
struct kvi_cindex {
	struct kvi_index ix; /* epoch 0: none */
	uint64_t *chunks;    /* [chunk_cap] */
};

struct kvi_conn {
	struct kvi_rmem *rm;
	struct kvi_geometry sb; /* the geometry the server stated at join (rm->geo), validated at open */
	/* The index in use, and the one a migration is emptying into it (epoch 0:
	 * none) -- layout.h "Resize"; engine.c "Indexes". */
	struct kvi_cindex cur, prev;
	uint32_t chunk_cap; /* room in each: the most chunks an index of this region has */
	uint32_t index_state; /* enum kvi_index_state, as the server last stated it */
	int index_stale;      /* a LEASE named another epoch or state: fetch (index.c) */
	struct kvc_opts o;
	uint32_t op_timeout_ms; /* o.op_timeout_ms, at most the server's max_op_ms */
	uint32_t obj_area; /* the largest object area an op may need (max_object, rounded) */
	uint64_t max_object;

	struct kvi_opst *st; /* [depth] */
	unsigned inflight;
	struct kvc_op **done; /* finished, not yet handed out: ring of depth */
	unsigned done_head, done_count;

	/* The extent this client appends objects to (granted by the server). */
	uint64_t seg_off, seg_size, seg_used;

	struct kvi_locache cache;
	/* Access marks (ring) and the byte every mark WRITE sends: it never
	 * changes, so a WRITE may read it whenever the NIC gets to it. */
	struct kvi_mark marks[KVI_MARKS];
	unsigned mark_head, mark_count;
	uint8_t *one;
	struct kvc_stats stats;
	uint64_t rng;

	/* Lease (engine.c "Lease"); lease_ns 0: the server grants none. */
	uint64_t lease_ns, renew_ns;
	uint64_t lease_end;  /* ns, our clock: nothing is posted at or after it */
	uint32_t renew_seq;  /* renewal sent, response not yet taken (0: none) */
	uint64_t renew_sent;
	uint64_t renew_epoch; /* the epoch the last renewal sent named (the server's ack of it) */
	uint32_t report_seq; /* lock report sent, response not yet taken */
	uint64_t report_sent;
	uint64_t report_after_ns; /* a lock word seen this long is reported */
	/* GROW (op_resize.c): the one request outstanding (shares the report's
	 * place among KVI_CTRL_MAX_OUTSTANDING: never both at once), and the
	 * epoch the server last said it cannot grow, until when we believe it. */
	uint32_t grow_seq;
	uint64_t grow_sent, grow_sent_epoch;
	uint64_t grow_no_epoch, grow_no_until;
	/* A segment request sent without waiting (engine.c reserve: while other
	 * operations may hold locks), its answer not yet taken (0: none). */
	uint32_t grant_seq;
	uint64_t grant_sent;

	/* Rejoining (engine.c "Rejoin"). */
	kvi_dial_fn dial;
	void *dial_arg;
	void (*dial_free)(void *arg);
	uint64_t rejoin_not_before; /* ns: backoff */
	/* The clock of the step under way, 0 between steps: read by
	 * kvi_conn_submit_many before the operations it starts (their
	 * deadlines count from it), or by kvi_conn_poll after the completions
	 * it then handles arrived; posts made in that step check their
	 * deadline and the lease against it, as a clock read costs as much as
	 * a tenth of a cached GET (40 ns in a VM). So a post is
	 * later than its check by the step's own work, which must stay short
	 * against the margin the server adds to an operation's deadline before
	 * it reuses memory (segtab.h settle: 10 ms): whatever may take longer
	 * -- registering a larger object area, verifying or copying an object
	 * over KVI_STEP_HEAVY_BYTES -- calls kvi_step_clock_refresh, and a
	 * commit (the one post that must never land late) always does. */
	uint64_t step_now;
	uint32_t rejoin_backoff_ms;
};

/* One server's connection (a kvi_conn) is what the rest of this file calls a
 * "handle": the state machines and the engine work on one connection. The
 * public kvc_t (cluster.c) holds one per server and routes each key to one.
 *
 * Open a connection over a connected transport (takes ownership of rm, also
 * on failure): validates the geometry the server stated (rm->geo; the
 * region's superblock is never read), sizes the local buffer, takes a lease. */
int kvi_conn_open(struct kvi_rmem *rm, const struct kvc_opts *o, struct kvi_conn **out);
/* Let h rejoin through dial when its connection breaks (owns arg: free_arg
 * is called on it at kvi_conn_destroy; either may be NULL). */
void kvi_conn_set_dial(struct kvi_conn *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg));
/* The public calls, on one connection (engine.c). */
void kvi_conn_destroy(struct kvi_conn *h);
int kvi_conn_submit(struct kvi_conn *h, struct kvc_op *op);
/* Start ops[0..n) in order: how many started; *why says why the next did not. */
unsigned kvi_conn_submit_many(struct kvi_conn *h, struct kvc_op *const *ops, unsigned n, int *why);
int kvi_conn_poll(struct kvi_conn *h, struct kvc_op **done, unsigned max, int timeout_ms);
unsigned kvi_conn_inflight(const struct kvi_conn *h);
size_t kvi_conn_max_value(const struct kvi_conn *h, size_t key_len);
void kvi_conn_get_stats(const struct kvi_conn *h, struct kvc_stats *out);
int kvi_conn_server_stats(struct kvi_conn *h, struct kvc_server_stats *out);
void kvi_conn_reset_stats(struct kvi_conn *h);
/* While waiting on several connections: let h notice a vanished peer (what
 * kvi_rmem_wait does for one). */
void kvi_conn_idle(struct kvi_conn *h);
/* Several servers (cluster.c kvc_poll): sleep on the connections of cs that
 * have operations in flight (NULL entries and idle ones are skipped) until
 * one of them may have progressed, or timeout_ms. 1 if it slept, 0 if not
 * (kvi_rmem_block). An operation waiting on a timer rather than the
 * transport (a backoff) is looked at again when the sleep ends. */
int kvi_conns_block(struct kvi_conn *const *cs, unsigned n, int timeout_ms);
/* Its connection is broken now (it rejoins at the next submit). */
int kvi_conn_broken(const struct kvi_conn *h);

/* A handle of one server over a connected transport, without a server list:
 * for tests and local:// benchmarks (cluster.c). kvi_client_set_dial: let its
 * connection rejoin (kvi_conn_set_dial). kvi_client_conn: the connection of
 * server i (tests look inside). */
int kvi_client_open(struct kvi_rmem *rm, const struct kvc_opts *o, kvc_t **out);
void kvi_client_set_dial(kvc_t *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg));
struct kvi_conn *kvi_client_conn(kvc_t *h, unsigned i);
/* A handle of several servers over given transports (tests): an empty one,
 * then a server named name ("host:port") joined through dial (which owns
 * arg). A server whose join fails is added down, as kvc_create would. */
int kvi_client_new(const struct kvc_opts *o, kvc_t **out);
int kvi_client_add(kvc_t *h, const char *name, uint32_t weight, kvi_dial_fn dial, void *arg,
		   void (*free_arg)(void *arg));

/* A writer found bucket locked by word (not its own): report it to the
 * server if it keeps finding it (engine.c "Lock reports"). */
void kvi_lock_waited(struct kvi_conn *h, struct kvi_opst *st, uint64_t bucket, uint64_t epoch, uint64_t word);

/* Engine services for the state machines. */
int kvi_st_post(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_rop *ops, unsigned n, int state);
void kvi_st_finish(struct kvi_conn *h, struct kvi_opst *st, int status, int kind);
/* Finish st, which cannot go on while it may hold bucket locks: nothing else
 * can release them, so the connection is broken first and the server fences
 * us (releasing them). Every other operation in flight then fails. */
void kvi_st_abandon(struct kvi_conn *h, struct kvi_opst *st, int status);
/* Queue an access mark for the object at obj_off (op_get.c, on a first read). */
void kvi_mark_access(struct kvi_conn *h, uint64_t obj_off, uint64_t deadline);
uint64_t kvi_now_ns(void);
/* After work that may have taken long, within a step: the step's clock
 * (kvi_conn.step_now) is read again. */
#define KVI_STEP_HEAVY_BYTES (64u << 10)
void kvi_step_clock_refresh(struct kvi_conn *h);
/* CLOCK_REALTIME in ns: the clock of expiries (layout.h "Expiry"). */
uint64_t kvi_real_ns(void);
uint64_t kvi_rand(struct kvi_conn *h);

/* Make st's object area at least `need` bytes (<= h->obj_area); 0 or KVC_ENOMEM. */
int kvi_obj_room(struct kvi_conn *h, struct kvi_opst *st, uint64_t need);

/* Indexes (index.c): room for the chunk tables (at attach: the region's
 * geometry bounds them), and their release; fetch the current and previous
 * index from the server (sync; clears the location cache when the epoch
 * changed); choose st's candidate buckets in the current index (st->b, boff,
 * bep, nb, epoch; nbk, noff, nchoice) and, while the server migrates, in the
 * previous one (obk, ooff, oepoch). */
int kvi_index_alloc(struct kvi_conn *h);
void kvi_index_free(struct kvi_conn *h);
int kvi_index_refresh(struct kvi_conn *h);
void kvi_place(const struct kvi_conn *h, struct kvi_opst *st);

/* Resize (op_resize.c): following a migration, and waiting for a new index.
 * kvi_lock_mark: what lock word w of st's bucket i means. kvi_use_old: take
 * the previous index's bucket for the choices in mask (deduplicated: both
 * choices may have the same old bucket); kvi_use_new: the current index's
 * again for the choices in mask. kvi_wait_stale / kvi_wait_grow: st holds no
 * lock; put it in KVI_ST_STALE / KVI_ST_GROW. kvi_view_changed: the index
 * view differs from the one st was placed with. kvi_grow_collect (kvc_poll):
 * take a GROW answer that arrived. kvi_resize_step (kvc_poll, for st in
 * either wait): 1 when st must start over now; else it waits (lowering
 * *next_due to when to look again) or finished (its deadline passed). */
enum kvi_rmark kvi_lock_mark(const struct kvi_opst *st, unsigned i, uint64_t w);
void kvi_use_old(struct kvi_opst *st, unsigned mask);
void kvi_use_new(struct kvi_opst *st, unsigned mask);
void kvi_wait_stale(struct kvi_conn *h, struct kvi_opst *st);
void kvi_wait_grow(struct kvi_conn *h, struct kvi_opst *st);
int kvi_view_changed(const struct kvi_conn *h, const struct kvi_opst *st);
void kvi_grow_collect(struct kvi_conn *h, uint64_t now);
int kvi_resize_step(struct kvi_conn *h, struct kvi_opst *st, uint64_t now, uint64_t *next_due);
/* May st ask the server to grow its index (it has not, and the server did
 * not just say it cannot)? */
int kvi_grow_wanted(const struct kvi_conn *h, const struct kvi_opst *st);

/* Shared helpers of the GET and write paths. */
uint64_t kvi_read_len(const struct kvi_conn *h, uint64_t slot);
unsigned kvi_collect_cands(const struct kvi_conn *h, struct kvi_opst *st);
int kvi_read_cands(struct kvi_conn *h, struct kvi_opst *st, int state);
enum kvi_objcheck kvi_obj_check(const struct kvi_opst *st, const struct kvi_cand *c);
/* Check the candidates read in the last round: the one holding the key (*res is
 * KVI_OBJ_MATCH or KVI_OBJ_EXPIRED), or NULL; unreadable ones are counted in cand_bad. */
const struct kvi_cand *kvi_check_round(const struct kvi_conn *h, struct kvi_opst *st, enum kvi_objcheck *res);

/* State machines. */
void kvi_get_start(struct kvi_conn *h, struct kvi_opst *st);
void kvi_get_step(struct kvi_conn *h, struct kvi_opst *st);
void kvi_write_start(struct kvi_conn *h, struct kvi_opst *st);
void kvi_write_step(struct kvi_conn *h, struct kvi_opst *st);

#endif
