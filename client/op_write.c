/* PUT and DELETE: bucket locks taken with RDMA CAS, slot written, locks
 * released with CAS (layout.h says why not with a WRITE).
 *
 *   1  [WRITE new object into our segment] + CAS-lock b0 + READ b0 + CAS-lock b1
 *      + READ b1, one doorbell. RC runs them in order: each READ sees the
 *      bucket as our CAS left it.
 *   2  READ the fingerprint-matching objects to find the key (only if any).
 *   3  WRITE the slot + CAS-unlock both, one doorbell. RC puts the object before
 *      the slot and the slot before the unlock (layout.h I3).
 *
 * A PUT insert without fingerprint matches takes 2 round trips, an update 3,
 * DELETE 3 (2 when absent). With a valid cached location only the key's own
 * bucket is locked: 2 round trips. That is safe because a key lives in exactly
 * one slot (I2) and every writer of that slot holds that bucket's lock (I1):
 * the cached slot word, re-read under the lock, proves the slot still names
 * the object the entry saw. That the object is this key's is proved by its
 * key bytes, read in the same doorbell (after the lock CAS, so under the lock,
 * where the object cannot change): the entry is found by the key's 128-bit
 * hash, and a crafted collision must not let one key's PUT replace another's
 * value. The header and key ride in the lock doorbell: no extra round trip.
 *
 * Conditional stores (kvclient.h kvc_store: add, replace, cas) decide under
 * the same locks, at the moment a plain PUT decides where to write: from the
 * header of the key's current object -- read whole and verified on the
 * general path, its header and key on the cached one -- which cannot change
 * while the locks are held (layout.h I1, I3). A refused store releases the
 * locks without writing the slot: the same round trips as a PUT, and its
 * object, written in the lock doorbell, is garbage like an overwritten one.
 * So each is linearizable with every other write of the key at that moment.
 *
 * A lock attempt that finds a bucket held releases what it took and retries
 * after a randomised exponential backoff, until the operation's deadline. Locks
 * are never waited for while held, so two writers cannot deadlock.
 *
 * Resize (layout.h "Resize", op_resize.c): while the server migrates, a lock
 * CAS that returns UNMIGRATED took nothing: the choice's truth is its old
 * bucket, locked (with a READ) in one more doorbell, deduplicated when both
 * choices share it. An old bucket found MOVED: let go of everything, start
 * over at once (the new bucket is migrated by now). An old bucket held (by a
 * writer or the migrator): a conflict like any other. A mark our view cannot
 * explain: let go, wait for a new view (KVI_ST_STALE). An insert that finds
 * its buckets full of live items asks the server to grow first (KVI_ST_GROW). */
#include <string.h>

#include "check.h"
#include "conn.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "lock_report.h"
#include "op.h"
#include "post.h"
#include "rmw.h"

#define BACKOFF_MIN_NS 2000ull
#define BACKOFF_MAX_NS 1000000ull

static uint64_t held_word(const struct kvi_conn *h)
{
	return kvi_lock_held_by(h->rm->client_id);
}

/* Region offset of the lock word of the attempt's bucket i (chosen with the
 * index of its epoch: a newer index arriving meanwhile changes nothing). */
static uint64_t lock_off(const struct kvi_opst *st, unsigned i)
{
	return st->boff[i];
}

/* May a cached PUT that started at st->start trust the entry? Its locked
 * re-read of the slot happens before its deadline; the slot word cannot name
 * a different object until quarantine_ms after the entry was confirmed. */
static int cache_trusted(const struct kvi_conn *h, const struct kvi_opst *st, const struct kvi_loc *l)
{
	uint64_t q = (uint64_t)h->rm->quarantine_ms * 1000000u, op = (uint64_t)h->op_timeout_ms * 1000000u;

	if (h->rm->quarantine_ms == 0)
		return 1; /* a server that never reuses memory */
	return q > op && kvi_locache_fresh(l, st->start, q - op);
}

/* Bytes a cached PUT reads of the object slot names: its header and key, or
 * 0 when that object cannot be this key's (outside the heap, too short). */
