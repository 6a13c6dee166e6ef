#include "reclaim.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "clock.h"
#include "hash.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "lockwatch.h"
#include "log.h"
#include "flush.h"
#include "migrate.h"

#define LOCK_BATCH 7u          /* buckets per lock doorbell: CAS + READ each, <= 16 ops */
#define RECLAIM_RDMA_MS 5000   /* one loopback doorbell; past it the loopback is broken */
#define BACKOFF_MIN_US 100u
#define BACKOFF_MAX_US 10000u
#define PEND_MAX 256u          /* undecided objects looked at again one by one (walk_until_decided) */
/* Evict mode: copy forward at most this share of a segment (eighths), so that
 * every reclaimed segment frees at least an eighth of itself even when every
 * object in it was read. */
#define COPY_LIMIT_EIGHTHS 7u

/* A live-looking object of the segment being reclaimed. */
struct item {
	uint32_t pos;    /* offset in the segment */
	uint32_t len;    /* object length */
	uint64_t slot;   /* the slot word that names it */
	uint64_t bucket; /* where that slot was seen */
	uint32_t idx;
	uint32_t done;
	uint64_t copy_at; /* region offset of its copy, 0 if none */
};

/* Local buffer of the loopback connection. */
struct lbuf {
	struct kvi_bucket bk[LOCK_BATCH];
	uint64_t cas[LOCK_BATCH];
	uint64_t unlock[LOCK_BATCH];
	/* The slots a batch switches (do_batch): at most every slot of every
	 * bucket it locked. */
	uint64_t slotw[LOCK_BATCH * KVI_SLOTS_PER_BUCKET];
};
_Static_assert(KVI_SLOTS_PER_BUCKET < 256 && LOCK_BATCH < 256, "slotw packs bucket and slot in a byte each");
_Static_assert(sizeof(struct lbuf) >= KVS_FLUSH_LBUF && sizeof(struct lbuf) >= KVS_MIGRATE_LBUF,
	       "the flusher and the migrator work in the reclaimer's buffer");

struct kvs_reclaimer {
	struct kvs_core *core;
	struct kvi_rmem *rm;
	struct kvs_migrator *mig; /* not owned; NULL: no resizing */
	struct kvs_flusher *fl;   /* not owned; NULL: no flush_all */
	struct kvs_reclaim_hooks hooks;
	struct kvi_geometry geo; /* the core's private copy */
	/* The current index, copied from the core at each segment: the migrator
	 * (same thread) changes it only between segments, and reclamation never
	 * runs during a migration, so the previous index is never the truth here. */
	struct kvi_index ix;
	uint64_t *chunks;
	uint8_t *base;
	uint8_t *snap; /* private copy of the segment being walked; in the local
			* buffer, because copies forward are RDMA WRITEs from it */
	struct item *items;
	uint32_t nitems, cap_items;
	uint32_t pending; /* objects the walk left undecided (writer_holds) */
	/* The first PEND_MAX of them: where, and the key's hash (its buckets). */
	struct pend {
		uint64_t slot; /* the slot word that would name it */
		struct kvi_keyhash kh;
	} pend[PEND_MAX];
	struct kvs_extent x; /* where live objects are copied to */
	uint64_t x_used;
	int no_evict;
	/* This segment is mostly garbage (live objects take at most half of
	 * it): reclaiming it frees memory without evicting anything, so cold
	 * live objects are copied too. Eviction is for segments full of live
	 * data, where copying would free nothing. */
	int keep_cold;
	struct kvs_lockwatch lw; /* locks we keep finding held (lockwatch.h) */
};

static uint64_t now_ms(void)
{
	return kvi_clock_ns(CLOCK_REALTIME) / 1000000u; /* the clock of expiries */
}

int kvs_reclaim_create(struct kvs_core *core, struct kvi_rmem *rm, const struct kvs_reclaim_hooks *hooks,
		       struct kvs_reclaimer **out)
{
	struct kvs_reclaimer *r = calloc(1, sizeof(*r));
	int rc = KVC_ENOMEM;

