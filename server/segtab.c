#include "segtab.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "log.h"

enum seg_state {
	SEG_FREE = 0,
	SEG_OPEN,        /* being carved, or extents of it still open */
	SEG_SEALED,      /* in the FIFO, waiting to settle and be reclaimed */
	SEG_RECLAIMING,  /* the reclaimer is walking it */
	SEG_QUARANTINED, /* reclaimed and zeroed; reused after the quarantine */
	SEG_INDEX,       /* a chunk of a grown index (segtab.h) */
};

/* Bytes of one owner's extents in a segment (for opts.charge): given back
 * when the segment is reclaimed. Newest first, so the head is the extent
 * carved last, the only one whose tail can come back. */
struct charge {
	struct charge *next;
	uint64_t owner;
	uint32_t bytes;
};

struct seg {
	uint8_t state;   /* enum seg_state */
	uint8_t carving; /* extents may still be carved from it */
	uint8_t private_seg; /* one whole extent (a busy writer's, or the reclaimer's) */
	uint8_t main;        /* the reclaimer's copies (main FIFO); else clients' writes (small) */
	uint32_t holders; /* open extents in it */
	uint32_t carved;  /* bytes handed out from its start */
	uint32_t next;    /* FIFO link (sealed or quarantine queue) */
	uint64_t t;       /* ns: sealed at (SEALED) or quarantined at (QUARANTINED) */
	struct charge *charges; /* owners of its extents, newest first */
};

struct queue {
	uint32_t head, tail;
};

struct kvs_segtab {
	struct kvs_segtab_opts o;
	struct seg *s;
	uint32_t shared; /* the carving segment small extents come from, or KVS_NO_SEG */
	struct queue sealed[2], quarantine; /* sealed[0]: small FIFO, sealed[1]: main */
	uint64_t small_used; /* small segments not free or quarantined */
	struct kvs_segtab_counts n;
};

/* The life of a segment: the only moves it makes (checked where cheap,
 * common/check.h).
 *   FREE -> OPEN        taken from the heap to carve extents from
 *   OPEN -> INDEX       (just taken, nothing carved) a chunk of a new index
 *   OPEN -> SEALED      nothing more can be appended: not carving, no extent open
 *   SEALED -> RECLAIMING, and back to SEALED when the reclaimer gives it back
 *   RECLAIMING -> QUARANTINED  reclaimed: no slot names it, zeroed
 *   INDEX -> QUARANTINED       a retired index's chunk
 *   QUARANTINED -> FREE        after the quarantine (layout.h "Reuse") */
static int legal_move(const struct seg *s, enum seg_state to)
{
	switch (to) {
	case SEG_OPEN:
		return s->state == SEG_FREE;
	case SEG_INDEX:
		return s->state == SEG_OPEN && s->carved == 0 && s->holders == 0;
	case SEG_SEALED:
		return (s->state == SEG_OPEN && !s->carving && s->holders == 0) || s->state == SEG_RECLAIMING;
	case SEG_RECLAIMING:
		return s->state == SEG_SEALED && !s->carving && s->holders == 0;
	case SEG_QUARANTINED:
		return (s->state == SEG_RECLAIMING && s->holders == 0) || s->state == SEG_INDEX;
	case SEG_FREE:
		return s->state == SEG_QUARANTINED;
	}
	return 0;
}
#define KVS_SEG_MOVE(s, to) KVI_INVARIANT(legal_move((s), (to)), "a segment moves only along its life cycle")

/* Every segment is counted in exactly one state. */
static void check_counts(const struct kvs_segtab *t)
{
	KVI_INVARIANT(t->n.free + t->n.open + t->n.sealed + t->n.reclaiming + t->n.quarantined + t->n.index ==
			      t->o.nsegs,
		      "every segment is counted in exactly one state");
}

