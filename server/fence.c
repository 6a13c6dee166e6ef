#define _GNU_SOURCE /* pthread_setname_np */
#include "fence.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"
#include "loopkey.h"
#include "rmem_verbs.h"

#define FENCE_TIMEOUT_MS 5000
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 1000
#define OWN_IDS 8u          /* the fencer's own recent loopback ids */
#define MISMATCHES 64u      /* per pass: words read again that changed yet still name a fenced client */
#define BITMAP_WORDS (((uint64_t)KVI_MAX_CLIENT_ID + 1) / 64)

struct clear_req {
	uint64_t off, word, to; /* region offset of the lock word; CAS word -> to */
};

struct kvs_fence {
	struct kvs_fence_opts o;
	pthread_t t;
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* work queued, or stop */
	pthread_cond_t idle_cv; /* the thread went idle */
	/* Under mu. */
	uint64_t *pending; /* bitmap of queued client ids */
	unsigned npending;
	struct clear_req clears[KVS_FENCE_CLEAR_MAX];
	unsigned chead, ccount;
	int stop, busy;
	uint64_t begun, done; /* passes started and the last one finished (tickets) */
	struct kvs_fence_stats st;
	/* The thread's own. */
	uint64_t *active; /* bitmap of the clients of the running pass */
	uint32_t *ids;    /* ... as a sorted list */
	uint64_t *counts; /* locks released per id of the pass */
	unsigned nids, ids_cap;
	uint64_t pass_no; /* the running pass's number (begun when it took its clients) */
	struct kvi_rmem *rm; /* the loopback; NULL or broken: connect again */
	struct kvi_index ix[2]; /* the pass's copies of the current and previous index */
	uint64_t *chunks[2];
	/* Read by the control loop. */
	_Atomic uint32_t own[OWN_IDS];
	atomic_uint own_next;
};

static int stopping(struct kvs_fence *f)
{
	int s;

	pthread_mutex_lock(&f->mu);
	s = f->stop;
	pthread_mutex_unlock(&f->mu);
	return s;
}

/* Sleep ms, or until stopped; returns 1 when stopping. */
static int nap(struct kvs_fence *f, int ms)
{
	struct timespec ts = kvi_abstime_in(CLOCK_MONOTONIC, ms);
	int s;

	pthread_mutex_lock(&f->mu);
	while (!f->stop && pthread_cond_timedwait(&f->cv, &f->mu, &ts) != ETIMEDOUT)
		;
	s = f->stop;
	pthread_mutex_unlock(&f->mu);
	return s;
}

/* A usable loopback, (re)connecting with backoff for as long as it takes.
 * NULL only when stopping. */
static struct kvi_rmem *loopback(struct kvs_fence *f)
{
	int ms = BACKOFF_MIN_MS;
	unsigned fails = 0;

	while (!f->rm || f->rm->broken) {
		struct kvi_rmem *rm = NULL;
		int rc;

		kvi_rmem_destroy(f->rm);
		f->rm = NULL;
		if (stopping(f))
			return NULL;
		rc = f->o.connect(f->o.connect_arg, &rm);
		if (rc == 0 && rm->lbuf_size < KVI_RMEM_MAX_BATCH * sizeof(uint64_t)) {
			kvi_ev_err("fencer_failed", "buffer_bytes=%zu reason=%s", rm->lbuf_size,
				   "the loopback's local buffer is too small");
			kvi_rmem_destroy(rm);
			rc = KVC_EINVAL;
		}
		if (rc == 0) {
			atomic_store(&f->own[atomic_fetch_add(&f->own_next, 1) % OWN_IDS], rm->client_id);
			f->rm = rm;
			pthread_mutex_lock(&f->mu);
			f->st.connects++;
			pthread_mutex_unlock(&f->mu);
			kvi_ev_info("fencer_connected", "client=%u", rm->client_id);
			break;
		}
		/* Say it once, then every 10th try: the thread retries forever. */
		if (fails++ % 10 == 0)
			kvi_ev_warn("fencer_connect_failed", "error=%s try=%u msg=%s", kvc_err_name(rc), fails,
				    "no loopback connection: locks of gone clients wait; retrying");
		if (nap(f, ms))
			return NULL;
		ms = ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
	}
	return f->rm;
}

