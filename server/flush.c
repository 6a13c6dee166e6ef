#include "flush.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "lockwatch.h"
#include "log.h"

#define FLUSH_BATCH 8u      /* buckets per doorbell: CAS + READ, then WRITE + CAS each: 16 ops */
#define FLUSH_RDMA_MS 5000  /* one loopback doorbell; past it the loopback is broken */
#define FLUSH_RETRY_MAX 64u /* held buckets kept to try again; a full list is retried first */
#define BACKOFF_MIN_US 100u
#define BACKOFF_MAX_US 10000u

_Static_assert(2 * FLUSH_BATCH <= KVI_RMEM_MAX_BATCH, "a batch is one doorbell");

/* The walk's part of the loopback's local buffer. */
struct work {
	struct kvi_bucket bk[FLUSH_BATCH];
	uint64_t cas[FLUSH_BATCH];
	uint64_t unlock[FLUSH_BATCH];
	uint64_t zero[KVI_SLOTS_PER_BUCKET]; /* what a cleared bucket's slots become */
};
_Static_assert(sizeof(struct work) <= KVS_FLUSH_LBUF, "flush work area");

struct kvs_flusher {
	struct kvs_core *core;
	uint8_t *base;
	uint32_t cap; /* chunks an index may have */
	/* The walk under way: the indexes it took at its start, in walk order
	 * (the previous one first during a migration), and where it is. */
	int active;
	uint64_t ticket;
	struct kvi_index ix[2];
	uint64_t *chunks[2];
	unsigned nix, which;
	uint64_t cursor;
	uint64_t walked, cleared, skipped; /* walked: buckets of the indexes finished */
	uint64_t t_start, cpu_start;
	/* Buckets found held, tried again later. */
	struct retry {
		uint64_t bucket, since;
		unsigned which;
	} retry[FLUSH_RETRY_MAX];
	unsigned nretry;
	uint64_t backoff_until;
	unsigned backoff_us;
	struct kvs_lockwatch lw;
	struct kvs_flush_stats st;
};

int kvs_flush_create(struct kvs_core *core, struct kvs_flusher **out)
{
	struct kvs_flusher *f = calloc(1, sizeof(*f));

	*out = NULL;
	if (!f)
		return KVC_ENOMEM;
	f->core = core;
	f->base = kvs_core_region(core);
	f->cap = kvs_core_max_chunks(core);
	f->chunks[0] = calloc(f->cap, sizeof(uint64_t));
	f->chunks[1] = calloc(f->cap, sizeof(uint64_t));
	if (!f->chunks[0] || !f->chunks[1]) {
		kvs_flush_destroy(f);
		return KVC_ENOMEM;
	}
	kvs_core_attach_flusher(core);
	*out = f;
	return 0;
}

void kvs_flush_destroy(struct kvs_flusher *f)
{
	if (!f)
		return;
	free(f->chunks[0]);
	free(f->chunks[1]);
	free(f);
}

int kvs_flush_active(const struct kvs_flusher *f)
{
	return f->active;
}

void kvs_flush_stats(const struct kvs_flusher *f, struct kvs_flush_stats *out)
{
	*out = f->st;
}

/* Take the published indexes for a new walk: previous (while migrating)
 * first, then current. 0, or 1 when there is no current index (cannot be). */
static int take_indexes(struct kvs_flusher *f)
{
	enum kvi_index_state state;
	uint64_t epoch;

	kvs_core_index_status(f->core, &epoch, &state);
	f->nix = 0;
	if (state == KVI_INDEX_MIGRATING) {
		f->ix[0].chunk_off = f->chunks[0];
		if (kvs_core_index(f->core, 1, &f->ix[0], f->chunks[0], f->cap) == 0)
			f->nix = 1;
	}
	f->ix[f->nix].chunk_off = f->chunks[f->nix];
	if (kvs_core_index(f->core, 0, &f->ix[f->nix], f->chunks[f->nix], f->cap))
		return 1;
	f->nix++;
	return 0;
}

