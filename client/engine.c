/* The operation engine of one connection: admits operations (kvc_submit),
 * turns completions into state-machine steps, wakes operations waiting on a
 * timer (a backoff, memory, a new index), breaks a connection whose batches
 * go unanswered, and hands finished operations back (kvc_poll). The state
 * machines post through post.c; the lease is kept from here (lease.c). */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "conn.h"
#include "engine.h"
#include "extent.h"
#include "kvclient_errors.h"
#include "lease.h"
#include "op.h"
#include "post.h"
#include "rmw.h"

#define GRANT_RETRY_MIN_US 500u
#define GRANT_RETRY_MAX_US 20000u

uint64_t kvi_now_ns(void)
{
	return kvi_clock_ns(KVI_CLOCK_DEADLINE); /* clock.h: counts a suspend */
}

uint64_t kvi_real_ns(void)
{
	return kvi_clock_ns(CLOCK_REALTIME);
}

uint64_t kvi_rand(struct kvi_conn *h)
{
	/* xorshift64*: backoff jitter only, not security */
	h->rng ^= h->rng >> 12;
	h->rng ^= h->rng << 25;
	h->rng ^= h->rng >> 27;
	return h->rng * 2685821657736338717ull;
}

void kvi_step_clock_refresh(struct kvi_conn *h)
{
	if (h->step_now)
		h->step_now = kvi_now_ns();
}

static int check_op(const struct kvi_conn *h, const struct kvc_op *op)
{
	if (!op || (op->key_len && !op->key))
		return KVC_EINVAL;
	if (op->key_len == 0 || op->key_len > KVI_MAX_KEY)
		return KVC_EKEYSIZE;
	switch (op->type) {
	case KVC_OP_GET:
		return (op->buf_len && !op->buf) || (op->meta & ~(uint32_t)(KVC_META_RECACHE | KVC_META_NO_BUMP)) ? KVC_EINVAL : 0;
	case KVC_OP_PUT:
		if ((op->value_len && !op->value) || op->mode < KVC_STORE_SET || op->mode > KVC_STORE_PREPEND)
			return KVC_EINVAL;
		/* the token rides in the object the call builds; append and
		 * prepend build theirs from the old one, under the locks */
		if ((op->meta & KVC_META_WON) && (op->mode == KVC_STORE_APPEND || op->mode == KVC_STORE_PREPEND))
			return KVC_EINVAL;
		if (op->meta && (op->meta & ~(uint32_t)KVC_META_NO_BUMP) != KVC_META_WON &&
		    !(op->meta == KVC_META_INVALIDATE && op->mode == KVC_STORE_CAS))
			return KVC_EINVAL;
		if (op->value_len > kvi_conn_max_value(h, op->key_len))
			return KVC_EVALSIZE;
		return 0;
	case KVC_OP_DELETE:
		return op->meta & ~(uint32_t)KVC_META_INVALIDATE ? KVC_EINVAL : 0;
	case KVC_OP_TOUCH:
		return 0;
	case KVC_OP_INCR:
	case KVC_OP_DECR:
		return op->mode & ~(KVC_ARITH_VIVIFY | KVC_ARITH_TOUCH) ? KVC_EINVAL : 0;
	case KVC_OP_GAT:
		return (op->buf_len && !op->buf) || (op->meta & ~(uint32_t)(KVC_META_RECACHE | KVC_META_NO_BUMP)) ? KVC_EINVAL : 0;
	default:
		return KVC_EINVAL;
	}
}

uint64_t kvi_expiry_of(uint64_t ttl_ms)
{
	uint64_t now_ms;

	if (ttl_ms == 0)
		return 0;
	if (ttl_ms == KVC_TTL_EXPIRED) /* long past by every clock: expired at once */
		return 1;
	now_ms = kvi_real_ns() / 1000000u + 1;
	return ttl_ms > KVI_OBJ_EXPIRY_MAX - now_ms ? KVI_OBJ_EXPIRY_MAX : now_ms + ttl_ms;
}

static void start(struct kvi_conn *h, struct kvi_opst *st)
{
	if (st->op->type == KVC_OP_GET)
		kvi_get_start(h, st);
	else
		kvi_write_start(h, st);
}

/* Start op, whose key hash is kh, in the step of kvi_conn_submit_many
 * (kvi_conn.step_now), whose clock is read again after work that may take
 * long: registering a larger object area (kvi_obj_room), a segment request,
 * or building objects of more than KVI_STEP_HEAVY_BYTES since it was read
 * (*built counts them). */
