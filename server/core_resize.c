/* The indexes the core publishes (indexes.h) and their resizing (migrate.h
 * "Resize"): GROW requests and whether they hold, the resize phases, the pool
 * of index chunks, and the acknowledgements an old index waits for. */
#include "core_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"

/* Chunks the next index (twice the current one) needs. */
static uint64_t next_need(const struct kvs_core *c)
{
	return kvi_index_nchunks(2 * c->ix.cur.bucket_count, c->ix.cur.chunk_shift);
}

/* Could the next index get its memory? Now (free segments beyond the
 * reserve, home pieces), or by eviction -- but an index never takes more
 * than half of the heap's segments that are not index already. */
static int can_grow(struct kvs_core *c)
{
	struct kvs_segtab_counts n;
	uint64_t need = next_need(c), spare;

	if (2 * c->ix.cur.bucket_count > c->geo.region_size / KVI_BUCKET_SIZE)
		return 0;
	kvs_segtab_counts(c->segs, &n);
	spare = n.free > kvs_core_reserve(c) ? n.free - kvs_core_reserve(c) : 0;
	if (spare + c->npool >= need)
		return 1;
	return !c->o.no_evict && c->has_reclaimer && need <= (c->nsegs - n.index) / 2;
}

/* A resize is asked for (a client's GROW of the current epoch, or the load
 * sampler): enum kvi_grow_verdict. Caller holds the lock. */
static uint64_t grow_locked(struct kvs_core *c)
{
	if (c->resize != KVS_RESIZE_IDLE) {
		/* One at a time; one asked for meanwhile begins as soon as
		 * this one's old index is unpublished (kvs_core_resize_done):
		 * while a small index doubles, inserts outrun it. A refusal
		 * stays a refusal: a resize that cannot get its memory is no
		 * reason for an insert to wait (it would wait for nothing). */
		if (!can_grow(c))
			return KVI_GROW_NO;
		if (c->resize == KVS_RESIZE_RUNNING)
			c->grow_pending = 1;
		return KVI_GROW_STARTED;
	}
	if (!c->has_migrator || !can_grow(c))
		return KVI_GROW_NO;
	c->resize = KVS_RESIZE_WANTED;
	c->resize_need = 0;
	if (c->o.wake)
		c->o.wake(c->o.wake_arg);
	return KVI_GROW_STARTED;
}

/* Is bucket b of index x full (every slot names something)? A CPU read of
 * the region: the bytes are only counted, never followed. */
static int bucket_full(const struct kvs_core *c, const struct kvi_index *x, uint64_t b)
{
	const struct kvi_bucket *bk = (const void *)(c->base + kvi_index_bucket_off(x, b));

	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
		if (__atomic_load_n(&bk->slot[i], __ATOMIC_RELAXED) == 0)
			return 0;
	return 1;
}

/* Slots in use, in %, of KVS_GROW_SAMPLE_BUCKETS random buckets of the
 * current index (a smaller index whole): bounded work per GROW. */
static uint64_t sampled_load_pct(struct kvs_core *c)
{
	const struct kvi_index *x = &c->ix.cur;
	int whole = x->bucket_count <= KVS_GROW_SAMPLE_BUCKETS;
	uint64_t n = whole ? x->bucket_count : KVS_GROW_SAMPLE_BUCKETS, used = 0;

	for (uint64_t k = 0; k < n; k++) {
		uint64_t b = k;
		const struct kvi_bucket *bk;

		if (!whole) {
			c->grow_rng ^= c->grow_rng << 13; /* xorshift64 */
			c->grow_rng ^= c->grow_rng >> 7;
			c->grow_rng ^= c->grow_rng << 17;
			b = c->grow_rng % x->bucket_count;
		}
		bk = (const void *)(c->base + kvi_index_bucket_off(x, b));
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			used += __atomic_load_n(&bk->slot[i], __ATOMIC_RELAXED) != 0;
	}
	return used * 100 / (n * KVI_SLOTS_PER_BUCKET);
}

/* core.h "GROW": does a GROW of the current index claim what justifies a
 * resize -- the pair it names (full_pair: bucket + 1) really full, and the
 * index loaded enough that a full pair is not an accident of a few keys? */
static int grow_claim_holds(struct kvs_core *c, const struct kvi_ctrl *req)
{
	unsigned named = 0;

	for (unsigned j = 0; j < 2; j++) {
		uint64_t b1 = req->grow.full_pair[j];

		if (!b1)
			continue;
		if (b1 > c->ix.cur.bucket_count || !bucket_full(c, &c->ix.cur, b1 - 1))
			return 0;
		named++;
	}
	return named && sampled_load_pct(c) >= KVS_GROW_MIN_LOAD_PCT;
}

