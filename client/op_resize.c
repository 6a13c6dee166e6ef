/* Following an online resize (layout.h "Resize"), and waiting for a new index.
 *
 * Mixed mode: while the server migrates index E (N buckets) into E + 1 (2N),
 * a client that knows both places each choice j in the new index first; a
 * new bucket whose lock word is UNMIGRATED has not received its items yet,
 * so the truth for that choice is the old bucket h_j mod N -- unless that one
 * is MOVED by now, and then the new bucket again (its slots were copied
 * before the MOVED). Both choices may resolve to the same old bucket: it is
 * read and locked once (kvi_use_old merges them). A GET never waits on a
 * lock; a writer that meets MOVED in an old bucket starts over at once
 * (MOVED is final: the next attempt finds the new bucket migrated).
 *
 * Stale view: a mark the client's view of the indexes cannot explain (MOVED
 * in an index it thinks current, UNMIGRATED while it thinks the server is
 * STABLE) means a resize it has not heard of. The operation lets go of its
 * locks, asks for the indexes (h->index_stale: kvi_lease_tick fetches them) and
 * waits, posting nothing, until its view changed, then starts over; at its
 * deadline it fails KVC_ETIMEDOUT. If a fetch brings nothing new (a resize
 * between two INDEX answers), it looks again after a pause that doubles.
 *
 * GROW: an insert that finds both its buckets full of live items asks the
 * server to grow the index (once per operation, without waiting for the
 * answer) and waits for a new index until a quarter of its deadline is left; a
 * NO (the server has no memory for it, or cannot resize) sends it back to
 * today's path at once: evict a victim, or KVC_EINDEXFULL under no-evict.
 * A NO is remembered for the epoch for one deadline, so that a full index
 * does not cost every insert a control message. A full bucket of the index
 * a migration is emptying is different: GROW names it (split_next), the migrator
 * splits it next, and the insert looks again after a short pause; so an
 * insert waits for about one bucket's migration, not for the whole pass. */
#include "conn.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "op.h"
#include "post.h"

#define STALE_PAUSE_MIN_US 1000u
#define STALE_PAUSE_MAX_US 64000u
#define GROW_POLL_NS 1000000ull /* how often a waiting GROW looks for its answer */

enum kvi_rmark kvi_lock_mark(const struct kvi_opst *st, unsigned i, uint64_t w)
{
	if (!kvi_lock_is_mark(w))
		return KVI_RMARK_NONE; /* free, held, or junk (waited on and reported) */
	if (st->old & (1u << i))
		return w == KVI_LOCK_MOVED ? KVI_RMARK_FOLLOW : KVI_RMARK_STALE;
	return st->oepoch && w == KVI_LOCK_UNMIGRATED ? KVI_RMARK_FOLLOW : KVI_RMARK_STALE;
}

void kvi_use_old(struct kvi_opst *st, unsigned mask)
{
	for (unsigned j = 0; j < st->nchoice; j++) {
		if (!(mask & (1u << j)))
			continue;
		st->b[j] = st->obk[j];
		st->boff[j] = st->ooff[j];
		st->bep[j] = st->oepoch;
		st->old |= 1u << j;
	}
	/* Choices b and b + N of the new index share old bucket b: one bucket,
	 * read and locked once (nothing of bucket 1 is held: it was new). */
	if (st->nchoice == 2 && st->old == 3u && st->obk[0] == st->obk[1])
		st->nb = 1;
}

void kvi_use_new(struct kvi_opst *st, unsigned mask)
{
	if (st->nb < st->nchoice && (mask & 1u))
		mask |= 2u; /* bucket 0 served both choices */
	for (unsigned j = 0; j < st->nchoice; j++) {
		if (!(mask & (1u << j)))
			continue;
		st->b[j] = st->nbk[j];
		st->boff[j] = st->noff[j];
		st->bep[j] = st->epoch;
		st->old &= ~(1u << j);
	}
	st->nb = st->nchoice;
}