/* Run one batch of CAS through the loopback. 0; or, after a transport
 * failure, the code (the loopback is dropped: the caller retries). */
static int exec_batch(struct kvs_fence *f, struct kvi_rop *ops, unsigned n)
{
	int rc = kvi_rmem_exec(f->rm, ops, n, f->o.op_timeout_ms);

	if (rc) {
		kvi_ev_warn("fencer_loopback_failed", "error=%s msg=%s", kvc_err_name(rc),
			    "the loopback failed while releasing locks: reconnecting and retrying");
		kvi_rmem_shutdown(f->rm, rc);
		pthread_mutex_lock(&f->mu);
		f->st.retries++;
		pthread_mutex_unlock(&f->mu);
	}
	return rc;
}

static int bit_test(const uint64_t *map, uint32_t id)
{
	return (int)(map[id / 64] >> (id % 64) & 1);
}

static unsigned id_index(const struct kvs_fence *f, uint32_t id)
{
	unsigned lo = 0, hi = f->nids;

	while (lo + 1 < hi) {
		unsigned mid = (lo + hi) / 2;

		if (f->ids[mid] <= id)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Does this lock word name a client of the running pass? */
static int fenced_word(const struct kvs_fence *f, uint64_t w)
{
	return (w & KVI_LOCK_LOCKED) && bit_test(f->active, kvi_lock_owner(w));
}

/* Release the fenced clients' locks in buckets [from, to). Returns 0, or 1
 * when stopping (the rest is abandoned). */
static int release_range(struct kvs_fence *f, const struct kvi_index *ix, uint64_t from, uint64_t to,
			 uint64_t *released, unsigned *mismatches)
{
	const uint8_t *base = kvs_core_region(f->o.core);
	uint64_t b = from;
#define LOCKW(b) ((const uint64_t *)(const void *)(base + kvi_index_bucket_off(ix, (b))))

	while (b < to) {
		struct kvi_rop ops[KVI_RMEM_MAX_BATCH];
		uint64_t bk[KVI_RMEM_MAX_BATCH], want[KVI_RMEM_MAX_BATCH], start = b, *old;
		unsigned n = 0;

		for (; b < to && n < KVI_RMEM_MAX_BATCH; b++) {
			/* Reading the word with the CPU is fine; changing it is the NIC's job. */
			uint64_t w = __atomic_load_n(LOCKW(b), __ATOMIC_RELAXED);

			if (fenced_word(f, w)) {
				bk[n] = b;
				want[n++] = w;
			}
		}
		if (n == 0)
			break;
		if (!loopback(f))
			return 1;
		old = kvi_rmem_lbuf(f->rm, NULL);
		for (unsigned i = 0; i < n; i++)
			ops[i] = kvi_rop_cas(kvi_index_bucket_off(ix, bk[i]), &old[i], want[i], want[i] & KVI_LOCK_MOVED);
		if (exec_batch(f, ops, n)) {
			/* Some CAS of the batch may have landed. Once a client is
			 * fenced only we change its words, so a word that changed is
			 * one we released. Then redo the batch from fresh reads: the
			 * CAS never releases twice. */
			for (unsigned i = 0; i < n; i++) {
				if (__atomic_load_n(LOCKW(bk[i]), __ATOMIC_RELAXED) != want[i]) {
					f->counts[id_index(f, kvi_lock_owner(want[i]))]++;
					(*released)++;
				}
			}
			b = start;
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			if (old[i] == want[i]) {
				f->counts[id_index(f, kvi_lock_owner(want[i]))]++;
				(*released)++;
			} else if (fenced_word(f, old[i]) && b > bk[i] && (*mismatches)++ < MISMATCHES) {
				/* The word changed under us yet still names a fenced
				 * client (only a buggy writer does that): read it again. */
				b = bk[i];
			}
		}
	}
	return 0;
#undef LOCKW
}

/* Serve every queued single-word clear request. Returns 1 when stopping. */
static int serve_clears(struct kvs_fence *f)
{
	for (;;) {
		struct clear_req r;
		uint64_t t0 = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID), w0 = kvi_clock_ns(CLOCK_MONOTONIC);
		struct kvi_rop op;
		uint64_t *old;
		int rc;

		pthread_mutex_lock(&f->mu);
		if (!f->ccount) {
			pthread_mutex_unlock(&f->mu);
			return 0;
		}
		r = f->clears[f->chead];
		pthread_mutex_unlock(&f->mu);
		do {
			if (!loopback(f))
				return 1;
			old = kvi_rmem_lbuf(f->rm, NULL);
			op = kvi_rop_cas(r.off, old, r.word, r.to);
			rc = exec_batch(f, &op, 1);
		} while (rc);
		if (*old == r.word && kvi_lock_legal(r.word))
			kvi_ev_warn("lock_cleared", "offset=%" PRIu64 " owner=%u msg=%s", r.off, kvi_lock_owner(r.word),
				    "a lock word of no live client was cleared");
		else if (*old == r.word)
			kvi_ev_warn("lock_repaired", "offset=%" PRIu64 " word=0x%016" PRIx64 " now=0x%016" PRIx64 " msg=%s",
				    r.off, r.word, r.to, "a lock word no client or resize writes was repaired");
		pthread_mutex_lock(&f->mu);
		f->chead = (f->chead + 1) % KVS_FENCE_CLEAR_MAX;
		f->ccount--;
		f->st.cleared += *old == r.word;
		f->st.cpu_ns += kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
		f->st.wall_ns += kvi_clock_ns(CLOCK_MONOTONIC) - w0;
		pthread_mutex_unlock(&f->mu);
	}
}

/* Take the queued clients as this pass's: the pending bitmap becomes the
 * active one (the old active one is all zero again). */
static int take_clients(struct kvs_fence *f)
{
	uint64_t *tmp;
	unsigned n;

	pthread_mutex_lock(&f->mu);
	n = f->npending;
	tmp = f->active;
	f->active = f->pending;
	f->pending = tmp;
	f->npending = 0;
	if (n)
		f->pass_no = ++f->begun;
	pthread_mutex_unlock(&f->mu);
	if (n > f->ids_cap) {
		uint32_t *ids = realloc(f->ids, n * sizeof(*ids));
		uint64_t *counts = ids ? realloc(f->counts, n * sizeof(*counts)) : NULL;

		if (ids)
			f->ids = ids;
		if (counts)
			f->counts = counts;
		if (!ids || !counts) {
			/* Put them back: they are fenced when memory allows. */
			kvi_ev_err("fence_pass_failed", "clients=%u reason=%s", n, "out of memory: retrying");
			pthread_mutex_lock(&f->mu);
			for (uint64_t i = 0; i < BITMAP_WORDS; i++)
				f->pending[i] |= f->active[i];
			f->npending += n;
			pthread_mutex_unlock(&f->mu);
			memset(f->active, 0, BITMAP_WORDS * sizeof(uint64_t));
			return 0;
		}
		f->ids_cap = n;
	}
	f->nids = 0;
	for (uint64_t i = 0; i < BITMAP_WORDS && f->nids < n; i++) {
		for (uint64_t w = f->active[i]; w; w &= w - 1)
			f->ids[f->nids++] = (uint32_t)(i * 64 + (unsigned)__builtin_ctzll(w));
	}
	memset(f->counts, 0, f->nids * sizeof(*f->counts));
	return (int)f->nids;
}

static void run_pass(struct kvs_fence *f)
{
	uint64_t cpu0 = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID), wall0 = kvi_clock_ns(CLOCK_MONOTONIC), released = 0;
	uint64_t retries0, cpu, wall;
	unsigned mismatches = 0;
	uint64_t buckets = 0;
	int stopped = 0;

	if (take_clients(f) <= 0)
		return;
	pthread_mutex_lock(&f->mu);
	retries0 = f->st.retries;
	pthread_mutex_unlock(&f->mu);
	/* Both indexes while a resize migrates (layout.h "Resize"): a client may
	 * hold locks in either. The copies are the core's, as they are now; an
	 * index is reused only after fencing went idle (server/migrate.h). */
	for (int which = 0; which < 2 && !stopped; which++) {
		const struct kvi_index *ix = &f->ix[which];

		if (kvs_core_index(f->o.core, which, &f->ix[which], f->chunks[which], kvs_core_max_chunks(f->o.core)))
			continue;
		buckets += ix->bucket_count;
		for (uint64_t b = 0; b < ix->bucket_count && !stopped; b += f->o.slice) {
			uint64_t end = ix->bucket_count - b < f->o.slice ? ix->bucket_count : b + f->o.slice;

			/* A clear request waits for one slice, not for a whole pass. */
			stopped = serve_clears(f) || release_range(f, ix, b, end, &released, &mismatches);
		}
	}
	cpu = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	wall = kvi_clock_ns(CLOCK_MONOTONIC) - wall0;
	pthread_mutex_lock(&f->mu);
	f->st.passes++;
	f->done = f->pass_no;
	f->st.fencings += f->nids;
	f->st.released += released;
	f->st.cpu_ns += cpu;
	f->st.wall_ns += wall;
	retries0 = f->st.retries - retries0;
	pthread_mutex_unlock(&f->mu);
	kvs_core_add_fence(f->o.core, f->nids, released, cpu);
	for (unsigned i = 0; i < f->nids; i++) {
		if (f->counts[i])
			kvi_ev_warn("client_fenced", "client=%u locks_released=%" PRIu64, f->ids[i], f->counts[i]);
		else
			kvi_ev_info("client_fenced", "client=%u locks_released=0", f->ids[i]);
		f->active[f->ids[i] / 64] = 0;
	}
	kvi_event(retries0 ? KVI_LOG_WARN : KVI_LOG_INFO, "fence_pass",
		  "clients=%u buckets=%" PRIu64 " locks_released=%" PRIu64 " retries=%" PRIu64
		  " cpu_ms=%.3f wall_ms=%.3f abandoned=%s", f->nids, buckets, released, retries0, cpu / 1e6,
		  wall / 1e6, stopped ? "true" : "false");
}