static uint64_t grow_request(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req)
{
	if (req->grow.epoch != c->ix.cur.epoch)
		return KVI_GROW_STALE;
	if (!grow_claim_holds(c, req)) {
		kvi_ev_dbg("grow_refused", "client=%u epoch=%" PRIu64 " reason=%s", id, req->grow.epoch,
			   "the buckets it names are not full, or the index is not loaded enough");
		return KVI_GROW_NO;
	}
	return grow_locked(c);
}

void kvs_core_grow_ctrl_locked(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	const struct kvi_ctrl_grow *g = &req->grow;

	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_GROWING, .seq = req->seq,
				   .growing = { .verdict = grow_request(c, id, req) } };
	/* split_next = an old bucket + 1 that is full while it waits for its
	 * migration: split it next (that is what makes room for it). */
	if (g->epoch && g->epoch == c->ix.prev.epoch && c->ix.state == KVI_INDEX_MIGRATING && g->split_next &&
	    g->split_next <= c->ix.prev.bucket_count) {
		if (c->urgent_n < KVS_URGENT_MAX)
			c->urgent[c->urgent_n++] = g->split_next - 1;
		resp->growing.verdict = KVI_GROW_STARTED;
		if (c->o.wake)
			c->o.wake(c->o.wake_arg);
	}
}

uint32_t kvs_core_max_chunks(const struct kvs_core *c)
{
	return (uint32_t)(c->geo.region_size / c->geo.segment_size + 1);
}

