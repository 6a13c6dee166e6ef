/* GET: one-sided, lock-free.
 *
 *   cached location:  READ slot word + READ object          (1 round trip)
 *   otherwise:        READ both buckets                      (1: a miss ends here)
 *                     READ fingerprint-matching object(s)    (2: a hit)
 *
 * Linearizable because each object is immutable and a key lives in at most one
 * slot: the value returned was the key's value when its slot word was read. A
 * read that fails verification (torn by a concurrent reuse, zeroed by the
 * reclaimer, or corrupt) is retried from the bucket reads, at most
 * KVI_VERIFY_TRIES times; it is never a result. Nothing read is used once the
 * deadline has passed (engine.c): the memory may have been reused since.
 * Why the cached path (slot word and object in one doorbell, not ordered with
 * each other) stays right under reuse: layout.h "Reuse".
 *
 * Resize (layout.h "Resize", op_resize.c): the cached path reads the bucket's
 * lock word with the slot word, in one READ, so that a location in a bucket a
 * migration emptied (MOVED) is never trusted. While the server migrates, a
 * bucket found UNMIGRATED is read from the old index in one more doorbell,
 * and an old bucket found MOVED by then from the new one again. Locations
 * found in an old bucket are not cached (the cache names current buckets).
 *
 * Expired (layout.h "Expiry"): an item can expire while a writer holds its
 * bucket, after the writer decided it alive (an INCR, TOUCH, CAS ... that
 * gives it a new expiry) and before its commit lands. A GET that then read
 * the old object and told a miss would be linearized after the writer's
 * decision and before its effect: a touch that "happened" to an item someone
 * saw gone. So a GET that finds its item expired tells the miss only once it
 * read the bucket's lock word free and then, fenced behind that READ, the
 * slot word still naming the item (one more round trip, on this path only):
 * a writer that took the lock before that READ has committed by then (the
 * slot would differ); one that takes it after decides after the expiry. A
 * held lock is read again until its writer is done (or the deadline). */
#include <stddef.h>
#include <string.h>

#include "conn.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "op.h"
#include "post.h"

/* READ the buckets of the placement st has (kvi_place). */
static void post_buckets(struct kvi_conn *h, struct kvi_opst *st)
{
	struct kvi_rop ops[2];

	st->cached = 0;
	for (unsigned i = 0; i < st->nb; i++)
		ops[i] = kvi_rop_read(st->boff[i], &st->bk[i], KVI_BUCKET_SIZE);
	if (kvi_st_post(h, st, ops, st->nb, KVI_ST_GET_BUCKETS) == 0)
		st->slot_posted = st->posted;
}

/* Place again (the index may have changed since) and READ the buckets. */
static void read_buckets(struct kvi_conn *h, struct kvi_opst *st)
{
	kvi_place(h, st);
	post_buckets(h, st);
}

void kvi_get_start(struct kvi_conn *h, struct kvi_opst *st)
{
	const struct kvi_loc *l = kvi_locache_get(&h->cache, st->kh.lo, st->kh.hi);
	struct kvi_rop ops[2];

	kvi_place(h, st); /* the index view this attempt uses (also the cached one) */
	if (!l || l->bucket >= h->cur.ix.bucket_count || l->idx >= KVI_SLOTS_PER_BUCKET ||
	    !kvi_slot_in_heap(&h->sb, l->slot) || kvi_read_len(h, l->slot) > h->obj_area) {
		post_buckets(h, st); /* placed just now */
		return;
	}
	if (kvi_obj_room(h, st, kvi_read_len(h, l->slot))) {
		kvi_st_finish(h, st, KVC_ENOMEM, KVC_STAT_FAILED);
		return;
	}
	st->cached = 1;
	st->loc = *l;
	st->ncand = 1;
	st->cand[0] = (struct kvi_cand){ .slot = l->slot, .idx = l->idx, .len = (uint32_t)kvi_read_len(h, l->slot) };
	st->nb = 1;
	st->b[0] = l->bucket;
	st->boff[0] = kvi_index_bucket_off(&h->cur.ix, l->bucket);
	/* The lock word with the slot word, in one READ (bytes 0 .. the slot's
	 * end): a bucket migrated away (MOVED) is seen with the word it froze. */
	ops[0] = kvi_rop_read(st->boff[0], &st->bk[0], 8u * (l->idx + 2u));
	ops[1] = kvi_rop_read(kvi_slot_obj_off(l->slot), st->obj, st->cand[0].len);
	if (kvi_st_post(h, st, ops, 2, KVI_ST_GET_CACHED) == 0)
		st->slot_posted = st->posted;
}