static void *fence_main(void *arg)
{
	struct kvs_fence *f = arg;

	/* Named for top -H, perf and the tests' per-thread CPU figures. */
	pthread_setname_np(pthread_self(), "kvs-fence");

	/* Connect at once: the first fencing should not wait for it. */
	if (!loopback(f))
		return NULL;
	for (;;) {
		int clients;

		pthread_mutex_lock(&f->mu);
		while (!f->stop && !f->npending && !f->ccount) {
			f->busy = 0;
			pthread_cond_broadcast(&f->idle_cv);
			pthread_cond_wait(&f->cv, &f->mu);
		}
		if (f->stop) {
			pthread_mutex_unlock(&f->mu);
			break;
		}
		f->busy = 1;
		clients = f->npending > 0;
		pthread_mutex_unlock(&f->mu);
		if (serve_clears(f))
			break;
		if (clients)
			run_pass(f);
	}
	return NULL;
}

int kvs_fence_create(const struct kvs_fence_opts *o, struct kvs_fence **out)
{
	struct kvs_fence *f = calloc(1, sizeof(*f));
	pthread_condattr_t ca;

	*out = NULL;
	if (!f)
		return KVC_ENOMEM;
	f->o = *o;
	if (!f->o.op_timeout_ms)
		f->o.op_timeout_ms = FENCE_TIMEOUT_MS;
	if (!f->o.slice)
		f->o.slice = KVS_FENCE_SLICE;
	f->pending = calloc(BITMAP_WORDS, sizeof(uint64_t));
	f->active = calloc(BITMAP_WORDS, sizeof(uint64_t));
	f->chunks[0] = calloc(kvs_core_max_chunks(o->core), sizeof(uint64_t));
	f->chunks[1] = calloc(kvs_core_max_chunks(o->core), sizeof(uint64_t));
	if (!f->pending || !f->active || !f->chunks[0] || !f->chunks[1]) {
		free(f->pending);
		free(f->active);
		free(f->chunks[0]);
		free(f->chunks[1]);
		free(f);
		return KVC_ENOMEM;
	}
	pthread_mutex_init(&f->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&f->idle_cv, NULL);
	f->busy = 1; /* until the thread has connected and waits for work */
	if (pthread_create(&f->t, NULL, fence_main, f)) {
		f->o.connect_arg_free = NULL; /* the caller keeps its argument */
		f->t = pthread_self();
		kvs_fence_destroy(f);
		return KVC_ESYS;
	}
	*out = f;
	return 0;
}