static const struct kvi_bucket *bucket_at(const struct kvs_flusher *f, unsigned which, uint64_t b)
{
	return (const struct kvi_bucket *)(f->base + kvi_index_bucket_off(&f->ix[which], b));
}

/* The CPU's look (a hint): does bucket b need locking? Not when no slot is
 * in use, nor when it is MOVED (an old bucket whose items are in the
 * current index, walked after it; final until the index retires). */
static int needs_lock(const struct kvs_flusher *f, unsigned which, uint64_t b)
{
	const struct kvi_bucket *bk = bucket_at(f, which, b);

	if (__atomic_load_n(&bk->lock, __ATOMIC_RELAXED) == KVI_LOCK_MOVED)
		return 0;
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
		if (__atomic_load_n(&bk->slot[i], __ATOMIC_RELAXED))
			return 1;
	return 0;
}

/* May a junk lock word of this index be repaired here? Only while it is the
 * one index (no resize: its words are then free or held, so junk must be
 * 0), as the reclaimer's rule (reclaim.c repair_junk); old buckets are the
 * migrator's. */
static int may_repair(struct kvs_flusher *f, unsigned which)
{
	enum kvi_index_state state;
	uint64_t epoch;

	kvs_core_index_status(f->core, &epoch, &state);
	return state == KVI_INDEX_STABLE && epoch == f->ix[which].epoch && f->nix == 1;
}

/* Put bucket b back on the retry list (first seen held at `since`), or give
 * it up when it has been held past the patience. */
static void keep_for_retry(struct kvs_flusher *f, struct kvi_rmem *rm, unsigned which, uint64_t b, uint64_t since,
			   uint64_t now)
{
	uint64_t patience = (2ull * rm->max_op_ms + 1000u) * 1000000u;

	if (now - since > patience) {
		f->skipped++;
		f->st.skipped++;
		kvi_ev_warn("flush_bucket_skipped", "bucket=%" PRIu64 " epoch=%" PRIu64 " msg=%s", b, f->ix[which].epoch,
			    "held past every writer's deadline: its items stay");
		kvs_lockwatch_forget(&f->lw, b, f->ix[which].epoch);
		return;
	}
	f->retry[f->nretry++] = (struct retry){ .bucket = b, .since = since, .which = which };
}

/* Lock, read, clear and unlock up to FLUSH_BATCH buckets of index `which`
 * (since[i]: when bucket[i] was first found held, 0: never). Buckets found
 * held go to the retry list, which has room for all of them. Returns the
 * buckets done (cleared, or nothing to do), or a transport code. */
