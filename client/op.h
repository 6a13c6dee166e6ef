/* libkvclient internals: an operation's state, shared by the state machines
 * that run it (op_get.c, op_write.c, op_resize.c, op_cands.c). Nothing here
 * is exported.
 *
 * Every operation is a small state machine. Each state posts exactly one batch
 * (one doorbell) through the remote-memory interface (rmem.h; kvi_st_post)
 * and waits for it; the batch's completion is one round trip and moves the
 * machine on (engine.c). Operations of one connection run interleaved (up to `depth` at
 * once), each with its own slice of the registered local buffer (conn.c), so
 * nothing is shared between them but the connection's extent and location
 * cache, both touched only by the thread that owns the handle.
 *
 * Ownership: an operation state (kvi_opst) owns its scratch slice from
 * kvc_submit until the operation completes; the caller's kvc_op and its
 * buffers are the library's for the same span. */
#ifndef KVI_OP_H
#define KVI_OP_H

#include <stdint.h>

#include "hash.h"
#include "kvclient.h"
#include "layout.h"
#include "locache.h"

struct kvi_conn;

#define KVI_MAX_CAND (2 * KVI_SLOTS_PER_BUCKET)
#define KVI_VERIFY_TRIES 8 /* reads that fail verification before KVC_ECORRUPT */
/* Each operation slot's object area starts this small (in the handle's main
 * buffer) and grows, in its own registered buffer, only when the slot meets a
 * larger object: a handle pins memory for what it carries, not depth times
 * the largest object a server could hold. */
#define KVI_OBJ_AREA_MIN 4096u
/* A cached PUT reads the header and key of the object its cached slot names
 * (op_write.c), in the lock doorbell: room for the longest key, 64-byte rounded. */
#define KVI_KEYHEAD_AREA 320u
_Static_assert(sizeof(struct kvi_obj_hdr) + KVI_MAX_KEY <= KVI_KEYHEAD_AREA, "a header and key fit");

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
	KVI_ST_GET_WIN,      /* GET delivered: CAS for the item's recache token (layout.h "Recache tokens") */
	KVI_ST_GET_CONFIRM,  /* found the item expired: READ its bucket's lock word, then (fenced) its slot word */
};

/* What the slot an insert committed to held. */
enum kvi_took {
	KVI_TOOK_NONE = 0, /* not an insert, or the key's own (expired) slot */
	KVI_TOOK_FREE,     /* a free slot: one more item */
	KVI_TOOK_DEAD,     /* another key's expired item, or junk: one item out, one in */
	KVI_TOOK_LIVE,     /* a live item, evicted */
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
	/* Writer: the lock word it keeps finding, where, and since when
	 * (lock_report.c). */
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

	/* PUT: the new object in our segment, and its CAS unique. */
	uint64_t obj_off;
	uint64_t obj_cas;
	uint32_t obj_len;
	int obj_written;
	/* A read-modify-write (op_rmw.c): its object is built under the locks
	 * (rmw_built: in this attempt, at the start of the object area) and
	 * written in the commit doorbell. */
	int rmw;
	int rmw_built;
	/* For memcached's counters (counts.c): what the slot an insert took
	 * held (enum kvi_took), and whether a GET miss found its item expired. */
	uint8_t took;
	uint8_t saw_expired;
	uint64_t win_off;   /* KVI_ST_GET_WIN: region offset of the word the token's CAS works on */
	unsigned win_shift; /* ... and the access byte's bit position in it (kvi_access_shift) */
	unsigned confirm; /* KVI_ST_GET_CONFIRM: the candidate found expired */

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
	 * clearing it (1488 bytes with 31-slot buckets) per operation was a
	 * tenth of a GET's CPU. */
	struct kvi_cand cand[KVI_MAX_CAND];
};

/* State machines (op_get.c, op_write.c): start st (its key hashed, its
 * deadline set), and move it on when its batch completed. */
void kvi_get_start(struct kvi_conn *h, struct kvi_opst *st);
void kvi_get_step(struct kvi_conn *h, struct kvi_opst *st);
void kvi_write_start(struct kvi_conn *h, struct kvi_opst *st);
void kvi_write_step(struct kvi_conn *h, struct kvi_opst *st);

/* Shared helpers of the GET and write paths (op_cands.c): the bytes to READ
 * for a slot's object; the fingerprint matches in st's buckets; READ as many
 * pending candidates as fit the object area, in one doorbell (how many, 0
 * when none is left, -1 when st finished); what an object read says about
 * st's key. */
uint64_t kvi_read_len(const struct kvi_conn *h, uint64_t slot);
unsigned kvi_collect_cands(const struct kvi_conn *h, struct kvi_opst *st);
int kvi_read_cands(struct kvi_conn *h, struct kvi_opst *st, int state);
enum kvi_objcheck kvi_obj_check(const struct kvi_opst *st, const struct kvi_cand *c);
/* The expiry part of kvi_obj_check, for a header already known to be the
 * key's (layout.h "Expiry"): MATCH (alive), EXPIRED, or for a GET UNSURE. */
enum kvi_objcheck kvi_expiry_check(const struct kvi_opst *st, uint64_t expiry_ms);
/* What a read of the object whose header is oh tells the caller
 * (kvc_op.item: fetched, stale, its recache token out), for GET and GAT. */
uint32_t kvi_item_bits(const struct kvi_obj_hdr *oh);
/* The access bit an operation that reads an item sets (layout.h "Access
 * tracking"): KVI_ACCESS_READ, or none when it asked not to bump the item
 * (KVC_META_NO_BUMP, memcached meta's "mg u"). */
static inline uint8_t kvi_read_mark(const struct kvc_op *op)
{
	return op->meta & KVC_META_NO_BUMP ? 0 : KVI_ACCESS_READ;
}
/* Does a GET or GAT of this item contend for its recache token: a stale
 * item, or (KVC_META_RECACHE) one whose remaining TTL is below recache_ms?
 * (A GET takes the token with an RDMA CAS, a GAT under the locks.) */
int kvi_recache_contends(const struct kvc_op *op, const struct kvi_obj_hdr *oh);
/* Check the candidates read in the last round: the one holding the key (*res is
 * KVI_OBJ_MATCH, KVI_OBJ_EXPIRED or KVI_OBJ_UNSURE), or NULL; unreadable ones
 * are counted in cand_bad. */
const struct kvi_cand *kvi_check_round(const struct kvi_conn *h, struct kvi_opst *st, enum kvi_objcheck *res);

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

#endif