/* Try to win the item's recache token (layout.h "Recache tokens"): CAS the
 * word of its access byte from what was read (expect) to that with the
 * token (and the read mark) set. */
static void post_win(struct kvi_conn *h, struct kvi_opst *st, uint64_t expect)
{
	uint64_t set = KVI_ACCESS_WIN | kvi_read_mark(st->op);
	struct kvi_rop op = kvi_rop_cas(st->win_off, &st->w[0], expect, expect | set << st->win_shift);

	st->w[1] = expect;
	kvi_st_post(h, st, &op, 1, KVI_ST_GET_WIN);
}

/* The token's CAS completed: won, someone else has it, or the access byte
 * changed under us (a read mark: try again, a few times); anything else in
 * the word changed means the memory is no longer this object's: no token. */
static void on_win(struct kvi_conn *h, struct kvi_opst *st)
{
	uint64_t got = st->w[0], expect = st->w[1], byte = (uint64_t)0xff << st->win_shift;

	if (got == expect) {
		st->op->item |= KVC_ITEM_WON;
	} else if ((got & ~byte) == (expect & ~byte)) {
		if ((got >> st->win_shift) & KVI_ACCESS_WIN) {
			st->op->item |= KVC_ITEM_WIN_SENT;
		} else if (++st->lock_tries < 4) {
			post_win(h, st, got);
			return;
		}
	}
	kvi_st_finish(h, st, st->result, st->kind);
}

int kvi_recache_contends(const struct kvc_op *op, const struct kvi_obj_hdr *oh)
{
	uint64_t exp = kvi_obj_expiry_ms(oh), now_ms;

	if (oh->flags & KVI_OBJ_F_STALE)
		return 1;
	if (!(op->meta & KVC_META_RECACHE) || exp == 0)
		return 0;
	now_ms = kvi_real_ns() / 1000000u;
	return exp <= now_ms || exp - now_ms < op->recache_ms;
}

/* Copy the value of the matching object in c out to the caller. */
static void deliver(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_cand *c, int kind)
{
	const unsigned char *buf = st->obj + c->loff;
	const struct kvi_obj_hdr *oh = (const struct kvi_obj_hdr *)(const void *)buf;
	struct kvc_op *op = st->op;
	int status = 0;
	uint64_t word, obj_off = kvi_slot_obj_off(c->slot);

	op->value_len = kvi_obj_value_len(oh);
	op->flags = kvi_obj_client_flags(oh);
	op->cas = oh->cas;
	op->expiry_ms = kvi_obj_expiry_ms(oh);
	op->item = kvi_item_bits(oh);
	if (op->value_len > op->buf_len)
		status = KVC_ETRUNC;
	else if (op->value_len)
		memcpy(op->buf, buf + sizeof(*oh) + oh->key_len, op->value_len);
	if (op->value_len > KVI_STEP_HEAVY_BYTES) /* verified and copied: a while */
		kvi_step_clock_refresh(h);
	/* The slot named this object of our key during this operation: the
	 * location is confirmed as of its start (locache.h) -- if it is a bucket
	 * of the current index (not an old one, not of an index since replaced). */
	if (st->epoch == h->cur.ix.epoch && (st->cached || !(st->old & (1u << c->which))))
		kvi_locache_put(&h->cache, st->kh.lo, st->kh.hi, st->cached ? st->loc.bucket : st->b[c->which],
				st->cached ? st->loc.idx : c->idx, c->slot, st->start);
	/* The recache token: one more round trip, only when contended (its
	 * CAS sets the read mark too). */
	memcpy(&word, buf + (kvi_access_word_off(obj_off) - obj_off), sizeof(word));
	if (!(oh->access & KVI_ACCESS_WIN) && kvi_recache_contends(op, oh)) {
		st->result = status;
		st->kind = kind;
		st->lock_tries = 0;
		st->win_off = kvi_access_word_off(obj_off);
		st->win_shift = kvi_access_shift(obj_off);
		post_win(h, st, word);
		return;
	}
	/* First read since the item was written (or copied forward): tell the
	 * reclaimer it is in use (not asked to leave it be: "mg u"). */
	if (!(oh->access & KVI_ACCESS_READ) && kvi_read_mark(op))
		kvi_mark_access(h, obj_off, word, st->deadline);
	kvi_st_finish(h, st, status, kind);
}

