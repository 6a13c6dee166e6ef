/* The region layout: what lives where in the server's one registered region,
 * and the invariants every client and the server keep. Defined once, here.
 *
 *   offset 0                 superblock   (4 KiB, written by the server once; trusted
 *                                         by nobody, see "Geometry" below)
 *   index_off                home index   bucket_count x 256-byte buckets: the index
 *                                         the server starts with (epoch 1)
 *   heap_off                 heap         segments of segment_size bytes, handed to
 *                                         clients, which append objects into them, or
 *                                         taken by the server for a grown index
 *
 * Indexes and resizing ("Resize" below): the index in use is described by a
 * struct kvi_index -- its epoch, bucket count and the chunks that hold its
 * buckets -- which clients get over the control path (wire.h INDEX), never from
 * the region. At epoch 1 it is the home index; each resize doubles the bucket
 * count into chunks taken from the heap (or from the home area, once free).
 *
 * Geometry. Where the index and the heap are, how many buckets there are, the
 * segment size, the layout epoch and the hash seed (struct kvi_geometry) come
 * from the server over the connection (wire.h welcome), never from the region:
 * every client may WRITE anywhere in the region, so a stray or malicious WRITE
 * over the superblock must not redirect other clients' hashing or lock them
 * out. The server keeps its own copy (server/core.h) and never reads the
 * region's superblock either. The superblock is still written at start, for
 * debugging tools that look at a region dump; nothing may act on it.
 *
 * All fields are fixed-width little-endian. Offsets are bytes from the region's
 * start unless a name says otherwise. Nothing read from the region is trusted:
 * every offset and length is bounds-checked by the reader before use
 * (kvi_layout_check_* below), so a buggy or malicious writer can corrupt data
 * but cannot make a reader or the server fault.
 *
 * ---------------------------------------------------------------------------
 * Buckets are 256 bytes: one lock word and 31 slots (not the 64 bytes with 7
 * that RACE-style tables often use; docs/design.md says why: with two choices, an index of a million
 * slots fills to ~93 % before the first insert finds both its buckets full
 * with 31-slot buckets, to ~86 % with 15, to ~67 % with 7, for the same
 * index memory and the same number of READs: the resize trigger, 87 %, comes
 * first, and inserts do not wait for a resize).
 *
 * Bucket lock word (8 bytes, first word of each bucket)
 *
 *   bit 63      LOCKED  held by a writer
 *   bit 62      MOVED   resize: see below
 *   bits 61..40 OWNER   client id of the holder (22 bits; 0 = none)
 *   bits 39..0  zero
 *
 *   MOVED alone (exactly KVI_LOCK_MOVED): a bucket of an older index whose
 *   items were migrated to the newer one; its slots are frozen (never written
 *   again) and no longer the truth.
 *   LOCKED|MOVED (exactly KVI_LOCK_UNMIGRATED): a bucket of the newer index
 *   that has not received its items yet; the older index's bucket is still
 *   the truth for it.
 *   Both name no owner: no lock report or fencing ever clears them.
 *
 *   Free is exactly 0. A writer takes the lock with CAS(0 -> LOCKED|OWNER) and
 *   releases it with CAS(LOCKED|OWNER -> 0), never with a WRITE: on NICs that
 *   report IBV_ATOMIC_HCA a WRITE and an atomic to the same word are not atomic
 *   with respect to each other. A MOVED bucket is never 0, so every lock attempt
 *   on it fails and the writer follows the mark. The server's own lock
 *   operations (fencing a dead client, eviction, resize) go through its NIC on a
 *   loopback QP, never through a CPU atomic.
 *   The lock word carries no version (docs/design.md "No version in the lock word"): with
 *   one, a writer could not CAS-lock a bucket without first reading it.
 *
 * Resize (the server's migrator, server/migrate.c, does it; docs/design.md
 * "Online resize" says why this way). From an index of N buckets (epoch E)
 * to one of 2N (epoch E + 1). A key's candidate buckets in an index of n
 * buckets are h0 mod n and h1 mod n (hash.h; they may coincide), so its
 * choice j in the new index, h_j mod 2N, is either b or b + N where b = h_j
 * mod N is that choice in the old one: old bucket b's items all go to new
 * buckets b and b + N, and nothing else goes there (31 slots split in two
 * never overflow). The new index starts with every lock word UNMIGRATED.
 * Migrating old bucket b, through the server's NIC:
 *   1 CAS-lock old b (0 -> LOCKED|server): waits for its writer like any writer.
 *   2 Copy its slots to new b and b + N (the server's CPU: nobody else may
 *     write a bucket whose word is UNMIGRATED), each to the bucket of the
 *     choice that put it in old b (found by hashing its key).
 *   3 One doorbell: CAS old b -> MOVED, then CAS new b and b + N
 *     UNMIGRATED -> 0 (RC keeps that order).
 * The truth for a key's choice j is therefore new bucket h_j mod 2N unless
 * its word is UNMIGRATED, and then old bucket h_j mod N -- unless that one is
 * MOVED by now, and then the new one again (its slots were written before the
 * MOVED). Readers and writers that know both indexes follow exactly that;
 * one that knows only the old index and meets MOVED (in a lock word it read
 * or a CAS it lost) fetches the current index and starts over. A GET never
 * waits for a lock; a PUT waits for at most one bucket's migration (step 1
 * to 3). The old index stays readable until every client holding a lease
 * acknowledged the new epoch and no operation that began before could still
 * run (server/migrate.h "Retiring"); then its memory is reused.
 *
 * Invariants of the index:
 *   I1 A slot changes only while its bucket's lock is held by the changer.
 *   I2 A key occupies at most one slot among its two candidate buckets: an
 *      insert holds both buckets' locks while it checks both for the key.
 *   I3 A slot points only at a fully written object: the object WRITE is posted
 *      before the slot WRITE on the same RC QP, and RC executes WRITEs in order.
 *
 * Slot word (8 bytes, 0 = empty)
 *
 *   bits 63..52 FP      fingerprint (12 bits of the key's hash: a miss in two
 *                       buckets 90 % full reads a false-positive object for
 *                       ~1.4 % of lookups)
 *   bits 51..38 SIZE    object length in 64-byte units, rounded up (1..16383)
 *   bits 37..0  OFFSET  object offset in 4-byte units (38 bits: 1 TiB)
 *
 *   A non-empty slot always has SIZE >= 1, so no valid slot is 0.
 *
 * Objects (in the heap, 4-byte aligned, immutable once a slot points at them)
 *
 *   struct kvi_obj_hdr | key bytes | value bytes [| client flags]
 *
 *   The header (24 bytes, below): checksum, access byte, layout version,
 *   the object's flags, key length, value length and expiry, the item's
 *   64-bit CAS unique ("CAS uniques" below). The client's 32-bit flags word
 *   follows the value only when it is not 0 (KVI_OBJ_F_CFLAGS), as memcached
 *   stores it: most items carry none, and 4 bytes are 3 % of a 100-byte item.
 *   The checksum (32 bits of XXH3-64) covers the header from `version` on, the
 *   key, the value and the flags word; `access` is outside it so readers may
 *   update it without rewriting the object. 32 bits are a second line: a
 *   reader meets a torn object only when a reuse margin was broken ("Reuse"
 *   below), and then takes it for whole once in 4 billion times. A reader accepts an object only if the checksum matches, the
 *   lengths fit what it read, the key equals its key and the item has not
 *   expired; anything else is a retry, never a result.
 *   An object is never modified after its slot is written (but for `access`).
 *   Its memory is reused only when its whole segment is reclaimed (below).
 *
 * Recache tokens (memcached meta's W / Z flags). At most one client at a
 * time is told it "won" the right to recache a stale item, or one whose TTL
 * runs low: the GET that would win sets KVI_ACCESS_WIN with an RDMA CAS on
 * the aligned 8-byte word holding the access byte (kvi_access_word_off: the
 * rest of that word -- the checksum, or the value length's low bits, and
 * version, flags, key length -- never changes while the object lives, so the
 * CAS fails only on a changed access byte, or on memory no longer this
 * object's); whoever finds the bit set is told someone else
 * won. Access marks are CASes too (below), so none clears a token. A
 * reclaimer's copy starts with none, so after a move a second client may
 * win -- both recache, nothing is lost. A rewrite (set, touch excepted) is a
 * new item with no token.
 *
 * Access tracking. `access` is 0 when the object is written (by a client, or
 * as the reclaimer's copy). A GET that reads an object whose KVI_ACCESS_READ
 * is clear (0, or a token won by a GET that asked not to bump the item,
 * KVC_META_NO_BUMP) sets it with an RDMA CAS of the byte's 8-byte word, from
 * the word it read, riding in a later doorbell of the same handle (no extra
 * round trip, once per object: a marked object is not marked again; a CAS,
 * not a 1-byte WRITE, so that it never clears a recache token). A GET with
 * KVC_META_NO_BUMP marks nothing. The reclaimer keeps (copies forward) the
 * live objects whose KVI_ACCESS_READ is set and evicts the others: FIFO with reinsertion of what was read, as
 * Segcache and S3-FIFO do. A lost mark only costs that object its second
 * chance. KVI_OBJ_F_FETCHED on a copy records that it had been read before.
 *
 * Segments: a client appends objects only into extents the server granted to
 * it (server/segtab.h); no two clients ever write the same bytes. Overwritten
 * and deleted objects stay in their segment as garbage until the segment is
 * reclaimed.
 *
 * Reuse. The server reclaims the oldest sealed segment (server/reclaim.h):
 * every slot naming an object in it is switched to a copy or cleared, under
 * the bucket's lock (I1); then the segment is zeroed and quarantined, and
 * handed out again only after quarantine_ms > 2 x max_op_ms (both stated to
 * clients at join). Clients keep max_op_ms as the deadline of every operation,
 * and post nothing after it, and never use a READ that completed after it.
 * What that guarantees a reader (times are when the NIC executes a READ):
 *   - Two-step GET: the object READ follows its slot READ within one deadline.
 *     If the slot named an object in a segment that was then reclaimed, the
 *     object READ happens before the segment's reuse: it returns that object
 *     (the key's value when the slot was read) or zeros (a retry).
 *   - Cached GET (slot word and object READ in one doorbell, in either order
 *     at the NIC): it accepts only if the slot word equals the cached one and
 *     the object verifies with the key. Both READs lie within one deadline.
 *     The same slot word can come back after a reuse (same offset, same
 *     size, same fingerprint), but only more than a quarantine after the old
 *     object was zeroed; so the object READ cannot have seen the old object
 *     while the slot READ saw the new word, and if both saw the new
 *     generation the value returned is the key's current one.
 *   - Cached PUT: it re-reads the slot word under the bucket lock and, in
 *     the same doorbell, the header and key of the object the word names;
 *     it replaces the slot only if the word is the cached one and the key
 *     bytes are its own (a 128-bit hash collision cannot make it replace
 *     another key's value). It also uses a cache entry only while it is
 *     younger than quarantine - max_op (client/locache.h).
 */