static uint32_t keyhead_len(const struct kvi_conn *h, const struct kvi_opst *st, uint64_t slot)
{
	uint64_t need = sizeof(struct kvi_obj_hdr) + st->op->key_len;

	return kvi_slot_in_heap(&h->sb, slot) && kvi_read_len(h, slot) >= need ? (uint32_t)need : 0;
}

/* Is the header + key a cached PUT read (st->khead) this key's? No checksum:
 * only the key bytes decide, and they cannot change while we hold the lock
 * and the slot still names the object (objects are immutable, I3). A
 * conditional store also takes the expiry and CAS unique from that header
 * unverified: only a stray WRITE over the object (which corrupts its item
 * anyway) could make it decide wrongly, and then only for that item. */
static int keyhead_is_ours(const struct kvi_opst *st)
{
	const struct kvi_obj_hdr *oh = (const void *)st->khead;

	return oh->version == KVI_LAYOUT_VERSION && oh->key_len == st->op->key_len &&
	       memcmp(st->khead + sizeof(*oh), st->op->key, st->op->key_len) == 0;
}

/* Does the attempt read the key's whole object under the locks (a DELETE,
 * to report an expired item absent; a read-modify-write, to compute the new
 * one)? A store reads only the header and key on its cached path. */
static int reads_item(const struct kvi_opst *st)
{
	return st->rmw || st->op->type == KVC_OP_DELETE;
}

void kvi_write_start(struct kvi_conn *h, struct kvi_opst *st)
{
	const struct kvi_loc *l = kvi_locache_get(&h->cache, st->kh.lo, st->kh.hi);
	struct kvi_rop ops[5];
	unsigned n = 0;

	st->held = 0;
	st->rmw_built = 0;
	st->took = KVI_TOOK_NONE;
	kvi_place(h, st); /* the key's buckets in the current index view (kh.b too) */
	/* A cached PUT trusts the slot word without reading the object, so the
	 * entry must be too young for its segment to have been reused since
	 * (locache.h); a cached DELETE or read-modify-write reads the object
	 * and checks the key. */
	st->cached = l && l->bucket < h->cur.ix.bucket_count && l->idx < KVI_SLOTS_PER_BUCKET &&
		     (l->bucket == st->kh.b[0] || l->bucket == st->kh.b[1]) &&
		     (!reads_item(st) ? cache_trusted(h, st, l) && keyhead_len(h, st, l->slot)
				      : (kvi_slot_in_heap(&h->sb, l->slot) &&
					 kvi_read_len(h, l->slot) <= h->obj_area));
	if (st->cached && reads_item(st) && kvi_obj_room(h, st, kvi_read_len(h, l->slot))) {
		kvi_st_finish(h, st, KVC_ENOMEM, KVC_STAT_FAILED); /* nothing held yet */
		return;
	}
	if (st->cached) {
		st->loc = *l;
		st->nb = 1;
		st->b[0] = l->bucket;
		st->boff[0] = kvi_index_bucket_off(&h->cur.ix, l->bucket);
	}
	if (st->op->type == KVC_OP_PUT && !st->rmw && !st->obj_written)
		ops[n++] = kvi_rop_write(st->obj_off, st->obj, st->obj_len);
	for (unsigned i = 0; i < st->nb; i++) {
		ops[n++] = kvi_rop_cas(lock_off(st, i), &st->w[i], 0, held_word(h));
		ops[n++] = kvi_rop_read(lock_off(st, i), &st->bk[i], KVI_BUCKET_SIZE);
	}
	/* A cached PUT reads the object's header and key, under the lock
	 * (posted after the CAS), to check that the entry is really this key's. */
	if (st->cached && !reads_item(st))
		ops[n++] = kvi_rop_read(kvi_slot_obj_off(st->loc.slot), st->khead, keyhead_len(h, st, st->loc.slot));
	/* A cached DELETE reads the object too (an expired item is absent to the
	 * caller, as to GET, though its slot is still cleared), as does a
	 * read-modify-write (its new object is computed from it). */
	if (st->cached && reads_item(st)) {
		st->ncand = 1;
		st->cand[0] = (struct kvi_cand){ .slot = st->loc.slot, .idx = st->loc.idx,
						 .len = (uint32_t)kvi_read_len(h, st->loc.slot) };
		ops[n++] = kvi_rop_read(kvi_slot_obj_off(st->loc.slot), st->obj, st->cand[0].len);
	}
	kvi_st_post(h, st, ops, n, st->cached ? KVI_ST_W_LOCK_CACHED : KVI_ST_W_LOCK);
}