static int submit_hashed(struct kvi_conn *h, struct kvc_op *op, const struct kvi_keyhash *kh, uint64_t *built)
{
	struct kvi_opst *st = NULL;
	int64_t off = 0;
	int rc;

	if (h->inflight + h->done_count >= h->o.depth)
		return KVC_EAGAIN;
	for (unsigned i = 0; i < h->o.depth && !st; i++)
		if (!h->st[i].op)
			st = &h->st[i];
	if (!st)
		return KVC_EAGAIN;
	{
		/* Fresh state; the scratch slice and index stay the slot's. */
		unsigned index = st->index;
		struct kvi_bucket *bk = st->bk;
		uint64_t *w = st->w;
		unsigned char *khead = st->khead, *obj = st->obj;
		uint32_t obj_cap = st->obj_cap;

		memset(st, 0, offsetof(struct kvi_opst, cand));
		st->index = index;
		st->bk = bk;
		st->w = w;
		st->khead = khead;
		st->obj = obj;
		st->obj_cap = obj_cap;
	}
	st->kh = *kh;
	/* A read-modify-write builds its object under the locks (op_rmw.c). */
	st->rmw = kvi_rmw_is(op);
	if (st->rmw) {
		/* It takes its place in our extent under the locks, where it
		 * must not wait for the server: have room for what it likely
		 * writes now (a shortfall found there costs a retry): with the
		 * key's location cached, its current object's size is known
		 * (the slot's, rounded up to 64 bytes). More than an object may
		 * take is refused under the locks (KVC_EVALSIZE). */
		const struct kvi_loc *l = kvi_locache_get(&h->cache, kh->lo, kh->hi);
		uint64_t need = kvi_rmw_estimate(op, l ? kvi_slot_read_len(l->slot) : 0);

		rc = kvi_extent_room(h, kvi_obj_footprint(need < h->max_object ? need : h->max_object), &h->step_now);
		if (rc && rc != KVC_EAGAIN)
			return rc;
	}
	if (op->type == KVC_OP_PUT && !st->rmw) {
		st->obj_len = (uint32_t)kvi_obj_len((uint32_t)op->key_len, (uint32_t)op->value_len, op->flags);
		rc = kvi_obj_room(h, st, st->obj_len);
		if (rc)
			return rc;
		off = kvi_reserve(h, kvi_obj_footprint(st->obj_len), &h->step_now, &st->obj_cas);
		if (off < 0 && off != KVC_EAGAIN)
			return (int)off;
		kvi_obj_build(st->obj, op->key, (uint16_t)op->key_len, op->value, (uint32_t)op->value_len,
			      kvi_expiry_of(op->ttl_ms), op->flags, off >= 0 ? st->obj_cas : 0);
		/* Not checksummed: layout.h "Recache tokens". Read, too: the
		 * GET that vivified the item ("mg N") was its first fetch --
		 * unless it asked not to bump the item ("mg N u"). */
		if (op->meta & KVC_META_WON)
			((struct kvi_obj_hdr *)st->obj)->access = KVI_ACCESS_WIN | kvi_read_mark(op);
		*built += op->value_len;
	}
	op->status = 1; /* in flight */
	st->op = op;
	h->inflight++;
	if (off == KVC_EAGAIN) { /* only a PUT */
		/* Wait for memory without blocking: kvc_poll asks again. It posts
		 * nothing, so it may take the caller's whole timeout; the
		 * operation's own deadline starts when it has room. */
		st->state = KVI_ST_W_GRANT;
		st->grant_pause_us = GRANT_RETRY_MIN_US;
		st->deadline = h->step_now + (uint64_t)h->o.op_timeout_ms * 1000000u;
		st->not_before = h->step_now + GRANT_RETRY_MIN_US * 1000ull;
		return 0;
	}
	st->obj_off = (uint64_t)off; /* PUT: where its object goes */
	st->start = h->step_now;
	st->deadline = st->start + (uint64_t)h->op_timeout_ms * 1000000u;
	/* Building objects (checksum, copy) takes a while: the post checks
	 * the lease against the time after many bytes. The deadline counts
	 * from before (earlier is the safe side). */
	if (*built > KVI_STEP_HEAVY_BYTES) {
		kvi_step_clock_refresh(h);
		*built = 0;
	}
	start(h, st);
	return 0;
}