#ifndef KVI_LAYOUT_H
#define KVI_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define KVI_REGION_MAGIC 0x4e4f494745525643ull /* "CVREGION" as LE bytes */
#define KVI_LAYOUT_VERSION 6u /* 2: 20-byte object headers; 3: expiry in milliseconds; 4: 256-byte buckets;
				* 5: 32-byte object headers with client flags and CAS unique;
				* 6: 24-byte headers, 4-byte aligned objects, flags word only when set */

#define KVI_SUPERBLOCK_SIZE 4096u
#define KVI_BUCKET_SIZE 256u
#define KVI_SLOTS_PER_BUCKET 31u
#define KVI_OBJ_ALIGN 4u       /* objects start on 4-byte boundaries */
#define KVI_SLOT_SIZE_UNIT 64u /* slot SIZE granularity */
#define KVI_MAX_KEY 250u       /* memcached's limit */

enum kvi_region_state {
	KVI_STATE_INIT = 0,
	KVI_STATE_SERVING = 1,
	KVI_STATE_SHUTDOWN = 2,
};

/* Segment sizes a server may use (a power of two in this range). */
#define KVI_MIN_SEGMENT_SIZE (64u << 10)
#define KVI_MAX_SEGMENT_SIZE (1u << 20)
/* Slots address objects in 4-byte units with 38 bits: a region is at most 1 TiB. */
#define KVI_MAX_REGION_SIZE ((uint64_t)KVI_OBJ_ALIGN << 38)