/* The item in candidate c has expired: see "Expired" above. */
static void post_confirm(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_cand *c)
{
	uint64_t boff = st->cached ? st->boff[0] : st->boff[c->which];
	unsigned idx = st->cached ? st->loc.idx : c->idx;
	struct kvi_rop ops[2] = { kvi_rop_read(boff, &st->w[0], 8),
				  kvi_rop_read(boff + offsetof(struct kvi_bucket, slot[idx]), &st->w[1], 8) };

	ops[1].fence = 1;
	st->confirm = (unsigned)(c - st->cand);
	kvi_st_post(h, st, ops, 2, KVI_ST_GET_CONFIRM);
}

static void read_buckets(struct kvi_conn *h, struct kvi_opst *st);

static void on_confirm(struct kvi_conn *h, struct kvi_opst *st)
{
	const struct kvi_cand *c = &st->cand[st->confirm];
	uint64_t lock = st->w[0];

	if (st->w[1] == c->slot && lock == 0) {
		st->saw_expired = 1;
		kvi_st_finish(h, st, KVC_ENOTFOUND, KVC_STAT_GET_MISS);
	} else if (st->w[1] == c->slot && !kvi_lock_is_mark(lock)) {
		h->stats.expiry_waits++; /* a writer holds the bucket: wait it out */
		post_confirm(h, st, c);
	} else { /* replaced or removed meanwhile, or a resize mark: look again */
		if (st->cached)
			kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
		read_buckets(h, st);
	}
}

static void retry_or_fail(struct kvi_conn *h, struct kvi_opst *st)
{
	h->stats.verify_retries++;
	if (++st->verify_tries >= KVI_VERIFY_TRIES)
		kvi_st_finish(h, st, KVC_ECORRUPT, KVC_STAT_FAILED);
	else
		read_buckets(h, st);
}

static void on_cached(struct kvi_conn *h, struct kvi_opst *st)
{
	uint64_t lock = st->bk[0].lock;

	if (kvi_lock_is_mark(lock)) { /* junk in a lock word is not a mark: ignored */
		/* UNMIGRATED (while we know of the migration): the full path
		 * follows it; anything else: our index is not the server's. */
		if (st->oepoch && lock == KVI_LOCK_UNMIGRATED) {
			read_buckets(h, st);
			return;
		}
		kvi_wait_stale(h, st);
		return;
	}
	if (st->bk[0].slot[st->loc.idx] == st->loc.slot) {
		switch (kvi_obj_check(st, &st->cand[0])) {
		case KVI_OBJ_MATCH:
			deliver(h, st, &st->cand[0], KVC_STAT_GET_HIT_CACHED);
			return;
		case KVI_OBJ_EXPIRED:
			post_confirm(h, st, &st->cand[0]);
			return;
		case KVI_OBJ_UNSURE: /* expired during the READ: read again, decided then */
			read_buckets(h, st);
			return;
		default:
			break;
		}
	}
	/* The key moved, was deleted or replaced: forget and look it up. */
	kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
	read_buckets(h, st);
}

