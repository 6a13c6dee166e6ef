/* The engine: opens a handle over a transport, admits operations, posts their
 * batches, turns completions into state-machine steps, retries after backoff,
 * and hands finished operations back. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"

#define CTRL_TIMEOUT_MS 5000
#define RETURN_TIMEOUT_MS 200
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

/* Per-operation scratch in the main buffer: 2 buckets, 8 words, the
 * initial object area. */
static size_t scratch_size(void)
{
	return 2 * KVI_BUCKET_SIZE + 64 + KVI_KEYHEAD_AREA + KVI_OBJ_AREA_MIN;
}

int kvi_obj_room(struct kvi_conn *h, struct kvi_opst *st, uint64_t need)
{
	uint64_t size = st->obj_cap;
	void *p;

	if (need <= st->obj_cap)
		return 0;
	if (need > h->obj_area)
		return KVC_EINVAL;
	while (size < need)
		size *= 2;
	if (size > h->obj_area)
		size = h->obj_area;
	/* Nothing of st is in flight (it is between doorbells), and the old
	 * area's contents are not needed: every caller fills the new one. */
	if (kvi_rmem_xbuf(h->rm, st->index, size, &p))
		return KVC_ENOMEM;
	st->obj = p;
	st->obj_cap = (uint32_t)size;
	kvi_step_clock_refresh(h); /* registering memory may take milliseconds */
	return 0;
}

void kvi_step_clock_refresh(struct kvi_conn *h)
{
	if (h->step_now)
		h->step_now = kvi_now_ns();
}

static void close_handle(struct kvi_conn *h)
{
	kvi_rmem_destroy(h->rm);
	kvi_locache_fini(&h->cache);
	kvi_index_free(h);
	if (h->dial_free)
		h->dial_free(h->dial_arg);
	free(h->st);
	free(h->done);
	free(h);
}

/* ---- Lease ---------------------------------------------------------------
 *
 * The server expels a client whose lease ran out (server/members.h). We count
 * our lease from when we SENT the renewal the server answered -- earlier than
 * when the server got it, from which it counts -- so we never believe in a
 * lease the server has ended. Nothing is posted at or after lease_end: an
 * operation that would post then fails KVC_EFENCED (and, holding locks,
 * breaks the connection, as on a deadline). Renewals go out without waiting,
 * every renew_ns, from kvc_submit and kvc_poll: a handle whose application
 * does not call it for a whole lease is expelled and rejoins on its next call
 * ("Rejoin"). Nothing here makes a hidden thread or a timer. */

/* Take a LEASE answer to a renewal sent at `sent`; 0, or KVC_EFENCED when
 * the server refused (our lease had already ended there). */
static int lease_granted(struct kvi_conn *h, const struct kvi_ctrl *r, uint64_t sent)
{
	uint64_t end;

	if (r->type == KVI_CTRL_ERROR && r->status == KVC_EFENCED)
		return KVC_EFENCED;
	/* A server that never heard of leases answers EPROTO: it grants none. */
	if (r->type == KVI_CTRL_ERROR && r->status == KVC_EPROTO && !h->lease_ns)
		return 0;
	if (r->type != KVI_CTRL_LEASE || r->arg[0] == 0 || r->arg[0] > 3600000u || r->arg[1] == 0 ||
	    r->arg[1] > r->arg[0])
		return KVC_EPROTO;
	h->lease_ns = r->arg[0] * 1000000u;
	h->renew_ns = r->arg[1] * 1000000u;
	h->stats.lease_renewals++;
	if (r->arg[4] & KVI_LEASE_F_READMITTED) {
		/* Our lease had lapsed while we were idle (members.h "Idleness"):
		 * the server sealed our extent, may have retired indexes and
		 * reused memory we knew of. Nothing of ours was in flight. */
		h->seg_off = h->seg_size = h->seg_used = 0;
		h->mark_count = 0;
		h->index_stale = 1;
		h->stats.readmissions++;
	}
	end = sent + h->lease_ns;
	if (end > h->lease_end)
		h->lease_end = end;
	/* A resize began or ended since we last looked: fetch the indexes --
	 * except when the server only says that the migration we know of is
	 * over (STABLE, our epoch) while it still publishes the old index until
	 * every client acknowledged: nothing of the old index is needed any
	 * more (no bucket is UNMIGRATED; operations under way keep the offsets
	 * they placed), so it is dropped here instead of fetched again at every
	 * renewal until its retirement. */
	if (r->arg[2] != h->cur.ix.epoch)
		h->index_stale = 1;
	else if (r->arg[3] != h->index_state) {
		if (r->arg[3] == KVI_INDEX_STABLE && h->prev.ix.epoch) {
			h->prev.ix.epoch = 0;
			h->index_state = KVI_INDEX_STABLE;
		} else {
			h->index_stale = 1;
		}
	}
	return 0;
}

/* Renew now, waiting for the answer: at join, and when an idle handle comes
 * back after its lease ran out (the server may not have expelled it yet). */
/* A renewal: arg0 the epoch we use, which the server counts as our
 * acknowledgement of it (index.c); arg1, arg2 where our idle word is. */
static struct kvi_ctrl renew_request(const struct kvi_conn *h)
{
	return (struct kvi_ctrl){ .type = KVI_CTRL_LEASE_RENEW,
				  .arg = { h->cur.ix.epoch, h->rm->idle_addr, h->rm->idle_rkey } };
}