/* The geometry of a region (host view), as the server states it in the
 * welcome of every connection (wire.h). Defined once, here; validated by
 * kvi_geometry_check wherever it is received. Everything in it is fixed for
 * a server's lifetime but epoch (the server's at the moment of the welcome);
 * the index in use comes separately (struct kvi_index, wire.h INDEX), since
 * a resize moves it. */
struct kvi_geometry {
	uint32_t layout_version; /* KVI_LAYOUT_VERSION */
	uint64_t epoch;          /* index epoch (>= 1) at the welcome: bumped by each resize */
	uint64_t region_size;    /* bytes */
	uint64_t index_off;      /* home index (epoch 1): KVI_INDEX_CHUNK_ALIGN aligned, after the superblock page */
	uint64_t bucket_count;   /* buckets of the home index, >= 2 */
	uint64_t heap_off;       /* KVI_OBJ_ALIGN aligned, after the index */
	uint64_t heap_size;      /* at least one segment */
	uint64_t segment_size;   /* power of two, KVI_MIN_SEGMENT_SIZE .. KVI_MAX_SEGMENT_SIZE */
	uint64_t hash_seed;      /* XXH3 seed of every key hash (hash.h); random per server start */
};

/* NULL when g describes a usable region of g->region_size bytes (version,
 * sizes, alignment, every area inside the region, index before heap without
 * overlap, segment size); else a one-line description of the first problem. */