static void q_push_tail(struct kvs_segtab *t, struct queue *q, uint32_t i)
{
	t->s[i].next = KVS_NO_SEG;
	if (q->tail == KVS_NO_SEG)
		q->head = i;
	else
		t->s[q->tail].next = i;
	q->tail = i;
}

static void q_push_head(struct kvs_segtab *t, struct queue *q, uint32_t i)
{
	t->s[i].next = q->head;
	q->head = i;
	if (q->tail == KVS_NO_SEG)
		q->tail = i;
}

static uint32_t q_pop(struct kvs_segtab *t, struct queue *q)
{
	uint32_t i = q->head;

	if (i != KVS_NO_SEG) {
		q->head = t->s[i].next;
		if (q->head == KVS_NO_SEG)
			q->tail = KVS_NO_SEG;
	}
	return i;
}

int kvs_segtab_create(const struct kvs_segtab_opts *o, struct kvs_segtab **out)
{
	struct kvs_segtab *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t || o->nsegs == 0 || o->nsegs >= KVS_NO_SEG) {
		free(t);
		return KVC_ENOMEM;
	}
	t->o = *o;
	t->s = calloc(o->nsegs, sizeof(*t->s));
	if (!t->s) {
		free(t);
		return KVC_ENOMEM;
	}
	t->shared = KVS_NO_SEG;
	t->sealed[0] = t->sealed[1] = t->quarantine = (struct queue){ KVS_NO_SEG, KVS_NO_SEG };
	t->n.free = o->nsegs;
	*out = t;
	return 0;
}

static void charge(struct kvs_segtab *t, uint64_t owner, int64_t bytes)
{
	if (owner && bytes && t->o.charge)
		t->o.charge(t->o.charge_arg, owner, bytes);
}

/* The segment is reclaimed: its owners no longer hold its bytes. */
static void uncharge_all(struct kvs_segtab *t, uint32_t i, int report)
{
	while (t->s[i].charges) {
		struct charge *ch = t->s[i].charges;

		t->s[i].charges = ch->next;
		if (report)
			charge(t, ch->owner, -(int64_t)ch->bytes);
		free(ch);
	}
}

void kvs_segtab_destroy(struct kvs_segtab *t)
{
	if (!t)
		return;
	for (uint64_t i = 0; i < t->o.nsegs; i++)
		uncharge_all(t, (uint32_t)i, 0);
	free(t->s);
	free(t);
}

static uint64_t seg_off(const struct kvs_segtab *t, uint32_t i)
{
	return t->o.heap_off + (uint64_t)i * t->o.stride;
}

uint32_t kvs_segtab_seg_of(const struct kvs_segtab *t, uint64_t off)
{
	uint64_t rel;

	if (off < t->o.heap_off)
		return KVS_NO_SEG;
	rel = (off - t->o.heap_off) / t->o.stride;
	return rel < t->o.nsegs ? (uint32_t)rel : KVS_NO_SEG;
}

/* A segment from the heap, as OPEN and carving; KVS_NO_SEG if none. */
static uint32_t take_free(struct kvs_segtab *t, int main)
{
	uint8_t *p = kvs_heap_alloc_segment(t->o.heap);
	uint32_t i;

	if (!p)
		return KVS_NO_SEG;
	i = kvs_segtab_seg_of(t, (uint64_t)(p - t->o.base));
	if (i == KVS_NO_SEG || t->s[i].state != SEG_FREE) {
		/* The allocator handed out something we consider in use: a bug. Keep
		 * it allocated (freeing could hand it out again) and refuse. */
		kvi_ev_err("segment_refused", "addr=%p msg=%s", (void *)p, "the heap returned memory that is not a free segment");
		return KVS_NO_SEG;
	}
	KVS_SEG_MOVE(&t->s[i], SEG_OPEN);
	t->s[i] = (struct seg){ .state = SEG_OPEN, .carving = 1, .next = KVS_NO_SEG, .main = (uint8_t)main };
	t->small_used += !main;
	t->n.free--;
	t->n.open++;
	t->n.taken++;
	return i;
}