	*out = NULL;
	if (!r)
		goto fail;
	r->core = core;
	r->rm = rm;
	if (hooks)
		r->hooks = *hooks;
	r->geo = *kvs_core_geometry(core);
	r->base = kvs_core_region(core);
	r->no_evict = kvs_core_no_evict(core);
	/* At most one object per footprint of the smallest one (a header and a
	 * 1-byte key, aligned: 28 bytes). An item the walk cannot record keeps
	 * its slot into a segment that is zeroed and reused. */
	r->cap_items = (uint32_t)(r->geo.segment_size / kvi_obj_footprint(kvi_obj_len(1, 0, 0)) + 1);
	r->items = calloc(r->cap_items, sizeof(*r->items));
	r->chunks = calloc(kvs_core_max_chunks(core), sizeof(*r->chunks));
	if (!r->items || !r->chunks || kvs_core_index(core, 0, &r->ix, r->chunks, kvs_core_max_chunks(core)))
		goto fail;
	rc = kvi_rmem_set_lbuf(rm, sizeof(struct lbuf) + r->geo.segment_size);
	if (rc)
		goto fail;
	r->snap = (uint8_t *)kvi_rmem_lbuf(rm, NULL) + sizeof(struct lbuf);
	kvs_core_attach_reclaimer(core);
	*out = r;
	return 0;
fail:
	if (r) {
		r->rm = NULL;
		kvs_reclaim_destroy(r);
	}
	kvi_rmem_destroy(rm);
	return rc;
}

void kvs_reclaim_set_migrator(struct kvs_reclaimer *r, struct kvs_migrator *m)
{
	r->mig = m;
}

void kvs_reclaim_set_flusher(struct kvs_reclaimer *r, struct kvs_flusher *f)
{
	r->fl = f;
}

void kvs_reclaim_destroy(struct kvs_reclaimer *r)
{
	if (!r)
		return;
	if (r->x.off)
		kvs_core_server_release(r->core, &r->x, r->x_used);
	kvi_rmem_destroy(r->rm);
	free(r->items);
	free(r->chunks);
	free(r);
}

static uint64_t held(const struct kvs_reclaimer *r)
{
	return kvi_lock_held_by(r->rm->client_id);
}

/* An object no slot names may still be named: its writer's commit (slot
 * WRITE + unlock) may be on its way, and only the lock it took before shows
 * it. Settle covers the execution bound (segtab.h), so this is the second
 * line: a key bucket locked by a writer that is still connected (the core
 * has its record; a departed one's QP is gone and can land nothing) makes
 * the object undecided. A lock read by the CPU, as the walk reads slots: an
 * object of a writer's that holds the lock was written before it was taken
 * (one QP, in order), so the walk saw it. */
/* Does a slot of the key's buckets hold `slot` (name the object)? */
static int slot_names(const struct kvs_reclaimer *r, const struct kvi_keyhash *kh, uint64_t slot)
{
	for (unsigned w = 0; w < 2; w++) {
		const struct kvi_bucket *b = (const void *)(r->base + kvi_index_bucket_off(&r->ix, kh->b[w]));

		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			if (__atomic_load_n(&b->slot[i], __ATOMIC_RELAXED) == slot)
				return 1;
	}
	return 0;
}

static int writer_holds(struct kvs_reclaimer *r, const struct kvi_keyhash *kh)
{
	for (unsigned w = 0; w < (kh->b[0] == kh->b[1] ? 1u : 2u); w++) {
		const uint64_t *lock = (const void *)(r->base + kvi_index_bucket_off(&r->ix, kh->b[w]));
		uint64_t word = __atomic_load_n(lock, __ATOMIC_RELAXED);
		uint32_t owner = kvi_lock_owner(word);

		if ((word & KVI_LOCK_LOCKED) && owner && owner != r->rm->client_id &&
		    kvs_core_client_held(r->core, owner)) {
			kvs_lockwatch_seen(&r->lw, r->rm, kh->b[w], r->ix.epoch, word, kvi_mono_ns());
			return 1;
		}
		kvs_lockwatch_forget(&r->lw, kh->b[w], r->ix.epoch);
	}
	return 0;
}