const char *kvi_geometry_check(const struct kvi_geometry *g);
/* Field by field (the struct has padding: never memcmp it). */
int kvi_geometry_equal(const struct kvi_geometry *a, const struct kvi_geometry *b);

/* The superblock: the geometry (without the hash seed) as written at offset 0
 * for debugging tools. Untrusted by every reader (see "Geometry" above). */
struct kvi_superblock {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t state; /* enum kvi_region_state */
	uint64_t epoch; /* layout epoch: bumped when the index moves (resize) */
	uint64_t region_size;
	uint64_t index_off;
	uint64_t bucket_count;
	uint64_t heap_off;
	uint64_t heap_size;
	uint64_t segment_size;
	uint64_t reserved[7];
};
_Static_assert(sizeof(struct kvi_superblock) == 128, "superblock layout");
_Static_assert(sizeof(struct kvi_superblock) <= KVI_SUPERBLOCK_SIZE, "superblock fits its page");

struct kvi_bucket {
	uint64_t lock;
	uint64_t slot[KVI_SLOTS_PER_BUCKET];
};
_Static_assert(sizeof(struct kvi_bucket) == KVI_BUCKET_SIZE, "a bucket is four cache lines");

/* Lock word fields. */
#define KVI_LOCK_LOCKED (1ull << 63)
#define KVI_LOCK_MOVED (1ull << 62)
#define KVI_LOCK_OWNER_SHIFT 40
#define KVI_LOCK_OWNER_BITS 22
#define KVI_MAX_CLIENT_ID ((1u << KVI_LOCK_OWNER_BITS) - 1)

#define KVI_LOCK_UNMIGRATED (KVI_LOCK_LOCKED | KVI_LOCK_MOVED)