static int lease_renew_sync(struct kvi_conn *h, int timeout_ms)
{
	struct kvi_ctrl req = renew_request(h), resp;
	uint64_t sent = kvi_now_ns();
	int rc = kvi_rmem_ctrl_call(h->rm, &req, &resp, timeout_ms);

	h->renew_epoch = req.arg[0];
	return rc ? rc : lease_granted(h, &resp, sent);
}

static int lease_lapsed(const struct kvi_conn *h, uint64_t now)
{
	return h->lease_ns && now >= h->lease_end;
}

/* The server's index changed (a LEASE said so, or an operation met a MOVED
 * bucket): fetch it now, before anything else is placed. A client that
 * cannot learn where the buckets are cannot go on: 0, or the code the
 * connection was broken with. */
static int refresh_if_stale(struct kvi_conn *h)
{
	int rc;

	if (!h->index_stale)
		return 0;
	h->index_stale = 0;
	rc = kvi_index_refresh(h);
	if (rc)
		kvi_rmem_shutdown(h->rm, rc == KVC_ETIMEDOUT ? KVC_ESERVERGONE : rc);
	return rc;
}

/* Collect a renewal's answer; send the next one when due. */
static void lease_tick(struct kvi_conn *h, uint64_t now)
{
	struct kvi_ctrl r;

	if (h->rm->broken || refresh_if_stale(h))
		return;
	/* Lapsed: the next post breaks the connection, or kvc_submit renews. */
	if (!h->lease_ns || lease_lapsed(h, now))
		return;
	if (h->renew_seq) {
		if (kvi_rmem_ctrl_take(h->rm, h->renew_seq, &r)) {
			h->renew_seq = 0;
			if (lease_granted(h, &r, h->renew_sent)) {
				kvi_rmem_shutdown(h->rm, KVC_EFENCED);
				return;
			}
		} else if (now - h->renew_sent < h->renew_ns) {
			return; /* still on its way */
		} else {
			h->renew_seq = 0; /* lost or very late: send another */
		}
	}
	/* Due, or a new index is in use: say so at once -- the server
	 * retires the old index (and may begin the next resize) only once
	 * every client acknowledged the new one. */
	if (now + h->lease_ns >= h->lease_end + h->renew_ns || h->renew_epoch != h->cur.ix.epoch) {
		struct kvi_ctrl req = renew_request(h);

		if (kvi_rmem_ctrl_send(h->rm, &req) == 0) {
			h->renew_seq = req.seq;
			h->renew_sent = now;
			h->renew_epoch = req.arg[0];
		}
	}
}

/* ---- Idle word -------------------------------------------------------------
 *
 * A word of our memory the server may RDMA-READ (rmem.h idle_word; its
 * address goes with every renewal) when our lease ends (server/members.h
 * "Idleness"): 0 says that nothing of ours is in flight and nothing will be
 * posted before we have renewed, so the server keeps us connected instead of
 * expelling us. It is set, with a full barrier, before an operation looks at
 * the lease (ensure_joined), and cleared only when no operation is left and
 * no batch is posted. So whenever the server reads 0 after our lease ended
 * (it ended earlier for us than for the server), every later post is
 * preceded by a lease check that finds the lease over, and a renewal. A
 * thread stalled between its check and its doorbell holds the word at 1:
 * the server expels it, as it must. */
static void idle_busy(struct kvi_conn *h)
{
	if (h->rm->idle_word)
		__atomic_store_n(h->rm->idle_word, 1, __ATOMIC_SEQ_CST);
}

static void idle_update(struct kvi_conn *h)
{
	if (h->rm->idle_word && h->inflight == 0 && h->rm->inflight == 0)
		__atomic_store_n(h->rm->idle_word, 0, __ATOMIC_RELEASE);
}

/* ---- Lock reports ----------------------------------------------------------
 *
 * A writer that keeps finding one bucket locked by the same word for a
 * quarter of its deadline tells the server, which clears a word naming no
 * live client and expels an owner that keeps one past every deadline
 * (server/members.h "Lock reports"). One report in flight per handle; the
 * answer is only collected (the writer just goes on trying). */
void kvi_lock_waited(struct kvi_conn *h, struct kvi_opst *st, uint64_t bucket, uint64_t epoch, uint64_t word)
{
	uint64_t now = kvi_now_ns();
	struct kvi_ctrl req = { .type = KVI_CTRL_LOCK_REPORT, .arg = { bucket, word, epoch } }, r;

	if (kvi_lock_legal(word) && kvi_lock_owner(word) == h->rm->client_id)
		return; /* another operation of ours */
	if (kvi_lock_is_mark(word))
		return; /* a resize mark, not a holder: nothing to clear (layout.h); junk is reported */
	if (st->wait_since == 0 || st->wait_bucket != bucket || st->wait_word != word) {
		st->wait_bucket = bucket;
		st->wait_word = word;
		st->wait_since = now;
		return;
	}
	if (now - st->wait_since < h->report_after_ns)
		return;
	/* A GROW outstanding holds the place a report would take (client.h). */
	if (h->grow_seq)
		return;
	if (h->report_seq && !kvi_rmem_ctrl_take(h->rm, h->report_seq, &r) &&
	    now - h->report_sent < h->report_after_ns)
		return;
	h->report_seq = 0;
	if (kvi_rmem_ctrl_send(h->rm, &req) == 0) {
		h->report_seq = req.seq;
		h->report_sent = now;
		h->stats.lock_reports++;
		st->wait_since = now;
	}
}