/* Step 1 and 2: walk the snapshot, keep the objects some slot names; count
 * in r->pending those no slot names yet whose key a writer has locked. */
static void walk(struct kvs_reclaimer *r, uint64_t off, uint64_t len, struct kvs_reclaim_stats *st)
{
	uint64_t p = 0, unnamed_end = 0;

	r->nitems = 0;
	r->pending = 0;
	while (p + sizeof(struct kvi_obj_hdr) <= len) {
		const struct kvi_obj_hdr *h = (const void *)(r->snap + p);
		uint64_t olen = kvi_obj_len_of(h);
		struct kvi_keyhash kh;
		uint64_t slot;
		int found = 0;

		if (h->version != KVI_LAYOUT_VERSION || h->key_len == 0 || h->key_len > KVI_MAX_KEY || olen > len - p) {
			p += KVI_OBJ_ALIGN;
			continue;
		}
		/* Which slot would name it: looked for before the checksum, so
		 * that a header-like run of bytes costs a key hash, not a hash of
		 * up to a whole segment. */
		kvi_key_hash(r->snap + p + sizeof(*h), h->key_len, r->geo.hash_seed, r->ix.bucket_count, &kh);
		slot = kvi_slot_make(kh.fp, off + p, olen);
		for (unsigned w = 0; w < 2 && !found; w++) {
			const struct kvi_bucket *b = (const void *)(r->base + kvi_index_bucket_off(&r->ix, kh.b[w]));

			for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
				/* A hint only: the decision is taken again under the lock. */
				if (__atomic_load_n(&b->slot[i], __ATOMIC_RELAXED) != slot)
					continue;
				found = 1;
				if (kvi_obj_verify(h, len - p))
					break; /* named, but not an object: nothing to keep */
				if (r->nitems < r->cap_items)
					r->items[r->nitems++] = (struct item){ .pos = (uint32_t)p,
									       .len = (uint32_t)olen,
									       .slot = slot, .bucket = kh.b[w],
									       .idx = i };
				found = 2;
				break;
			}
		}
		/* Only an object a slot names is stepped over whole: a writer
		 * wrote it as one, so no other live object starts inside it. An
		 * unnamed one may be anything -- the value of a torn object, or a
		 * value that embeds a checksum-valid header whose length covers
		 * live objects after it -- so the walk goes on 4 bytes further,
		 * and what starts inside its span counts for nothing (but a slot
		 * naming it). */
		if (found == 2) {
			p += kvi_obj_footprint(olen);
			continue;
		}
		if (!found && p >= unnamed_end && kvi_obj_verify(h, len - p) == 0) {
			if (writer_holds(r, &kh)) {
				if (r->pending < PEND_MAX)
					r->pend[r->pending] = (struct pend){ .slot = slot, .kh = kh };
				r->pending++;
			} else
				st->dropped++;
			unnamed_end = p + kvi_obj_footprint(olen);
		}
		p += KVI_OBJ_ALIGN;
	}
}

uint32_t kvs_reclaim_walk_for_test(struct kvs_reclaimer *r, const void *seg, uint64_t off, uint64_t len,
				   uint32_t *pos, uint32_t *olen, uint32_t max)
{
	struct kvs_reclaim_stats st = { 0 };
	uint8_t *snap = r->snap;

	r->snap = (uint8_t *)seg; /* walk only reads the snapshot */
	walk(r, off, len, &st);
	r->snap = snap;
	for (uint32_t k = 0; k < r->nitems && k < max; k++) {
		pos[k] = r->items[k].pos;
		olen[k] = r->items[k].len;
	}
	return r->nitems;
}

/* Room for len bytes in the server's own segment: the region offset, or 0. */
static uint64_t copy_room(struct kvs_reclaimer *r, uint64_t len)
{
	uint64_t fp = kvi_obj_footprint(len), at;

	if (!r->x.off || r->x.len - r->x_used < fp) {
		if (kvs_core_server_extent(r->core, &r->x, r->x_used))
			return 0;
		r->x_used = 0;
	}
	at = r->x.off + r->x_used;
	r->x_used += fp;
	return at;
}

