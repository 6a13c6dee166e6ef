#include "migrate.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "hash.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "lockwatch.h"
#include "log.h"

#define MIG_BATCH 5u     /* old buckets per doorbell: 3 CAS each at the end, <= 16 ops */
#define MIG_SLICE 4096u  /* old buckets looked at per kvs_migrate_run */
#define MIG_RDMA_MS 5000 /* one loopback doorbell; past it the loopback is broken */
#define BACKOFF_MIN_US 100u
#define BACKOFF_MAX_US 10000u
#define ROOM_RETRY_MS 10
#define RETIRE_RETRY_MS 10

enum phase {
	P_IDLE,
	P_ROOM,        /* a resize is wanted: waiting for its chunks */
	P_MIGRATING,
	P_RETIRE_WAIT, /* STABLE, old index still published until every member acknowledged */
};

/* Results of one batch's doorbells, in the connection's local buffer. */
struct work {
	uint64_t lock[MIG_BATCH];
	uint64_t fin[3 * MIG_BATCH];
};
_Static_assert(sizeof(struct work) <= KVS_MIGRATE_LBUF, "migrator work area");

struct kvs_migrator {
	struct kvs_core *core;
	struct kvs_migrate_opts o;
	struct kvi_geometry geo;
	uint8_t *base;
	enum phase phase;
	struct kvi_index old, nw; /* chunk_off: old_chunks, new_chunks */
	uint64_t *old_chunks, *new_chunks;
	/* Unpublished indexes waiting for their memory to be reused (at, and
	 * an idle fencer): the next resize need not wait for them. While the
	 * index doubles quickly (a small one filling), each waits its whole
	 * quarantine, so several may; together they are smaller than the
	 * current index (each half the next). */
	struct retired {
		struct kvi_index ix; /* chunk_off: chunks; epoch 0: slot free */
		uint64_t *chunks;
		uint64_t at;
	} ret[KVS_MIGRATE_RETIRED_MAX];
	uint32_t cap;
	uint8_t *done;  /* bitmap over old buckets */
	uint64_t left, cursor;
	uint64_t pass_progress, pass_dropped, pass_held;
	uint64_t t_start, t_end, cpu_start, dropped_at_start, urgent_at_start;
	uint64_t backoff_until;
	unsigned backoff_us;
	uint64_t next_sample, rng, load_warned_epoch;
	/* The last KVS_MIGRATE_SAMPLE_WINDOW samples' used slots, of index
	 * win_epoch: the trigger judges their sum, not one sample's noise. */
	uint64_t win[KVS_MIGRATE_SAMPLE_WINDOW], win_epoch;
	unsigned win_n, win_at;
	uint64_t last_used, last_at; /* the previous sample (of win_epoch): used slots, when */
	double rise;                 /* the load's rise between the last two samples: fraction of the index per ms */
	uint8_t *obj; /* private copy of one object (KVI_MAX_OBJECT bytes) */
	struct kvs_lockwatch lw; /* old buckets we keep finding held (lockwatch.h) */
	struct kvs_migrate_stats st;
	int hold; /* kvs_migrate_hold: a flush walks the published indexes */
};

int kvs_migrate_create(struct kvs_core *core, const struct kvs_migrate_opts *o, struct kvs_migrator **out)
{
	struct kvs_migrator *m = calloc(1, sizeof(*m));
	int fail;

	*out = NULL;
	if (!m)
		return KVC_ENOMEM;
	m->core = core;
	if (o)
		m->o = *o;
	m->geo = *kvs_core_geometry(core);
	m->base = kvs_core_region(core);
	m->cap = kvs_core_max_chunks(core);
	m->old_chunks = calloc(m->cap, sizeof(uint64_t));
	m->new_chunks = calloc(m->cap, sizeof(uint64_t));
	m->obj = malloc(KVI_MAX_OBJECT);
	fail = !m->old_chunks || !m->new_chunks || !m->obj;
	for (unsigned i = 0; i < KVS_MIGRATE_RETIRED_MAX; i++)
		fail |= !(m->ret[i].chunks = calloc(m->cap, sizeof(uint64_t)));
	if (fail) {
		kvs_migrate_destroy(m);
		return KVC_ENOMEM;
	}
	m->rng = m->geo.hash_seed ^ 0x9e3779b97f4a7c15ull;
	kvs_core_attach_migrator(core);
	*out = m;
	return 0;
}