/* Release the locks this attempt holds; then (enum kvi_after_release) retry,
 * wait, or finish with st->result / st->kind. */
static void release(struct kvi_conn *h, struct kvi_opst *st, int retry)
{
	struct kvi_rop ops[2];
	unsigned n = 0;

	st->retry = retry;
	for (unsigned i = 0; i < st->nb; i++)
		if (st->held & (1u << i))
			ops[n++] = kvi_rop_cas(lock_off(st, i), &st->w[2 + i], held_word(h), 0);
	if (n == 0) {
		st->state = KVI_ST_W_RELEASE;
		kvi_write_step(h, st); /* nothing to release: go straight on */
		return;
	}
	kvi_st_post(h, st, ops, n, KVI_ST_W_RELEASE);
}

/* WRITE the decided slot word and release every lock, in one doorbell. */
static void commit(struct kvi_conn *h, struct kvi_opst *st, uint32_t which, uint32_t idx, uint64_t slot, int kind)
{
	struct kvi_rop ops[4];
	unsigned n = 0;

	/* A read-modify-write's object, built under the locks, goes first:
	 * RC lands it before the slot WRITE that names it (layout.h I3). */
	if (st->rmw_built && slot) {
		ops[n++] = kvi_rop_write(st->obj_off, st->obj, st->obj_len);
		st->obj_written = 1;
	}

	/* The slot WRITE must not land past the deadline (memory reuse):
	 * checked against the time now, not the step's. */
	kvi_step_clock_refresh(h);
	/* A slot changes only under its bucket's lock (layout.h I1): the attempt
	 * holds every lock this doorbell releases. A PUT's slot names the object
	 * it wrote, whole, with the key's fingerprint; its WRITE went out before
	 * (I3: posted with the lock doorbell, or an earlier attempt's). */
	KVI_INVARIANT(st->nb >= 1 && st->held == (1u << st->nb) - 1 && which < st->nb,
		      "a commit holds every lock it releases");
	KVI_INVARIANT(slot == 0 || ((st->op->type == KVC_OP_PUT || st->rmw_built) && st->obj_written &&
				    kvi_slot_obj_off(slot) == st->obj_off && kvi_slot_read_len(slot) >= st->obj_len &&
				    kvi_slot_fp(slot) == (st->kh.fp & ((1u << KVI_SLOT_FP_BITS) - 1))),
		      "a committed slot names the object its PUT wrote");
	st->commit_which = which;
	st->commit_idx = idx;
	st->commit_slot = slot;
	st->kind = kind;
	st->w[4] = slot;
	ops[n++] = kvi_rop_write(lock_off(st, which) + 8 + 8u * idx, &st->w[4], 8);
	for (unsigned i = 0; i < st->nb; i++)
		ops[n++] = kvi_rop_cas(lock_off(st, i), &st->w[2 + i], held_word(h), 0);
	kvi_st_post(h, st, ops, n, KVI_ST_W_COMMIT);
}

static uint64_t new_slot(const struct kvi_opst *st)
{
	return kvi_slot_make(st->kh.fp, st->obj_off, st->obj_len);
}

/* A store's verdict on the key's current item, under the locks: oh is its
 * header (NULL: the key is absent), expired whether it has expired (then it
 * is absent, as GET would say). 0: store; else the code it is refused with. */
static int store_verdict(const struct kvc_op *op, const struct kvi_obj_hdr *oh, int expired)
{
	int present = oh && !expired;

	switch (op->mode) {
	case KVC_STORE_ADD:
		return present ? KVC_ENOTSTORED : 0;
	case KVC_STORE_REPLACE:
		return present ? 0 : KVC_ENOTSTORED;
	case KVC_STORE_CAS:
		return !present ? KVC_ENOTFOUND : oh->cas != op->cas ? KVC_EEXISTS : 0;
	default:
		return 0;
	}
}

