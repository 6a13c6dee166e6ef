/* Posting a state machine's batch and finishing its operation. Every post
 * checks the lease and the operation's deadline against the step's clock
 * first, and carries the access marks waiting for a doorbell. */
#include <stddef.h>
#include <string.h>

#include "conn.h"
#include "counts.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "lease.h"
#include "op.h"
#include "post.h"

/* Could st hold bucket locks? Set from a lock doorbell's post until its
 * release completed: while a CAS is in flight its outcome is unknown. */
int kvi_may_hold_locks(const struct kvi_opst *st)
{
	return st->op->type != KVC_OP_GET && st->state != KVI_ST_BACKOFF && st->state != KVI_ST_FREE &&
	       st->state != KVI_ST_W_GRANT && st->state != KVI_ST_STALE && st->state != KVI_ST_GROW &&
	       (st->held || st->state == KVI_ST_W_LOCK || st->state == KVI_ST_W_LOCK_CACHED ||
		st->state == KVI_ST_W_LOCK_OLD);
}

int kvi_locks_in_flight(const struct kvi_conn *h)
{
	for (unsigned i = 0; i < h->o.depth; i++)
		if (h->st[i].op && kvi_may_hold_locks(&h->st[i]))
			return 1;
	return 0;
}

/* An operation that cannot go on while it may hold locks: nothing else can
 * release them, so the connection is broken and the server fences us
 * (releasing them). Every operation in flight then fails. */
void kvi_st_abandon(struct kvi_conn *h, struct kvi_opst *st, int status)
{
	kvi_rmem_shutdown(h->rm, status);
	kvi_st_finish(h, st, status, KVC_STAT_FAILED);
}

void kvi_mark_access(struct kvi_conn *h, uint64_t obj_off, uint64_t word, uint64_t deadline)
{
	if (!h->o.track_access || h->mark_count == KVI_MARKS)
		return; /* sampling: a full queue drops the mark */
	h->marks[(h->mark_head + h->mark_count) % KVI_MARKS] = (struct kvi_mark){
		.off = kvi_access_word_off(obj_off), .word = word,
		.set = word | (uint64_t)KVI_ACCESS_READ << kvi_access_shift(obj_off), .deadline = deadline };
	h->mark_count++;
}

/* As many pending marks as fit one doorbell, then ops[0..n), in out: the
 * marks first, so that this handle's next read of an object sees that it
 * read it before (memcached meta's "mg h"). */
static unsigned add_marks(struct kvi_conn *h, const struct kvi_rop *ops, unsigned n, uint64_t now, struct kvi_rop *out)
{
	unsigned m = 0;

	while (h->mark_count && m + n < KVI_RMEM_MAX_BATCH) {
		const struct kvi_mark *mk = &h->marks[h->mark_head];

		h->mark_head = (h->mark_head + 1) % KVI_MARKS;
		h->mark_count--;
		if (now < mk->deadline) {
			/* A CAS, not a WRITE: it must not clear a recache token
			 * set since the GET read the byte (layout.h). */
			out[m++] = kvi_rop_cas(mk->off, h->mark_sink, mk->word, mk->set);
			h->stats.access_marks++;
		}
	}
	memcpy(out + m, ops, n * sizeof(*ops));
	return m + n;
}

int kvi_st_post(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_rop *ops, unsigned n, int state)
{
	struct kvi_rop all[KVI_RMEM_MAX_BATCH];
	uint64_t now = h->step_now ? h->step_now : kvi_now_ns();
	int rc, was_broken;

	/* Past our lease we post nothing (members.h): the server may have
	 * expelled us and released our locks. Breaking the connection fails
	 * this and every other operation KVC_EFENCED -- unless the lease ran
	 * out while we held nothing and had nothing posted (a slow grant or
	 * index fetch) and the server renews it (lease.c "Lapsed mid-way"). */
	if (kvi_lease_lapsed(h, now) && !h->rm->broken && kvi_lease_revive(h, st->deadline, &now))
		kvi_rmem_shutdown(h->rm, KVC_EFENCED);
	/* Past its deadline an operation posts nothing more: the server reuses
	 * memory on that promise (segtab.h). */
	if (now >= st->deadline && !kvi_lease_lapsed(h, now)) {
		if (st->held)
			kvi_st_abandon(h, st, KVC_ETIMEDOUT);
		else
			kvi_st_finish(h, st, KVC_ETIMEDOUT, KVC_STAT_FAILED);
		return KVC_ETIMEDOUT;
	}
	n = add_marks(h, ops, n, now, all);
	was_broken = h->rm->broken;
	rc = kvi_rmem_post(h->rm, all, n, st->index);
	st->posted = now;
	if (rc) {
		/* Every op has at most one batch in flight and depth <= the transport's
		 * limit, so only a broken connection or a bug lands here. A commit
		 * that broke the connection while posting may be half in: its slot
		 * WRITE may land (rmem.h), so its outcome is unknown. */
		if (kvi_lease_lapsed(h, now))
			rc = KVC_EFENCED;
		if (state == KVI_ST_W_COMMIT && !was_broken && h->rm->broken)
			rc = KVC_EUNKNOWN;
		if (st->held)
			kvi_st_abandon(h, st, rc);
		else
			kvi_st_finish(h, st, rc, KVC_STAT_FAILED);
		return rc;
	}
	st->state = state;
	return 0;
}

void kvi_st_finish(struct kvi_conn *h, struct kvi_opst *st, int status, int kind)
{
	struct kvc_op *op = st->op;

	/* What the item said (absent, refused, not a number) is not a failure. */
	if (status && status != KVC_ENOTFOUND && status != KVC_ETRUNC &&
	    !(kind == KVC_STAT_STORE_REFUSED &&
	      (status == KVC_ENOTSTORED || status == KVC_EEXISTS || status == KVC_ENONNUMERIC || status == KVC_EVALSIZE)) &&
	    !(kind == KVC_STAT_RMW_MISS && status == KVC_ENOTSTORED))
		kind = KVC_STAT_FAILED;
	kvi_counts_finish(h, st, status);
	h->stats.ops[kind]++;
	h->stats.round_trips[kind] += st->rtt;
	op->status = status;
	h->done[(h->done_head + h->done_count) % h->o.depth] = op;
	h->done_count++;
	st->op = NULL;
	st->state = KVI_ST_FREE;
	h->inflight--;
}