/* Seal i if nothing can be appended to it any more. */
static void maybe_seal(struct kvs_segtab *t, uint32_t i, uint64_t now)
{
	struct seg *s = &t->s[i];

	if (s->state != SEG_OPEN || s->carving || s->holders)
		return;
	KVS_SEG_MOVE(s, SEG_SEALED);
	s->state = SEG_SEALED;
	s->t = now;
	t->n.open--;
	t->n.sealed++;
	q_push_tail(t, &t->sealed[s->main], i);
}

static void stop_carving(struct kvs_segtab *t, uint32_t i, uint64_t now)
{
	t->s[i].carving = 0;
	if (t->shared == i)
		t->shared = KVS_NO_SEG;
	maybe_seal(t, i, now);
}

void kvs_segtab_release(struct kvs_segtab *t, struct kvs_extent *x, uint64_t used, uint64_t now)
{
	struct seg *s;
	uint64_t rel;

	if (!x->off)
		return;
	s = &t->s[x->seg];
	if (used > x->len)
		used = x->len;
	used = kvi_obj_footprint(used);
	rel = x->off - seg_off(t, x->seg);
	/* The unused tail goes back if it is the last thing carved from a
	 * segment that is still the shared one, or could become it again (full,
	 * but not sealed: this extent is still open): the next extent starts
	 * there. */
	if (rel + x->len == s->carved && used < x->len && !s->private_seg &&
	    (x->seg == t->shared || t->shared == KVS_NO_SEG)) {
		struct charge *ch = s->charges;

		if (ch && ch->owner == x->owner && x->owner) {
			ch->bytes -= (uint32_t)(x->len - used);
			charge(t, x->owner, -(int64_t)(x->len - used));
			if (!ch->bytes) {
				s->charges = ch->next;
				free(ch);
			}
		}
		t->n.tails_returned += x->len - used;
		t->n.carved_bytes -= x->len - used;
		s->carved = (uint32_t)(rel + used);
		s->carving = 1;
		t->shared = x->seg;
	}
	s->holders--;
	x->off = x->len = 0;
	maybe_seal(t, x->seg, now);
}

int kvs_segtab_grant(struct kvs_segtab *t, struct kvs_extent *x, uint64_t need, uint64_t used, int kind,
		     uint64_t now)
{
	uint64_t seg = t->o.segment_size, want, keep;
	int privileged = kind == KVS_GRANT_SERVER, grow = 1;
	struct charge *ch = NULL;
	uint32_t i;

	/* The accounting record first: once anything is carved, failing would
	 * leave a segment that no extent holds and that never seals. */
	if (x->owner && !(ch = malloc(sizeof(*ch))))
		return KVC_ENOMEM;
	/* Growth is earned: an extent less than half used means the writer does
	 * not need bigger ones (or asks without writing, which with ever larger
	 * extents would take a segment per request). It gets half the size back;
	 * an empty small extent returns its bytes to the carving segment below,
	 * so asking in a loop costs next to nothing. */
	if (x->off && !privileged && (used > x->len ? x->len : used) < x->len / 2) {
		grow = 0;
		x->next_size = x->len / 2 > KVS_MIN_EXTENT ? (uint32_t)(x->len / 2) : KVS_MIN_EXTENT;
	}
	kvs_segtab_release(t, x, used, now);
	if (need == 0)
		need = KVI_OBJ_ALIGN;
	need = kvi_obj_footprint(need);
	want = x->next_size ? x->next_size : KVS_MIN_EXTENT;
	if (want < need)
		want = (need + 4095) & ~4095ull;
	if (privileged || want > seg)
		want = seg;
	/* The shared carving segment serves extents smaller than a segment; one
	 * it cannot serve any more stops carving (its tail is lost until it is
	 * reclaimed: less than one extent). */
	i = t->shared;
	if (want < seg && i != KVS_NO_SEG && seg - t->s[i].carved < need)
		stop_carving(t, i, now);
	i = want < seg ? t->shared : KVS_NO_SEG;
	if (i == KVS_NO_SEG) {
		keep = privileged ? 0 : t->o.reserve + (kind == KVS_GRANT_OVER_QUOTA);
		if (t->n.free <= keep) {
			t->n.grants_deferred++;
			free(ch);
			return KVC_EAGAIN;
		}
		i = take_free(t, privileged);
		if (i == KVS_NO_SEG) {
			t->n.grants_deferred++;
			free(ch);
			return KVC_EAGAIN;
		}
		if (want < seg)
			t->shared = i;
	}
	if (want > seg - t->s[i].carved)
		want = seg - t->s[i].carved; /* >= need: checked above */
	x->off = seg_off(t, i) + t->s[i].carved;
	x->len = want;
	x->seg = i;
	x->next_size = !grow ? (uint32_t)want : want * 2 > seg ? (uint32_t)seg : (uint32_t)(want * 2);
	t->s[i].carved += (uint32_t)want;
	t->s[i].holders++;
	t->n.carved_bytes += want;
	t->n.grants++;
	if (ch) { /* the same owner's previous extent right before this one: one record */
		if (t->s[i].charges && t->s[i].charges->owner == x->owner) {
			t->s[i].charges->bytes += (uint32_t)want;
			free(ch);
		} else {
			*ch = (struct charge){ .next = t->s[i].charges, .owner = x->owner, .bytes = (uint32_t)want };
			t->s[i].charges = ch;
		}
		charge(t, x->owner, (int64_t)want);
	}
	if (want == seg && t->s[i].carved == seg)
		t->s[i].private_seg = 1;
	if (t->s[i].carved == seg)
		stop_carving(t, i, now);
	check_counts(t);
	return 0;
}