static void release(struct kvi_conn *h, struct kvi_opst *st, int retry);

/* Refuse a conditional store (code from store_verdict): let go, change nothing. */
static void refuse(struct kvi_conn *h, struct kvi_opst *st, int code)
{
	st->result = code;
	st->kind = KVC_STAT_STORE_REFUSED;
	release(h, st, KVI_AFTER_FINISH);
}

/* A read-modify-write could not build its object (kvi_rmw_build's codes):
 * let go, and try again (a new extent is on its way) or finish. */
static void rmw_failed(struct kvi_conn *h, struct kvi_opst *st, int rc)
{
	switch (rc) {
	case KVC_EAGAIN:
		st->lock_tries++; /* back off while the grant arrives */
		release(h, st, KVI_AFTER_RETRY);
		return;
	case KVC_EEXISTS:
	case KVC_ENONNUMERIC:
	case KVC_EVALSIZE:
		refuse(h, st, rc);
		return;
	default:
		st->result = rc;
		st->kind = KVC_STAT_FAILED;
		release(h, st, KVI_AFTER_FINISH);
	}
}

/* Insert st's object into bucket `which`, slot idx (free, or an expired
 * item's, or a victim's). A vivifying INCR / DECR builds its object now:
 * under the locks, where it knows the key is absent. */
static void insert_at(struct kvi_conn *h, struct kvi_opst *st, uint32_t which, uint32_t idx)
{
	int rc = st->rmw ? kvi_rmw_vivify(h, st) : 0;

	if (rc) {
		rmw_failed(h, st, rc);
		return;
	}
	commit(h, st, which, idx, new_slot(st), KVC_STAT_PUT_INSERT);
}

static int vivifies(const struct kvc_op *op)
{
	return (op->type == KVC_OP_INCR || op->type == KVC_OP_DECR) && (op->mode & KVC_ARITH_VIVIFY);
}

/* A read-modify-write found the key in bucket `which`, slot idx (oh, expired
 * as for found()): build the new object and commit it; or, the item absent
 * (expired, or junk in the slot), clear the slot as a DELETE would and
 * report the miss -- unless it vivifies, and then its item takes the slot. */
static void rmw_found(struct kvi_conn *h, struct kvi_opst *st, uint32_t which, uint32_t idx, int cached,
		      const struct kvi_obj_hdr *oh, int expired)
{
	int rc;

	if (!oh || expired) {
		if (vivifies(st->op)) {
			insert_at(h, st, which, idx);
			return;
		}
		st->result = kvi_rmw_miss(st->op);
		commit(h, st, which, idx, 0, KVC_STAT_RMW_MISS);
		return;
	}
	rc = kvi_rmw_build(h, st, oh);
	if (rc) {
		rmw_failed(h, st, rc);
		return;
	}
	commit(h, st, which, idx, new_slot(st), cached ? KVC_STAT_RMW_CACHED : KVC_STAT_RMW);
}

/* The key is in bucket `which`, slot idx, its object's header oh (NULL: junk
 * in the slot; expired: its item has expired, so a DELETE clears the slot
 * but reports the key absent, as GET would, and a store takes it as absent).
 * A read-modify-write also has the whole object at oh. */
static void found(struct kvi_conn *h, struct kvi_opst *st, uint32_t which, uint32_t idx, int cached,
		  const struct kvi_obj_hdr *oh, int expired)
{
	if (st->rmw) {
		rmw_found(h, st, which, idx, cached, oh, expired);
		return;
	}
	if (st->op->type == KVC_OP_PUT) {
		int verdict = store_verdict(st->op, oh, expired);

		if (verdict) {
			refuse(h, st, verdict);
			return;
		}
		commit(h, st, which, idx, new_slot(st), cached ? KVC_STAT_PUT_UPDATE_CACHED : KVC_STAT_PUT_UPDATE);
		return;
	}
	st->result = expired ? KVC_ENOTFOUND : 0;
	commit(h, st, which, idx, 0, expired ? KVC_STAT_DELETE_MISS : KVC_STAT_DELETE);
}