/* Prepare the copy of the (verified) object of it, in the snapshot, for the
 * server's segment: the new slot word, or 0 when there is no room. The copy
 * starts unread again; that it was read before is kept in its flags (for
 * evicted_unfetched). It is written by an RDMA WRITE posted before the slot
 * WRITE that publishes it (layout.h I3), like any client's object. */
static uint64_t copy_forward(struct kvs_reclaimer *r, struct item *it, int fetched)
{
	struct kvi_obj_hdr *h = (void *)(r->snap + it->pos);
	uint64_t at = copy_room(r, it->len), ns;

	if (!at)
		return 0;
	h->access = 0;
	if (fetched) /* a cold object copied along (keep_cold) stays unfetched */
		h->flags |= KVI_OBJ_F_FETCHED;
	h->checksum = kvi_obj_checksum(h);
	it->copy_at = at;
	ns = kvi_slot_make(kvi_slot_fp(it->slot), at, it->len);
	/* Slot and object agree (layout.h "Slot word"): the new word names the
	 * copy whole, inside the extent the core granted us. */
	KVI_INVARIANT(at >= r->x.off && at + it->len <= r->x.off + r->x.len, "a copy lies in the reclaimer's extent");
	KVI_INVARIANT(kvi_slot_obj_off(ns) == at && kvi_slot_read_len(ns) >= it->len &&
			      kvi_slot_fp(ns) == kvi_slot_fp(it->slot),
		      "the new slot names the whole copy, with the key's fingerprint");
	return ns;
}

struct batch {
	uint64_t bucket[LOCK_BATCH];
	unsigned nb;
};

/* Decide, under the lock of bucket bi (its contents in bk), what happens to
 * item it. Returns the new slot word to write (== it->slot: nothing to do),
 * or sets *abort (no-evict and no room to copy). */
static uint64_t decide(struct kvs_reclaimer *r, struct item *it, const struct kvi_bucket *bk,
		       uint64_t *copied, uint64_t seg_bytes, struct kvs_reclaim_stats *st, int *abort)
{
	const struct kvi_obj_hdr *h = (const void *)(r->snap + it->pos);
	uint64_t ns, exp = kvi_obj_expiry_ms(h);
	uint8_t access;
	int fetched;

	if (bk->slot[it->idx] != it->slot) {
		st->dropped++; /* replaced or deleted since the walk */
		return it->slot;
	}
	/* The live access word (clients mark it after the snapshot was taken). */
	access = __atomic_load_n(r->base + kvi_slot_obj_off(it->slot) + offsetof(struct kvi_obj_hdr, access),
				 __ATOMIC_RELAXED);
	/* Read since written; a recache token alone is no read ("mg u" wins
	 * one without bumping the item) */
	access &= KVI_ACCESS_READ;
	fetched = access != 0 || (h->flags & KVI_OBJ_F_FETCHED);
	if (exp && now_ms() >= exp) { /* under the lock: any moment decides (layout.h "Expiry") */
		st->expired++;
		st->expired_unfetched += !fetched;
		return 0;
	}
	if (r->no_evict || ((access || r->keep_cold) && *copied + it->len <= seg_bytes / 8 * COPY_LIMIT_EIGHTHS)) {
		ns = copy_forward(r, it, fetched);
		if (ns) {
			*copied += kvi_obj_footprint(it->len);
			st->moved++;
			return ns;
		}
		if (r->no_evict) {
			*abort = 1;
			return it->slot;
		}
	}
	st->evictions++;
	st->evicted_unfetched += !fetched;
	return 0;
}

/* Append op to the doorbell being built, ringing it first when full (the
 * operations keep their order across doorbells: each waits for the last). */
static int push(struct kvs_reclaimer *r, struct kvi_rop *ops, unsigned *n, struct kvi_rop op)
{
	if (*n == KVI_RMEM_MAX_BATCH) {
		int rc = kvi_rmem_exec(r->rm, ops, *n, RECLAIM_RDMA_MS);

		if (rc)
			return rc;
		*n = 0;
	}
	ops[(*n)++] = op;
	return 0;
}

