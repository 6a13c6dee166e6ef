#include "core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kvclient_errors.h"
#include "log.h"

enum kvs_seg_state {
	KVS_SEG_FREE = 0,
	KVS_SEG_OPEN,   /* granted to owner, which may append */
	KVS_SEG_SEALED, /* no more appends; objects stay readable */
};

/* One entry per segment, indexed by segment number ((offset - heap_off) /
 * stride). Server-private memory: never in the region. */
struct kvs_seg {
	uint32_t owner; /* client id it was granted to (kept when sealed, for diagnostics) */
	uint8_t state;  /* enum kvs_seg_state */
};

/* A client holding open segments. Created on its first grant, freed when it
 * leaves. open[] lists segment numbers, oldest first. */
struct kvs_client {
	struct kvs_client *next;
	uint32_t id;
	unsigned nopen;
	uint32_t open[KVS_MAX_OPEN_SEGMENTS];
};

#define KVS_CLIENT_BUCKETS 256u

struct kvs_core {
	uint8_t *base;
	struct kvi_superblock sb; /* private copy: the region's may be scribbled on */
	struct kvs_heap *heap;
	struct kvs_seg *segs;
	uint64_t nsegs;
	uint64_t stride; /* bytes from one segment to the next (heap.h) */
	uint64_t nopen, nsealed, grants_refused, nclients;
	struct kvs_client *clients[KVS_CLIENT_BUCKETS];
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

int kvs_core_plan(uintptr_t base, uint64_t region_size, const struct kvs_core_opts *o,
		  struct kvi_superblock *sb, struct kvi_errbuf *e)
{
	uint64_t seg = o && o->segment_size ? o->segment_size : KVS_DEFAULT_SEGMENT_SIZE;
	uint64_t buckets, index_end, heap_off, stride;

	if (seg < KVS_MIN_SEGMENT_SIZE || seg > KVS_MAX_SEGMENT_SIZE || (seg & (seg - 1))) {
		kvi_errbuf_set(e, "segment size %" PRIu64 " bytes: must be a power of two from %u KiB to %u KiB",
			       seg, KVS_MIN_SEGMENT_SIZE >> 10, KVS_MAX_SEGMENT_SIZE >> 10);
		return KVC_EINVAL;
	}
	/* Slots address objects in 16-byte units with 38 bits: 4 TiB. */
	if (region_size > ((uint64_t)KVI_OBJ_ALIGN << KVI_SLOT_OFF_BITS) || region_size <= KVI_SUPERBLOCK_SIZE) {
		kvi_errbuf_set(e, "region of %" PRIu64 " bytes: must be larger than %u bytes and at most 4 TiB",
			       region_size, KVI_SUPERBLOCK_SIZE);
		return KVC_EINVAL;
	}
	buckets = o && o->buckets ? o->buckets : region_size / KVS_BYTES_PER_BUCKET;
	if (!(o && o->buckets) && buckets < KVS_MIN_BUCKETS)
		buckets = KVS_MIN_BUCKETS;
	/* Every key has two distinct candidate buckets. An explicitly tiny index
	 * is allowed (tests fill buckets on purpose); it only limits the items. */
	if (buckets < 2) {
		kvi_errbuf_set(e, "a bucket count of %" PRIu64 " is too few: at least 2 (every key has two "
			       "candidate buckets)", buckets);
		return KVC_EINVAL;
	}
	if (buckets > (region_size - KVI_SUPERBLOCK_SIZE) / KVI_BUCKET_SIZE) {
		kvi_errbuf_set(e, "%" PRIu64 " buckets (%" PRIu64 " MiB of index) do not fit in a %" PRIu64
			       " MiB region", buckets, buckets * KVI_BUCKET_SIZE >> 20, region_size >> 20);
		return KVC_EINVAL;
	}
	index_end = KVI_SUPERBLOCK_SIZE + buckets * KVI_BUCKET_SIZE;
	/* The heap starts at the first page boundary after the index. Segments
	 * sit on a grid of kvs_heap_stride() bytes from there (heap.h: jemalloc's
	 * page of padding rules out segment-aligned segments without wasting half
	 * the heap), so aligning the heap start to the segment size would buy
	 * nothing; nor would 2 MiB: hugepage boundaries are a property of the
	 * mapping (kvserver's region starts on one), not of heap_off. */
	heap_off = align_up(base + index_end, 4096) - base;
	stride = kvs_heap_stride(seg);
	if (heap_off >= region_size || (region_size - heap_off) / stride == 0) {
		kvi_errbuf_set(e, "no room for one %" PRIu64 " KiB segment after an index of %" PRIu64
			       " buckets in a %" PRIu64 " MiB region: fewer buckets, smaller segments or more memory",
			       seg >> 10, buckets, region_size >> 20);
		return KVC_EINVAL;
	}
	memset(sb, 0, sizeof(*sb));
	sb->magic = KVI_REGION_MAGIC;
	sb->layout_version = KVI_LAYOUT_VERSION;
	sb->state = KVI_STATE_SERVING;
	sb->epoch = 1;
	sb->region_size = region_size;
	sb->index_off = KVI_SUPERBLOCK_SIZE;
	sb->bucket_count = buckets;
	sb->heap_off = heap_off;
	sb->heap_size = (region_size - heap_off) / stride * stride;
	sb->segment_size = seg;
	return 0;
}

int kvs_core_create(void *region_base, uint64_t region_size, const struct kvs_core_opts *o,
		    struct kvs_core **out, struct kvi_errbuf *e)
{
	struct kvs_core *c;
	int rc;