int kvs_core_index(struct kvs_core *c, int which, struct kvi_index *out, uint64_t *chunks, uint32_t cap)
{
	int rc;

	pthread_mutex_lock(&c->mu);
	rc = kvs_indexes_copy(&c->ix, which, out, chunks, cap);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void kvs_core_index_status(struct kvs_core *c, uint64_t *epoch, enum kvi_index_state *state)
{
	pthread_mutex_lock(&c->mu);
	*epoch = c->ix.cur.epoch;
	*state = c->ix.state;
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_set_indexes(struct kvs_core *c, const struct kvi_index *cur, const struct kvi_index *prev,
			 enum kvi_index_state state)
{
	int rc;

	pthread_mutex_lock(&c->mu);
	rc = kvs_indexes_set(&c->ix, cur, prev, state);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int kvs_core_bucket_of_epoch(struct kvs_core *c, uint64_t epoch, uint64_t bucket, uint64_t *off)
{
	int rc;

	pthread_mutex_lock(&c->mu);
	rc = kvs_indexes_bucket(&c->ix, epoch, bucket, off);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

uint64_t kvs_core_bucket_off(struct kvs_core *c, uint64_t bucket)
{
	uint64_t off;

	pthread_mutex_lock(&c->mu);
	off = kvi_index_bucket_off(&c->ix.cur, bucket);
	pthread_mutex_unlock(&c->mu);
	return off;
}

void kvs_core_attach_migrator(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->has_migrator = 1;
	pthread_mutex_unlock(&c->mu);
}

uint64_t kvs_core_grow(struct kvs_core *c, uint64_t epoch)
{
	uint64_t v;

	pthread_mutex_lock(&c->mu);
	v = epoch == c->ix.cur.epoch ? grow_locked(c) : KVI_GROW_STALE;
	pthread_mutex_unlock(&c->mu);
	return v;
}

unsigned kvs_core_urgent_take(struct kvs_core *c, uint64_t *buckets, unsigned max)
{
	unsigned n;

	pthread_mutex_lock(&c->mu);
	n = c->urgent_n < max ? c->urgent_n : max;
	memcpy(buckets, c->urgent + (c->urgent_n - n), n * sizeof(*buckets));
	c->urgent_n -= n;
	pthread_mutex_unlock(&c->mu);
	return n;
}

enum kvs_resize_phase kvs_core_resize_phase(struct kvs_core *c)
{
	enum kvs_resize_phase p;

	pthread_mutex_lock(&c->mu);
	p = c->resize;
	pthread_mutex_unlock(&c->mu);
	return p;
}

void kvs_core_set_resize_phase(struct kvs_core *c, enum kvs_resize_phase p)
{
	pthread_mutex_lock(&c->mu);
	c->resize = p;
	c->resize_need = 0;
	pthread_mutex_unlock(&c->mu);
}

void kvs_core_resize_done(struct kvs_core *c)
{
	uint64_t epoch = 0;

	pthread_mutex_lock(&c->mu);
	c->resize = KVS_RESIZE_IDLE;
	c->resize_need = 0;
	if (c->grow_pending) {
		c->grow_pending = 0;
		if (grow_locked(c) == KVI_GROW_STARTED)
			epoch = c->ix.cur.epoch;
	}
	pthread_mutex_unlock(&c->mu);
	if (epoch)
		kvi_ev_info("resize_wanted", "epoch=%" PRIu64 " reason=%s", epoch, "an insert asked while the last resize ran");
}

int kvs_core_chunks_take(struct kvs_core *c, uint32_t n, uint64_t *chunks)
{
	struct kvs_segtab_counts cnt;
	uint32_t got = 0, from_pool;
	int rc = 0;

	pthread_mutex_lock(&c->mu);
	kvs_segtab_tick(c->segs, kvi_mono_ns());
	kvs_segtab_counts(c->segs, &cnt);
	from_pool = c->npool < n ? c->npool : n;
	if (n > from_pool && cnt.free < (uint64_t)(n - from_pool) + kvs_core_reserve(c)) {
		rc = KVC_EAGAIN;
	} else {
		while (got < from_pool)
			chunks[got++] = c->pool[--c->npool];
		while (got < n && kvs_segtab_index_take(c->segs, &chunks[got]) == 0)
			got++;
		if (got < n) { /* cannot happen after the count above: undo */
			rc = KVC_EAGAIN;
			while (got > 0) {
				uint64_t off = chunks[--got];

				if (kvs_segtab_index_return(c->segs, off, 0))
					c->pool[c->npool++] = off;
			}
		}
	}
	if (rc) {
		/* Ask for room: reclamation runs until these chunks would fit
		 * (kvs_core_wanted_locked()), unless eviction is off and nothing would come. */
		c->resize_need = n;
		if (c->o.no_evict && !can_grow(c))
			rc = KVC_ENOMEM;
		else if (c->o.wake && kvs_core_wanted_locked(c))
			c->o.wake(c->o.wake_arg);
	} else {
		c->resize_need = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int kvs_core_chunks_return(struct kvs_core *c, const uint64_t *chunks, uint32_t n)
{
	uint64_t home_end = c->geo.index_off + c->geo.bucket_count * KVI_BUCKET_SIZE, now = kvi_mono_ns();
	int rc = 0;

	pthread_mutex_lock(&c->mu);
	for (uint32_t k = 0; k < n; k++) {
		uint64_t off = chunks[k];

		if (off >= c->geo.index_off && off < home_end) {
			/* A home piece: reusable only whole (a chunk is a segment's
			 * bytes); a partial last piece stays unused. */
			if (off + c->geo.segment_size > home_end)
				continue;
			if (c->npool == c->pool_cap) {
				uint32_t cap = c->pool_cap ? 2 * c->pool_cap : 16;
				uint64_t *p = realloc(c->pool, cap * sizeof(*p));

				if (!p) {
					rc = KVC_ENOMEM; /* the piece is lost, nothing worse */
					continue;
				}
				c->pool = p;
				c->pool_cap = cap;
			}
			c->pool[c->npool++] = off;
		} else if (kvs_segtab_index_return(c->segs, off, now)) {
			kvi_ev_err("index_chunk_invalid", "offset=%#" PRIx64 " msg=%s", off, "not an index segment: not returned");
			rc = KVC_EINVAL;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void kvs_core_require_acks(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->acks_required = 1;
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_acks_wanted(struct kvs_core *c, uint64_t *epoch)
{
	int w;

	pthread_mutex_lock(&c->mu);
	*epoch = c->ix.cur.epoch;
	w = c->ix.prev.epoch != 0 && c->acked_epoch < c->ix.cur.epoch;
	pthread_mutex_unlock(&c->mu);
	return w;
}

void kvs_core_set_acked(struct kvs_core *c, uint64_t epoch, uint64_t at_ns)
{
	pthread_mutex_lock(&c->mu);
	if (epoch > c->acked_epoch) {
		c->acked_epoch = epoch;
		c->acked_at = at_ns;
	}
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_acked(struct kvs_core *c, uint64_t epoch, uint64_t *at_ns)
{
	int ok;

	pthread_mutex_lock(&c->mu);
	ok = !c->acks_required || c->acked_epoch >= epoch;
	*at_ns = c->acks_required ? c->acked_at : 0;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