void kvs_migrate_destroy(struct kvs_migrator *m)
{
	if (!m)
		return;
	free(m->old_chunks);
	free(m->new_chunks);
	for (unsigned i = 0; i < KVS_MIGRATE_RETIRED_MAX; i++)
		free(m->ret[i].chunks);
	free(m->done);
	free(m->obj);
	free(m);
}

static uint64_t next_rand(struct kvs_migrator *m)
{
	/* xorshift64: sampling needs spread, not secrecy. */
	m->rng ^= m->rng << 13;
	m->rng ^= m->rng >> 7;
	m->rng ^= m->rng << 17;
	return m->rng;
}

/* Stores before it are in memory before anything that follows: the NIC's
 * reads of the doorbell we post next, other threads' reads after the core's
 * mutex. Posting a work request orders them anyway (libibverbs' barriers
 * before the doorbell), so a TSan build, which cannot model a fence (gcc
 * -Wtsan), leaves it out. */
static inline void store_fence(void)
{
#ifndef __SANITIZE_THREAD__
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static struct kvi_bucket *bucket(const struct kvs_migrator *m, const struct kvi_index *x, uint64_t i)
{
	return (struct kvi_bucket *)(m->base + kvi_index_bucket_off(x, i));
}

/* When to sample next, after a sample of `used` of `total` slots (of `n`
 * buckets): by then the load must not have gone from here past the line.
 * Within 1 point of it, or over it: KVS_MIGRATE_SAMPLE_MS. Else the time
 * the rise between the last two samples (at least half a point a second: a
 * load seen flat may start rising) needs for a quarter of the way to the
 * line less 1 point, and at most 50 ms per point left: an index near the
 * line that suddenly fills is seen within a few tens of ms, one far from it
 * within a second. After a resize the rise is the old index's, halved (as
 * many inserts fill twice the slots). Noise: two samples' loads differ by
 * ~0.6 point, so samples 10 ms apart see a steep "rise" and the next comes
 * soon; each one later makes the rise flatter, and an index that is not
 * filling settles to one sample per KVS_MIGRATE_SAMPLE_MAX_MS within a few
 * -- or per 4 ms of each bucket read, when a small index is read whole: it
 * fills sooner, and reading it costs less. */
static uint64_t sample_ms(const struct kvs_migrator *m, uint64_t used, uint64_t total, uint64_t n)
{
	uint64_t line = (uint64_t)m->o.load_pct * total / 100, point = total / 100, gap, ms, most, per_point;
	double rise = 0.005 / 1000.0; /* half a point a second, as a fraction of the index per ms */

	if (used + point >= line)
		return KVS_MIGRATE_SAMPLE_MS;
	gap = line - point - used;
	if (m->rise > rise)
		rise = m->rise;
	ms = (uint64_t)((double)gap / (double)total / 4.0 / rise);
	per_point = 50 * (gap / (point ? point : 1) + 1);
	most = 4 * n < KVS_MIGRATE_SAMPLE_MAX_MS ? 4 * n : KVS_MIGRATE_SAMPLE_MAX_MS;
	if (ms > per_point)
		ms = per_point;
	if (ms > most)
		ms = most;
	return ms < KVS_MIGRATE_SAMPLE_MS ? KVS_MIGRATE_SAMPLE_MS : ms;
}

/* The load trigger: CPU reads of a few random buckets, never of the index
 * (an index of at most KVS_MIGRATE_SAMPLE_BUCKETS is read whole: exactly).
 * Returns the ms to wait before the next sample. */
static uint64_t sample(struct kvs_migrator *m, uint64_t now)
{
	uint64_t used = 0, total, n, epoch, ms;
	enum kvi_index_state state;
	int whole;

	/* The chunk table is copied only when the index changed. */
	kvs_core_index_status(m->core, &epoch, &state);
	if (epoch != m->old.epoch && kvs_core_index(m->core, 0, &m->old, m->old_chunks, m->cap))
		return KVS_MIGRATE_SAMPLE_MS;
	whole = m->old.bucket_count <= KVS_MIGRATE_SAMPLE_BUCKETS;
	n = whole ? m->old.bucket_count : KVS_MIGRATE_SAMPLE_BUCKETS;
	total = n * KVI_SLOTS_PER_BUCKET;
	for (uint64_t k = 0; k < n; k++) {
		const struct kvi_bucket *b = bucket(m, &m->old, whole ? k : next_rand(m) % m->old.bucket_count);

		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			used += __atomic_load_n(&b->slot[i], __ATOMIC_RELAXED) != 0;
	}
	m->st.samples++;
	/* A window of samples: the first single sample to cross the line
	 * out of hundreds is noise a percent or two above the true load. */
	if (m->win_epoch != m->old.epoch) {
		m->win_n = m->win_at = 0;
		m->rise /= 2; /* as many inserts fill twice the slots */
	} else if (now > m->last_at) {
		m->rise = used > m->last_used
			  ? (double)(used - m->last_used) / (double)total / ((double)(now - m->last_at) / 1e6)
			  : 0;
	}
	m->win_epoch = m->old.epoch;
	ms = sample_ms(m, used, total, n);
	m->last_used = used;
	m->last_at = now;
	m->win[m->win_at] = used;
	m->win_at = (m->win_at + 1) % KVS_MIGRATE_SAMPLE_WINDOW;
	if (m->win_n < KVS_MIGRATE_SAMPLE_WINDOW)
		m->win_n++;
	used = 0;
	for (unsigned k = 0; k < m->win_n; k++)
		used += m->win[k];
	total *= m->win_n;
	if (m->win_n < KVS_MIGRATE_SAMPLE_WINDOW || used * 100 <= (uint64_t)m->o.load_pct * total)
		return ms;
	if (kvs_core_grow(m->core, m->old.epoch) == KVI_GROW_NO) {
		if (m->load_warned_epoch != m->old.epoch)
			kvi_ev_warn("resize_blocked", "epoch=%" PRIu64 " load_pct=%" PRIu64 " buckets_wanted=%" PRIu64
				    " msg=%s", m->old.epoch, used * 100 / total, 2 * m->old.bucket_count,
				    "the index cannot grow: not enough memory");
		m->load_warned_epoch = m->old.epoch;
		/* Memory comes free slowly; an insert that finds its pair
		 * full still asks at once. */
		return KVS_MIGRATE_SAMPLE_MAX_MS;
	}
	kvi_ev_info("resize_wanted", "epoch=%" PRIu64 " load_pct=%" PRIu64, m->old.epoch, used * 100 / total);
	return ms;
}

/* Memory is there: build the new index and publish it. 0, or a code (the
 * chunks went back; the resize is dropped). */
static int start(struct kvs_migrator *m)
{
	uint64_t n2 = 2 * m->old.bucket_count, bytes = n2 * KVI_BUCKET_SIZE;
	const char *why;

	m->nw = (struct kvi_index){ .epoch = m->old.epoch + 1, .bucket_count = n2,
				    .chunk_shift = m->old.chunk_shift,
				    .nchunks = kvi_index_nchunks(n2, m->old.chunk_shift), .chunk_off = m->new_chunks };
	if ((why = kvi_index_check(&m->nw, &m->geo))) {
		kvi_ev_err("resize_failed", "reason=%s msg=%s", why, "the new index is unusable: dropped");
		return KVC_EINVAL;
	}
	free(m->done);
	m->done = calloc((m->old.bucket_count + 7) / 8, 1);
	if (!m->done) {
		kvi_ev_err("resize_failed", "buckets=%" PRIu64 " reason=%s", m->old.bucket_count,
			   "out of memory for the progress bitmap: dropped");
		return KVC_ENOMEM;
	}
	/* Nobody knows these chunks yet: the CPU writes them. Every lock word
	 * UNMIGRATED before the index is published (layout.h "Resize"). */
	for (uint32_t k = 0; k < m->nw.nchunks; k++) {
		uint64_t len = bytes - (uint64_t)k * m->geo.segment_size;

		memset(m->base + m->nw.chunk_off[k], 0, len < m->geo.segment_size ? len : m->geo.segment_size);
	}
	for (uint64_t i = 0; i < n2; i++)
		__atomic_store_n(&bucket(m, &m->nw, i)->lock, KVI_LOCK_UNMIGRATED, __ATOMIC_RELAXED);
	store_fence();
	if (kvs_core_set_indexes(m->core, &m->nw, &m->old, KVI_INDEX_MIGRATING)) {
		kvi_ev_err("resize_failed", "reason=%s", "out of memory to publish the new index: dropped");
		return KVC_ENOMEM;
	}
	m->left = m->old.bucket_count;
	m->cursor = 0;
	m->pass_progress = m->pass_dropped = m->pass_held = 0;
	m->backoff_us = BACKOFF_MIN_US;
	m->backoff_until = 0;
	m->t_start = kvi_mono_ns();
	m->cpu_start = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	m->dropped_at_start = m->st.dropped;
	m->urgent_at_start = m->st.urgent;
	kvi_ev_info("resize_begin", "from_epoch=%" PRIu64 " epoch=%" PRIu64 " from_buckets=%" PRIu64 " buckets=%" PRIu64
		    " chunks=%u", m->old.epoch, m->nw.epoch, m->old.bucket_count, n2, m->nw.nchunks);
	return 0;
}

/* Is slot (found in old bucket b) a verified object whose key has a choice
 * in b? Then *which is 0 for new bucket b, 1 for b + N. */
static int slot_ok(struct kvs_migrator *m, uint64_t slot, uint64_t b, int *which)
{
	const struct kvi_obj_hdr *h = (const void *)m->obj;
	uint64_t len = kvi_slot_read_len(slot), off = kvi_slot_obj_off(slot), n = m->old.bucket_count;
	struct kvi_keyhash kh;
	unsigned j;

	if (!kvi_slot_in_heap(&m->geo, slot) || len < sizeof(*h) || len > KVI_MAX_OBJECT ||
	    off + len > m->geo.region_size)
		return 0;
	/* A private copy: a writer that ignores the protocol may change the
	 * bytes meanwhile, and what was verified must be what is hashed. */
	memcpy(m->obj, m->base + off, len);
	if (kvi_obj_verify(m->obj, len) || h->version != KVI_LAYOUT_VERSION || h->key_len == 0 ||
	    h->key_len > KVI_MAX_KEY || kvi_obj_len_of(h) > len)
		return 0;
	kvi_key_hash(m->obj + sizeof(*h), h->key_len, m->geo.hash_seed, n, &kh);
	if (kvi_slot_fp(slot) != (kh.fp & ((1u << KVI_SLOT_FP_BITS) - 1)))
		return 0;
	for (j = 0; j < 2 && kh.b[j] != b; j++)
		;
	if (j == 2)
		return 0;
	kvi_keyhash_place(&kh, 2 * n);
	*which = kh.b[j] != b;
	return 1;
}

/* Step 2 for old bucket b (its lock held by us): its slots to new b and
 * b + N, with the CPU. */
static void copy_bucket(struct kvs_migrator *m, uint64_t b)
{
	const struct kvi_bucket *ob = bucket(m, &m->old, b);
	struct kvi_bucket *nb[2] = { bucket(m, &m->nw, b), bucket(m, &m->nw, b + m->old.bucket_count) };
	uint64_t out[2][KVI_SLOTS_PER_BUCKET] = { { 0 } };
	unsigned cnt[2] = { 0, 0 };

	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
		uint64_t slot = __atomic_load_n(&ob->slot[i], __ATOMIC_ACQUIRE);
		int which;

		if (!slot)
			continue;
		if (!slot_ok(m, slot, b, &which)) {
			m->st.dropped++;
			m->pass_dropped++;
			continue;
		}
		out[which][cnt[which]++] = slot;
		m->st.moved++;
	}
	/* Every slot, also the empty ones: a retried bucket (its first copy's
	 * doorbell never came) is rebuilt, not appended to. */
	for (unsigned w = 0; w < 2; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			__atomic_store_n(&nb[w]->slot[i], out[w][i], __ATOMIC_RELAXED);
}

static void mark_done(struct kvs_migrator *m, uint64_t b)
{
	m->done[b / 8] |= (uint8_t)(1u << (b % 8));
	m->left--;
	m->pass_progress++;
}

static int is_done(const struct kvs_migrator *m, uint64_t b)
{
	return m->done[b / 8] >> (b % 8) & 1;
}

/* Steps 1 to 3 for up to MIG_BATCH old buckets. 0 or a transport code. */
static int do_batch(struct kvs_migrator *m, struct kvi_rmem *rm, struct work *w, const uint64_t *bk, unsigned nb)
{
	uint64_t me = kvi_lock_held_by(rm->client_id), n = m->old.bucket_count;
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH] = { { 0 } };
	unsigned nops = 0;
	int rc;

	for (unsigned i = 0; i < nb; i++)
		ops[i] = kvi_rop_cas(kvi_index_bucket_off(&m->old, bk[i]), &w->lock[i], 0, me);
	rc = kvi_rmem_exec(rm, ops, nb, MIG_RDMA_MS);
	if (rc)
		return rc;
	/* An old bucket not migrated yet is free or held by a writer: anything
	 * else in its lock word is junk (a stray WRITE), which would keep the
	 * resize from ever finishing. It must be 0: repaired here (the fin
	 * words are free for these buckets this pass), taken next pass. */
	for (unsigned i = 0; i < nb; i++) {
		if (kvi_lock_legal(w->lock[i]))
			continue;
		kvi_ev_warn("resize_lock_repaired", "bucket=%" PRIu64 " word=%#" PRIx64 " msg=%s", bk[i], w->lock[i],
			    "junk in an old bucket's lock word: repaired");
		ops[nops++] = kvi_rop_cas(kvi_index_bucket_off(&m->old, bk[i]), &w->fin[3 * i], w->lock[i], 0);
		m->st.repaired++;
	}
	if (nops && (rc = kvi_rmem_exec(rm, ops, nops, MIG_RDMA_MS)))
		return rc;
	nops = 0;
	for (unsigned i = 0; i < nb; i++) {
		if (w->lock[i] == 0)
			copy_bucket(m, bk[i]);
	}
	/* The new slots are in memory before the NIC unlocks the new buckets. */
	store_fence();
	for (unsigned i = 0; i < nb; i++) {
		uint64_t o = kvi_index_bucket_off(&m->old, bk[i]);

		if (w->lock[i] != 0 && w->lock[i] != KVI_LOCK_MOVED)
			continue; /* held: next pass */
		if (w->lock[i] == 0)
			ops[nops++] = kvi_rop_cas(o, &w->fin[3 * i], me, KVI_LOCK_MOVED);
		ops[nops++] = kvi_rop_cas(kvi_index_bucket_off(&m->nw, bk[i]), &w->fin[3 * i + 1], KVI_LOCK_UNMIGRATED, 0);
		ops[nops++] = kvi_rop_cas(kvi_index_bucket_off(&m->nw, bk[i] + n), &w->fin[3 * i + 2],
					  KVI_LOCK_UNMIGRATED, 0);
	}
	if (nops && (rc = kvi_rmem_exec(rm, ops, nops, MIG_RDMA_MS)))
		return rc;
	for (unsigned i = 0; i < nb; i++) {
		if (w->lock[i] != 0 && w->lock[i] != KVI_LOCK_MOVED) {
			m->st.held++;
			m->pass_held++;
			kvs_lockwatch_seen(&m->lw, rm, bk[i], m->old.epoch, w->lock[i], kvi_mono_ns());
			continue;
		}
		kvs_lockwatch_forget(&m->lw, bk[i], m->old.epoch);
		/* Only a writer that ignores the protocol can change words we
		 * hold or UNMIGRATED ones; our writes landed: say so, go on. */
		if (w->lock[i] == 0 && (w->fin[3 * i] != me || w->fin[3 * i + 1] != KVI_LOCK_UNMIGRATED ||
					w->fin[3 * i + 2] != KVI_LOCK_UNMIGRATED))
			kvi_ev_err("resize_lock_lost", "bucket=%" PRIu64 " words=%#" PRIx64 ",%#" PRIx64 ",%#" PRIx64
				   " msg=%s", bk[i], w->fin[3 * i], w->fin[3 * i + 1], w->fin[3 * i + 2],
				   "lock words changed while the migrator held them");
		mark_done(m, bk[i]);
	}
	return 0;
}