	*out = NULL;
	if (!region_base || (uintptr_t)region_base % 4096) {
		kvi_errbuf_set(e, "region at %p is not page-aligned", region_base);
		return KVC_EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		kvi_errbuf_set(e, "out of memory");
		return KVC_ENOMEM;
	}
	c->base = region_base;
	rc = kvs_core_plan((uintptr_t)region_base, region_size, o, &c->sb, e);
	if (rc)
		goto clean_core;
	if (kvi_superblock_check(&c->sb, region_size)) { /* the readers' view of it */
		kvi_errbuf_set(e, "internal error: planned layout fails the superblock check");
		rc = KVC_EINVAL;
		goto clean_core;
	}
	c->stride = kvs_heap_stride(c->sb.segment_size);
	c->nsegs = c->sb.heap_size / c->stride;
	c->segs = calloc(c->nsegs, sizeof(*c->segs));
	if (!c->segs) {
		kvi_errbuf_set(e, "out of memory for the table of %" PRIu64 " segments", c->nsegs);
		rc = KVC_ENOMEM;
		goto clean_core;
	}
	rc = kvs_heap_create(c->base + c->sb.heap_off, c->sb.heap_size, c->sb.segment_size, &c->heap, e);
	if (rc)
		goto clean_segs;
	/* Index first, superblock last: a reader that sees the magic sees an
	 * empty index (no client is connected yet anyway). */
	memset(c->base + c->sb.index_off, 0, c->sb.bucket_count * KVI_BUCKET_SIZE);
	memset(c->base, 0, KVI_SUPERBLOCK_SIZE);
	memcpy(c->base, &c->sb, sizeof(c->sb));
	*out = c;
	return 0;
clean_segs:
	free(c->segs);
clean_core:
	free(c);
	return rc;
}

void kvs_core_destroy(struct kvs_core *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < KVS_CLIENT_BUCKETS; i++) {
		while (c->clients[i]) {
			struct kvs_client *cl = c->clients[i];

			c->clients[i] = cl->next;
			free(cl);
		}
	}
	kvs_heap_destroy(c->heap);
	free(c->segs);
	free(c);
}