/* The groups of kvi_conn_submit_many, in its step (h->step_now set). */
static unsigned submit_groups(struct kvi_conn *h, struct kvc_op *const *ops, unsigned n, int *why)
{
	/* Hash a group of keys first and ask for their location-cache
	 * entries, then start them: each start finds its entry loaded instead
	 * of waiting for memory (a random line of a table of megabytes, the
	 * largest single cost of a cached GET when taken one by one). */
	enum { GROUP = 16 };
	struct kvi_keyhash kh[GROUP];
	uint64_t built = 0;
	unsigned started = 0;
	int rc;

	while (started < n) {
		unsigned m = n - started < GROUP ? n - started : GROUP;
		unsigned hashed = 0;

		/* Only as many as there is room for (the rest would be refused).
		 * The seed changes only when a rejoin makes a new connection,
		 * which happens in kvi_ensure_joined, not in here. */
		if (m > h->o.depth - (h->inflight + h->done_count))
			m = h->o.depth - (h->inflight + h->done_count);
		for (; hashed < m; hashed++) {
			const struct kvc_op *op = ops[started + hashed];

			if (check_op(h, op))
				break;
			kvi_key_hash(op->key, op->key_len, h->sb.hash_seed, h->cur.ix.bucket_count, &kh[hashed]);
			kvi_locache_prefetch(&h->cache, kh[hashed].lo);
		}
		for (unsigned i = 0; i < (m ? m : 1); i++) {
			struct kvc_op *op = ops[started];

			if (i >= hashed) { /* it failed its check, or no room */
				rc = check_op(h, op);
				*why = rc ? rc : KVC_EAGAIN;
				return started;
			}
			/* An earlier op's post may have broken the connection or
			 * found the lease lapsed: what kvc_submit of this op would
			 * say now, and the op stays the caller's. */
			if (h->rm->broken || kvi_lease_lapsed(h, h->step_now)) {
				*why = kvi_lease_lapsed(h, h->step_now) ? KVC_EFENCED : KVC_ESERVERGONE;
				return started;
			}
			rc = submit_hashed(h, op, &kh[i], &built);
			if (rc) {
				*why = rc;
				return started;
			}
			started++;
		}
	}
	return started;
}

unsigned kvi_conn_submit_many(struct kvi_conn *h, struct kvc_op *const *ops, unsigned n, int *why)
{
	uint64_t now;
	unsigned started;
	int rc;

	if (n == 0)
		return 0;
	rc = check_op(h, ops[0]); /* a bad op says so whatever the connection */
	if (!rc) {
		now = kvi_now_ns();
		rc = kvi_ensure_joined(h, &now);
	}
	if (rc) {
		*why = rc;
		kvi_idle_update(h);
		return 0;
	}
	h->step_now = now;
	started = submit_groups(h, ops, n, why);
	h->step_now = 0;
	kvi_idle_update(h);
	return started;
}

int kvi_conn_submit(struct kvi_conn *h, struct kvc_op *op)
{
	int why = 0;

	return kvi_conn_submit_many(h, &op, 1, &why) == 1 ? 0 : why;
}

/* A PUT waiting for memory asks again (from kvc_poll, when due). */
static void retry_grant(struct kvi_conn *h, struct kvi_opst *st, uint64_t now)
{
	int64_t off = kvi_reserve(h, kvi_obj_footprint(st->obj_len), NULL, &st->obj_cas);

	if (off == KVC_EAGAIN) {
		if (now >= st->deadline) {
			kvi_st_finish(h, st, KVC_ENOMEM, KVC_STAT_FAILED); /* "not yet", all along */
			return;
		}
		st->grant_pause_us = st->grant_pause_us * 2 > GRANT_RETRY_MAX_US ? GRANT_RETRY_MAX_US
										  : st->grant_pause_us * 2;
		st->not_before = now + st->grant_pause_us * 1000ull;
		return;
	}
	if (off < 0) {
		kvi_st_finish(h, st, (int)off, KVC_STAT_FAILED);
		return;
	}
	st->obj_off = (uint64_t)off;
	kvi_obj_set_cas(st->obj, st->obj_cas); /* built before its place was known */
	st->start = kvi_now_ns();
	st->deadline = st->start + (uint64_t)h->op_timeout_ms * 1000000u;
	start(h, st);
}