/* Check the candidates of the round just read; read more or conclude. */
static void on_objects(struct kvi_conn *h, struct kvi_opst *st)
{
	enum kvi_objcheck res;
	const struct kvi_cand *c = kvi_check_round(h, st, &res);

	if (c) {
		if (res == KVI_OBJ_MATCH) {
			deliver(h, st, c, KVC_STAT_GET_HIT);
		} else if (res == KVI_OBJ_UNSURE) { /* expired during the READ: read again */
			read_buckets(h, st);
		} else {
			post_confirm(h, st, c);
		}
		return;
	}
	if (st->cand_next < st->ncand) {
		if (kvi_read_cands(h, st, KVI_ST_GET_OBJECTS) != 0)
			return;
	}
	if (st->cand_bad)
		retry_or_fail(h, st);
	else
		kvi_st_finish(h, st, KVC_ENOTFOUND, KVC_STAT_GET_MISS);
}

/* The buckets of this attempt were read: follow resize marks, or go on. */
static int follow_marks(struct kvi_conn *h, struct kvi_opst *st)
{
	struct kvi_rop ops[2];
	unsigned follow = 0, n = 0, before = st->old, reread;

	for (unsigned i = 0; i < st->nb; i++) {
		uint64_t w = st->bk[i].lock;

		/* Re-read new buckets are the truth even while still marked
		 * UNMIGRATED: their old bucket was MOVED after the copy. */
		if (st->state == KVI_ST_GET_RENEW && w == KVI_LOCK_UNMIGRATED)
			continue;
		switch (kvi_lock_mark(st, i, w)) {
		case KVI_RMARK_STALE:
			kvi_wait_stale(h, st);
			return 1;
		case KVI_RMARK_FOLLOW:
			follow |= 1u << i;
			break;
		case KVI_RMARK_NONE:
			break;
		}
	}
	if (!follow)
		return 0;
	if (st->state == KVI_ST_GET_RENEW) {
		kvi_wait_stale(h, st); /* MOVED again within one operation: not ours to follow */
		return 1;
	}
	if (st->state == KVI_ST_GET_BUCKETS)
		kvi_use_old(st, follow);
	else
		kvi_use_new(st, follow);
	/* The buckets that changed index (one old bucket may serve both
	 * choices, and both come back to the new index together). */
	reread = st->old ^ before;
	for (unsigned i = 0; i < st->nb; i++)
		if (reread & (1u << i))
			ops[n++] = kvi_rop_read(st->boff[i], &st->bk[i], KVI_BUCKET_SIZE);
	h->stats.resize_follows += st->state == KVI_ST_GET_BUCKETS ? n : 0;
	kvi_st_post(h, st, ops, n, st->state == KVI_ST_GET_BUCKETS ? KVI_ST_GET_OLD : KVI_ST_GET_RENEW);
	return 1;
}

void kvi_get_step(struct kvi_conn *h, struct kvi_opst *st)
{
	switch (st->state) {
	case KVI_ST_GET_CACHED:
		on_cached(h, st);
		break;
	case KVI_ST_GET_BUCKETS:
	case KVI_ST_GET_OLD:
	case KVI_ST_GET_RENEW:
		if (follow_marks(h, st))
			break;
		if (kvi_collect_cands(h, st) == 0) {
			kvi_st_finish(h, st, KVC_ENOTFOUND, KVC_STAT_GET_MISS);
			break;
		}
		if (kvi_read_cands(h, st, KVI_ST_GET_OBJECTS) == 0) /* every match is garbage */
			kvi_st_finish(h, st, KVC_ENOTFOUND, KVC_STAT_GET_MISS);
		break;
	case KVI_ST_GET_OBJECTS:
		on_objects(h, st);
		break;
	case KVI_ST_GET_WIN:
		on_win(h, st);
		break;
	case KVI_ST_GET_CONFIRM:
		on_confirm(h, st);
		break;
	}
}