/* Which FIFO to reclaim from (S3-FIFO): the small one while it holds more
 * than its share of the heap, or when the main one has nothing settled. */
static struct queue *victim_queue(struct kvs_segtab *t, uint64_t now)
{
	uint32_t hs = t->sealed[0].head, hm = t->sealed[1].head;
	int small_ok = hs != KVS_NO_SEG && now - t->s[hs].t >= t->o.settle_ns;
	int main_ok = hm != KVS_NO_SEG && now - t->s[hm].t >= t->o.settle_ns;

	if (t->o.one_fifo) /* compaction only: oldest first, whichever FIFO it is in */
		return small_ok && (!main_ok || t->s[hs].t <= t->s[hm].t) ? &t->sealed[0]
									   : main_ok ? &t->sealed[1] : NULL;
	if (small_ok && (!main_ok || t->small_used * 100 > t->o.nsegs * KVS_SMALL_FIFO_PCT))
		return &t->sealed[0];
	return main_ok ? &t->sealed[1] : NULL;
}

int kvs_segtab_reclaim_begin(struct kvs_segtab *t, uint64_t now, uint64_t *off, uint64_t *len)
{
	struct queue *q;
	uint32_t i;

	/* Nothing else to reclaim: the shared segment stops taking new extents
	 * so that it seals once its writers move on (or leave), rather than
	 * keeping its garbage forever. */
	if (t->sealed[0].head == KVS_NO_SEG && t->sealed[1].head == KVS_NO_SEG && t->shared != KVS_NO_SEG)
		stop_carving(t, t->shared, now);
	q = victim_queue(t, now);
	if (!q)
		return KVC_ENOTFOUND;
	i = q_pop(t, q);
	KVS_SEG_MOVE(&t->s[i], SEG_RECLAIMING);
	t->s[i].state = SEG_RECLAIMING;
	t->n.sealed--;
	t->n.reclaiming++;
	*off = seg_off(t, i);
	*len = t->s[i].carved;
	return 0;
}

