/* One server's connection (a kvi_conn; conn.h): opening it over a
 * transport, carving the registered local buffer into the operation slots'
 * scratch, growing a slot's object area, and closing it. The engine
 * (engine.c) runs operations on it; lease.c keeps it joined. */
#include <stdlib.h>

#include "conn.h"
#include "counts.h"
#include "engine.h"
#include "extent.h"
#include "kvclient_errors.h"
#include "lease.h"
#include "log.h"
#include "op.h"

/* Per-operation scratch in the main buffer: 2 buckets, 8 words, the header
 * and key of a cached PUT's slot object, the initial object area. */
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

/* Give h the connection rm: learn the layout, size and carve the local
 * buffer, take a lease. Used at open and when rejoining (nothing in flight). */
int kvi_conn_attach(struct kvi_conn *h, struct kvi_rmem *rm)
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
	h->mark_sink = (uint64_t *)(void *)(lb + scratch * o->depth);
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
	rc = kvi_lease_renew_sync(h, KVI_CTRL_TIMEOUT_MS);
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
	rc = kvi_conn_attach(h, rm);
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

void kvi_conn_destroy(struct kvi_conn *h)
{
	if (!h)
		return;
	kvi_counts_flush(h);
	kvi_return_extent(h);
	close_handle(h);
}

size_t kvi_conn_max_value(const struct kvi_conn *h, size_t key_len)
{
	/* Counted with a flags word, whether the item has one or not: the
	 * largest value does not depend on the flags. */
	uint64_t over = kvi_obj_len((uint32_t)key_len, 0, 1);

	return key_len > KVI_MAX_KEY || over > h->max_object ? 0 : (size_t)(h->max_object - over);
}