/* Give h the connection rm: learn the layout, size and carve the local
 * buffer, take a lease. Used at open and when rejoining (nothing in flight). */
static int attach(struct kvi_conn *h, struct kvi_rmem *rm)
{
	const struct kvc_opts *o = &h->o;
	const char *why;
	unsigned char *lb;
	size_t scratch;
	int rc;

	h->rm = rm;
	rm->spin_us = o->busy_poll_us;
	/* Where everything is comes from the server at join, not from the
	 * region, which every client may write (layout.h "Geometry"); the
	 * transport validated it, and so do we, once, before any use. */
	h->sb = rm->geo;
	why = kvi_geometry_check(&h->sb);
	if (why || h->sb.region_size != rm->region_size) {
		kvi_err("the server stated an unusable region geometry (%s): is it a kvserver of the same version?",
			why ? why : "region size differs from the connection's");
		return KVC_EPROTO;
	}
	/* The server reuses reclaimed memory on the assumption that no operation
	 * outlives its deadline: ours may be shorter than the server's limit,
	 * never longer. */
	h->op_timeout_ms = (uint32_t)o->op_timeout_ms;
	if (rm->max_op_ms && rm->max_op_ms < h->op_timeout_ms)
		h->op_timeout_ms = rm->max_op_ms;
	h->report_after_ns = (uint64_t)h->op_timeout_ms * 1000000u / 4;
	h->max_object = h->sb.segment_size < KVI_MAX_OBJECT ? h->sb.segment_size : KVI_MAX_OBJECT;
	h->obj_area = (uint32_t)((h->max_object + 63) & ~(uint64_t)63);

	scratch = scratch_size();
	rc = kvi_rmem_set_lbuf(rm, scratch * o->depth + 64);
	if (rc)
		return rc;
	lb = kvi_rmem_lbuf(rm, NULL);
	h->one = lb + scratch * o->depth;
	*h->one = 1;
	for (unsigned i = 0; i < o->depth; i++) {
		unsigned char *s = lb + i * scratch;

		h->st[i].index = i;
		h->st[i].bk = (struct kvi_bucket *)(void *)s;
		h->st[i].w = (uint64_t *)(void *)(s + 2 * KVI_BUCKET_SIZE);
		h->st[i].khead = s + 2 * KVI_BUCKET_SIZE + 64;
		h->st[i].obj = h->st[i].khead + KVI_KEYHEAD_AREA;
		h->st[i].obj_cap = KVI_OBJ_AREA_MIN < h->obj_area ? KVI_OBJ_AREA_MIN : h->obj_area;
	}
	h->lease_ns = h->renew_ns = h->lease_end = 0;
	/* Requests of an earlier connection have no answer on this one (its
	 * sequence numbers start again: a stale one could take another's). */
	h->renew_seq = h->report_seq = h->grow_seq = h->grant_seq = 0;
	h->grow_no_epoch = h->grow_no_until = 0;
	rc = kvi_index_alloc(h);
	if (rc)
		return rc;
	rc = lease_renew_sync(h, CTRL_TIMEOUT_MS);
	if (rc)
		return rc;
	h->index_stale = 0;
	return kvi_index_refresh(h);
}

int kvi_conn_open(struct kvi_rmem *rm, const struct kvc_opts *o, struct kvi_conn **out)
{
	struct kvi_conn *h;
	int rc;

	*out = NULL;
	h = calloc(1, sizeof(*h));
	if (!h) {
		kvi_rmem_destroy(rm);
		return KVC_ENOMEM;
	}
	h->rm = rm;
	h->o = *o;
	h->rng = kvi_now_ns() ^ ((uint64_t)rm->client_id << 32) ^ 0x9e3779b97f4a7c15ull;
	h->st = calloc(o->depth, sizeof(*h->st));
	h->done = calloc(o->depth, sizeof(*h->done));
	rc = kvi_locache_init(&h->cache, o->cache_entries);
	if (!h->st || !h->done || rc) {
		rc = KVC_ENOMEM;
		goto clean_h;
	}
	rc = attach(h, rm);
	if (rc)
		goto clean_h;
	*out = h;
	return 0;
clean_h:
	close_handle(h);
	return rc;
}

void kvi_conn_set_dial(struct kvi_conn *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg))
{
	if (h->dial_free)
		h->dial_free(h->dial_arg);
	h->dial = dial;
	h->dial_arg = arg;
	h->dial_free = free_arg;
}

/* ---- Rejoin ----------------------------------------------------------------
 *
 * A broken connection (expelled, server restarted, path lost) fails what was
 * in flight; the next kvc_submit with nothing in flight dials again: a new
 * client id, a new lease, an empty location cache (the server may have
 * restarted with another layout) and no extent. Attempts back off from 10 ms
 * to 1 s while they fail; meanwhile calls fail fast. A handle whose lease ran
 * out while idle first just asks for a new one. */
#define REJOIN_MIN_MS 10u
#define REJOIN_MAX_MS 1000u