static void finish(struct kvs_migrator *m)
{
	uint64_t ms = (kvi_mono_ns() - m->t_start) / 1000000u, cpu = (kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - m->cpu_start) / 1000000u;

	if (kvs_core_set_indexes(m->core, &m->nw, &m->old, KVI_INDEX_STABLE)) {
		m->backoff_until = kvi_mono_ns() + 1000000u; /* out of memory: try again shortly */
		return;
	}
	m->st.resizes++;
	m->t_end = kvi_mono_ns();
	m->phase = P_RETIRE_WAIT;
	kvi_ev_info("resize_end", "epoch=%" PRIu64 " buckets=%" PRIu64 " wall_ms=%" PRIu64 " cpu_ms=%" PRIu64
		    " passes=%" PRIu64 " garbage_dropped=%" PRIu64 " urgent_splits=%" PRIu64,
		 m->nw.epoch, m->nw.bucket_count, ms, cpu, m->st.passes, m->st.dropped - m->dropped_at_start,
		 m->st.urgent - m->urgent_at_start);
}

/* One slice of step 3: 0 or a transport code. */
static int migrate_slice(struct kvs_migrator *m, struct kvi_rmem *rm, struct work *w)
{
	uint64_t n = m->old.bucket_count, looked = 0, bk[MIG_BATCH];
	int rc;

	/* Buckets inserts are waiting for first (core.h kvs_core_urgent_take). */
	for (unsigned nu; m->left && (nu = kvs_core_urgent_take(m->core, bk, MIG_BATCH)) > 0;) {
		unsigned nb = 0;

		for (unsigned i = 0; i < nu; i++) {
			int dup = 0;

			for (unsigned j = 0; j < nb; j++)
				dup |= bk[j] == bk[i];
			if (bk[i] < n && !is_done(m, bk[i]) && !dup)
				bk[nb++] = bk[i];
		}
		if (nb && (rc = do_batch(m, rm, w, bk, nb)))
			return rc;
		m->st.urgent += nb;
	}
	while (m->left && looked < MIG_SLICE) {
		unsigned nb = 0;

		while (nb < MIG_BATCH && m->cursor < n && looked < MIG_SLICE) {
			if (!is_done(m, m->cursor))
				bk[nb++] = m->cursor;
			m->cursor++;
			looked++;
		}
		if (nb && (rc = do_batch(m, rm, w, bk, nb)))
			return rc;
		if (m->cursor == n) { /* end of a pass */
			m->st.passes++;
			if (m->pass_dropped)
				kvi_ev_warn("resize_slots_dropped", "slots=%" PRIu64 " msg=%s", m->pass_dropped,
					    "slots naming no valid object of their bucket were dropped in this pass");
			if (m->left && !m->pass_progress) {
				/* Only held buckets left: their writers finish within a
				 * deadline or are fenced. Wait a little. */
				m->backoff_until = kvi_mono_ns() + (uint64_t)m->backoff_us * 1000u;
				m->backoff_us = m->backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : m->backoff_us * 2;
			} else {
				m->backoff_us = BACKOFF_MIN_US;
			}
			m->cursor = 0;
			m->pass_progress = m->pass_dropped = m->pass_held = 0;
			break;
		}
	}
	return 0;
}