int kvs_fence_client_ticket(struct kvs_fence *f, uint32_t client_id, uint64_t *ticket)
{
	if (ticket)
		*ticket = 0;
	if (!f)
		return KVC_ESERVERGONE;
	if (client_id == 0 || client_id > KVI_MAX_CLIENT_ID)
		return KVC_EINVAL;
	pthread_mutex_lock(&f->mu);
	if (!bit_test(f->pending, client_id)) {
		f->pending[client_id / 64] |= 1ull << (client_id % 64);
		f->npending++;
	}
	/* The running pass (if any) took its clients already: the next one
	 * takes this one. */
	if (ticket)
		*ticket = f->begun + 1;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	return 0;
}

int kvs_fence_client(struct kvs_fence *f, uint32_t client_id)
{
	return kvs_fence_client_ticket(f, client_id, NULL);
}

uint64_t kvs_fence_done(struct kvs_fence *f)
{
	uint64_t d;

	if (!f)
		return 0;
	pthread_mutex_lock(&f->mu);
	d = f->done;
	pthread_mutex_unlock(&f->mu);
	return d;
}

static int queue_clear(struct kvs_fence *f, uint64_t off, uint64_t word, uint64_t to)
{
	int rc = 0;

	if (!f)
		return KVC_ESERVERGONE;
	if (off % KVI_BUCKET_SIZE || off >= kvs_core_geometry(f->o.core)->region_size || word == to)
		return KVC_EINVAL;
	pthread_mutex_lock(&f->mu);
	if (f->ccount == KVS_FENCE_CLEAR_MAX) {
		rc = KVC_EAGAIN;
	} else {
		f->clears[(f->chead + f->ccount) % KVS_FENCE_CLEAR_MAX] = (struct clear_req){ off, word, to };
		f->ccount++;
		pthread_cond_signal(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return rc;
}

int kvs_fence_clear_word(struct kvs_fence *f, uint64_t off, uint64_t word)
{
	if (!(word & KVI_LOCK_LOCKED) || kvi_lock_owner(word) == 0)
		return KVC_EINVAL;
	return queue_clear(f, off, word, word & KVI_LOCK_MOVED);
}

int kvs_fence_repair_word(struct kvs_fence *f, uint64_t off, uint64_t word, uint64_t to)
{
	if (kvi_lock_legal(word) || !kvi_lock_legal(to))
		return KVC_EINVAL;
	return queue_clear(f, off, word, to);
}

int kvs_fence_is_own(const struct kvs_fence *f, uint32_t client_id)
{
	if (!f || client_id == 0)
		return 0;
	for (unsigned i = 0; i < OWN_IDS; i++) {
		if (atomic_load(&((struct kvs_fence *)f)->own[i]) == client_id)
			return 1;
	}
	return 0;
}

void kvs_fence_forget_own(struct kvs_fence *f, uint32_t client_id)
{
	if (!f || client_id == 0)
		return;
	for (unsigned i = 0; i < OWN_IDS; i++) {
		uint32_t want = client_id;

		atomic_compare_exchange_strong(&f->own[i], &want, 0);
	}
}

int kvs_fence_wait_idle(struct kvs_fence *f, int timeout_ms)
{
	struct timespec ts = kvi_abstime_in(CLOCK_REALTIME, timeout_ms); /* idle_cv's clock */
	int rc = 0;

	pthread_mutex_lock(&f->mu);
	while ((f->busy || f->npending || f->ccount) && !f->stop && rc == 0)
		if (pthread_cond_timedwait(&f->idle_cv, &f->mu, &ts) == ETIMEDOUT)
			rc = KVC_ETIMEDOUT;
	if (f->busy || f->npending || f->ccount)
		rc = KVC_ETIMEDOUT;
	pthread_mutex_unlock(&f->mu);
	return rc;
}

void kvs_fence_stats(struct kvs_fence *f, struct kvs_fence_stats *out)
{
	pthread_mutex_lock(&f->mu);
	*out = f->st;
	pthread_mutex_unlock(&f->mu);
}

void kvs_fence_destroy(struct kvs_fence *f)
{
	if (!f)
		return;
	if (!pthread_equal(f->t, pthread_self())) {
		pthread_mutex_lock(&f->mu);
		f->stop = 1;
		pthread_cond_broadcast(&f->cv);
		pthread_mutex_unlock(&f->mu);
		pthread_join(f->t, NULL);
	}
	kvi_rmem_destroy(f->rm);
	if (f->o.connect_arg_free)
		f->o.connect_arg_free(f->o.connect_arg);
	pthread_cond_destroy(&f->cv);
	pthread_cond_destroy(&f->idle_cv);
	pthread_mutex_destroy(&f->mu);
	free(f->pending);
	free(f->active);
	free(f->ids);
	free(f->counts);
	free(f->chunks[0]);
	free(f->chunks[1]);
	free(f);
}

/* kvserver's loopback: verbs to its own listening address. */
struct verbs_target {
	char host[256], port[16], device[64];
};

static int verbs_connect(void *arg, struct kvi_rmem **out)
{
	struct verbs_target *v = arg;
	struct kvi_errbuf e = { { 0 } };
	struct kvi_welcome w;
	int rc;

	rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = v->host, .port = v->port,
								 .device = v->device[0] ? v->device : NULL,
								 .lbuf_size = 4096, .timeout_ms = FENCE_TIMEOUT_MS,
								 .role = KVI_ROLE_LOOPBACK,
								 .secret = kvs_loopkey(),
								 .secret_len = KVI_AUTH_LOOPBACK_KEY_LEN },
				    out, &w, &e);
	if (rc)
		kvi_ev_info("fencer_connect_failed", "reason=%s", e.msg);
	return rc;
}

int kvs_fence_start(struct kvs_fence **out, struct kvs_core *core, const char *host, const char *port,
		    const char *device)
{
	struct verbs_target *v = calloc(1, sizeof(*v));
	int rc;

	*out = NULL;
	if (!v)
		return KVC_ENOMEM;
	snprintf(v->host, sizeof(v->host), "%s", host);
	snprintf(v->port, sizeof(v->port), "%s", port);
	snprintf(v->device, sizeof(v->device), "%s", device ? device : "");
	rc = kvs_fence_create(&(struct kvs_fence_opts){ .core = core, .connect = verbs_connect, .connect_arg = v,
							.connect_arg_free = free },
			      out);
	if (rc)
		free(v);
	return rc;
}
