#include "core.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <pthread.h>
#include <time.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"

/* The clients connected from one source host (kvs_core_client_host): the
 * quota binds what they hold together. Freed with its last client. */
struct kvs_host {
	struct kvs_host *next;
	uint64_t key;
	uint64_t held;     /* the sum of its clients' held */
	uint32_t nclients; /* clients that name it */
};

/* A client holding an open extent. Created on its first grant (or when its
 * host is told), freed when it leaves. */
struct kvs_client {
	struct kvs_client *next;
	uint32_t id;
	struct kvs_extent x; /* x.owner: its account (account_of) */
	uint64_t held; /* bytes granted and not back (core.h "Quota") */
	struct kvs_host *host; /* NULL: none known (the quota binds the client alone) */
	int counted;           /* in nclients (it asked for memory) */
};

#define KVS_CLIENT_BUCKETS 256u

struct kvs_core {
	pthread_mutex_t mu; /* guards everything below */
	uint8_t *base;
	struct kvi_geometry geo; /* private: the region's superblock may be scribbled on */
	struct kvs_core_opts o;   /* with defaults filled in */
	struct kvs_heap *heap;
	struct kvs_segtab *segs;
	uint64_t nsegs;
	uint64_t stride; /* bytes from one segment to the next (heap.h) */
	uint64_t low, high; /* reclamation watermarks, in free + quarantined segments */
	/* Segments taken during the last quarantine-long window: reclamation
	 * must keep at least twice that many free or quarantined, or writers
	 * would wait for quarantines to end (segtab.h). */
	uint64_t win_start, win_taken, win_rate;
	int reclaiming;     /* between the watermarks: keep going until high */
	uint64_t full_at;   /* no-evict: when the reclaimer last found nothing to compact */
	int has_reclaimer;  /* without one, nothing will ever make room: refuse at once */
	uint64_t grants_refused, nclients;
	uint64_t accounts; /* clients given an account so far (account_of) */
	uint64_t quota;       /* bytes one client may hold while others need memory */
	uint64_t starving_at; /* ns: a client within half its quota was last answered EAGAIN */
	uint32_t starving_id; /* ... that client */
	uint64_t starving_ns; /* how long that counts */
	uint64_t over_quota;  /* grants answered KVC_EQUOTA */
	uint64_t throttled;   /* grants answered KVC_EAGAIN for another's sake */
	struct kvs_reclaim_stats rc;
	uint64_t fencings, fence_released, fence_cpu_ns; /* the fencer's (kvs_core_add_fence) */
	struct kvs_client *clients[KVS_CLIENT_BUCKETS];
	struct kvs_host *hosts[KVS_CLIENT_BUCKETS];
	struct kvs_indexes ix; /* indexes.h */
	/* Old buckets an insert found full during a migration (GROW naming the
	 * previous index): the migrator splits them first (migrate.h). */
	uint64_t urgent[KVS_URGENT_MAX];
	unsigned urgent_n;
	/* Resizing (migrate.h): who may start one, and where it stands. */
	int has_migrator;
	enum kvs_resize_phase resize;
	uint64_t resize_need; /* chunks the wanted resize waits for (reclamation makes room) */
	int grow_pending;     /* a GROW came while one ran: the next begins at its retirement */
	uint64_t grow_rng;    /* picks the buckets a GROW's load check reads (grow_claim_holds) */
	/* Home area pieces free for index chunks (after the home index retired). */
	uint64_t *pool;
	uint32_t npool, pool_cap;
	/* Acknowledgements (kvs_core_set_acked): kvserver's members all use
	 * acked_epoch or later since acked_at (ns). */
	int acks_required;
	uint64_t acked_epoch, acked_at;
};

static void kvs_core_stats_locked(struct kvs_core *c, struct kvs_core_stats *out);
static struct kvs_client **client_slot(struct kvs_core *c, uint32_t id);

/* What memory is charged to (segtab's extent owner): the client's id in the
 * low 32 bits and, above, the number of clients the core had seen when this
 * one got its first grant. kvserver recycles ids (ids.h) while segments
 * granted to an id's earlier holder may wait hours for reclamation: their
 * charges must not count against the id's new holder. */
static uint64_t account_of(struct kvs_core *c, uint32_t id)
{
	return ++c->accounts << 32 | id;
}

/* segtab's accounting (opts.charge), under the core's lock. A client that
 * has left is not counted any more, nor is an earlier holder of its id. */
static void charge_client(void *arg, uint64_t owner, int64_t bytes)
{
	struct kvs_client *cl = *client_slot(arg, (uint32_t)owner);
	uint64_t was;

	if (!cl || cl->x.owner != owner)
		return;
	was = cl->held;
	cl->held = bytes < 0 && (uint64_t)-bytes > cl->held ? 0 : cl->held + (uint64_t)bytes;
	if (cl->host)
		cl->host->held = cl->host->held - was + cl->held; /* it includes was */
}