/* A free retired slot, or NULL when every one still waits. */
static struct retired *retired_slot(struct kvs_migrator *m)
{
	for (unsigned i = 0; i < KVS_MIGRATE_RETIRED_MAX; i++)
		if (!m->ret[i].ix.epoch)
			return &m->ret[i];
	return NULL;
}

/* Retirement (migrate.h "Retiring"), first half: once every member uses the
 * new epoch, unpublish the old index and keep it aside until no operation
 * that began on it can still run. Returns the verdict. */
static int retire(struct kvs_migrator *m)
{
	uint64_t ack_at = 0, since, q = (uint64_t)kvs_core_quarantine_ms(m->core) * 1000000u;
	struct retired *r = retired_slot(m);
	uint64_t *swap;

	if (!r || !kvs_core_acked(m->core, m->nw.epoch, &ack_at))
		return KVS_MIGRATE_RETIRING; /* (every slot waits: the oldest goes first) */
	if (kvs_core_set_indexes(m->core, &m->nw, NULL, KVI_INDEX_STABLE))
		return KVS_MIGRATE_RETIRING;
	since = ack_at > m->t_end ? ack_at : m->t_end;
	swap = r->chunks;
	r->ix = m->old;
	r->chunks = m->old_chunks;
	m->old_chunks = swap;
	m->old = (struct kvi_index){ .chunk_off = m->old_chunks };
	r->at = since + q;
	m->phase = P_IDLE;
	kvi_ev_info("index_unpublished", "epoch=%" PRIu64 " clients_on_epoch=%" PRIu64, r->ix.epoch, m->nw.epoch);
	/* Last: a resize asked for meanwhile may begin at once (core.h). */
	kvs_core_resize_done(m->core);
	return KVS_MIGRATE_IDLE;
}