static int rejoin(struct kvi_conn *h, uint64_t now)
{
	struct kvi_rmem *rm;
	int was = h->rm->broken ? h->rm->broken : KVC_EFENCED, rc, timeout;

	if (!h->dial)
		return was;
	if (now < h->rejoin_not_before)
		return was == KVC_EFENCED ? KVC_EFENCED : KVC_ESERVERGONE;
	timeout = h->op_timeout_ms > 200 ? (int)h->op_timeout_ms : 200;
	rc = h->dial(h->dial_arg, timeout, &rm);
	if (rc == 0) {
		/* Nothing is in flight: the old connection's buffers are free. */
		kvi_rmem_destroy(h->rm);
		kvi_locache_clear(&h->cache);
		h->mark_count = 0;
		h->seg_off = h->seg_size = h->seg_used = 0;
		rc = attach(h, rm); /* h->rm = rm, whatever happens */
		if (rc == 0) {
			h->rejoin_backoff_ms = 0;
			h->stats.rejoins++;
			kvi_info("rejoined the server as client %u", h->rm->client_id);
			return 0;
		}
		kvi_rmem_shutdown(h->rm, KVC_ESERVERGONE); /* broken until the next try */
	}
	h->rejoin_backoff_ms = h->rejoin_backoff_ms ? h->rejoin_backoff_ms * 2 : REJOIN_MIN_MS;
	if (h->rejoin_backoff_ms > REJOIN_MAX_MS)
		h->rejoin_backoff_ms = REJOIN_MAX_MS;
	h->rejoin_not_before = now + (uint64_t)h->rejoin_backoff_ms * 1000000u;
	/* Refusals that retrying cannot cure are worth passing on as they are. */
	if (rc == KVC_EAUTH || rc == KVC_EPROTO || rc == KVC_ENOMEM)
		return rc;
	return was == KVC_EFENCED ? KVC_EFENCED : KVC_ESERVERGONE;
}

/* Before admitting an operation: a usable connection with a live lease.
 * *nowp is the clock read just before; anything slower than the usual
 * check (fetching a new index, a renewal waited for, a rejoin) reads it
 * again for the caller. */
static int ensure_joined(struct kvi_conn *h, uint64_t *nowp)
{
	uint64_t now = *nowp;
	int rc;

	idle_busy(h); /* before the lease is looked at ("Idle word") */
	if (!h->rm->broken && !lease_lapsed(h, now)) {
		int fetches = h->index_stale;

		lease_tick(h, now);
		if (fetches)
			*nowp = kvi_now_ns();
		return 0;
	}
	if (h->inflight) /* they fail first; the caller polls them, then we rejoin */
		return h->rm->broken ? (lease_lapsed(h, now) ? KVC_EFENCED : KVC_ESERVERGONE) : 0;
	if (!h->rm->broken && lease_renew_sync(h, (int)h->op_timeout_ms) == 0 && !lease_lapsed(h, kvi_now_ns())) {
		/* Readmitted after a lapse, or a resize meanwhile: learn the
		 * index before anything is placed. */
		rc = refresh_if_stale(h);
	} else {
		if (!h->rm->broken)
			kvi_rmem_shutdown(h->rm, KVC_EFENCED);
		rc = rejoin(h, now);
		idle_busy(h); /* the new connection's word */
	}
	*nowp = kvi_now_ns();
	return rc;
}

/* Tell the server how much of our extent we used, so that its tail serves
 * the next client (one short control round trip; skipped when anything is in
 * flight or the connection is gone: the server then keeps the whole extent
 * until it is reclaimed). */
static void return_extent(struct kvi_conn *h)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_RETURN, .arg = { h->seg_used } }, resp;

	if (!h->seg_off || h->inflight || h->rm->broken)
		return;
	(void)kvi_rmem_ctrl_call(h->rm, &req, &resp, RETURN_TIMEOUT_MS);
}

void kvi_conn_destroy(struct kvi_conn *h)
{
	if (!h)
		return;
	return_extent(h);
	close_handle(h);
}

/* ---- helpers shared by the state machines ---------------------------- */

/* Bytes to READ for a slot's object: the slot's rounded length, clamped to the
 * heap's end (the rounding may reach past the last object). */
uint64_t kvi_read_len(const struct kvi_conn *h, uint64_t slot)
{
	uint64_t off = kvi_slot_obj_off(slot), len = kvi_slot_read_len(slot);
	uint64_t end = h->sb.heap_off + h->sb.heap_size;

	return len > end - off ? end - off : len;
}

/* Fingerprint matches in the op's buckets; slots pointing outside the heap
 * are garbage and ignored (they can only come from a corrupt writer). */
unsigned kvi_collect_cands(const struct kvi_conn *h, struct kvi_opst *st)
{
	_Static_assert(KVI_SLOTS_PER_BUCKET <= 32, "a bucket's matches fit one 32-bit mask");
	st->ncand = st->cand_next = st->cand_bad = 0;
	for (unsigned w = 0; w < st->nb; w++) {
		const uint64_t *slot = st->bk[w].slot;
		uint32_t match = 0;

		/* Every fingerprint compared without a branch (a match is rare),
		 * then the matches in slot order. */
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			match |= (uint32_t)(kvi_slot_fp(slot[i]) == st->kh.fp) << i;
		while (match) {
			unsigned i = (unsigned)__builtin_ctz(match);
			uint64_t s = slot[i];

			match &= match - 1;
			if (!s || !kvi_slot_in_heap(&h->sb, s))
				continue;
			st->cand[st->ncand++] = (struct kvi_cand){ .slot = s, .which = w, .idx = i,
								   .len = (uint32_t)kvi_read_len(h, s) };
		}
	}
	return st->ncand;
}