int kvi_view_changed(const struct kvi_conn *h, const struct kvi_opst *st)
{
	return h->cur.ix.epoch != st->epoch || (h->prev.ix.epoch != 0) != (st->oepoch != 0);
}

static uint64_t cap_deadline(const struct kvi_opst *st, uint64_t t)
{
	return t < st->deadline ? t : st->deadline;
}

void kvi_wait_stale(struct kvi_conn *h, struct kvi_opst *st)
{
	uint64_t now = kvi_now_ns();

	h->index_stale = 1;
	h->stats.index_stale++;
	/* A cached location names a bucket of the index it was found in. */
	kvi_locache_drop(&h->cache, st->kh.lo, st->kh.hi);
	if (st->stale_pause_us == 0)
		st->stale_pause_us = STALE_PAUSE_MIN_US;
	st->not_before = cap_deadline(st, now + st->stale_pause_us * 1000ull);
	st->state = KVI_ST_STALE;
}

/* How long ago `since` was, by a clock read at `now` -- which may be the
 * earlier of the two: kvc_poll's `now` is read before the completions it
 * handles, and what they send is stamped later (kvi_wait_grow). Such an
 * age is 0, never a wrapped-around eternity. */
static uint64_t age_ns(uint64_t now, uint64_t since)
{
	return now > since ? now - since : 0;
}

/* The report slot is free (its answer came, or it is lost): GROW may use it
 * (wire.h KVI_CTRL_MAX_OUTSTANDING counts one for both). */
static int report_slot_free(struct kvi_conn *h, uint64_t now)
{
	struct kvi_ctrl r;

	if (h->report_seq && !kvi_rmem_ctrl_take(h->rm, h->report_seq, &r) &&
	    age_ns(now, h->report_sent) < h->report_after_ns)
		return 0;
	h->report_seq = 0;
	return 1;
}

static void grow_send(struct kvi_conn *h, struct kvi_opst *st, uint64_t now)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_GROW,
				.grow = { .epoch = st->grow_epoch,
					  .split_next = st->grow_bucket,
					  .full_pair = { st->grow_pair[0], st->grow_pair[1] } } };

	if (h->grow_seq) {
		/* One outstanding per handle: another insert's, for this index,
		 * speaks for us too; for another index, ours goes out after it. */
		st->grow_sent = h->grow_sent_epoch == st->grow_epoch;
		return;
	}
	if (!report_slot_free(h, now) || kvi_rmem_ctrl_send(h->rm, &req) != 0)
		return; /* try again from kvi_resize_step */
	h->grow_seq = req.seq;
	h->grow_sent = now;
	h->grow_sent_epoch = st->grow_epoch;
	h->stats.grow_requests++;
	st->grow_sent = 1;
}

int kvi_grow_wanted(const struct kvi_conn *h, const struct kvi_opst *st)
{
	return !st->grow_asked &&
	       !(h->grow_no_epoch && h->grow_no_epoch == st->epoch && kvi_now_ns() < h->grow_no_until);
}

void kvi_wait_grow(struct kvi_conn *h, struct kvi_opst *st)
{
	uint64_t now = kvi_now_ns();

	if (st->old) {
		/* A full bucket of the index a migration is emptying: its split
		 * (into two new buckets) makes the room. Ask for it first, look
		 * again shortly, and do not count this as our one GROW. */
		unsigned j = (st->old & 1u) ? 0 : 1;

		st->grow_sent = 0;
		st->grow_epoch = st->oepoch;
		st->grow_bucket = st->obk[j] + 1;
		st->grow_pair[0] = st->grow_pair[1] = 0;
		st->state = KVI_ST_GROW;
		if (st->stale_pause_us == 0)
			st->stale_pause_us = STALE_PAUSE_MIN_US;
		st->not_before = cap_deadline(st, now + st->stale_pause_us * 1000ull);
		st->stale_pause_us = st->stale_pause_us * 2 > STALE_PAUSE_MAX_US ? STALE_PAUSE_MAX_US
										 : st->stale_pause_us * 2;
		grow_send(h, st, now);
		return;
	}
	/* The pair found full (+ 1), which the server checks before growing
	 * (server core.h "GROW"). */
	st->grow_bucket = 0;
	st->grow_pair[0] = st->b[0] + 1;
	st->grow_pair[1] = st->nb > 1 ? st->b[1] + 1 : 0;
	st->grow_asked = 1;
	st->grow_sent = 0;
	st->grow_epoch = st->epoch;
	st->state = KVI_ST_GROW;
	/* Wait for the new index until a quarter of the deadline is left (what
	 * today's path needs: a lock doorbell, header READs, a commit): a resize
	 * asked for now may first wait for every client to acknowledge the last
	 * one (a renewal interval), then migrate. */
	{
		uint64_t quarter = (uint64_t)h->op_timeout_ms * 1000000u / 4;
		uint64_t until = st->deadline > quarter ? st->deadline - quarter : 0;

		st->not_before = until > now ? until : now;
	}
	grow_send(h, st, now);
}