/* Second half: an index's memory is reused once quarantine_ms passed since
 * the later of its migration's end and the last acknowledgement, and the
 * fence thread is idle (a pass that began before may still scan it; one that
 * begins after does not see it). */
static void free_retired(struct kvs_migrator *m, uint64_t now)
{
	int idle = -1; /* the fence thread's, asked once, when an index is due */

	for (unsigned i = 0; i < KVS_MIGRATE_RETIRED_MAX; i++) {
		struct retired *r = &m->ret[i];

		if (!r->ix.epoch || now < r->at)
			continue;
		if (idle < 0)
			idle = !m->o.fence_idle || m->o.fence_idle(m->o.fence_arg);
		if (!idle)
			return;
		for (uint32_t k = 0; k < r->ix.nchunks; k++) {
			uint64_t len = r->ix.bucket_count * KVI_BUCKET_SIZE - (uint64_t)k * m->geo.segment_size;

			memset(m->base + r->ix.chunk_off[k], 0, len < m->geo.segment_size ? len : m->geo.segment_size);
		}
		kvs_core_chunks_return(m->core, r->ix.chunk_off, r->ix.nchunks);
		m->st.retired++;
		kvi_ev_info("index_retired", "epoch=%" PRIu64 " chunks=%u", r->ix.epoch, r->ix.nchunks);
		r->ix.epoch = 0;
	}
}