/* READ as many pending candidates as fit the object area, in one doorbell. */
int kvi_read_cands(struct kvi_conn *h, struct kvi_opst *st, int state)
{
	struct kvi_rop ops[KVI_MAX_CAND];
	uint32_t used = 0;
	unsigned n = 0;

	st->cand_round = st->cand_next;
	while (st->cand_next < st->ncand && n < KVI_RMEM_MAX_BATCH) {
		struct kvi_cand *c = &st->cand[st->cand_next];

		if (c->len > h->obj_area) { /* larger than any object: garbage, not our key */
			st->cand_next++;
			continue;
		}
		if (used == 0 && kvi_obj_room(h, st, c->len)) {
			/* No memory to read it into: give up (a writer cannot release
			 * its locks without deciding: break, and be fenced). */
			if (st->held)
				kvi_st_abandon(h, st, KVC_ENOMEM);
			else
				kvi_st_finish(h, st, KVC_ENOMEM, KVC_STAT_FAILED);
			return -1;
		}
		if (used + c->len > st->obj_cap)
			break;
		c->loff = used;
		ops[n++] = kvi_rop_read(kvi_slot_obj_off(c->slot), st->obj + used, c->len);
		used += (c->len + 63) & ~63u;
		st->cand_next++;
	}
	if (n == 0)
		return 0;
	return kvi_st_post(h, st, ops, n, state) ? -1 : (int)n;
}

/* Expiry is decided at a point where the object was the key's current one
 * (layout.h "Expiry"). A GET's object was current when the slot naming it
 * was read: between that READ's post (st->slot_posted) and now, a moment the
 * object READ also precedes. Alive if the expiry is after now; expired if it
 * was before that post; in between, unknown (read again). A writer holds the
 * bucket locks, so its object is current at every moment until its commit:
 * now is such a moment. */
static enum kvi_objcheck expiry_check(const struct kvi_opst *st, uint64_t expiry_ms)
{
	uint64_t real, exp_ns, t0;

	if (expiry_ms == 0) /* no TTL: no clock to read */
		return KVI_OBJ_MATCH;
	real = kvi_real_ns();
	exp_ns = expiry_ms >= UINT64_MAX / 1000000u ? UINT64_MAX : expiry_ms * 1000000u;
	if (exp_ns > real)
		return KVI_OBJ_MATCH;
	t0 = real;
	if (st->op->type == KVC_OP_GET) {
		uint64_t since = kvi_now_ns() - st->slot_posted;

		t0 = since < real ? real - since : 0;
	}
	return exp_ns <= t0 ? KVI_OBJ_EXPIRED : KVI_OBJ_UNSURE;
}

enum kvi_objcheck kvi_obj_check(const struct kvi_opst *st, const struct kvi_cand *c)
{
	const unsigned char *buf = st->obj + c->loff;
	const struct kvi_obj_hdr *oh = (const struct kvi_obj_hdr *)(const void *)buf;
	const struct kvc_op *op = st->op;

	if (kvi_obj_verify(buf, c->len))
		return KVI_OBJ_BAD;
	if (oh->key_len != op->key_len || memcmp(buf + sizeof(*oh), op->key, op->key_len) != 0)
		return KVI_OBJ_OTHER;
	return expiry_check(st, kvi_obj_expiry_ms(oh));
}

const struct kvi_cand *kvi_check_round(const struct kvi_conn *h, struct kvi_opst *st, enum kvi_objcheck *res)
{
	for (unsigned i = st->cand_round; i < st->cand_next; i++) {
		const struct kvi_cand *c = &st->cand[i];

		if (c->len > h->obj_area) /* never read: garbage */
			continue;
		*res = kvi_obj_check(st, c);
		if (*res == KVI_OBJ_MATCH || *res == KVI_OBJ_EXPIRED || *res == KVI_OBJ_UNSURE)
			return c;
		if (*res == KVI_OBJ_BAD)
			st->cand_bad++;
	}
	return NULL;
}

/* ---- posting and finishing -------------------------------------------- */

/* Could st hold bucket locks? Set from a lock doorbell's post until its
 * release completed: while a CAS is in flight its outcome is unknown. */
static int may_hold_locks(const struct kvi_opst *st)
{
	return st->op->type != KVC_OP_GET && st->state != KVI_ST_BACKOFF && st->state != KVI_ST_FREE &&
	       st->state != KVI_ST_W_GRANT && st->state != KVI_ST_STALE && st->state != KVI_ST_GROW &&
	       (st->held || st->state == KVI_ST_W_LOCK || st->state == KVI_ST_W_LOCK_CACHED ||
		st->state == KVI_ST_W_LOCK_OLD);
}

/* An operation that cannot go on while it may hold locks: nothing else can
 * release them, so the connection is broken and the server fences us
 * (releasing them). Every operation in flight then fails. */
void kvi_st_abandon(struct kvi_conn *h, struct kvi_opst *st, int status)
{
	kvi_rmem_shutdown(h->rm, status);
	kvi_st_finish(h, st, status, KVC_STAT_FAILED);
}

void kvi_mark_access(struct kvi_conn *h, uint64_t obj_off, uint64_t deadline)
{
	if (!h->o.track_access || h->mark_count == KVI_MARKS)
		return; /* sampling: a full queue drops the mark */
	h->marks[(h->mark_head + h->mark_count) % KVI_MARKS] = (struct kvi_mark){
		.off = obj_off + offsetof(struct kvi_obj_hdr, access), .deadline = deadline };
	h->mark_count++;
}