static struct kvs_client **client_slot(struct kvs_core *c, uint32_t id)
{
	struct kvs_client **pp = &c->clients[id % KVS_CLIENT_BUCKETS];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

static uint64_t seg_off(const struct kvs_core *c, uint64_t n)
{
	return c->sb.heap_off + n * c->stride;
}

static void seal(struct kvs_core *c, uint32_t n)
{
	c->segs[n].state = KVS_SEG_SEALED;
	c->nopen--;
	c->nsealed++;
}

static void reply_error(const struct kvi_ctrl *req, struct kvi_ctrl *resp, int status)
{
	resp->type = KVI_CTRL_ERROR;
	resp->seq = req->seq;
	resp->status = status;
}

static int seg_request(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_client **pp = client_slot(c, id), *cl = *pp;
	uint64_t n, sealed_off = 0;
	char sum[160];
	uint8_t *p;

	p = kvs_heap_alloc_segment(c->heap);
	if (!p) {
		/* Eviction (a later issue) will make room here; until then the client
		 * hears ENOMEM and keeps its open segments. */
		c->grants_refused++;
		reply_error(req, resp, KVC_ENOMEM);
		kvi_dbg("client %u: no free segment", id);
		return 0;
	}
	n = (uint64_t)(p - (c->base + c->sb.heap_off)) / c->stride;
	if (c->segs[n].state != KVS_SEG_FREE) {
		/* The allocator handed out a segment we consider in use: a bug. Keep
		 * it allocated (freeing could hand it out again) and refuse. */
		kvi_err("heap returned segment %" PRIu64 " that is still in use by client %u", n,
			c->segs[n].owner);
		reply_error(req, resp, KVC_EIO);
		return 0;
	}
	if (!cl) {
		cl = calloc(1, sizeof(*cl));
		if (!cl) {
			kvs_heap_free_segment(c->heap, p);
			reply_error(req, resp, KVC_ENOMEM);
			return 0;
		}
		cl->id = id;
		*pp = cl;
		c->nclients++;
	}
	if (cl->nopen == KVS_MAX_OPEN_SEGMENTS) {
		sealed_off = seg_off(c, cl->open[0]);
		seal(c, cl->open[0]);
		memmove(cl->open, cl->open + 1, (KVS_MAX_OPEN_SEGMENTS - 1) * sizeof(cl->open[0]));
		cl->nopen--;
	}
	cl->open[cl->nopen++] = (uint32_t)n;
	c->segs[n] = (struct kvs_seg){ .owner = id, .state = KVS_SEG_OPEN };
	c->nopen++;
	resp->type = KVI_CTRL_SEG_GRANT;
	resp->seq = req->seq;
	resp->arg[0] = seg_off(c, n);
	resp->arg[1] = c->sb.segment_size;
	resp->arg[2] = sealed_off;
	kvs_core_summary(c, sum, sizeof(sum));
	kvi_dbg("client %u granted segment at %#" PRIx64 "; %s", id, resp->arg[0], sum);
	return 0;
}

/* The process's CPU time lets a benchmark on another machine show that the
 * data path costs the server nothing. */
static int stats_reply(const struct kvs_core *c, struct kvi_ctrl *resp)
{
	struct kvs_core_stats st;
	struct rusage ru;

	kvs_core_stats(c, &st);
	resp->type = KVI_CTRL_STATS;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		resp->arg[0] = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
			       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
	resp->arg[1] = st.segments_total - st.segments_free;
	resp->arg[2] = st.segments_total;
	resp->arg[3] = st.clients;
	/* Memory holding items: the index and every segment handed out. */
	resp->arg[4] = st.index_bytes + st.segments_granted * c->sb.segment_size;
	return 0;
}

int kvs_core_ctrl(void *core, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_core *c = core;

	memset(resp, 0, sizeof(*resp));
	resp->seq = req->seq;
	/* 0 is "no owner" in lock words; ids are assigned by the transport. */
	if (client_id == 0 || client_id > KVI_MAX_CLIENT_ID) {
		kvi_warn("control request from invalid client id %u", client_id);
		return KVC_EINVAL;
	}
	switch (req->type) {
	case KVI_CTRL_SEG_REQ:
		return seg_request(c, client_id, req, resp);
	case KVI_CTRL_STATS_REQ:
		return stats_reply(c, resp);
	case KVI_CTRL_SEG_GRANT:
	case KVI_CTRL_ERROR:
	case KVI_CTRL_SHUTDOWN:
	case KVI_CTRL_STATS:
		kvi_warn("client %u sent control type %u, which only the server sends", client_id, req->type);
		return KVC_EPROTO;
	default:
		kvi_warn("client %u sent unknown control type %u", client_id, req->type);
		return KVC_EPROTO;
	}
}

void kvs_core_client_left(struct kvs_core *c, uint32_t client_id)
{
	struct kvs_client **pp = client_slot(c, client_id), *cl = *pp;

	if (!cl)
		return;
	for (unsigned i = 0; i < cl->nopen; i++)
		seal(c, cl->open[i]);
	kvi_dbg("client %u left: sealed its %u open segments", client_id, cl->nopen);
	*pp = cl->next;
	free(cl);
	c->nclients--;
}

int kvs_core_free_segment(struct kvs_core *c, uint64_t off)
{
	uint64_t n;

	if (off < c->sb.heap_off || off - c->sb.heap_off >= c->sb.heap_size ||
	    (off - c->sb.heap_off) % c->stride)
		return KVC_EINVAL;
	n = (off - c->sb.heap_off) / c->stride;
	/* Only sealed segments: an open one may still receive appends. */
	if (c->segs[n].state != KVS_SEG_SEALED)
		return KVC_EINVAL;
	c->segs[n] = (struct kvs_seg){ .state = KVS_SEG_FREE };
	c->nsealed--;
	kvs_heap_free_segment(c->heap, c->base + off);
	return 0;
}

const struct kvi_superblock *kvs_core_superblock(const struct kvs_core *c)
{
	return &c->sb;
}

void kvs_core_stats(const struct kvs_core *c, struct kvs_core_stats *out)
{
	*out = (struct kvs_core_stats){
		.segments_total = c->nsegs,
		.segments_granted = c->nopen + c->nsealed,
		.segments_free = c->nsegs - c->nopen - c->nsealed,
		.heap_bytes = c->sb.heap_size,
		.index_bytes = c->sb.bucket_count * KVI_BUCKET_SIZE,
		.grants_refused = c->grants_refused,
		.segments_sealed = c->nsealed,
		.clients = c->nclients,
	};
}

void kvs_core_summary(const struct kvs_core *c, char *buf, size_t len)
{
	snprintf(buf, len, "segments %" PRIu64 " open, %" PRIu64 " sealed, %" PRIu64 " free of %" PRIu64
		 " x %" PRIu64 " KiB; %" PRIu64 " refused",
		 c->nopen, c->nsealed, c->nsegs - c->nopen - c->nsealed, c->nsegs, c->sb.segment_size >> 10,
		 c->grants_refused);
}

const struct kvs_heap *kvs_core_heap(const struct kvs_core *c)
{
	return c->heap;
}