/* Lock words of the batch that are no lock word at all (a stray WRITE's
 * junk) would hold the segment up for good: while our index is the only one
 * (no resize: its buckets are then free or held), they must be 0 and are
 * repaired here, for the next try to take. 0 or a transport code. */
static int repair_junk(struct kvs_reclaimer *r, const struct batch *b, struct kvs_reclaim_stats *st)
{
	struct lbuf *lb = kvi_rmem_lbuf(r->rm, NULL);
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH];
	enum kvi_index_state state;
	uint64_t epoch, seen[KVI_RMEM_MAX_BATCH];
	unsigned n = 0, junk = 0;

	for (unsigned i = 0; i < b->nb; i++)
		junk += !kvi_lock_legal(lb->cas[i]);
	if (!junk)
		return 0;
	kvs_core_index_status(r->core, &epoch, &state);
	if (state != KVI_INDEX_STABLE || epoch != r->ix.epoch)
		return 0; /* a resize's migrator repairs old buckets (migrate.c) */
	for (unsigned i = 0; i < b->nb && n < KVI_RMEM_MAX_BATCH; i++) {
		if (kvi_lock_legal(lb->cas[i]))
			continue;
		kvi_ev_warn("reclaim_lock_repaired", "bucket=%" PRIu64 " word=%#" PRIx64 " msg=%s", b->bucket[i],
			    lb->cas[i], "junk in a lock word: repaired");
		seen[n] = lb->cas[i];
		ops[n] = kvi_rop_cas(kvi_index_bucket_off(&r->ix, b->bucket[i]), &lb->cas[i], seen[n], 0);
		n++;
		st->junk_repaired++;
	}
	return n ? kvi_rmem_exec(r->rm, ops, n, RECLAIM_RDMA_MS) : 0;
}

/* Lock a batch of buckets, decide for every pending item in them, switch the
 * slots and unlock. Returns 0, KVC_EAGAIN (no-evict: out of room), or a
 * transport error. Items in buckets found held stay pending. */