/* What the quota compares: the client's host's holdings, or its own. */
static uint64_t quota_held(const struct kvs_client *cl)
{
	return cl->host ? cl->host->held : cl->held;
}
static int policy_opts(const struct kvs_core_opts *in, struct kvs_core_opts *o, struct kvi_errbuf *e);

/* Free segments only the reclaimer may take (segtab opts.reserve). */
static uint64_t reserve_of(const struct kvs_core *c)
{
	return c->nsegs > 8 ? KVS_RESERVE_SEGMENTS : 0;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

int kvs_core_plan(uintptr_t base, uint64_t region_size, const struct kvs_core_opts *o,
		  struct kvi_geometry *g, struct kvi_errbuf *e)
{
	uint64_t seg = o && o->segment_size ? o->segment_size : KVS_DEFAULT_SEGMENT_SIZE;
	uint64_t buckets, index_end, heap_off, stride;

	if (seg < KVS_MIN_SEGMENT_SIZE || seg > KVS_MAX_SEGMENT_SIZE || (seg & (seg - 1))) {
		kvi_errbuf_set(e, "segment size %" PRIu64 " bytes: must be a power of two from %u KiB to %u KiB",
			       seg, KVS_MIN_SEGMENT_SIZE >> 10, KVS_MAX_SEGMENT_SIZE >> 10);
		return KVC_EINVAL;
	}
	/* Slots address objects in 16-byte units with 38 bits: 4 TiB. */
	if (region_size > KVI_MAX_REGION_SIZE || region_size <= KVI_SUPERBLOCK_SIZE) {
		kvi_errbuf_set(e, "region of %" PRIu64 " bytes: must be larger than %u bytes and at most 4 TiB",
			       region_size, KVI_SUPERBLOCK_SIZE);
		return KVC_EINVAL;
	}
	{
		struct kvs_core_opts full;

		if (policy_opts(o, &full, e))
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
	*g = (struct kvi_geometry){
		.layout_version = KVI_LAYOUT_VERSION,
		.epoch = 1,
		.region_size = region_size,
		.index_off = KVI_SUPERBLOCK_SIZE,
		.bucket_count = buckets,
		.heap_off = heap_off,
		.heap_size = (region_size - heap_off) / stride * stride,
		.segment_size = seg,
		.hash_seed = o ? o->hash_seed : 0,
	};
	return 0;
}

/* Defaults filled in, and the combinations that cannot work refused. */
static int policy_opts(const struct kvs_core_opts *in, struct kvs_core_opts *o, struct kvi_errbuf *e)
{
	uint32_t margin = in && in->in_process ? 0 : KVS_QUARANTINE_MARGIN_MS;
	uint64_t least;

	*o = in ? *in : (struct kvs_core_opts){ 0 };
	if (!o->max_op_ms)
		o->max_op_ms = KVS_DEFAULT_MAX_OP_MS;
	if (o->max_op_ms > 600000u || o->exec_ms > 600000u) {
		kvi_errbuf_set(e, "an operation deadline of %u ms or an execution bound of %u ms is too long: at "
			       "most 600000", o->max_op_ms, o->exec_ms);
		return KVC_EINVAL;
	}
	/* A write posted just before its deadline executes up to exec_ms later
	 * (exec_bound.h); segtab.h says why twice the deadline. */
	least = 2ull * o->max_op_ms + o->exec_ms + margin;
	if (!o->quarantine_ms)
		o->quarantine_ms = o->max_op_ms == KVS_DEFAULT_MAX_OP_MS && least <= KVS_DEFAULT_QUARANTINE_MS
					   ? KVS_DEFAULT_QUARANTINE_MS
					   : (uint32_t)least;
	if (!o->reclaim_low_pct)
		o->reclaim_low_pct = KVS_DEFAULT_RECLAIM_LOW_PCT;
	if (!o->reclaim_high_pct)
		o->reclaim_high_pct = o->reclaim_low_pct + (KVS_DEFAULT_RECLAIM_HIGH_PCT - KVS_DEFAULT_RECLAIM_LOW_PCT);
	if (o->quarantine_ms < least) {
		kvi_errbuf_set(e, "a quarantine of %u ms is unsafe with operations of up to %u ms: it must be at "
			       "least twice that plus the execution bound (%u ms) plus %u ms", o->quarantine_ms,
			       o->max_op_ms, o->exec_ms, margin);
		return KVC_EINVAL;
	}
	if (!o->client_quota_pct)
		o->client_quota_pct = KVS_DEFAULT_CLIENT_QUOTA_PCT;
	if (o->client_quota_pct > 100) {
		kvi_errbuf_set(e, "a client quota of %u%% of the heap: must be 1..100", o->client_quota_pct);
		return KVC_EINVAL;
	}
	if (o->reclaim_low_pct > 90 || o->reclaim_high_pct > 95 || o->reclaim_high_pct <= o->reclaim_low_pct) {
		kvi_errbuf_set(e, "reclaim watermarks %u%% / %u%%: the low one must be 1..90 and below the high one "
			       "(at most 95)", o->reclaim_low_pct, o->reclaim_high_pct);
		return KVC_EINVAL;
	}
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
	rc = kvs_core_plan((uintptr_t)region_base, region_size, o, &c->geo, e);
	if (rc)
		goto clean_core;
	policy_opts(o, &c->o, e); /* checked by kvs_core_plan */
	if (kvi_geometry_check(&c->geo)) { /* what every client will check */
		kvi_errbuf_set(e, "internal error: planned layout fails the geometry check: %s",
			       kvi_geometry_check(&c->geo));
		rc = KVC_EINVAL;
		goto clean_core;
	}
	/* A fresh seed per start: key placement cannot be predicted (or
	 * flooded) by anyone who has not joined this server (hash.h). */
	if (!c->geo.hash_seed && getrandom(&c->geo.hash_seed, sizeof(c->geo.hash_seed), 0) !=
					 (ssize_t)sizeof(c->geo.hash_seed)) {
		kvi_errbuf_set(e, "getrandom for the hash seed: %s", strerror(errno));
		rc = KVC_ESYS;
		goto clean_core;
	}
	c->stride = kvs_heap_stride(c->geo.segment_size);
	c->nsegs = c->geo.heap_size / c->stride;
	c->low = c->nsegs * c->o.reclaim_low_pct / 100;
	if (c->low < KVS_RESERVE_SEGMENTS + 2)
		c->low = KVS_RESERVE_SEGMENTS + 2; /* the reserve, one to carve, one in quarantine */
	c->high = c->nsegs * c->o.reclaim_high_pct / 100;
	if (c->high <= c->low)
		c->high = c->low + 1;
	c->quota = c->geo.heap_size / 100 * c->o.client_quota_pct;
	if (c->quota < 2 * c->geo.segment_size)
		c->quota = 2 * c->geo.segment_size;
	c->starving_ns = (uint64_t)(c->o.max_op_ms > KVS_STARVING_MIN_MS ? c->o.max_op_ms : KVS_STARVING_MIN_MS) *
			 1000000u;
	c->grow_rng = c->geo.hash_seed | 1;
	rc = kvs_heap_create(c->base + c->geo.heap_off, c->geo.heap_size, c->geo.segment_size, &c->heap, e);
	if (rc)
		goto clean_core;
	rc = kvs_segtab_create(&(struct kvs_segtab_opts){ .base = c->base, .heap = c->heap,
							  .heap_off = c->geo.heap_off,
							  .segment_size = c->geo.segment_size, .stride = c->stride,
							  .nsegs = c->nsegs,
							  /* Every write into a segment sealed at s was
							   * posted before s + max_op and executed
							   * within exec_ms of that (segtab.h). */
							  .settle_ns = ((uint64_t)c->o.max_op_ms + c->o.exec_ms +
									(c->o.in_process ? 0 : KVS_QUARANTINE_MARGIN_MS)) *
								       1000000u,
							  .quarantine_ns = (uint64_t)c->o.quarantine_ms * 1000000u,
							  .reserve = (unsigned)reserve_of(c),
							  .one_fifo = c->o.no_evict,
							  .charge = charge_client, .charge_arg = c },
			       &c->segs);
	if (rc) {
		kvi_errbuf_set(e, "out of memory for the table of %" PRIu64 " segments", c->nsegs);
		goto clean_heap;
	}
	rc = kvs_indexes_init(&c->ix, &c->geo);
	if (rc) {
		kvi_errbuf_set(e, "out of memory for the index's chunk table");
		kvs_segtab_destroy(c->segs);
		goto clean_heap;
	}
	pthread_mutex_init(&c->mu, NULL);
	/* Index first, superblock last: a reader that sees the magic sees an
	 * empty index (no client is connected yet anyway). */
	memset(c->base + c->geo.index_off, 0, c->geo.bucket_count * KVI_BUCKET_SIZE);
	memset(c->base, 0, KVI_SUPERBLOCK_SIZE);
	{
		struct kvi_superblock sb; /* for debugging tools only (layout.h "Geometry") */

		kvi_superblock_from_geometry(&sb, &c->geo);
		memcpy(c->base, &sb, sizeof(sb));
	}
	*out = c;
	return 0;
clean_heap:
	kvs_heap_destroy(c->heap);
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
		while (c->hosts[i]) {
			struct kvs_host *ho = c->hosts[i];

			c->hosts[i] = ho->next;
			free(ho);
		}
	}
	kvs_indexes_fini(&c->ix);
	free(c->pool);
	kvs_segtab_destroy(c->segs);
	kvs_heap_destroy(c->heap);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static struct kvs_client **client_slot(struct kvs_core *c, uint32_t id)
{
	struct kvs_client **pp = &c->clients[id % KVS_CLIENT_BUCKETS];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* client_id's record, made if it has none (NULL: out of memory). */
static struct kvs_client *client_get(struct kvs_core *c, uint32_t id)
{
	struct kvs_client **pp = client_slot(c, id);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (*pp) {
			(*pp)->id = id;
			(*pp)->x.owner = account_of(c, id);
		}
	}
	return *pp;
}

static struct kvs_host **host_slot(struct kvs_core *c, uint64_t key)
{
	struct kvs_host **pp = &c->hosts[key % KVS_CLIENT_BUCKETS];

	while (*pp && (*pp)->key != key)
		pp = &(*pp)->next;
	return pp;
}

/* cl no longer counts for its host; the host goes with its last client. */
static void host_drop(struct kvs_core *c, struct kvs_client *cl)
{
	struct kvs_host *ho = cl->host, **pp;

	if (!ho)
		return;
	cl->host = NULL;
	ho->held = ho->held > cl->held ? ho->held - cl->held : 0;
	if (--ho->nclients)
		return;
	pp = host_slot(c, ho->key);
	*pp = ho->next;
	free(ho);
}

static void reply_error(const struct kvi_ctrl *req, struct kvi_ctrl *resp, int status)
{
	resp->type = KVI_CTRL_ERROR;
	resp->seq = req->seq;
	resp->status = status;
}

#define RATE_WINDOW_NS 100000000ull

/* No-evict: the reclaimer's verdict "live data fills the heap" holds for
 * FULL_HOLD_NS; then a grant that finds no room asks it to look again
 * (deletes and expiry make garbage without telling the server). */
#define FULL_HOLD_NS 200000000ull

static int full_now(const struct kvs_core *c)
{
	return c->full_at && kvi_mono_ns() - c->full_at < FULL_HOLD_NS;
}

/* Is reclamation wanted? Hysteresis between the watermarks, counting
 * quarantined segments as (soon) free. Caller holds the lock. */
static int wanted(struct kvs_core *c)
{
	struct kvs_segtab_counts n;
	uint64_t avail;

	uint64_t now = kvi_mono_ns(), low, high;

	kvs_segtab_counts(c->segs, &n);
	if (now - c->win_start >= RATE_WINDOW_NS) {
		/* Segments taken per quarantine, from the last window. */
		c->win_rate = (n.taken - c->win_taken) * c->o.quarantine_ms * 1000000u / (now - c->win_start);
		c->win_taken = n.taken;
		c->win_start = now;
	}
	low = c->low;
	if (low < KVS_RESERVE_SEGMENTS + 1 + c->win_rate * 5 / 4)
		low = KVS_RESERVE_SEGMENTS + 1 + c->win_rate * 5 / 4;
	if (low > c->nsegs / 2)
		low = c->nsegs / 2;
	high = low + (c->high - c->low);
	avail = n.free + n.quarantined;
	if (avail < low)
		c->reclaiming = 1;
	else if (avail >= high)
		c->reclaiming = 0;
	/* A resize waiting for room: evict until its chunks are free or in
	 * quarantine (chunks never take the reserve). */
	if (c->resize == KVS_RESIZE_WANTED && c->resize_need &&
	    n.free + n.quarantined + c->npool < c->resize_need + reserve_of(c))
		return !full_now(c);
	return c->reclaiming && !full_now(c);
}

static void poke(struct kvs_core *c)
{
	if (wanted(c) && c->o.wake)
		c->o.wake(c->o.wake_arg);
}

static int seg_request(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_client *cl;
	uint64_t now = kvi_mono_ns();
	int rc, over;

	if (req->arg[0] > c->geo.segment_size) {
		reply_error(req, resp, KVC_EINVAL);
		return 0;
	}
	cl = client_get(c, id);
	if (!cl) {
		reply_error(req, resp, KVC_ENOMEM);
		return 0;
	}
	if (!cl->counted) {
		cl->counted = 1;
		c->nclients++;
	}
	/* core.h "Quota". */
	over = quota_held(cl) + req->arg[0] > c->quota;
	if (over && c->starving_at && now - c->starving_at < c->starving_ns && c->starving_id != id) {
		uint64_t used = req->arg[1] < cl->x.len ? req->arg[1] : cl->x.len;

		if (cl->x.off && used < cl->x.len / 2) {
			/* Asks for more while it has not used what it has: its
			 * extent stays open (the client did not get a new one and
			 * may go on filling it; only EAGAIN says it is gone). */
			c->grants_refused++;
			c->over_quota++;
			reply_error(req, resp, KVC_EQUOTA);
			kvi_ev_dbg("grant_refused", "client=%u reason=quota held=%" PRIu64 " quota=%" PRIu64, id,
				   quota_held(cl), c->quota);
			return 0;
		}
		/* A writer that fills what it gets waits its turn. */
		kvs_segtab_release(c->segs, &cl->x, req->arg[1], now);
		c->throttled++;
		reply_error(req, resp, KVC_EAGAIN);
		return 0;
	}
	kvs_segtab_tick(c->segs, now);
	rc = kvs_segtab_grant(c->segs, &cl->x, req->arg[0], req->arg[1],
			      over ? KVS_GRANT_OVER_QUOTA : KVS_GRANT_CLIENT, now);
	if (rc == KVC_EAGAIN && quota_held(cl) < c->quota / 2) {
		c->starving_at = now;
		c->starving_id = id;
	}
	if (rc) {
		/* Nothing free right now. With eviction (or garbage left to
		 * compact) the reclaimer will make room: the client asks again. */
		poke(c);
		if (rc == KVC_EAGAIN && (!c->has_reclaimer || (c->o.no_evict && full_now(c)))) {
			c->grants_refused++;
			rc = KVC_ENOMEM;
		}
		reply_error(req, resp, rc);
		kvi_ev_dbg("grant_refused", "client=%u reason=no_free_segment error=%s", id, kvc_err_name(rc));
		return 0;
	}
	poke(c);
	resp->type = KVI_CTRL_SEG_GRANT;
	resp->seq = req->seq;
	resp->arg[0] = cl->x.off;
	resp->arg[1] = cl->x.len;
	kvi_ev_dbg("granted", "client=%u bytes=%" PRIu64 " offset=%#" PRIx64, id, cl->x.len, cl->x.off);
	return 0;
}

static int seg_return(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_client *cl = *client_slot(c, id);

	if (cl)
		kvs_segtab_release(c->segs, &cl->x, req->arg[0], kvi_mono_ns());
	resp->type = KVI_CTRL_SEG_RETURNED;
	resp->seq = req->seq;
	return 0;
}

static void fill_stats(struct kvs_core *c, uint64_t *v)
{
	struct kvs_core_stats st;
	struct rusage ru;

	kvs_core_stats_locked(c, &st);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		v[KVI_STAT_CPU_NS] =
			((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
			((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
	v[KVI_STAT_SEGMENTS_USED] = st.segments_total - st.segments_free;
	v[KVI_STAT_SEGMENTS_TOTAL] = st.segments_total;
	v[KVI_STAT_CLIENTS] = st.clients;
	/* Memory holding items: the index and every byte handed to writers that
	 * has not been reclaimed (live items and garbage alike). */
	v[KVI_STAT_BYTES_USED] = st.index_bytes + st.carved_bytes;
	v[KVI_STAT_BYTES] = st.carved_bytes;
	v[KVI_STAT_LIMIT_MAXBYTES] = st.heap_bytes;
	v[KVI_STAT_EVICTIONS] = st.rc.evictions;
	v[KVI_STAT_RECLAIMED] = st.rc.segments;
	v[KVI_STAT_EXPIRED_UNFETCHED] = st.rc.expired_unfetched;
	v[KVI_STAT_EVICTED_UNFETCHED] = st.rc.evicted_unfetched;
	v[KVI_STAT_MOVED] = st.rc.moved;
	v[KVI_STAT_EXPIRED] = st.rc.expired;
	v[KVI_STAT_DROPPED] = st.rc.dropped;
	v[KVI_STAT_SEGMENTS_FREE] = st.segments_free;
	v[KVI_STAT_SEGMENTS_OPEN] = st.segments_open;
	v[KVI_STAT_SEGMENTS_SEALED] = st.segments_sealed;
	v[KVI_STAT_SEGMENTS_QUARANTINED] = st.segments_quarantined;
	v[KVI_STAT_RECLAIM_CPU_NS] = st.rc.cpu_ns;
	v[KVI_STAT_GRANTS] = st.grants;
	v[KVI_STAT_GRANTS_DEFERRED] = st.grants_deferred;
	v[KVI_STAT_GRANTS_REFUSED] = st.grants_refused;
	v[KVI_STAT_RECLAIM_ABORTS] = st.rc.aborted;
	v[KVI_STAT_LOCK_RETRIES] = st.rc.lock_retries;
	v[KVI_STAT_FENCINGS] = st.fencings;
	v[KVI_STAT_FENCE_RELEASED] = st.fence_released;
	v[KVI_STAT_FENCE_CPU_NS] = st.fence_cpu_ns;
	v[KVI_STAT_RESIZES] = st.resizes;
	v[KVI_STAT_INDEX_BUCKETS] = st.index_buckets;
	v[KVI_STAT_INDEX_EPOCH] = st.index_epoch;
}

/* The process's CPU time lets a benchmark on another machine show that the
 * data path costs the server nothing. */
static int stats_reply(struct kvs_core *c, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	uint64_t v[KVI_STATS_PAGES * 5] = { 0 };

	if (req->arg[0] >= KVI_STATS_PAGES) {
		reply_error(req, resp, KVC_EINVAL);
		return 0;
	}
	fill_stats(c, v);
	resp->type = KVI_CTRL_STATS;
	memcpy(resp->arg, v + 5 * req->arg[0], sizeof(resp->arg));
	return 0;
}

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
	spare = n.free > reserve_of(c) ? n.free - reserve_of(c) : 0;
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
 * resize -- the pair it names (arg2, arg3: bucket + 1) really full, and the
 * index loaded enough that a full pair is not an accident of a few keys? */
static int grow_claim_holds(struct kvs_core *c, const struct kvi_ctrl *req)
{
	unsigned named = 0;

	for (unsigned j = 2; j <= 3; j++) {
		if (!req->arg[j])
			continue;
		if (req->arg[j] > c->ix.cur.bucket_count || !bucket_full(c, &c->ix.cur, req->arg[j] - 1))
			return 0;
		named++;
	}
	return named && sampled_load_pct(c) >= KVS_GROW_MIN_LOAD_PCT;
}

static uint64_t grow_request(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req)
{
	if (req->arg[0] != c->ix.cur.epoch)
		return KVI_GROW_STALE;
	if (!grow_claim_holds(c, req)) {
		kvi_ev_dbg("grow_refused", "client=%u epoch=%" PRIu64 " reason=%s", id, req->arg[0],
			   "the buckets it names are not full, or the index is not loaded enough");
		return KVI_GROW_NO;
	}
	return grow_locked(c);
}

int kvs_core_ctrl(void *core, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_core *c = core;
	int rc;

	memset(resp, 0, sizeof(*resp));
	resp->seq = req->seq;
	/* 0 is "no owner" in lock words; ids are assigned by the transport. */
	if (client_id == 0 || client_id > KVI_MAX_CLIENT_ID) {
		kvi_ev_warn("ctrl_refused", "client=%u reason=%s", client_id, "invalid client id");
		return KVC_EINVAL;
	}
	pthread_mutex_lock(&c->mu);
	switch (req->type) {
	case KVI_CTRL_SEG_REQ:
		rc = seg_request(c, client_id, req, resp);
		break;
	case KVI_CTRL_SEG_RETURN:
		rc = seg_return(c, client_id, req, resp);
		break;
	case KVI_CTRL_STATS_REQ:
		rc = stats_reply(c, req, resp);
		break;
	case KVI_CTRL_INDEX_REQ:
		rc = kvs_indexes_describe(&c->ix, req, resp);
		break;
	case KVI_CTRL_GROW:
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_GROWING, .seq = req->seq,
					   .arg = { grow_request(c, client_id, req) } };
		/* arg1 = an old bucket + 1 that is full while it waits for its
		 * migration: split it next (that is what makes room for it). */
		if (req->arg[0] && req->arg[0] == c->ix.prev.epoch && c->ix.state == KVI_INDEX_MIGRATING &&
		    req->arg[1] && req->arg[1] <= c->ix.prev.bucket_count) {
			if (c->urgent_n < KVS_URGENT_MAX)
				c->urgent[c->urgent_n++] = req->arg[1] - 1;
			resp->arg[0] = KVI_GROW_STARTED;
			if (c->o.wake)
				c->o.wake(c->o.wake_arg);
		}
		rc = 0;
		break;
	case KVI_CTRL_LEASE_RENEW:
	case KVI_CTRL_LOCK_REPORT:
		/* Membership is kvserver's (members.h), not the core's: a core
		 * serving clients alone (the local transport) grants no leases. */
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = req->seq, .status = KVC_EPROTO };
		rc = 0;
		break;
	case KVI_CTRL_SEG_GRANT:
	case KVI_CTRL_ERROR:
	case KVI_CTRL_SHUTDOWN:
	case KVI_CTRL_STATS:
	case KVI_CTRL_SEG_RETURNED:
	case KVI_CTRL_LEASE:
	case KVI_CTRL_LOCK_REPORTED:
	case KVI_CTRL_INDEX:
	case KVI_CTRL_GROWING:
		kvi_ev_warn("ctrl_refused", "client=%u type=%u reason=%s", client_id, req->type, "only the server sends this type");
		rc = KVC_EPROTO;
		break;
	default:
		kvi_ev_warn("ctrl_refused", "client=%u type=%u reason=%s", client_id, req->type, "unknown type");
		rc = KVC_EPROTO;
		break;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* What client_id holds, alone (host 0) or with its host's other clients. */
static uint64_t held_of(struct kvs_core *c, uint32_t client_id, int host)
{
	struct kvs_client *cl;
	uint64_t held;

	pthread_mutex_lock(&c->mu);
	cl = *client_slot(c, client_id);
	held = !cl ? 0 : host ? quota_held(cl) : cl->held;
	pthread_mutex_unlock(&c->mu);
	return held;
}

uint64_t kvs_core_client_held(struct kvs_core *c, uint32_t client_id)
{
	return held_of(c, client_id, 0);
}

int kvs_core_client_host(struct kvs_core *c, uint32_t client_id, const char *host)
{
	struct kvs_client *cl;
	struct kvs_host **hp;
	uint64_t key = 0xcbf29ce484222325ull; /* FNV-1a: the table is per server, its keys are no secret */
	int rc = 0;

	if (!host || !*host || strcmp(host, "?") == 0)
		return 0; /* no address: the client alone */
	for (const char *p = host; *p; p++)
		key = (key ^ (unsigned char)*p) * 0x100000001b3ull;
	pthread_mutex_lock(&c->mu);
	cl = client_get(c, client_id);
	if (!cl) {
		rc = KVC_ENOMEM;
		goto out;
	}
	if (cl->host) {
		if (cl->host->key == key)
			goto out;
		host_drop(c, cl);
	}
	hp = host_slot(c, key);
	if (!*hp) {
		*hp = calloc(1, sizeof(**hp));
		if (!*hp) {
			rc = KVC_ENOMEM;
			goto out;
		}
		(*hp)->key = key;
	}
	cl->host = *hp;
	cl->host->nclients++;
	cl->host->held += cl->held;
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

uint64_t kvs_core_host_held(struct kvs_core *c, uint32_t client_id)
{
	return held_of(c, client_id, 1);
}

void kvs_core_client_left(struct kvs_core *c, uint32_t client_id)
{
	struct kvs_client **pp, *cl;

	pthread_mutex_lock(&c->mu);
	pp = client_slot(c, client_id);
	cl = *pp;
	if (cl) {
		/* Whatever it used is unknown: keep the whole extent. */
		kvs_segtab_release(c->segs, &cl->x, cl->x.len, kvi_mono_ns());
		*pp = cl->next;
		host_drop(c, cl);
		if (cl->counted)
			c->nclients--;
		free(cl);
		c->full_at = 0;
		poke(c);
	}
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_reclaim_wanted(struct kvs_core *c)
{
	int w;

	pthread_mutex_lock(&c->mu);
	w = wanted(c);
	pthread_mutex_unlock(&c->mu);
	return w;
}

int kvs_core_reclaim_begin(struct kvs_core *c, uint64_t *off, uint64_t *len)
{
	int rc;

	pthread_mutex_lock(&c->mu);
	rc = kvs_segtab_reclaim_begin(c->segs, kvi_mono_ns(), off, len);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static void add_stats(struct kvs_reclaim_stats *a, const struct kvs_reclaim_stats *b)
{
	const uint64_t *src = (const uint64_t *)b;
	uint64_t *dst = (uint64_t *)a;

	_Static_assert(sizeof(*a) % sizeof(uint64_t) == 0, "reclaim stats are counters");
	for (size_t i = 0; i < sizeof(*a) / sizeof(uint64_t); i++)
		dst[i] += src[i];
}

void kvs_core_reclaim_end(struct kvs_core *c, uint64_t off, int done, int rotate, const struct kvs_reclaim_stats *st)
{
	pthread_mutex_lock(&c->mu);
	kvs_segtab_reclaim_end(c->segs, off, done, rotate, kvi_mono_ns());
	if (st)
		add_stats(&c->rc, st);
	pthread_mutex_unlock(&c->mu);
}

void kvs_core_add_fence(struct kvs_core *c, uint64_t fencings, uint64_t released, uint64_t cpu_ns)
{
	pthread_mutex_lock(&c->mu);
	c->fencings += fencings;
	c->fence_released += released;
	c->fence_cpu_ns += cpu_ns;
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_server_extent(struct kvs_core *c, struct kvs_extent *x, uint64_t used)
{
	int rc;

	pthread_mutex_lock(&c->mu);
	kvs_segtab_tick(c->segs, kvi_mono_ns());
	rc = kvs_segtab_grant(c->segs, x, c->geo.segment_size, used, KVS_GRANT_SERVER, kvi_mono_ns());
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void kvs_core_server_release(struct kvs_core *c, struct kvs_extent *x, uint64_t used)
{
	pthread_mutex_lock(&c->mu);
	kvs_segtab_release(c->segs, x, used, kvi_mono_ns());
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_tick(struct kvs_core *c, int max_ms)
{
	uint64_t now = kvi_mono_ns(), due;

	pthread_mutex_lock(&c->mu);
	kvs_segtab_tick(c->segs, now);
	/* A settling segment matters only when memory is wanted: an idle
	 * server sleeps until a quarantine ends. */
	due = kvs_segtab_next_due(c->segs, now, wanted(c));
	pthread_mutex_unlock(&c->mu);
	return kvi_ms_until(0, due, max_ms); /* due: ns from now */
}

void kvs_core_attach_reclaimer(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->has_reclaimer = 1;
	pthread_mutex_unlock(&c->mu);
}

int kvs_core_no_evict(const struct kvs_core *c)
{
	return c->o.no_evict;
}

void kvs_core_limits(const struct kvs_core *c, uint32_t *max_op_ms, uint32_t *quarantine_ms, uint16_t *flags)
{
	*max_op_ms = c->o.max_op_ms;
	*quarantine_ms = c->o.quarantine_ms;
	*flags = c->o.no_evict ? KVI_WELCOME_NO_EVICT : 0;
}

void kvs_core_set_full(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->full_at = kvi_mono_ns();
	pthread_mutex_unlock(&c->mu);
}

uint8_t *kvs_core_region(const struct kvs_core *c)
{
	return c->base;
}

const struct kvi_geometry *kvs_core_geometry(const struct kvs_core *c)
{
	return &c->geo;
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
	if (n > from_pool && cnt.free < (uint64_t)(n - from_pool) + reserve_of(c)) {
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
		 * (wanted()), unless eviction is off and nothing would come. */
		c->resize_need = n;
		if (c->o.no_evict && !can_grow(c))
			rc = KVC_ENOMEM;
		else if (c->o.wake && wanted(c))
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

uint32_t kvs_core_exec_ms(const struct kvs_core *c)
{
	return c->o.exec_ms;
}

uint32_t kvs_core_quarantine_ms(const struct kvs_core *c)
{
	return c->o.quarantine_ms;
}

static void kvs_core_stats_locked(struct kvs_core *c, struct kvs_core_stats *out)
{
	struct kvs_segtab_counts n;

	kvs_segtab_counts(c->segs, &n);
	*out = (struct kvs_core_stats){
		.segments_total = c->nsegs,
		.segments_granted = n.open + n.sealed + n.reclaiming,
		.segments_free = n.free,
		.segments_open = n.open,
		.segments_sealed = n.sealed + n.reclaiming,
		.segments_quarantined = n.quarantined,
		.heap_bytes = c->geo.heap_size,
		.index_bytes = (c->ix.cur.bucket_count + c->ix.prev.bucket_count) * KVI_BUCKET_SIZE,
		.segments_index = n.index,
		.carved_bytes = n.carved_bytes,
		.grants = n.grants,
		.grants_deferred = n.grants_deferred + c->throttled,
		.grants_refused = c->grants_refused,
		.grants_over_quota = c->over_quota,
		.grants_throttled = c->throttled,
		.quota_bytes = c->quota,
		.tails_returned = n.tails_returned,
		.clients = c->nclients,
		.rc = c->rc,
		.fencings = c->fencings,
		.fence_released = c->fence_released,
		.fence_cpu_ns = c->fence_cpu_ns,
		.resizes = c->ix.resizes,
		.index_buckets = c->ix.cur.bucket_count,
		.index_epoch = c->ix.cur.epoch,
	};
}

void kvs_core_stats(struct kvs_core *c, struct kvs_core_stats *out)
{
	pthread_mutex_lock(&c->mu);
	kvs_core_stats_locked(c, out);
	pthread_mutex_unlock(&c->mu);
}

void kvs_core_summary(struct kvs_core *c, char *buf, size_t len)
{
	struct kvs_core_stats st;

	kvs_core_stats(c, &st);
	snprintf(buf, len, "segments_open=%" PRIu64 " segments_sealed=%" PRIu64 " segments_quarantined=%" PRIu64
		 " segments_free=%" PRIu64 " segments=%" PRIu64 " segment_kib=%" PRIu64 " reclaimed=%" PRIu64
		 " evictions=%" PRIu64,
		 st.segments_open, st.segments_sealed, st.segments_quarantined, st.segments_free, c->nsegs,
		 c->geo.segment_size >> 10, st.rc.segments, st.rc.evictions);
}

const struct kvs_heap *kvs_core_heap(const struct kvs_core *c)
{
	return c->heap;
}