/* Waiting without anything posted (kvc_poll wakes them, run_backoffs). */
static int waiting(const struct kvi_opst *st)
{
	return st->state == KVI_ST_BACKOFF || st->state == KVI_ST_W_GRANT || st->state == KVI_ST_STALE ||
	       st->state == KVI_ST_GROW;
}

/* A batch outstanding for longer than a whole operation may take means the
 * server or the path stopped answering: break the connection so that nothing
 * can land later. (Judged by the batch's age, not the operation's, so that a
 * caller who polls late does not condemn a batch it has just posted.) */
static void check_stuck(struct kvi_conn *h, uint64_t now)
{
	uint64_t limit = (uint64_t)h->op_timeout_ms * 1000000u;

	for (unsigned i = 0; i < h->o.depth; i++) {
		struct kvi_opst *st = &h->st[i];

		if (!st->op || waiting(st))
			continue;
		/* A write past its deadline that may still hold locks cannot
		 * release them any more (it must post nothing): only fencing can. */
		if (now - st->posted > limit || (now >= st->deadline && kvi_may_hold_locks(st))) {
			kvi_rmem_shutdown(h->rm, kvi_lease_lapsed(h, now) ? KVC_EFENCED : KVC_ETIMEDOUT);
			return;
		}
	}
}

static void run_backoffs(struct kvi_conn *h, uint64_t now, uint64_t *next_due)
{
	kvi_grow_collect(h, now);
	for (unsigned i = 0; i < h->o.depth; i++) {
		struct kvi_opst *st = &h->st[i];

		if (!st->op || !waiting(st))
			continue;
		if (st->state == KVI_ST_STALE || st->state == KVI_ST_GROW) {
			/* A new index view (kvi_lease_tick fetched it), an answer, or
			 * time: start over from the buckets. */
			if (kvi_resize_step(h, st, now, next_due))
				start(h, st);
			continue;
		}
		if (st->not_before <= now) {
			if (st->state == KVI_ST_W_GRANT)
				retry_grant(h, st, now);
			else
				start(h, st);
		}
		if (st->op && (st->state == KVI_ST_BACKOFF || st->state == KVI_ST_W_GRANT) &&
		    st->not_before < *next_due)
			*next_due = st->not_before;
	}
}

/* now: read after the completion was polled (so no earlier than it). */
static void on_complete(struct kvi_conn *h, const struct kvi_rcomp *c, uint64_t now)
{
	struct kvi_opst *st;

	if (c->cookie >= h->o.depth || !h->st[c->cookie].op)
		return;
	st = &h->st[c->cookie];
	st->rtt++;
	if (c->status) {
		/* The connection is gone; locks this op held are released by the
		 * server when it fences us. A commit doorbell (slot WRITE + unlocks)
		 * that was posted may have landed before the break: its write has an
		 * unknown outcome, never "failed". Earlier doorbells change no slot. */
		int status = kvi_lease_lapsed(h, now) ? KVC_EFENCED : c->status;

		kvi_st_finish(h, st, st->state == KVI_ST_W_COMMIT ? KVC_EUNKNOWN : status, KVC_STAT_FAILED);
		return;
	}
	if (st->op->type == KVC_OP_GET) {
		/* A READ that completed past the deadline may have read memory the
		 * server has since reused: never a result (segtab.h). */
		if (now >= st->deadline) {
			kvi_st_finish(h, st, KVC_ETIMEDOUT, KVC_STAT_FAILED);
			return;
		}
		kvi_get_step(h, st);
	} else {
		kvi_write_step(h, st);
	}
}

/* The steps of got completions, as of now (read after they were polled). */
static void on_completions(struct kvi_conn *h, const struct kvi_rcomp *comp, int got, uint64_t now)
{
	h->step_now = now;
	for (int i = 0; i < got; i++)
		on_complete(h, &comp[i], now);
	h->step_now = 0;
}