static inline uint64_t kvi_lock_held_by(uint32_t client_id)
{
	return KVI_LOCK_LOCKED | ((uint64_t)client_id << KVI_LOCK_OWNER_SHIFT);
}
static inline uint32_t kvi_lock_owner(uint64_t lock)
{
	return (uint32_t)(lock >> KVI_LOCK_OWNER_SHIFT) & KVI_MAX_CLIENT_ID;
}
/* A resize mark (exactly MOVED or UNMIGRATED): nobody's lock. */
static inline int kvi_lock_is_mark(uint64_t lock)
{
	return lock == KVI_LOCK_MOVED || lock == KVI_LOCK_UNMIGRATED;
}
/* One of the words above: free, a mark, or LOCKED with an owner and nothing
 * else. Anything else is junk a stray WRITE left (every client may write the
 * region): readers ignore it, writers report it, the server repairs it. */
static inline int kvi_lock_legal(uint64_t lock)
{
	return lock == 0 || kvi_lock_is_mark(lock) ||
	       ((lock & ~(KVI_LOCK_LOCKED | ((uint64_t)KVI_MAX_CLIENT_ID << KVI_LOCK_OWNER_SHIFT))) == 0 &&
		(lock & KVI_LOCK_LOCKED) && kvi_lock_owner(lock) != 0);
}

/* Slot fields. */
#define KVI_SLOT_FP_BITS 12
#define KVI_SLOT_SIZE_BITS 14
#define KVI_SLOT_OFF_BITS 38
#define KVI_SLOT_SIZE_SHIFT KVI_SLOT_OFF_BITS
#define KVI_SLOT_FP_SHIFT (KVI_SLOT_OFF_BITS + KVI_SLOT_SIZE_BITS)
_Static_assert(KVI_SLOT_FP_SHIFT + KVI_SLOT_FP_BITS == 64, "slot fields fill the word");
#define KVI_SLOT_MAX_UNITS ((1u << KVI_SLOT_SIZE_BITS) - 1)
/* Largest object a slot can describe. */
#define KVI_MAX_OBJECT ((uint64_t)KVI_SLOT_MAX_UNITS * KVI_SLOT_SIZE_UNIT)

static inline uint64_t kvi_slot_make(uint32_t fp, uint64_t obj_off, uint64_t obj_len)
{
	uint64_t units = (obj_len + KVI_SLOT_SIZE_UNIT - 1) / KVI_SLOT_SIZE_UNIT;

	return ((uint64_t)(fp & ((1u << KVI_SLOT_FP_BITS) - 1)) << KVI_SLOT_FP_SHIFT) |
	       (units << KVI_SLOT_SIZE_SHIFT) | (obj_off / KVI_OBJ_ALIGN);
}
static inline uint32_t kvi_slot_fp(uint64_t s)
{
	return (uint32_t)(s >> KVI_SLOT_FP_SHIFT);
}
/* Bytes to READ for the object: its length rounded up to the size unit. */
static inline uint64_t kvi_slot_read_len(uint64_t s)
{
	return ((s >> KVI_SLOT_SIZE_SHIFT) & KVI_SLOT_MAX_UNITS) * KVI_SLOT_SIZE_UNIT;
}
static inline uint64_t kvi_slot_obj_off(uint64_t s)
{
	return (s & ((1ull << KVI_SLOT_OFF_BITS) - 1)) * KVI_OBJ_ALIGN;
}

enum kvi_obj_flags {
	KVI_OBJ_F_NONE = 0,
	KVI_OBJ_F_FETCHED = 1, /* a copy the reclaimer made of an object that had been read */
	/* The item was invalidated (memcached meta "md I"): still served, as
	 * stale, until rewritten ("Recache tokens"). Copies keep it. */
	KVI_OBJ_F_STALE = 2,
	/* The client's flags word follows the value (it is not 0): the
	 * writer's, part of the object's length; copies keep it. */
	KVI_OBJ_F_CFLAGS = 4,
};

/* Bits of the access byte ("Access tracking", "Recache tokens"). */
enum kvi_obj_access {
	KVI_ACCESS_READ = 1, /* read since written (the 1-byte mark WRITE sets it) */
	KVI_ACCESS_WIN = 2,  /* a client was told it won the right to recache the item */
};