static int do_batch(struct kvs_reclaimer *r, struct batch *b, uint64_t *copied, uint64_t seg_bytes,
		    struct kvs_reclaim_stats *st)
{
	struct lbuf *lb = kvi_rmem_lbuf(r->rm, NULL);
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH];
	unsigned n = 0, nw = 0;
	int rc, abort = 0;

	for (unsigned i = 0; i < b->nb; i++) {
		uint64_t lo = kvi_index_bucket_off(&r->ix, b->bucket[i]);

		ops[n++] = kvi_rop_cas(lo, &lb->cas[i], 0, held(r));
		ops[n++] = kvi_rop_read(lo, &lb->bk[i], KVI_BUCKET_SIZE);
	}
	rc = kvi_rmem_exec(r->rm, ops, n, RECLAIM_RDMA_MS);
	if (rc)
		return rc;
	if ((rc = repair_junk(r, b, st)) != 0)
		return rc;
	for (unsigned i = 0; i < b->nb; i++) {
		if (lb->cas[i] != 0) {
			st->lock_retries++;
			kvs_lockwatch_seen(&r->lw, r->rm, b->bucket[i], r->ix.epoch, lb->cas[i], kvi_mono_ns());
			continue;
		}
		kvs_lockwatch_forget(&r->lw, b->bucket[i], r->ix.epoch);
		for (uint32_t k = 0; k < r->nitems; k++) {
			struct item *it = &r->items[k];

			if (it->done || it->bucket != b->bucket[i])
				continue;
			if (!abort) {
				uint64_t ns = decide(r, it, &lb->bk[i], copied, seg_bytes, st, &abort);

				if (abort)
					continue;
				it->done = 1;
				if (ns != it->slot) {
					/* Remember the switch in the bucket image; written below. */
					lb->bk[i].slot[it->idx] = ns;
					lb->slotw[nw++] = ((uint64_t)k << 16) | ((uint64_t)i << 8) | it->idx;
				}
			}
		}
	}
	if (r->hooks.before_switch)
		r->hooks.before_switch(r->hooks.arg);
	/* Per locked bucket, in posting order: WRITE each copy, WRITE the
	 * changed slots, CAS-unlock. RC executes them in that order, so a copy
	 * is in place before the slot naming it, and the slot before the unlock;
	 * doorbells are cut at KVI_RMEM_MAX_BATCH without breaking the order. */
	n = 0;
	for (unsigned i = 0; i < b->nb; i++) {
		uint64_t lo = kvi_index_bucket_off(&r->ix, b->bucket[i]);

		if (lb->cas[i] != 0)
			continue;
		for (unsigned w = 0; w < nw; w++) {
			unsigned bi = (unsigned)(lb->slotw[w] >> 8 & 0xff), idx = (unsigned)(lb->slotw[w] & 0xff);
			const struct item *it = &r->items[lb->slotw[w] >> 16];

			if (bi != i)
				continue;
			if (it->copy_at &&
			    (rc = push(r, ops, &n, kvi_rop_write(it->copy_at, r->snap + it->pos, it->len))))
				return rc;
			if ((rc = push(r, ops, &n, kvi_rop_write(lo + 8 + 8u * idx, &lb->bk[i].slot[idx], 8))))
				return rc;
		}
		if ((rc = push(r, ops, &n, kvi_rop_cas(lo, &lb->unlock[i], held(r), 0))))
			return rc;
	}
	if (n) {
		rc = kvi_rmem_exec(r->rm, ops, n, RECLAIM_RDMA_MS);
		if (rc)
			return rc;
	}
	for (unsigned i = 0; i < b->nb; i++) {
		if (lb->cas[i] == 0 && lb->unlock[i] != held(r)) {
			/* Only a writer that ignores the protocol can have changed a lock
			 * we hold. Our slot writes landed; say so and go on. */
			kvi_ev_err("reclaim_lock_lost", "bucket=%" PRIu64 " word=%#" PRIx64 " msg=%s", b->bucket[i],
				   lb->unlock[i], "the lock word changed while the reclaimer held it");
		}
	}
	return abort ? KVC_EAGAIN : 0;
}

/* Sleep `*backoff` us (counted in *waited_us), doubling it for the next
 * time up to BACKOFF_MAX_US: how the walk and the switch wait for writers. */
static void pause_backoff(uint64_t *waited_us, unsigned *backoff)
{
	nanosleep(&(struct timespec){ .tv_nsec = (long)*backoff * 1000 }, NULL);
	*waited_us += *backoff;
	*backoff = *backoff * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : *backoff * 2;
}

/* Step 3 over every item, retrying buckets found locked (a writer holds a
 * lock for at most one operation deadline; a dead one is fenced) until
 * `patience` runs out. 0 when every item is settled. */
static int settle_items(struct kvs_reclaimer *r, uint64_t seg_bytes, struct kvs_reclaim_stats *st)
{
	uint64_t copied = 0, waited_us = 0, patience_us = 2000ull * r->rm->max_op_ms + 1000000u;
	unsigned backoff = BACKOFF_MIN_US;

	for (;;) {
		uint32_t pending = 0, k = 0;
		int rc;

		while (k < r->nitems) {
			struct batch b = { .nb = 0 };

			for (; k < r->nitems && b.nb < LOCK_BATCH; k++) {
				const struct item *it = &r->items[k];
				unsigned j;

				if (it->done)
					continue;
				for (j = 0; j < b.nb && b.bucket[j] != it->bucket; j++)
					;
				if (j == b.nb)
					b.bucket[b.nb++] = it->bucket;
			}
			if (b.nb == 0)
				break;
			rc = do_batch(r, &b, &copied, seg_bytes, st);
			if (rc)
				return rc;
		}
		for (k = 0; k < r->nitems; k++)
			pending += !r->items[k].done;
		if (!pending)
			return 0;
		if (waited_us >= patience_us)
			return KVC_ETIMEDOUT;
		pause_backoff(&waited_us, &backoff);
	}
}