void kvi_grow_collect(struct kvi_conn *h, uint64_t now)
{
	struct kvi_ctrl r;

	if (!h->grow_seq)
		return;
	if (!kvi_rmem_ctrl_take(h->rm, h->grow_seq, &r)) {
		/* Lost only after a deadline. Taken as lost at once (with a
		 * stale `now` its age would wrap around), a GROW whose NO is on
		 * its way would leave every insert of a full index waiting
		 * three quarters of its deadline, and asking again. */
		if (age_ns(now, h->grow_sent) > (uint64_t)h->op_timeout_ms * 1000000u)
			h->grow_seq = 0; /* lost: whoever still waits asks again */
		return;
	}
	h->grow_seq = 0;
	if (r.type == KVI_CTRL_GROWING && r.growing.verdict == KVI_GROW_STARTED) {
		/* The new index may be published already: look now (else the
		 * next LEASE names it). */
		h->index_stale = 1;
		return;
	}
	if (r.type == KVI_CTRL_GROWING && r.growing.verdict == KVI_GROW_STALE) {
		h->index_stale = 1;
		return;
	}
	/* KVI_GROW_NO, or a server that does not know GROW (an error): the
	 * index will not grow; inserts evict or fail as before. */
	h->grow_no_epoch = h->grow_sent_epoch;
	h->grow_no_until = now + (uint64_t)h->op_timeout_ms * 1000000u;
}

int kvi_resize_step(struct kvi_conn *h, struct kvi_opst *st, uint64_t now, uint64_t *next_due)
{
	uint64_t due;

	if (kvi_view_changed(h, st)) {
		/* A new view: an insert that still finds its pair full may ask
		 * (and wait) again -- the index it asked to grow may only have
		 * been retired, the server growing it next. Still bounded by
		 * the deadline: the wait ends a quarter before it. */
		if (st->state == KVI_ST_GROW && !st->grow_bucket)
			st->grow_asked = 0;
		return 1;
	}
	if (now >= st->deadline) {
		kvi_st_finish(h, st, KVC_ETIMEDOUT, KVC_STAT_FAILED);
		return 0;
	}
	if (st->state == KVI_ST_GROW) {
		if (h->grow_no_epoch == st->grow_epoch && now < h->grow_no_until)
			return 1; /* the server cannot grow: today's path */
		if (!st->grow_sent)
			grow_send(h, st, now);
		if (now >= st->not_before)
			return 1; /* nothing changed while three quarters of the deadline passed */
		due = st->not_before;
		/* An answer to collect, or a request still to send: look often. */
		if ((h->grow_seq || !st->grow_sent) && now + GROW_POLL_NS < due)
			due = now + GROW_POLL_NS;
	} else {
		if (now >= st->not_before) {
			/* The fetch brought nothing new: look again, less often. */
			st->stale_pause_us = st->stale_pause_us * 2 > STALE_PAUSE_MAX_US ? STALE_PAUSE_MAX_US
											 : st->stale_pause_us * 2;
			return 1;
		}
		due = st->not_before;
	}
	if (due < *next_due)
		*next_due = due;
	return 0;
}