/* Both buckets are full: READ the headers of the objects their slots name,
 * KVI_RMEM_MAX_BATCH at a time, looking for an expired item whose slot an
 * insert may take ("an expired item's slot counts as free"), or a victim to
 * evict (pick_victim). We hold
 * both locks, so those objects cannot change or go away meanwhile: a slot
 * changes only under its lock (layout.h I1) and a segment is reclaimed only
 * after every slot into it was switched away. */
#define HDR_STRIDE ((sizeof(struct kvi_obj_hdr) + 7) & ~(size_t)7)
_Static_assert(2 * KVI_SLOTS_PER_BUCKET * HDR_STRIDE <= KVI_OBJ_AREA_MIN, "headers fit any object area");

static void on_expcheck(struct kvi_conn *h, struct kvi_opst *st);

static void read_headers(struct kvi_conn *h, struct kvi_opst *st)
{
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH];
	unsigned n = 0;

	for (unsigned k = st->exp_next; k < st->nb * KVI_SLOTS_PER_BUCKET && n < KVI_RMEM_MAX_BATCH; k++) {
		uint64_t s = st->bk[k / KVI_SLOTS_PER_BUCKET].slot[k % KVI_SLOTS_PER_BUCKET];

		st->exp_next = k + 1;
		if (!kvi_slot_in_heap(&h->sb, s))
			continue;
		ops[n++] = kvi_rop_read(kvi_slot_obj_off(s), st->obj + k * HDR_STRIDE, sizeof(struct kvi_obj_hdr));
	}
	if (n == 0) { /* the rest name nothing in the heap: judged without a read */
		on_expcheck(h, st);
		return;
	}
	kvi_st_post(h, st, ops, n, KVI_ST_W_EXPCHECK);
}

/* Which slot of the two full buckets an insert takes, from the headers just
 * read: junk or an expired item's first (*expired 2 or 1); else (a cache that
 * evicts) an item nobody read since it was written, else any item --
 * set-associative eviction, as a CPU cache does when a set is full; -1 when
 * none may go. */
static int pick_victim(const struct kvi_conn *h, const struct kvi_opst *st, int *expired)
{
	uint64_t now_ms = kvi_real_ns() / 1000000u; /* we hold both locks: any moment decides */
	int unread = -1, any = -1;

	for (unsigned k = 0; k < st->exp_next; k++) {
		const struct kvi_obj_hdr *oh = (const void *)(st->obj + k * HDR_STRIDE);
		uint64_t s = st->bk[k / KVI_SLOTS_PER_BUCKET].slot[k % KVI_SLOTS_PER_BUCKET];

		/* Only the header was read: no checksum. Under our locks a slot
		 * always names a whole object (layout.h I1, I3), so one naming
		 * nothing in the heap, or a header that does not parse, is junk
		 * (a stray WRITE's): taken first, or buckets of junk would look
		 * full for good. A corrupt header that parses can only cost its
		 * own item. */
		if (!kvi_slot_in_heap(&h->sb, s) || oh->version != KVI_LAYOUT_VERSION || oh->key_len == 0 ||
		    oh->key_len > KVI_MAX_KEY) {
			*expired = 2;
			return (int)k;
		}
		if (kvi_obj_expiry_ms(oh) && now_ms >= kvi_obj_expiry_ms(oh)) {
			*expired = 1;
			return (int)k;
		}
		if (unread < 0 && oh->access == 0)
			unread = (int)k;
		if (any < 0)
			any = (int)k;
	}
	*expired = 0;
	if (st->exp_next < st->nb * KVI_SLOTS_PER_BUCKET || (h->rm->server_flags & KVI_WELCOME_NO_EVICT))
		return -1;
	return unread >= 0 ? unread : any;
}