/* Walk until no object is undecided (writer_holds): a writer holds a lock
 * for moments, so the walk is repeated after a backoff, up to the patience
 * settle_items has. 0, or KVC_ETIMEDOUT: give the segment back (to the tail
 * of its FIFO: the others go first). */
static int walk_until_decided(struct kvs_reclaimer *r, uint64_t off, uint64_t len, struct kvs_reclaim_stats *st)
{
	uint64_t waited_us = 0, patience_us = 2000ull * r->rm->max_op_ms + 1000000u, dropped = st->dropped;
	unsigned backoff = BACKOFF_MIN_US;

	for (;;) {
		st->dropped = dropped;
		walk(r, off, len, st);
		if (!r->pending)
			return 0;
		/* Only the undecided objects are looked at again (a segment of
		 * a hot key's old versions finds one of its buckets locked at
		 * almost every walk): each is decided once its buckets were seen
		 * free of a writer's lock -- its commit, if any, has landed --
		 * and then either a slot names it (walk again: it is live) or
		 * none does (garbage). */
		while (r->pending <= PEND_MAX) {
			uint32_t left = 0;
			int named = 0;

			for (uint32_t k = 0; k < r->pending; k++) {
				if (writer_holds(r, &r->pend[k].kh))
					r->pend[left++] = r->pend[k];
				else
					named |= slot_names(r, &r->pend[k].kh, r->pend[k].slot);
			}
			r->pending = left;
			if (named)
				break; /* walk again */
			if (!left)
				return 0;
			if (waited_us >= patience_us)
				return KVC_ETIMEDOUT;
			pause_backoff(&waited_us, &backoff);
		}
		if (r->pending) { /* more than PEND_MAX, or some still held when one turned out named */
			if (waited_us >= patience_us)
				return KVC_ETIMEDOUT;
			pause_backoff(&waited_us, &backoff);
		}
	}
}

/* Reclaim [off, off + len). 1 done, 2 given back (not worth it, or
 * postponed), 3 given back for want of room to copy to (wait for the
 * quarantine), < 0 transport error. */
static int reclaim_segment(struct kvs_reclaimer *r, uint64_t off, uint64_t len)
{
	struct kvs_reclaim_stats st = { 0 };
	uint64_t cpu0 = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID), live = 0;
	int rc, rotate = 0;

	/* Through the NIC, like every access to a region clients write to. */
	if (len) {
		struct kvi_rop op = kvi_rop_read(off, r->snap, (uint32_t)len);

		rc = kvi_rmem_exec(r->rm, &op, 1, RECLAIM_RDMA_MS);
		if (rc) {
			kvs_core_reclaim_end(r->core, off, 0, 0, NULL);
			return rc;
		}
	}
	rc = walk_until_decided(r, off, len, &st);
	if (rc) {
		st.cpu_ns = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
		st.aborted++;
		kvs_core_reclaim_end(r->core, off, 0, 1, &st);
		kvi_ev_info("reclaim_postponed", "segment=%#" PRIx64 " reason=%s", off,
			    "an object no slot names has its key locked by a live writer");
		return 2;
	}
	if (r->no_evict) {
		struct kvs_core_stats cs;

		/* Compaction only pays when enough of the segment is garbage, and
		 * is only started when every live object surely fits where we
		 * copy to: a compaction given up halfway frees nothing, and could
		 * leave no free segment to finish it with. */
		for (uint32_t k = 0; k < r->nitems; k++)
			live += kvi_obj_footprint(r->items[k].len);
		kvs_core_stats(r->core, &cs);
		if (live > r->geo.segment_size / 8 * COPY_LIMIT_EIGHTHS ||
		    live > (r->x.off ? r->x.len - r->x_used : 0) + cs.segments_free * r->geo.segment_size) {
			st.cpu_ns = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
			kvs_core_reclaim_end(r->core, off, 0, 1, &st);
			return live > r->geo.segment_size / 8 * COPY_LIMIT_EIGHTHS ? 2 : 3;
		}
	}
	for (uint32_t k = 0; k < r->nitems && !r->no_evict; k++)
		live += kvi_obj_footprint(r->items[k].len);
	r->keep_cold = !r->no_evict && live * 2 <= r->geo.segment_size;
	if (r->hooks.before_lock)
		r->hooks.before_lock(r->hooks.arg);
	rc = settle_items(r, r->geo.segment_size, &st);
	st.cpu_ns = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	if (rc) {
		/* Try it again later; what was already switched stays switched. */
		st.aborted++;
		/* Out of room, or a bucket held for longer than any writer may
		 * hold it: to the back of the line, so that one stuck segment
		 * does not stop reclamation of all the others. */
		rotate = rc == KVC_EAGAIN || rc == KVC_ETIMEDOUT;
		kvs_core_reclaim_end(r->core, off, 0, rotate, &st);
		if (rc != KVC_EAGAIN && rc != KVC_ETIMEDOUT)
			return rc;
		kvi_ev_info("reclaim_postponed", "segment=%#" PRIx64 " reason=%s", off, kvc_strerror(rc));
		return rc == KVC_EAGAIN ? 3 : 2;
	}
	/* No slot points here any more. Zero it now, at the start of the
	 * quarantine: a reader that still holds an old slot word reads zeros and
	 * retries, and no old object can outlive the quarantine to be read
	 * together with a newer slot word (layout.h "Reuse"). */
	memset(r->snap, 0, len);
	if (len) {
		struct kvi_rop op = kvi_rop_write(off, r->snap, (uint32_t)len);

		rc = kvi_rmem_exec(r->rm, &op, 1, RECLAIM_RDMA_MS);
		if (rc) {
			kvs_core_reclaim_end(r->core, off, 0, 0, &st);
			return rc;
		}
	}
	st.segments = 1;
	kvs_core_reclaim_end(r->core, off, 1, 0, &st);
	return 1;
}