/* ops[0..n) followed by as many pending marks as fit one doorbell, in out. */
static unsigned add_marks(struct kvi_conn *h, const struct kvi_rop *ops, unsigned n, uint64_t now, struct kvi_rop *out)
{
	memcpy(out, ops, n * sizeof(*ops));
	while (h->mark_count && n < KVI_RMEM_MAX_BATCH) {
		const struct kvi_mark *m = &h->marks[h->mark_head];

		h->mark_head = (h->mark_head + 1) % KVI_MARKS;
		h->mark_count--;
		if (now < m->deadline) {
			out[n++] = kvi_rop_write(m->off, h->one, 1);
			h->stats.access_marks++;
		}
	}
	return n;
}

int kvi_st_post(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_rop *ops, unsigned n, int state)
{
	struct kvi_rop all[KVI_RMEM_MAX_BATCH];
	uint64_t now = h->step_now ? h->step_now : kvi_now_ns();
	int rc, was_broken;

	/* Past our lease we post nothing (members.h): the server may have
	 * expelled us and released our locks. Breaking the connection fails
	 * this and every other operation KVC_EFENCED. */
	if (lease_lapsed(h, now) && !h->rm->broken)
		kvi_rmem_shutdown(h->rm, KVC_EFENCED);
	/* Past its deadline an operation posts nothing more: the server reuses
	 * memory on that promise (segtab.h). */
	if (now >= st->deadline && !lease_lapsed(h, now)) {
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
		if (lease_lapsed(h, now))
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

	if (status && status != KVC_ENOTFOUND && status != KVC_ETRUNC)
		kind = KVC_STAT_FAILED;
	h->stats.ops[kind]++;
	h->stats.round_trips[kind] += st->rtt;
	op->status = status;
	h->done[(h->done_head + h->done_count) % h->o.depth] = op;
	h->done_count++;
	st->op = NULL;
	st->state = KVI_ST_FREE;
	h->inflight--;
}

/* ---- segments ----------------------------------------------------------- */

/* Is a grant for `bytes` well-formed: inside the heap, 16-byte aligned, no
 * larger than a segment and large enough? */
static int grant_ok(const struct kvi_conn *h, const struct kvi_ctrl *r, uint64_t bytes)
{
	uint64_t heap_end = h->sb.heap_off + h->sb.heap_size;

	return r->type == KVI_CTRL_SEG_GRANT && r->arg[1] >= bytes && r->arg[1] <= h->sb.segment_size &&
	       r->arg[0] >= h->sb.heap_off && r->arg[0] <= heap_end && heap_end - r->arg[0] >= r->arg[1] &&
	       r->arg[0] % KVI_OBJ_ALIGN == 0;
}

/* Nothing more goes into our extent (the server sealed it, or may have). */
static void forget_extent(struct kvi_conn *h)
{
	h->seg_off = h->seg_size = h->seg_used = 0;
}

/* Take a segment request's answer (rc: how the call or the wait for it
 * went). 0 with a new extent, or a code; see reserve. */
static int grant_taken(struct kvi_conn *h, int rc, const struct kvi_ctrl *resp, uint64_t bytes)
{
	/* Not sent (the send failed at once): nothing changed; ask again. */
	if (rc == KVC_EAGAIN)
		return rc;
	if (rc) {
		/* No answer: the server may have sealed our extent at seg_used
		 * and carved its tail for others, or never seen the request.
		 * Writing on in it, or reporting less of it used, could
		 * overwrite another writer's objects: break the connection, so
		 * that the server keeps all of it (core.c kvs_core_client_left)
		 * and we rejoin with none. */
		if (!h->rm->broken)
			kvi_rmem_shutdown(h->rm, KVC_ESERVERGONE);
		forget_extent(h);
		return rc;
	}
	if (resp->type == KVI_CTRL_ERROR && resp->status == KVC_EAGAIN) {
		forget_extent(h); /* sealed either way */
		h->stats.grants_deferred++;
		return KVC_EAGAIN;
	}
	if (resp->type == KVI_CTRL_ERROR) {
		/* Only a quota refusal leaves our extent open (server core.h
		 * "Quota"); after any other answer the server may have sealed
		 * it, and a sealed segment can be reclaimed under our writes. */
		if (resp->status != KVC_EQUOTA)
			forget_extent(h);
		return resp->status < 0 ? resp->status : KVC_EPROTO;
	}
	if (!grant_ok(h, resp, bytes)) {
		forget_extent(h);
		return KVC_EPROTO;
	}
	h->seg_off = resp->arg[0];
	h->seg_size = resp->arg[1];
	h->seg_used = 0;
	h->stats.segments_granted++;
	return 0;
}

/* Does any operation in flight hold (or take) bucket locks? */
static int locks_in_flight(const struct kvi_conn *h)
{
	for (unsigned i = 0; i < h->o.depth; i++)
		if (h->st[i].op && may_hold_locks(&h->st[i]))
			return 1;
	return 0;
}

/* `bytes` of our extent for an object: its region offset, or KVC_EAGAIN
 * (the server has no memory free right now -- reclamation is making room --
 * or its answer is on its way: the caller waits and asks again), or another
 * code. A new extent comes from the server. With no operation holding locks,
 * the call waits for the answer (one round trip; then *nowp, if not NULL, is
 * read again, as ensure_joined does). Otherwise it must not: those
 * operations' commits are due before their deadlines, and a server slow to
 * answer would hold them up. The request then goes out without waiting, the
 * extent takes no more appends (the server seals it at what we said we
 * used), and the answer is taken by a later call (KVC_EAGAIN meanwhile). */
static int64_t reserve(struct kvi_conn *h, uint64_t bytes, uint64_t *nowp)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .arg = { bytes, h->seg_used } }, resp;
	uint64_t off;
	int rc;

	if (h->grant_seq) {
		if (kvi_rmem_ctrl_take(h->rm, h->grant_seq, &resp)) {
			h->grant_seq = 0;
			rc = grant_taken(h, 0, &resp, bytes);
		} else if (kvi_now_ns() - h->grant_sent > (uint64_t)CTRL_TIMEOUT_MS * 1000000u || h->rm->broken) {
			h->grant_seq = 0;
			rc = grant_taken(h, KVC_ETIMEDOUT, NULL, bytes);
		} else {
			return KVC_EAGAIN; /* on its way */
		}
		if (rc)
			return rc;
	}
	if (h->seg_size - h->seg_used < bytes) {
		if (locks_in_flight(h)) {
			rc = kvi_rmem_ctrl_send(h->rm, &req);
			if (rc)
				return rc == KVC_EAGAIN ? KVC_EAGAIN : grant_taken(h, rc, NULL, bytes);
			h->grant_seq = req.seq;
			h->grant_sent = kvi_now_ns();
			/* No more appends into it: the server seals it at what we
			 * said we used (its offset and use stay known: a quota
			 * refusal leaves it open, and the next request says
			 * the same). */
			h->seg_size = h->seg_used;
			return KVC_EAGAIN;
		}
		rc = kvi_rmem_ctrl_call(h->rm, &req, &resp, CTRL_TIMEOUT_MS);
		if (nowp)
			*nowp = kvi_now_ns();
		rc = grant_taken(h, rc, &resp, bytes);
		if (rc)
			return rc;
	}
	off = h->seg_off + h->seg_used;
	h->seg_used += bytes;
	return (int64_t)off;
}