static void on_expcheck(struct kvi_conn *h, struct kvi_opst *st)
{
	int expired, k = pick_victim(h, st, &expired);

	/* Every header read, none expired: both buckets hold live items only.
	 * Before evicting one (or failing), ask the server for a larger index,
	 * once (op_resize.c "GROW"). */
	if (!(k >= 0 && expired) && st->exp_next == st->nb * KVI_SLOTS_PER_BUCKET && kvi_grow_wanted(h, st)) {
		release(h, st, KVI_AFTER_GROW);
		return;
	}
	if (k >= 0) {
		if (expired == 2)
			h->stats.junk_slots++;
		else if (expired)
			h->stats.expired_reused++;
		else
			h->stats.index_evictions++;
		st->took = expired ? KVI_TOOK_DEAD : KVI_TOOK_LIVE;
		insert_at(h, st, (uint32_t)k / KVI_SLOTS_PER_BUCKET, (uint32_t)k % KVI_SLOTS_PER_BUCKET);
		return;
	}
	if (st->exp_next < st->nb * KVI_SLOTS_PER_BUCKET) {
		read_headers(h, st);
		return;
	}
	st->result = KVC_EINDEXFULL;
	st->kind = KVC_STAT_FAILED;
	release(h, st, KVI_AFTER_FINISH);
}