int kvs_reclaim_one(struct kvs_reclaimer *r)
{
	enum kvi_index_state state;
	uint64_t off, len, epoch;

	kvs_core_tick(r->core, 0);
	/* Never during a migration: buckets of the current index may still be
	 * UNMIGRATED, their truth in the previous one (migrate.h). */
	kvs_core_index_status(r->core, &epoch, &state);
	if (state == KVI_INDEX_MIGRATING)
		return 0;
	if (kvs_core_index(r->core, 0, &r->ix, r->chunks, kvs_core_max_chunks(r->core)))
		return 0; /* cannot happen: there is always a current index */
	if (kvs_core_reclaim_begin(r->core, &off, &len))
		return 0;
	return reclaim_segment(r, off, len);
}

int kvs_reclaim_run(struct kvs_reclaimer *r)
{
	struct kvs_core_stats cs;
	int done = 0, skipped = 0, rc;

	/* A flush's slice first; the migrator is held while its walk runs
	 * (flush.h), and reclamation goes on between slices. */
	if (r->fl) {
		rc = kvs_flush_run(r->fl, r->rm, kvi_rmem_lbuf(r->rm, NULL), sizeof(struct lbuf));
		if (rc < 0)
			return rc;
	}
	if (r->mig) {
		kvs_migrate_hold(r->mig, r->fl && kvs_flush_active(r->fl));
		rc = kvs_migrate_run(r->mig, r->rm, kvi_rmem_lbuf(r->rm, NULL), sizeof(struct lbuf));
		if (rc < 0)
			return rc;
		if (rc == KVS_MIGRATE_BUSY)
			return 0; /* migrating instead of reclaiming */
	}
	while (kvs_core_reclaim_wanted(r->core)) {
		rc = kvs_reclaim_one(r);
		if (rc < 0)
			return rc;
		if (rc == 0 || rc == 3)
			break; /* nothing settled yet, or no room until a quarantine ends */
		if (rc == 2) {
			/* Postponed, or (no-evict) not worth compacting: after a whole
			 * round of those, live data fills the heap. */
			kvs_core_stats(r->core, &cs);
			if (++skipped > (int)cs.segments_sealed) {
				if (r->no_evict)
					kvs_core_set_full(r->core);
				break;
			}
			continue;
		}
		skipped = 0;
		done++;
	}
	return done;
}