int kvs_migrate_run(struct kvs_migrator *m, struct kvi_rmem *rm, void *work, uint64_t work_len)
{
	uint64_t now = kvi_mono_ns();
	int rc;

	if (work_len < sizeof(struct work))
		return KVC_EINVAL;
	free_retired(m, now); /* indexes no longer published: no walk has them */
	/* Held (a flush walks the published indexes): a migration goes on, but
	 * no index is published or unpublished. */
	if (m->hold && m->phase != P_MIGRATING)
		return m->phase == P_ROOM ? KVS_MIGRATE_ROOM
		       : m->phase == P_RETIRE_WAIT ? KVS_MIGRATE_RETIRING : KVS_MIGRATE_IDLE;
	switch (m->phase) {
	case P_IDLE:
		if (kvs_core_resize_phase(m->core) != KVS_RESIZE_WANTED) {
			if (m->o.load_pct && now >= m->next_sample) {
				m->next_sample = now + sample(m, now) * 1000000ull;
			}
			if (kvs_core_resize_phase(m->core) != KVS_RESIZE_WANTED)
				return KVS_MIGRATE_IDLE;
		}
		if (kvs_core_index(m->core, 0, &m->old, m->old_chunks, m->cap))
			return KVS_MIGRATE_IDLE;
		m->phase = P_ROOM;
		/* fall through */
	case P_ROOM:
		rc = kvs_core_chunks_take(m->core, kvi_index_nchunks(2 * m->old.bucket_count, m->old.chunk_shift),
					  m->new_chunks);
		if (rc == KVC_EAGAIN)
			return KVS_MIGRATE_ROOM;
		if (rc) {
			kvi_ev_warn("resize_dropped", "epoch=%" PRIu64 " buckets_wanted=%" PRIu64 " reason=%s",
				    m->old.epoch, 2 * m->old.bucket_count, "no room and eviction is off");
			m->phase = P_IDLE;
			kvs_core_set_resize_phase(m->core, KVS_RESIZE_IDLE);
			return KVS_MIGRATE_IDLE;
		}
		kvs_core_set_resize_phase(m->core, KVS_RESIZE_RUNNING);
		if (start(m)) {
			kvs_core_chunks_return(m->core, m->new_chunks,
					       kvi_index_nchunks(2 * m->old.bucket_count, m->old.chunk_shift));
			m->phase = P_IDLE;
			kvs_core_set_resize_phase(m->core, KVS_RESIZE_IDLE);
			return KVS_MIGRATE_IDLE;
		}
		m->phase = P_MIGRATING;
		return KVS_MIGRATE_BUSY;
	case P_MIGRATING:
		if (now < m->backoff_until)
			return KVS_MIGRATE_BUSY;
		rc = migrate_slice(m, rm, work);
		if (rc)
			return rc;
		if (!m->left)
			finish(m);
		return m->phase == P_MIGRATING ? KVS_MIGRATE_BUSY : KVS_MIGRATE_RETIRING;
	case P_RETIRE_WAIT:
		return retire(m);
	}
	return KVS_MIGRATE_IDLE;
}