/* The key is in neither bucket (both locked and checked). */
static void absent(struct kvi_conn *h, struct kvi_opst *st)
{
	unsigned free_n[2] = { 0, 0 }, pick;
	int first[2] = { -1, -1 }, verdict;

	if (st->op->type == KVC_OP_DELETE || (st->rmw && !vivifies(st->op))) {
		st->result = st->rmw ? kvi_rmw_miss(st->op) : KVC_ENOTFOUND;
		st->kind = st->rmw ? KVC_STAT_RMW_MISS : KVC_STAT_DELETE_MISS;
		release(h, st, KVI_AFTER_FINISH);
		return;
	}
	if (!st->rmw && (verdict = store_verdict(st->op, NULL, 0)) != 0) {
		refuse(h, st, verdict);
		return;
	}
	for (unsigned w = 0; w < st->nb; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			if (st->bk[w].slot[i] == 0) {
				free_n[w]++;
				if (first[w] < 0)
					first[w] = (int)i;
			}
	if (free_n[0] == 0 && free_n[1] == 0) {
		/* An expired item's slot is as good as a free one: look. */
		st->exp_next = 0;
		read_headers(h, st);
		return;
	}
	/* The emptier bucket: keeps both choices balanced, which is what lets
	 * 2-choice hashing fill ~90% of the slots before a bucket overflows. */
	pick = free_n[1] > free_n[0] ? 1 : 0;
	st->took = KVI_TOOK_FREE;
	insert_at(h, st, pick, (uint32_t)first[pick]);
}

/* Every bucket of the attempt is held: check the cached slot, or look for
 * the key. */
static void locked_all(struct kvi_conn *h, struct kvi_opst *st)
{
	if (st->state == KVI_ST_W_LOCK_CACHED) {
		enum kvi_objcheck res = KVI_OBJ_MATCH;
		const struct kvi_obj_hdr *oh = (const void *)st->khead;

		if (reads_item(st)) {
			res = kvi_obj_check(st, &st->cand[0]);
			oh = (const void *)st->obj;
		} else if (!keyhead_is_ours(st)) {
			res = KVI_OBJ_OTHER; /* another key's entry (a hash collision) */
		} else {
			/* We hold the lock: any moment decides (layout.h "Expiry"). */
			res = kvi_expiry_check(st, kvi_obj_expiry_ms(oh));
		}
		if (st->bk[0].slot[st->loc.idx] == st->loc.slot && (res == KVI_OBJ_MATCH || res == KVI_OBJ_EXPIRED)) {
			found(h, st, 0, st->loc.idx, 1, oh, res == KVI_OBJ_EXPIRED);
			return;
		}
		/* Stale hint: let go and take the general path at once. */
		kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
		st->lock_tries = 0;
		release(h, st, KVI_AFTER_RETRY);
		return;
	}
	if (kvi_collect_cands(h, st) == 0) {
		absent(h, st);
		return;
	}
	if (kvi_read_cands(h, st, KVI_ST_W_KEYCHECK) == 0) {
		/* Every candidate is garbage (too large for any object): not our key. */
		absent(h, st);
	}
}

/* CAS-lock and READ the old buckets of the choices in `follow`, whose new
 * buckets are UNMIGRATED (nothing of them is held). */
static void lock_old(struct kvi_conn *h, struct kvi_opst *st, unsigned follow)
{
	struct kvi_rop ops[4];
	unsigned n = 0;

	kvi_use_old(st, follow);
	for (unsigned i = 0; i < st->nb; i++) {
		if (!(st->old & (1u << i)))
			continue;
		ops[n++] = kvi_rop_cas(lock_off(st, i), &st->w[i], 0, held_word(h));
		ops[n++] = kvi_rop_read(lock_off(st, i), &st->bk[i], KVI_BUCKET_SIZE);
		h->stats.resize_follows++;
	}
	kvi_st_post(h, st, ops, n, KVI_ST_W_LOCK_OLD);
}

/* A lock doorbell completed: the CAS results of the buckets it tried. */
static void on_lock(struct kvi_conn *h, struct kvi_opst *st)
{
	unsigned tried = 0, follow = 0;
	int busy = -1, stale = 0;

	if (st->op->type == KVC_OP_PUT && !st->rmw)
		st->obj_written = 1;
	for (unsigned i = 0; i < st->nb; i++)
		if (st->state != KVI_ST_W_LOCK_OLD || (st->old & (1u << i)))
			tried |= 1u << i;
	for (unsigned i = 0; i < st->nb; i++) {
		if (!(tried & (1u << i)))
			continue;
		if (st->w[i] == 0) {
			st->held |= 1u << i;
			continue;
		}
		switch (kvi_lock_mark(st, i, st->w[i])) {
		case KVI_RMARK_STALE:
			stale = 1;
			break;
		case KVI_RMARK_FOLLOW:
			follow |= 1u << i;
			break;
		case KVI_RMARK_NONE:
			if (busy < 0)
				busy = (int)i;
			break;
		}
	}
	if (stale) {
		release(h, st, KVI_AFTER_STALE);
		return;
	}
	if (busy >= 0) {
		h->stats.lock_conflicts++;
		st->lock_tries++;
		kvi_lock_waited(h, st, st->b[busy], st->bep[busy], st->w[busy]);
		release(h, st, KVI_AFTER_RETRY);
		return;
	}
	if (follow && st->state == KVI_ST_W_LOCK_OLD) {
		/* Migrated since we looked: the new bucket is the truth now. */
		release(h, st, KVI_AFTER_RETRY_NOW);
		return;
	}
	if (follow && st->state == KVI_ST_W_LOCK_CACHED) {
		/* A hint into a bucket still filling: take the general path. */
		kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
		release(h, st, KVI_AFTER_RETRY_NOW);
		return;
	}
	if (follow) {
		lock_old(h, st, follow);
		return;
	}
	locked_all(h, st);
}

static void on_keycheck(struct kvi_conn *h, struct kvi_opst *st)
{
	enum kvi_objcheck res;
	const struct kvi_cand *c = kvi_check_round(h, st, &res);

	if (c) { /* an expired item is replaced or removed in place */
		found(h, st, c->which, c->idx, 0, (const void *)(st->obj + c->loff), res == KVI_OBJ_EXPIRED);
		return;
	}
	if (st->cand_next < st->ncand && kvi_read_cands(h, st, KVI_ST_W_KEYCHECK) != 0)
		return;
	if (st->cand_bad == 0) {
		absent(h, st);
		return;
	}
	/* An unreadable candidate might be our key: deciding "absent" could insert
	 * a duplicate. Read again (we still hold the locks), a bounded number of times. */
	h->stats.verify_retries++;
	if (++st->verify_tries >= KVI_VERIFY_TRIES) {
		/* Under our locks nothing a slot names can change or go away
		 * (layout.h I1, I3): a slot whose object never verifies names no
		 * object at all -- junk a stray WRITE left, or an item whose bytes
		 * were written over. It is not our key's (that one would verify);
		 * repair it as an expired item is: a PUT takes its place, a DELETE
		 * clears it. Left alone it would fail every write of the key. */
		for (unsigned i = 0; i < st->cand_next; i++) {
			const struct kvi_cand *bad = &st->cand[i];

			if (bad->len <= h->obj_area && kvi_obj_check(st, bad) == KVI_OBJ_BAD) {
				h->stats.junk_slots++;
				found(h, st, bad->which, bad->idx, 0, NULL, 1);
				return;
			}
		}
		st->result = KVC_ECORRUPT;
		st->kind = KVC_STAT_FAILED;
		release(h, st, KVI_AFTER_FINISH);
		return;
	}
	st->cand_next = 0;
	st->cand_bad = 0;
	if (kvi_read_cands(h, st, KVI_ST_W_KEYCHECK) == 0)
		absent(h, st);
}

static void on_commit(struct kvi_conn *h, struct kvi_opst *st)
{
	for (unsigned i = 0; i < st->nb; i++) {
		if (st->w[2 + i] != held_word(h)) {
			/* Our lock word was not ours any more: the server fenced us, or
			 * someone wrote over it. Whether our slot WRITE counted is
			 * unknown, and so is what we still hold: break the connection
			 * so that the server fences whatever is left. */
			kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
			kvi_st_abandon(h, st, KVC_EUNKNOWN);
			return;
		}
	}
	/* Cache only a slot of the current index (not an old bucket, not an
	 * index replaced while we ran): the cache names current buckets. */
	if (st->commit_slot && st->epoch == h->cur.ix.epoch && !(st->old & (1u << st->commit_which)))
		kvi_locache_put(&h->cache, st->kh.lo, st->kh.hi, st->b[st->commit_which], st->commit_idx,
				st->commit_slot, st->start);
	else
		kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
	if ((st->op->type == KVC_OP_PUT || st->rmw) && st->commit_slot)
		st->op->cas = st->obj_cas; /* the new item's unique (a touch's: the same) */
	kvi_st_finish(h, st, st->result, st->kind);
}

static void on_release(struct kvi_conn *h, struct kvi_opst *st)
{
	uint64_t now, cap, wait;

	for (unsigned i = 0; i < st->nb; i++) {
		if ((st->held & (1u << i)) && st->w[2 + i] != held_word(h)) {
			/* As in on_commit: what we hold is unknown; only fencing can
			 * clean up. Nothing was written, so the write simply failed. */
			kvi_st_abandon(h, st, KVC_ESERVERGONE);
			return;
		}
	}
	st->held = 0;
	if (st->retry == KVI_AFTER_FINISH) {
		kvi_st_finish(h, st, st->result, st->kind);
		return;
	}
	now = kvi_now_ns();
	if (now >= st->deadline) {
		kvi_st_finish(h, st, KVC_ETIMEDOUT, KVC_STAT_FAILED);
		return;
	}
	if (st->retry == KVI_AFTER_STALE) {
		kvi_wait_stale(h, st);
		return;
	}
	if (st->retry == KVI_AFTER_GROW) {
		kvi_wait_grow(h, st);
		return;
	}
	if (st->retry == KVI_AFTER_RETRY_NOW || st->lock_tries == 0) { /* not a conflict: no wait */
		kvi_write_start(h, st);
		return;
	}
	cap = BACKOFF_MIN_NS << (st->lock_tries < 10 ? st->lock_tries : 10);
	if (cap > BACKOFF_MAX_NS)
		cap = BACKOFF_MAX_NS;
	wait = kvi_rand(h) % cap;
	st->not_before = now + wait;
	st->state = KVI_ST_BACKOFF;
}

void kvi_write_step(struct kvi_conn *h, struct kvi_opst *st)
{
	switch (st->state) {
	case KVI_ST_W_LOCK:
	case KVI_ST_W_LOCK_CACHED:
	case KVI_ST_W_LOCK_OLD:
		on_lock(h, st);
		break;
	case KVI_ST_W_KEYCHECK:
		on_keycheck(h, st);
		break;
	case KVI_ST_W_COMMIT:
		on_commit(h, st);
		break;
	case KVI_ST_W_RELEASE:
		on_release(h, st);
		break;
	case KVI_ST_W_EXPCHECK:
		on_expcheck(h, st);
		break;
	}
}