/* 24 bytes (4-byte aligned, as objects are: the 64-bit words are read as
 * two halves where a compiler needs it). The value
 * length and the expiry share one word (kvi_obj_value_len,
 * kvi_obj_expiry_ms): a value is under 1 MiB (a slot's SIZE field), so 20
 * bits hold its length and 44 bits hold the expiry in milliseconds of the
 * Unix epoch (until the year 2527). cas and the flags word after the value
 * (kvi_obj_client_flags) are the memcached item's CAS unique and flags; both
 * are inside the checksum, and the reclaimer's copy keeps them (and every
 * other byte but access, the server's flags bits and the checksum)
 * unchanged.
 *
 * CAS uniques. Every object a client writes carries a unique that no other
 * object written while the server runs carries: each extent grant (wire.h
 * SEG_GRANT) hands out a range of uniques, cas_base .. cas_base + len / 4
 * - 1, from a 64-bit counter of the server's (server/core_grants.c) that
 * only grows, by the extent's length in 4-byte units, and starts at 1; an
 * object at offset o of its extent has unique cas_base + o / 4
 * (kvi_obj_cas_of). Two objects of one extent start at different offsets;
 * two extents' ranges are disjoint whatever memory they cover, so reusing a
 * segment never brings a unique back. A copy the reclaimer makes keeps its
 * object's unique: it is the same item, not a modification. The counter
 * counts bytes granted / 4: at 100 GB/s of grants it lasts 23 years; the
 * server refuses grants (ENOMEM) rather than let it wrap.
 *
 * A writer that holds the bucket locks decides conditional stores (add,
 * replace, cas) from the header of the key's current object, which cannot
 * change while the locks are held (I1, I3).
 *
 * Expiry (TTL semantics; docs/operations.md "Expiry" says the same to users).
 *   - Clock: each machine's CLOCK_REALTIME, in milliseconds. A writer sets
 *     expiry = its clock when the PUT is submitted + ttl, rounded up to the
 *     next millisecond; 0 means never.
 *   - Decision: by the reader's clock at a moment when the object it read
 *     was the key's current one. For a GET that is the READ of the slot word
 *     naming it: the GET reads the clock after the object READ completed
 *     (t1) and derives from it t0, when the slot READ was posted; expiry > t1
 *     is alive, expiry <= t0 is expired, and an expiry between the two (the
 *     item expired while the GET was in flight, and may have been replaced
 *     since) is decided by reading again from the buckets. A writer, holding
 *     the bucket locks, decides at any moment between lock and commit: no
 *     one else changes the item meanwhile, but it may expire, and the
 *     writer's decision that it lived (a TOUCH, an INCR, a CAS giving it a
 *     new expiry) must not be contradicted by a GET that saw it expired
 *     before the commit landed. So a GET that finds the item expired tells
 *     the miss only after reading the bucket's lock word free and then,
 *     fenced behind it, the slot word unchanged (op_get.c "Expired"). The
 *     server's reclaimer decides under the bucket locks too, by its clock.
 *   - Guarantee, with machine clocks within S of each other (NTP keeps S to
 *     milliseconds; on one machine S = 0): an item is alive for at least
 *     ttl - S - d after its PUT completed (d: the PUT's own duration, its
 *     round trips), and never alive later than ttl + S after that. */
