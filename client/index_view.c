/* A connection's view of the server's indexes: where the buckets are
 * (layout.h "Resize", wire.h INDEX). The server's side is server/indexes.c.
 *
 * The server states its current index -- and, while a resize migrates, the
 * previous one -- in INDEX answers, a few chunks per message; the client
 * asks at join and again whenever a LEASE names an epoch or a state other
 * than what it has (or an operation meets a MOVED bucket). Nothing about an
 * index is ever read from the region. Operations take their buckets' region
 * offsets when they choose them (kvi_place), so a new index arriving while
 * they run changes nothing under them; the server keeps an old index
 * readable until every client acknowledged the new one (its renewals carry
 * the epoch it uses) and no operation begun before could still run. */
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "index_view.h"
#include "kvclient_errors.h"
#include "log.h"
#include "op.h"

#define INDEX_TIMEOUT_MS 5000
#define INDEX_TRIES 4 /* a resize may finish while we read an index: start over */

/* Fetch index `which` (0 current, 1 previous) into ci. 0 (ci->ix.epoch 0:
 * the server has no such index), or a negative code. */
static int fetch(struct kvi_conn *h, unsigned which, struct kvi_cindex *ci)
{
	struct kvi_index got = { .chunk_off = ci->chunks };
	uint32_t first = 0;

	ci->ix.epoch = 0;
	for (int tries = 0; tries < INDEX_TRIES; tries++) {
		first = 0;
		got.epoch = 0;
		for (;;) {
			struct kvi_ctrl req = { .type = KVI_CTRL_INDEX_REQ,
						.index_req = { .which = which, .first_chunk = first } },
					r;
			uint32_t n, at;
			int rc = kvi_rmem_ctrl_call(h->rm, &req, &r, INDEX_TIMEOUT_MS);

			if (rc)
				return rc;
			if (r.type != KVI_CTRL_INDEX)
				return r.type == KVI_CTRL_ERROR && r.status ? r.status : KVC_EPROTO;
			if (r.index.epoch == 0) {
				if (which == 0)
					return KVC_EPROTO; /* there is always a current index */
				return 0;
			}
			at = (uint32_t)r.index.chunks;
			n = (uint32_t)(r.index.chunks >> 32);
			if (first == 0) {
				got.epoch = r.index.epoch;
				got.bucket_count = r.index.bucket_count;
				got.chunk_shift = kvi_index_chunk_shift(&h->sb);
				got.nchunks = n;
				if (n == 0 || n > h->chunk_cap)
					return KVC_EPROTO;
			} else if (r.index.epoch != got.epoch) {
				break; /* a resize began meanwhile: read the new one */
			}
			if (at != first || n != got.nchunks || r.index.bucket_count != got.bucket_count)
				return KVC_EPROTO;
			for (unsigned i = 0; i < KVI_INDEX_CHUNKS_PER_MSG && first < n; i++, first++) {
				uint64_t w = r.index.pages[i / 2];

				got.chunk_off[first] = (uint64_t)(uint32_t)(w >> (32 * (i % 2))) * KVI_INDEX_CHUNK_ALIGN;
			}
			if (first == n) {
				const char *why = kvi_index_check(&got, &h->sb);

				if (why) {
					kvi_err("the server stated an unusable index (%s)", why);
					return KVC_EPROTO;
				}
				ci->ix = got;
				return 0;
			}
		}
	}
	return KVC_EAGAIN;
}

int kvi_index_refresh(struct kvi_conn *h)
{
	uint64_t before = h->cur.ix.epoch;
	int rc = fetch(h, 0, &h->cur);

	if (rc == 0)
		rc = fetch(h, 1, &h->prev);
	if (rc) {
		h->cur.ix.epoch = 0;
		return rc;
	}
	/* A previous index only matters while it is older than ours. */
	if (h->prev.ix.epoch && h->prev.ix.epoch + 1 != h->cur.ix.epoch)
		h->prev.ix.epoch = 0;
	/* A resize doubles (layout.h "Resize"): following a migration relies on
	 * it (a key's choice b in the old index is b or b + N in the new one). */
	if (h->prev.ix.epoch && h->prev.ix.bucket_count * 2 != h->cur.ix.bucket_count) {
		kvi_err("the server stated a previous index of %llu buckets for a current one of %llu (not half)",
			(unsigned long long)h->prev.ix.bucket_count, (unsigned long long)h->cur.ix.bucket_count);
		h->cur.ix.epoch = h->prev.ix.epoch = 0;
		return KVC_EPROTO;
	}
	h->index_state = h->prev.ix.epoch ? KVI_INDEX_MIGRATING : KVI_INDEX_STABLE;
	/* Cached locations name buckets of the index they were found in. */
	if (before != h->cur.ix.epoch)
		kvi_locache_clear(&h->cache);
	return 0;
}

int kvi_index_alloc(struct kvi_conn *h)
{
	uint32_t cap = (uint32_t)(h->sb.region_size / h->sb.segment_size + 1);

	if (cap > h->chunk_cap) {
		uint64_t *a = realloc(h->cur.chunks, cap * sizeof(*a)), *b;

		if (!a)
			return KVC_ENOMEM;
		h->cur.chunks = a;
		b = realloc(h->prev.chunks, cap * sizeof(*b));
		if (!b)
			return KVC_ENOMEM;
		h->prev.chunks = b;
		h->chunk_cap = cap;
	}
	h->cur.ix = (struct kvi_index){ .chunk_off = h->cur.chunks };
	h->prev.ix = (struct kvi_index){ .chunk_off = h->prev.chunks };
	return 0;
}

void kvi_index_free(struct kvi_conn *h)
{
	free(h->cur.chunks);
	free(h->prev.chunks);
	h->cur.chunks = h->prev.chunks = NULL;
	h->chunk_cap = 0;
}

/* The key's choices in the current index, and in mixed mode (a resize
 * migrating from the previous index, which has half as many buckets) in the
 * previous one too: the attempt starts on the current index's buckets and
 * follows a choice to its old bucket when it finds the new one UNMIGRATED
 * (op_resize.c). Offsets are fixed here: a new index arriving while the
 * operation runs changes nothing under it. */
void kvi_place(const struct kvi_conn *h, struct kvi_opst *st)
{
	const struct kvi_index *ix = &h->cur.ix, *px = &h->prev.ix;

	kvi_keyhash_place(&st->kh, ix->bucket_count);
	st->epoch = ix->epoch;
	st->nchoice = st->nb = st->kh.b[0] == st->kh.b[1] ? 1 : 2;
	st->old = 0;
	for (unsigned i = 0; i < 2; i++) {
		st->nbk[i] = st->b[i] = st->kh.b[i];
		st->noff[i] = st->boff[i] = kvi_index_bucket_off(ix, st->b[i]);
		st->bep[i] = ix->epoch;
	}
	st->oepoch = 0;
	if (px->epoch) {
		st->oepoch = px->epoch;
		st->obk[0] = st->kh.lo % px->bucket_count;
		st->obk[1] = st->kh.hi % px->bucket_count;
		for (unsigned i = 0; i < 2; i++)
			st->ooff[i] = kvi_index_bucket_off(px, st->obk[i]);
	}
}