static int do_batch(struct kvs_flusher *f, struct kvi_rmem *rm, struct work *w, unsigned which, const uint64_t *bucket,
		    const uint64_t *since, unsigned nb)
{
	uint64_t me = kvi_lock_held_by(rm->client_id), now;
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH] = { { 0 } };
	unsigned n = 0, done = 0;
	int rc;

	for (unsigned i = 0; i < nb; i++) {
		uint64_t o = kvi_index_bucket_off(&f->ix[which], bucket[i]);

		ops[n++] = kvi_rop_cas(o, &w->cas[i], 0, me);
		ops[n++] = kvi_rop_read(o, &w->bk[i], KVI_BUCKET_SIZE);
	}
	f->st.doorbells++;
	if ((rc = kvi_rmem_exec(rm, ops, n, FLUSH_RDMA_MS)))
		return rc;
	n = 0;
	for (unsigned i = 0; i < nb; i++) {
		uint64_t o = kvi_index_bucket_off(&f->ix[which], bucket[i]);
		unsigned used = 0;

		if (w->cas[i] != 0)
			continue;
		for (unsigned s = 0; s < KVI_SLOTS_PER_BUCKET; s++)
			used += w->bk[i].slot[s] != 0;
		/* Under our lock nobody else writes a slot (I1): clear them all
		 * in one WRITE, before the unlock (RC order). */
		if (used)
			ops[n++] = kvi_rop_write(o + offsetof(struct kvi_bucket, slot), w->zero, sizeof(w->zero));
		ops[n++] = kvi_rop_cas(o, &w->unlock[i], me, 0);
		f->cleared += used;
		f->st.cleared += used;
		f->st.locked++;
	}
	f->st.doorbells += n != 0;
	if (n && (rc = kvi_rmem_exec(rm, ops, n, FLUSH_RDMA_MS)))
		return rc;
	now = kvi_mono_ns();
	n = 0;
	for (unsigned i = 0; i < nb; i++) {
		uint64_t word = w->cas[i], o = kvi_index_bucket_off(&f->ix[which], bucket[i]);

		if (word == 0) {
			if (w->unlock[i] != me) /* only a writer that ignores the protocol */
				kvi_ev_err("flush_lock_lost", "bucket=%" PRIu64 " word=%#" PRIx64 " msg=%s", bucket[i],
					   w->unlock[i], "the lock word changed while the flusher held it");
			kvs_lockwatch_forget(&f->lw, bucket[i], f->ix[which].epoch);
			done++;
		} else if (word == KVI_LOCK_MOVED || word == KVI_LOCK_UNMIGRATED) {
			/* Moved since the CPU's look: its items are in the current
			 * index, walked later. Not migrated yet: its old bucket was
			 * walked before. */
			done++;
		} else {
			f->st.held++;
			if (!kvi_lock_legal(word) && may_repair(f, which)) {
				kvi_ev_warn("flush_lock_repaired", "bucket=%" PRIu64 " word=%#" PRIx64 " msg=%s", bucket[i],
					    word, "junk in a lock word: repaired");
				ops[n++] = kvi_rop_cas(o, &w->unlock[i], word, 0);
				f->st.repaired++;
			} else {
				kvs_lockwatch_seen(&f->lw, rm, bucket[i], f->ix[which].epoch, word, now);
			}
			keep_for_retry(f, rm, which, bucket[i], since[i] ? since[i] : now, now);
		}
	}
	f->st.doorbells += n != 0;
	if (n && (rc = kvi_rmem_exec(rm, ops, n, FLUSH_RDMA_MS)))
		return rc;
	return (int)done;
}

/* Try the retry list once, in batches. Returns the buckets done or a code
 * (then the whole list is kept: trying a cleared bucket again is harmless). */
static int retry_held(struct kvs_flusher *f, struct kvi_rmem *rm, struct work *w)
{
	struct retry list[FLUSH_RETRY_MAX];
	unsigned total = f->nretry, done = 0;

	memcpy(list, f->retry, total * sizeof(list[0]));
	f->nretry = 0;
	for (unsigned k = 0; k < total;) {
		uint64_t bk[FLUSH_BATCH], since[FLUSH_BATCH];
		unsigned nb = 0, which = list[k].which;
		int rc;

		/* One index per batch (the list holds the current one's only). */
		while (k < total && nb < FLUSH_BATCH && list[k].which == which) {
			bk[nb] = list[k].bucket;
			since[nb++] = list[k++].since;
		}
		rc = do_batch(f, rm, w, which, bk, since, nb);
		if (rc < 0) {
			memcpy(f->retry, list, total * sizeof(list[0]));
			f->nretry = total;
			return rc;
		}
		done += (unsigned)rc;
	}
	return (int)done;
}

static void backoff(struct kvs_flusher *f, int progress)
{
	if (progress) {
		f->backoff_us = BACKOFF_MIN_US;
		f->backoff_until = 0;
		return;
	}
	f->backoff_until = kvi_mono_ns() + (uint64_t)f->backoff_us * 1000u;
	f->backoff_us = f->backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : f->backoff_us * 2;
}