struct __attribute__((packed, aligned(4))) kvi_obj_hdr {
	uint32_t checksum; /* low 32 bits of XXH3-64 of bytes [offsetof(version), end of object) */
	uint8_t access;    /* access hint for eviction ("Access tracking"); not checksummed */
	uint8_t version;   /* KVI_LAYOUT_VERSION */
	uint8_t flags;     /* enum kvi_obj_flags */
	uint8_t key_len;   /* 1..KVI_MAX_KEY */
	uint64_t len_exp;  /* bits 0..19 value length, bits 20..63 expiry (ms, 0 = never) */
	uint64_t cas;      /* the item's CAS unique ("CAS uniques"); never 0 in an object a client wrote */
};
_Static_assert(sizeof(struct kvi_obj_hdr) == 24, "object header layout");
_Static_assert(offsetof(struct kvi_obj_hdr, access) == 4, "access is one byte after the checksum");
_Static_assert(offsetof(struct kvi_obj_hdr, version) == 5, "checksum starts after access");
_Static_assert(offsetof(struct kvi_obj_hdr, len_exp) == 8, "value length and expiry");
_Static_assert(offsetof(struct kvi_obj_hdr, cas) == 16, "the CAS unique is the header's last word");
#define KVI_OBJ_CFLAGS_SIZE 4u /* the flags word after the value, when KVI_OBJ_F_CFLAGS */
_Static_assert(KVI_MAX_KEY <= UINT8_MAX, "key_len is one byte");
#define KVI_OBJ_VLEN_BITS 20
#define KVI_OBJ_EXPIRY_MAX ((1ull << (64 - KVI_OBJ_VLEN_BITS)) - 1) /* ms; also "far future" */
_Static_assert(KVI_MAX_OBJECT < (1ull << KVI_OBJ_VLEN_BITS), "a value length fits 20 bits");

static inline uint32_t kvi_obj_value_len(const struct kvi_obj_hdr *h)
{
	return (uint32_t)(h->len_exp & ((1u << KVI_OBJ_VLEN_BITS) - 1));
}
static inline uint64_t kvi_obj_expiry_ms(const struct kvi_obj_hdr *h)
{
	return h->len_exp >> KVI_OBJ_VLEN_BITS;
}
#define KVI_OBJ_CSUM_FROM offsetof(struct kvi_obj_hdr, version)

/* Length of an object of this key, value and client flags word. */
static inline uint64_t kvi_obj_len(uint32_t key_len, uint32_t value_len, uint32_t client_flags)
{
	return sizeof(struct kvi_obj_hdr) + key_len + value_len + (client_flags ? KVI_OBJ_CFLAGS_SIZE : 0);
}
/* Length of the object whose header is h (not checked: kvi_obj_verify). */
static inline uint64_t kvi_obj_len_of(const struct kvi_obj_hdr *h)
{
	return sizeof(struct kvi_obj_hdr) + h->key_len + kvi_obj_value_len(h) +
	       (h->flags & KVI_OBJ_F_CFLAGS ? KVI_OBJ_CFLAGS_SIZE : 0);
}
/* The client's flags word of a whole object in memory (0 when it has none). */
static inline uint32_t kvi_obj_client_flags(const struct kvi_obj_hdr *h)
{
	uint32_t f = 0;

	if (h->flags & KVI_OBJ_F_CFLAGS)
		__builtin_memcpy(&f, (const unsigned char *)(h + 1) + h->key_len + kvi_obj_value_len(h), sizeof(f));
	return f;
}
/* Region offset of the aligned 8-byte word an RDMA CAS sets the access byte
 * of the object at obj_off through, and the byte's bit position in it
 * (little-endian): objects are 4-byte aligned, so the byte is the word's
 * first or fifth, and the rest of the word is the object's own ("Recache
 * tokens"). */
static inline uint64_t kvi_access_word_off(uint64_t obj_off)
{
	return (obj_off + offsetof(struct kvi_obj_hdr, access)) & ~(uint64_t)7;
}
static inline unsigned kvi_access_shift(uint64_t obj_off)
{
	return (unsigned)((obj_off + offsetof(struct kvi_obj_hdr, access)) & 7) * 8;
}
/* Space the object takes in a segment (KVI_OBJ_ALIGN aligned). */
static inline uint64_t kvi_obj_footprint(uint64_t obj_len)
{
	return (obj_len + KVI_OBJ_ALIGN - 1) & ~(uint64_t)(KVI_OBJ_ALIGN - 1);
}

/* The superblock the server writes for a geometry, and back (for tools:
 * the seed is not in the superblock, so it comes back 0). */
void kvi_superblock_from_geometry(struct kvi_superblock *sb, const struct kvi_geometry *g);
void kvi_geometry_from_superblock(struct kvi_geometry *g, const struct kvi_superblock *sb);

/* Validate a superblock (from a region dump) for a region of region_size
 * bytes: magic, version, and kvi_geometry_check. 0 or KVC_EPROTO. */