int kvs_migrate_next_ms(const struct kvs_migrator *m, int max_ms)
{
	uint64_t now = kvi_mono_ns();
	int ms;

	switch (m->phase) {
	case P_MIGRATING:
		ms = kvi_ms_until(now, m->backoff_until, max_ms);
		break;
	case P_ROOM:
		ms = ROOM_RETRY_MS;
		break;
	case P_RETIRE_WAIT:
		ms = RETIRE_RETRY_MS;
		break;
	default:
		ms = !m->o.load_pct ? max_ms : kvi_ms_until(now, m->next_sample, max_ms);
		break;
	}
	for (unsigned i = 0; i < KVS_MIGRATE_RETIRED_MAX; i++) {
		int r;

		if (!m->ret[i].ix.epoch)
			continue;
		r = m->ret[i].at > now ? kvi_ms_until(now, m->ret[i].at, max_ms) : RETIRE_RETRY_MS;
		if (r < ms)
			ms = r;
	}
	return ms < max_ms ? ms : max_ms;
}

void kvs_migrate_hold(struct kvs_migrator *m, int hold)
{
	m->hold = hold;
}

uint64_t kvs_migrate_left(const struct kvs_migrator *m)
{
	return m->phase == P_MIGRATING ? m->left : 0;
}

void kvs_migrate_stats(const struct kvs_migrator *m, struct kvs_migrate_stats *out)
{
	*out = m->st;
}
