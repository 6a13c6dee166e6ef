#include "indexes.h"

#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"

int kvs_indexes_init(struct kvs_indexes *x, const struct kvi_geometry *g)
{
	uint32_t n = kvi_index_nchunks(g->bucket_count, kvi_index_chunk_shift(g));
	uint64_t *chunks = calloc(n, sizeof(*chunks));

	memset(x, 0, sizeof(*x));
	if (!chunks)
		return KVC_ENOMEM;
	x->geo = *g;
	kvi_index_home(&x->cur, g, chunks);
	x->state = KVI_INDEX_STABLE;
	return 0;
}

void kvs_indexes_fini(struct kvs_indexes *x)
{
	free(x->cur.chunk_off);
	free(x->prev.chunk_off);
	memset(x, 0, sizeof(*x));
}

static uint64_t page_of(uint64_t off)
{
	return off / KVI_INDEX_CHUNK_ALIGN;
}

int kvs_indexes_describe(const struct kvs_indexes *x, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	const struct kvi_index *ix;
	uint64_t first = req->index_req.first_chunk, page[KVI_INDEX_CHUNKS_PER_MSG] = { 0 };

	if (req->index_req.which > 1)
		return KVC_EINVAL;
	ix = req->index_req.which == 0 ? &x->cur : &x->prev;
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_INDEX, .seq = req->seq };
	if (ix->epoch == 0)
		return 0; /* no previous index: epoch 0 says so */
	if (first >= ix->nchunks)
		return KVC_EINVAL;
	for (unsigned i = 0; i < KVI_INDEX_CHUNKS_PER_MSG && first + i < ix->nchunks; i++)
		page[i] = page_of(ix->chunk_off[first + i]);
	resp->index.epoch = ix->epoch;
	resp->index.bucket_count = ix->bucket_count;
	resp->index.chunks = first | (uint64_t)ix->nchunks << 32;
	resp->index.pages[0] = page[0] | page[1] << 32;
	resp->index.pages[1] = page[2] | page[3] << 32;
	return 0;
}

int kvs_indexes_copy(const struct kvs_indexes *x, int which, struct kvi_index *out, uint64_t *chunks, uint32_t cap)
{
	const struct kvi_index *ix = which ? &x->prev : &x->cur;

	if (ix->epoch == 0)
		return KVC_ENOTFOUND;
	if (ix->nchunks > cap)
		return KVC_ENOMEM;
	*out = *ix;
	out->chunk_off = chunks;
	memcpy(chunks, ix->chunk_off, ix->nchunks * sizeof(*chunks));
	return 0;
}

int kvs_indexes_bucket(const struct kvs_indexes *x, uint64_t epoch, uint64_t bucket, uint64_t *off)
{
	const struct kvi_index *ix = epoch == x->cur.epoch ? &x->cur : epoch && epoch == x->prev.epoch ? &x->prev : NULL;

	if (!ix || bucket >= ix->bucket_count)
		return KVC_EINVAL;
	*off = kvi_index_bucket_off(ix, bucket);
	return 0;
}

static int dup_index(struct kvi_index *dst, const struct kvi_index *src)
{
	uint64_t *c = malloc((src->nchunks ? src->nchunks : 1) * sizeof(*c));

	if (!c)
		return KVC_ENOMEM;
	memcpy(c, src->chunk_off, src->nchunks * sizeof(*c));
	*dst = *src;
	dst->chunk_off = c;
	return 0;
}

int kvs_indexes_set(struct kvs_indexes *x, const struct kvi_index *cur, const struct kvi_index *prev,
		    enum kvi_index_state state)
{
	struct kvi_index c, p = { 0 };

	if (dup_index(&c, cur))
		return KVC_ENOMEM;
	if (prev && dup_index(&p, prev)) {
		free(c.chunk_off);
		return KVC_ENOMEM;
	}
	free(x->cur.chunk_off);
	free(x->prev.chunk_off);
	x->cur = c;
	x->prev = p;
	x->resizes += x->state == KVI_INDEX_MIGRATING && state == KVI_INDEX_STABLE;
	x->state = state;
	return 0;
}