int kvi_superblock_check(const struct kvi_superblock *sb, uint64_t region_size);

/* Byte offset of bucket i of the home index (caller ensures i <
 * bucket_count): the index in use until the first resize. Tests and tools
 * only; clients and the server address buckets through their kvi_index. */
static inline uint64_t kvi_home_bucket_off(const struct kvi_geometry *g, uint64_t i)
{
	return g->index_off + i * KVI_BUCKET_SIZE;
}

/* An index: bucket_count buckets held in chunks of 2^chunk_shift buckets
 * (one segment's worth: segment_size / KVI_BUCKET_SIZE), chunk k at region
 * offset chunk_off[k] (page-aligned; the last chunk may be partly used). The
 * server states it (wire.h INDEX); kvi_index_check validates it before use.
 * chunk_off is owned by whoever filled the struct. */
#define KVI_INDEX_CHUNK_ALIGN 4096u
struct kvi_index {
	uint64_t epoch;        /* >= 1 */
	uint64_t bucket_count; /* >= 2 */
	uint32_t chunk_shift;  /* log2(segment_size / KVI_BUCKET_SIZE) */
	uint32_t nchunks;      /* ceil(bucket_count / 2^chunk_shift) */
	uint64_t *chunk_off;   /* [nchunks] */
};

static inline uint32_t kvi_index_chunk_shift(const struct kvi_geometry *g)
{
	return (uint32_t)__builtin_ctzll(g->segment_size / KVI_BUCKET_SIZE);
}
static inline uint32_t kvi_index_nchunks(uint64_t bucket_count, uint32_t chunk_shift)
{
	return (uint32_t)((bucket_count + (1ull << chunk_shift) - 1) >> chunk_shift);
}
/* Byte offset of bucket i of x (caller ensures i < bucket_count). */
static inline uint64_t kvi_index_bucket_off(const struct kvi_index *x, uint64_t i)
{
	return x->chunk_off[i >> x->chunk_shift] + (i & ((1ull << x->chunk_shift) - 1)) * KVI_BUCKET_SIZE;
}
/* NULL when x is a usable index of a region with geometry g (epoch, counts,
 * chunk shift, every chunk aligned, after the superblock, inside the region);
 * else a phrase naming the first problem. */
const char *kvi_index_check(const struct kvi_index *x, const struct kvi_geometry *g);
/* The home index of g (epoch 1: contiguous at g->index_off), in chunk_off,
 * which has room for kvi_index_nchunks(g->bucket_count, shift) entries. */
void kvi_index_home(struct kvi_index *x, const struct kvi_geometry *g, uint64_t *chunk_off);

/* Is the object a slot points at entirely inside the heap? Slots are read
 * from remote memory: this is what makes a garbage slot harmless. */
int kvi_slot_in_heap(const struct kvi_geometry *g, uint64_t slot);

/* Compute the checksum of an object whose header and payload are in memory. */
uint32_t kvi_obj_checksum(const struct kvi_obj_hdr *h);

/* Build an object in buf (kvi_obj_len bytes): header, key, value, flags word
 * (when not 0), checksum. */
void kvi_obj_build(void *buf, const void *key, uint16_t key_len, const void *val, uint32_t val_len,
		   uint64_t expiry_ms, uint32_t client_flags, uint64_t cas);
/* Set the CAS unique of an object built in buf (its checksum made right again). */
void kvi_obj_set_cas(void *buf, uint64_t cas);

/* The CAS unique of an object at region offset obj_off of an extent that
 * starts at ext_off and was granted with cas_base ("CAS uniques"). */
static inline uint64_t kvi_obj_cas_of(uint64_t cas_base, uint64_t ext_off, uint64_t obj_off)
{
	return cas_base + (obj_off - ext_off) / KVI_OBJ_ALIGN;
}

/* Verify an object READ into buf (got bytes): lengths inside got, checksum
 * right, version known. Returns 0 or KVC_ECORRUPT. Does not compare keys. */
int kvi_obj_verify(const void *buf, uint64_t got);

#endif
