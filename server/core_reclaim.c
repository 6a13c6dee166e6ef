/* The core's side of reclamation: when it is wanted (the watermarks, and
 * the room a waiting resize needs), and what the reclaimer thread asks of the
 * core -- a sealed segment to reclaim, an extent to copy live objects into,
 * the quarantine's clock. */
#include "core_impl.h"

#include "clock.h"

#define RATE_WINDOW_NS 100000000ull

/* No-evict: the reclaimer's verdict "live data fills the heap" holds for
 * FULL_HOLD_NS; then a grant that finds no room asks it to look again
 * (deletes and expiry make garbage without telling the server). */
#define FULL_HOLD_NS 200000000ull

int kvs_core_full_locked(const struct kvs_core *c)
{
	return c->full_at && kvi_mono_ns() - c->full_at < FULL_HOLD_NS;
}

/* Is reclamation wanted? Hysteresis between the watermarks, counting
 * quarantined segments as (soon) free. Caller holds the lock. */
int kvs_core_wanted_locked(struct kvs_core *c)
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
	    n.free + n.quarantined + c->npool < c->resize_need + kvs_core_reserve(c))
		return !kvs_core_full_locked(c);
	return c->reclaiming && !kvs_core_full_locked(c);
}

void kvs_core_poke_locked(struct kvs_core *c)
{
	if (kvs_core_wanted_locked(c) && c->o.wake)
		c->o.wake(c->o.wake_arg);
}

int kvs_core_reclaim_wanted(struct kvs_core *c)
{
	int w;

	pthread_mutex_lock(&c->mu);
	w = kvs_core_wanted_locked(c);
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
	due = kvs_segtab_next_due(c->segs, now, kvs_core_wanted_locked(c));
	pthread_mutex_unlock(&c->mu);
	return kvi_ms_until(0, due, max_ms); /* due: ns from now */
}

void kvs_core_attach_reclaimer(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->has_reclaimer = 1;
	pthread_mutex_unlock(&c->mu);
}

void kvs_core_set_full(struct kvs_core *c)
{
	pthread_mutex_lock(&c->mu);
	c->full_at = kvi_mono_ns();
	pthread_mutex_unlock(&c->mu);
}