int kvi_conn_poll(struct kvi_conn *h, struct kvc_op **done, unsigned max, int timeout_ms)
{
	uint64_t now, deadline;
	struct kvi_rcomp comp[16];
	unsigned n = 0;
	int polled = 0, got = 0;

	if (!done || max == 0)
		return KVC_EINVAL;
	/* Completions that are there already (a software device's, which
	 * complete inside the post) need no clock read before them: the one
	 * after them, which they need anyway, starts the call, and the first
	 * pass below looks at the lease and the timers, as always. When none
	 * is there, the call goes on as if this look had not been made. */
	if (h->done_count == 0)
		got = kvi_rmem_poll(h->rm, comp, 16);
	now = kvi_now_ns(); /* one clock read per pass: this, or the one after a completion */
	deadline = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000u;
	if (got > 0) {
		polled = 1;
		on_completions(h, comp, got, now);
	}
	got = 0;
	for (;;) {
		uint64_t next_due = UINT64_MAX;
		int wait_ms;

		/* The lease and the timers, unless this pass only hands back what
		 * the completions just finished: the pass before the wait looked
		 * at them, and the caller's next call looks again (a blocking GET
		 * would otherwise pay for both twice). Nothing is posted on a stale
		 * look: a submit checks the lease itself (kvi_ensure_joined). */
		if (got <= 0 || h->done_count == 0) {
			kvi_lease_tick(h, now);
			run_backoffs(h, now, &next_due);
		}
		while (n < max && h->done_count > 0) {
			done[n++] = h->done[h->done_head];
			h->done_head = (h->done_head + 1) % h->o.depth;
			h->done_count--;
		}
		/* Even without time to wait, look at the transport once. */
		if (n > 0 || h->inflight == 0 || (now >= deadline && polled)) {
			kvi_idle_update(h);
			return (int)n;
		}
		if (next_due > deadline)
			next_due = deadline;
		/* Rounded up: a wait that ends just before a timer is due would
		 * only poll again at once. */
		wait_ms = kvi_ms_until(now, next_due, 1000);
		/* A long wait (a slow path) must not starve the lease: look at it
		 * (kvi_lease_tick) a few times per renewal interval. */
		if (h->lease_ns && wait_ms > (int)(h->renew_ns / 4000000u))
			wait_ms = (int)(h->renew_ns / 4000000u) + 1;
		if (h->rm->inflight == 0 && next_due != UINT64_MAX && now < next_due) {
			/* Only operations waiting (for memory, a new index, a
			 * backoff): nothing to poll until one is due -- but no
			 * longer than wait_ms, so that kvi_lease_tick still runs a few
			 * times per renewal interval: a GROW's wait lasts three
			 * quarters of a deadline, which may outlast the lease. */
			uint64_t ns = next_due - now;

			if (ns > (uint64_t)wait_ms * 1000000u)
				ns = (uint64_t)wait_ms * 1000000u;

			nanosleep(&(struct timespec){ .tv_sec = (time_t)(ns / 1000000000u),
						      .tv_nsec = (long)(ns % 1000000000u) }, NULL);
			polled = 1;
			got = 0;
			now = kvi_now_ns();
			continue;
		}
		got = now >= deadline ? kvi_rmem_poll(h->rm, comp, 16) : kvi_rmem_wait(h->rm, comp, 16, wait_ms);
		polled = 1;
		now = kvi_now_ns();
		if (got > 0)
			on_completions(h, comp, got, now);
		else
			check_stuck(h, now);
	}
}

unsigned kvi_conn_inflight(const struct kvi_conn *h)
{
	return h->inflight + h->done_count;
}

int kvi_conn_broken(const struct kvi_conn *h)
{
	return h->rm->broken != 0;
}

int kvi_conns_block(struct kvi_conn *const *cs, unsigned n, int timeout_ms)
{
	struct kvi_rmem *rms[KVI_RMEM_BLOCK_MAX];
	unsigned k = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!cs[i] || cs[i]->inflight + cs[i]->done_count == 0)
			continue;
		if (cs[i]->done_count || k == KVI_RMEM_BLOCK_MAX)
			return 0; /* something to return already, or too many to sleep on */
		rms[k++] = cs[i]->rm;
	}
	return kvi_rmem_block(rms, k, timeout_ms);
}

uint64_t kvi_conns_spin_ns(struct kvi_conn *const *cs, unsigned n)
{
	uint64_t most = 0;

	for (unsigned i = 0; i < n; i++)
		if (cs[i] && cs[i]->inflight) {
			uint64_t s = kvi_rmem_spin_ns(cs[i]->rm);

			most = s > most ? s : most;
		}
	return most;
}

void kvi_conn_waited(struct kvi_conn *c, uint64_t ns)
{
	kvi_rmem_waited(c->rm, ns);
}

void kvi_conn_idle(struct kvi_conn *h)
{
	if (h->rm->inflight && !h->rm->broken)
		h->rm->type->idle(h->rm);
}