/* ---- the public asynchronous interface -------------------------------- */

static int check_op(const struct kvi_conn *h, const struct kvc_op *op)
{
	if (!op || (op->key_len && !op->key))
		return KVC_EINVAL;
	if (op->key_len == 0 || op->key_len > KVI_MAX_KEY)
		return KVC_EKEYSIZE;
	switch (op->type) {
	case KVC_OP_GET:
		return op->buf_len && !op->buf ? KVC_EINVAL : 0;
	case KVC_OP_PUT:
		if (op->value_len && !op->value)
			return KVC_EINVAL;
		if (op->value_len > UINT32_MAX || kvi_obj_len((uint32_t)op->key_len, (uint32_t)op->value_len) >
							   h->max_object)
			return KVC_EVALSIZE;
		return 0;
	case KVC_OP_DELETE:
		return 0;
	default:
		return KVC_EINVAL;
	}
}

/* The writer's clock at submission + ttl, rounded up to the next
 * millisecond (layout.h "Expiry"); 0 = never. */
static uint64_t expiry_of(uint64_t ttl_ms)
{
	uint64_t now_ms;

	if (ttl_ms == 0)
		return 0;
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
	if (op->type == KVC_OP_PUT) {
		st->obj_len = (uint32_t)kvi_obj_len((uint32_t)op->key_len, (uint32_t)op->value_len);
		rc = kvi_obj_room(h, st, st->obj_len);
		if (rc)
			return rc;
		off = reserve(h, kvi_obj_footprint(st->obj_len), &h->step_now);
		if (off < 0 && off != KVC_EAGAIN)
			return (int)off;
		kvi_obj_build(st->obj, op->key, (uint16_t)op->key_len, op->value, (uint32_t)op->value_len,
			      expiry_of(op->ttl_ms));
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
		 * which happens in ensure_joined, not in here. */
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
			if (h->rm->broken || lease_lapsed(h, h->step_now)) {
				*why = lease_lapsed(h, h->step_now) ? KVC_EFENCED : KVC_ESERVERGONE;
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
		rc = ensure_joined(h, &now);
	}
	if (rc) {
		*why = rc;
		idle_update(h);
		return 0;
	}
	h->step_now = now;
	started = submit_groups(h, ops, n, why);
	h->step_now = 0;
	idle_update(h);
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
	int64_t off = reserve(h, kvi_obj_footprint(st->obj_len), NULL);

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
		if (now - st->posted > limit || (now >= st->deadline && may_hold_locks(st))) {
			kvi_rmem_shutdown(h->rm, lease_lapsed(h, now) ? KVC_EFENCED : KVC_ETIMEDOUT);
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
			/* A new index view (lease_tick fetched it), an answer, or
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
		int status = lease_lapsed(h, now) ? KVC_EFENCED : c->status;

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

int kvi_conn_poll(struct kvi_conn *h, struct kvc_op **done, unsigned max, int timeout_ms)
{
	uint64_t now = kvi_now_ns(); /* one clock read per pass: this, or the one after a completion */
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000u;
	struct kvi_rcomp comp[16];
	unsigned n = 0;
	int polled = 0;

	if (!done || max == 0)
		return KVC_EINVAL;
	for (;;) {
		uint64_t next_due = UINT64_MAX;
		int got, wait_ms;

		lease_tick(h, now);
		run_backoffs(h, now, &next_due);
		while (n < max && h->done_count > 0) {
			done[n++] = h->done[h->done_head];
			h->done_head = (h->done_head + 1) % h->o.depth;
			h->done_count--;
		}
		/* Even without time to wait, look at the transport once. */
		if (n > 0 || h->inflight == 0 || (now >= deadline && polled)) {
			idle_update(h);
			return (int)n;
		}
		if (next_due > deadline)
			next_due = deadline;
		/* Rounded up: a wait that ends just before a timer is due would
		 * only poll again at once. */
		wait_ms = kvi_ms_until(now, next_due, 1000);
		/* A long wait (a slow path) must not starve the lease: look at it
		 * (lease_tick) a few times per renewal interval. */
		if (h->lease_ns && wait_ms > (int)(h->renew_ns / 4000000u))
			wait_ms = (int)(h->renew_ns / 4000000u) + 1;
		if (h->rm->inflight == 0 && next_due != UINT64_MAX && now < next_due) {
			/* Only operations waiting (for memory, a new index, a
			 * backoff): nothing to poll until one is due -- but no
			 * longer than wait_ms, so that lease_tick still runs a few
			 * times per renewal interval: a GROW's wait lasts three
			 * quarters of a deadline, which may outlast the lease. */
			uint64_t ns = next_due - now;

			if (ns > (uint64_t)wait_ms * 1000000u)
				ns = (uint64_t)wait_ms * 1000000u;

			nanosleep(&(struct timespec){ .tv_sec = (time_t)(ns / 1000000000u),
						      .tv_nsec = (long)(ns % 1000000000u) }, NULL);
			polled = 1;
			now = kvi_now_ns();
			continue;
		}
		got = now >= deadline ? kvi_rmem_poll(h->rm, comp, 16) : kvi_rmem_wait(h->rm, comp, 16, wait_ms);
		polled = 1;
		now = kvi_now_ns();
		if (got > 0) {
			h->step_now = now;
			for (int i = 0; i < got; i++)
				on_complete(h, &comp[i], now);
			h->step_now = 0;
		} else {
			check_stuck(h, now);
		}
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

void kvi_conn_idle(struct kvi_conn *h)
{
	if (h->rm->inflight && !h->rm->broken)
		h->rm->type->idle(h->rm);
}

size_t kvi_conn_max_value(const struct kvi_conn *h, size_t key_len)
{
	uint64_t over = kvi_obj_len((uint32_t)key_len, 0);

	return key_len > KVI_MAX_KEY || over > h->max_object ? 0 : (size_t)(h->max_object - over);
}

void kvi_conn_get_stats(const struct kvi_conn *h, struct kvc_stats *out)
{
	*out = h->stats;
}

/* The public struct is the wire's statistics in the wire's order. */
_Static_assert(sizeof(struct kvc_server_stats) == KVI_STAT_COUNT * sizeof(uint64_t),
	       "kvc_server_stats mirrors enum kvi_stat_id");

int kvi_conn_server_stats(struct kvi_conn *h, struct kvc_server_stats *out)
{
	uint64_t v[KVI_STATS_PAGES * 5], now = kvi_now_ns();
	int rc;

	if (!h || !out)
		return KVC_EINVAL;
	/* As a data call does: a handle idle past its lease renews it (or,
	 * expelled meanwhile, rejoins) before it asks anything. */
	rc = ensure_joined(h, &now);
	idle_update(h); /* nothing is posted for statistics */
	if (rc)
		return rc;
	for (unsigned p = 0; p < KVI_STATS_PAGES; p++) {
		struct kvi_ctrl req = { .type = KVI_CTRL_STATS_REQ, .arg = { p } }, resp;

		rc = kvi_rmem_ctrl_call(h->rm, &req, &resp, CTRL_TIMEOUT_MS);
		if (rc)
			return rc;
		if (resp.type != KVI_CTRL_STATS)
			return resp.type == KVI_CTRL_ERROR && resp.status < 0 ? resp.status : KVC_EPROTO;
		memcpy(v + 5 * p, resp.arg, sizeof(resp.arg));
	}
	memcpy(out, v, sizeof(*out));
	return 0;
}

const char *const *kvc_server_stat_names(size_t *n)
{
	static const char *const names[KVI_STAT_COUNT] = {
#define KVI_STAT_NAME(id, name, ...) [KVI_STAT_##id] = name,
		KVI_SERVER_STATS(KVI_STAT_NAME)
#undef KVI_STAT_NAME
	};

	if (n)
		*n = KVI_STAT_COUNT;
	return names;
}

void kvi_conn_reset_stats(struct kvi_conn *h)
{
	memset(&h->stats, 0, sizeof(h->stats));
}

const char *kvc_stat_name(int kind)
{
	static const char *const names[KVC_STAT_KINDS] = {
		[KVC_STAT_GET_HIT] = "get_hit",
		[KVC_STAT_GET_HIT_CACHED] = "get_hit_cached",
		[KVC_STAT_GET_MISS] = "get_miss",
		[KVC_STAT_PUT_INSERT] = "put_insert",
		[KVC_STAT_PUT_UPDATE] = "put_update",
		[KVC_STAT_PUT_UPDATE_CACHED] = "put_update_cached",
		[KVC_STAT_DELETE] = "delete",
		[KVC_STAT_DELETE_MISS] = "delete_miss",
		[KVC_STAT_FAILED] = "failed",
	};

	return kind >= 0 && kind < KVC_STAT_KINDS ? names[kind] : "unknown";
}