static void finish(struct kvs_flusher *f)
{
	uint64_t ms = (kvi_mono_ns() - f->t_start) / 1000000u;

	f->active = 0;
	f->st.walks++;
	f->st.last_ms = ms;
	f->st.cpu_ns += kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - f->cpu_start;
	kvs_core_flush_end(f->core, f->cleared);
	kvi_ev_info("flush_done", "ticket=%" PRIu64 " buckets=%" PRIu64 " items=%" PRIu64 " skipped=%" PRIu64
		    " wall_ms=%" PRIu64, f->ticket, f->walked, f->cleared, f->skipped, ms);
}

int kvs_flush_run(struct kvs_flusher *f, struct kvi_rmem *rm, void *work, uint64_t work_len)
{
	struct work *w = work;
	uint64_t looked = 0, now = kvi_mono_ns();
	int rc;

	if (work_len < sizeof(*w))
		return KVC_EINVAL;
	if (!f->active) {
		if (!kvs_core_flush_begin(f->core, now, &f->ticket))
			return KVS_FLUSH_IDLE;
		if (take_indexes(f)) { /* cannot happen: there is always a current index */
			kvs_core_flush_end(f->core, 0);
			return KVS_FLUSH_IDLE;
		}
		f->active = 1;
		f->which = 0;
		f->cursor = f->walked = f->cleared = f->skipped = 0;
		f->nretry = 0;
		f->backoff_us = BACKOFF_MIN_US;
		f->backoff_until = 0;
		f->t_start = now;
		f->cpu_start = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID);
		kvi_ev_info("flush_begin", "ticket=%" PRIu64 " indexes=%u buckets=%" PRIu64, f->ticket, f->nix,
			    f->ix[0].bucket_count + (f->nix > 1 ? f->ix[1].bucket_count : 0));
	}
	if (now < f->backoff_until)
		return KVS_FLUSH_BUSY;
	/* The work area is shared with the reclaimer and the migrator. */
	memset(w->zero, 0, sizeof(w->zero));
	while (looked < KVS_FLUSH_SLICE) {
		uint64_t bk[FLUSH_BATCH], since[FLUSH_BATCH] = { 0 }, from = f->cursor;
		unsigned nb = 0, kept = f->nretry;
		int end;

		if (f->which == f->nix) {
			finish(f);
			return KVS_FLUSH_IDLE;
		}
		/* An index is left only once its held buckets are done: an old
		 * bucket left held could be migrated meanwhile into new buckets
		 * already walked. */
		end = f->cursor == f->ix[f->which].bucket_count;
		if (end && !f->nretry) {
			f->walked += f->ix[f->which].bucket_count;
			f->which++;
			f->cursor = 0;
			continue;
		}
		/* The end of an index, or a retry list without room for a
		 * batch's held buckets: try the held ones (with a back-off when
		 * that does not move). */
		if (end || f->nretry + FLUSH_BATCH > FLUSH_RETRY_MAX) {
			rc = retry_held(f, rm, w);
			if (rc < 0)
				return rc;
			backoff(f, end ? rc > 0 : f->nretry + FLUSH_BATCH <= FLUSH_RETRY_MAX);
			if (f->backoff_until)
				break;
			continue;
		}
		while (nb < FLUSH_BATCH && f->cursor < f->ix[f->which].bucket_count && looked < KVS_FLUSH_SLICE) {
			if (needs_lock(f, f->which, f->cursor))
				bk[nb++] = f->cursor;
			f->cursor++;
			looked++;
		}
		if (nb && (rc = do_batch(f, rm, w, f->which, bk, since, nb)) < 0) {
			/* The loopback broke (its locks are released by fencing):
			 * the batch is walked again after the reconnect. */
			f->cursor = from;
			f->nretry = kept;
			return rc;
		}
	}
	kvs_core_flush_progress(f->core, f->walked + f->cursor);
	return KVS_FLUSH_BUSY;
}

int kvs_flush_next_ms(const struct kvs_flusher *f, int max_ms)
{
	uint64_t now = kvi_mono_ns();

	if (f->active)
		return kvi_ms_until(now, f->backoff_until, max_ms);
	return kvs_core_flush_next_ms(f->core, now, max_ms);
}