void kvs_segtab_reclaim_end(struct kvs_segtab *t, uint64_t off, int done, int rotate, uint64_t now)
{
	uint32_t i = kvs_segtab_seg_of(t, off);
	struct seg *s;

	if (i == KVS_NO_SEG || t->s[i].state != SEG_RECLAIMING)
		return;
	s = &t->s[i];
	t->n.reclaiming--;
	if (!done) {
		KVS_SEG_MOVE(s, SEG_SEALED);
		s->state = SEG_SEALED;
		t->n.sealed++;
		if (rotate) { /* to the back of the line: its time is now (one_fifo orders by it) */
			s->t = now;
			q_push_tail(t, &t->sealed[s->main], i);
		}
		else {
			q_push_head(t, &t->sealed[s->main], i);
		}
		return;
	}
	t->n.carved_bytes -= s->carved;
	t->small_used -= !s->main;
	uncharge_all(t, i, 1);
	KVS_SEG_MOVE(s, SEG_QUARANTINED);
	s->state = SEG_QUARANTINED;
	s->t = now;
	t->n.quarantined++;
	q_push_tail(t, &t->quarantine, i);
	check_counts(t);
}

int kvs_segtab_index_take(struct kvs_segtab *t, uint64_t *off)
{
	uint32_t i;

	if (t->n.free <= t->o.reserve)
		return KVC_EAGAIN;
	i = take_free(t, 0);
	if (i == KVS_NO_SEG)
		return KVC_EAGAIN;
	/* Out of the FIFOs' accounting: an index chunk is neither open nor a
	 * client's segment. */
	t->small_used--;
	t->n.open--;
	t->n.taken--; /* not writers' demand: the reclaimer's rate ignores it */
	t->n.index++;
	KVS_SEG_MOVE(&t->s[i], SEG_INDEX);
	t->s[i] = (struct seg){ .state = SEG_INDEX, .next = KVS_NO_SEG };
	*off = seg_off(t, i);
	return 0;
}

int kvs_segtab_index_return(struct kvs_segtab *t, uint64_t off, uint64_t now)
{
	uint32_t i = kvs_segtab_seg_of(t, off);

	if (i == KVS_NO_SEG || seg_off(t, i) != off || t->s[i].state != SEG_INDEX)
		return KVC_EINVAL;
	t->n.index--;
	KVS_SEG_MOVE(&t->s[i], SEG_QUARANTINED);
	t->s[i].state = SEG_QUARANTINED;
	t->s[i].t = now;
	t->n.quarantined++;
	q_push_tail(t, &t->quarantine, i);
	return 0;
}

void kvs_segtab_tick(struct kvs_segtab *t, uint64_t now)
{
	uint32_t i;

	while ((i = t->quarantine.head) != KVS_NO_SEG && now - t->s[i].t >= t->o.quarantine_ns) {
		q_pop(t, &t->quarantine);
		KVS_SEG_MOVE(&t->s[i], SEG_FREE);
		t->s[i] = (struct seg){ .state = SEG_FREE, .next = KVS_NO_SEG };
		t->n.quarantined--;
		t->n.free++;
		kvs_heap_free_segment(t->o.heap, t->o.base + seg_off(t, i));
	}
	check_counts(t);
}

uint64_t kvs_segtab_next_due(const struct kvs_segtab *t, uint64_t now, int sealed_too)
{
	uint64_t due = UINT64_MAX;
	uint32_t i;

	if ((i = t->quarantine.head) != KVS_NO_SEG)
		due = now - t->s[i].t >= t->o.quarantine_ns ? 0 : t->o.quarantine_ns - (now - t->s[i].t);
	for (int m = 0; m < 2 && sealed_too; m++) {
		uint64_t d;

		if ((i = t->sealed[m].head) == KVS_NO_SEG)
			continue;
		d = now - t->s[i].t >= t->o.settle_ns ? 0 : t->o.settle_ns - (now - t->s[i].t);
		if (d < due)
			due = d;
	}
	return due;
}

void kvs_segtab_counts(const struct kvs_segtab *t, struct kvs_segtab_counts *out)
{
	*out = t->n;
}
