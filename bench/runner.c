/* The load and run phases.
 *
 * Threads connect first (a failure there stops everything before any load is
 * sent), then meet at barriers between phases so that the main thread can
 * time each phase and sample the server's CPU at its edges. Each thread keeps
 * `depth` requests in flight; a READ-MODIFY-WRITE is a GET followed by a PUT of
 * the same key and is timed as one operation, as YCSB does. Only operations
 * started after the warm-up are recorded.
 *
 * Stopping early: a request whose status says the connection is gone (the
 * driver's lost()) stops every thread, as does SIGINT or SIGTERM; each thread
 * then waits at most SETTLE_MS for what it has in flight and abandons the
 * rest, so the results so far are printed at once rather than after the
 * planned duration. */
#include "runner.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

const char *const kvb_type_names[KVB_T_N] = { "READ", "UPDATE", "INSERT", "READ-MODIFY-WRITE" };

/* How long a stopping thread waits for its requests in flight. */
#define SETTLE_MS 200
/* How long a thread waits in poll before it looks at the stop flags again. */
#define POLL_MS 50

/* The signal that asked for a stop, 0 until one did. Lock-free, so the
 * handler may store it. */
static atomic_int stop_signal;

static void on_stop_signal(int sig)
{
	atomic_store(&stop_signal, sig);
}

struct shared {
	const struct kvb_cfg *cfg;
	/* Requests a thread keeps in flight: the configured depth, but never more
	 * than the driver really overlaps. A blocking driver (memcached) finishes a
	 * request inside submit; holding several would only make each one wait
	 * for the next ones to be recorded, inflating its latency. */
	unsigned depth;
	pthread_mutex_t gate; /* threads start once the barrier is sized */
	pthread_cond_t gate_cv;
	int gate_open;
	pthread_barrier_t bar;
	atomic_int abort; /* stop: nothing can start, or a connection was lost */
	atomic_int lost;  /* a connection was lost: the server is not asked for statistics */
	atomic_uint_fast64_t issued;      /* run-phase operations claimed after the warm-up */
	atomic_uint_fast64_t completed;   /* for the progress line */
	atomic_uint_fast64_t failures;    /* ... and the interval lines */
	struct kvb_ackcounter inserts;    /* run-phase INSERT key numbers, YCSB's acknowledged counter */
	uint64_t warmup_end, run_end;     /* ns, CLOCK_MONOTONIC; run_end 0 = by count */
};

struct slot {
	struct kvb_req req;
	int type;  /* enum kvb_type */
	int stage; /* RMW: 0 = reading, 1 = writing */
	int recorded;
	uint64_t t0, keynum;
};

struct thread {
	pthread_t t;
	unsigned id;
	struct shared *sh;
	void *conn;
	char err[400];
	int failed;
	struct kvb_rng rng;
	struct kvb_keychooser kc;
	struct slot *slots;
	unsigned inflight;
	char *value; /* vmax bytes of payload */
	char *bufs;  /* depth x vmax GET buffers */
	struct kvb_phase *ph; /* the phase being recorded into (thread-private copy) */
	struct kvb_phase load, run;
	uint64_t rt_ops0[16], rt_rtts0[16]; /* round-trip counters when the priming ended */
	/* When the last completions were taken (drain), for the batch that
	 * follows them at once (run): one clock read serves both -- in a VM a
	 * clock read may be a system call, dearer than the loop's own work for
	 * a request. 0: none since the last batch. */
	uint64_t drained_ns;
};

static void errs_add(struct kvb_errs *e, int status, uint64_t n)
{
	for (unsigned i = 0; i < e->kinds; i++) {
		if (e->status[i] == status) {
			e->n[i] += n;
			return;
		}
	}
	if (e->kinds == KVB_MAX_ERRS) {
		e->other += n;
		return;
	}
	e->status[e->kinds] = status;
	e->n[e->kinds++] = n;
}

static void phase_init(struct kvb_phase *p)
{
	memset(p, 0, sizeof(*p));
	for (int i = 0; i <= KVB_T_N; i++)
		kvb_hist_init(&p->hist[i]);
	kvb_hist_init(&p->fail_hist);
	p->server_cpu_s = -1;
}

static void phase_merge(struct kvb_phase *into, const struct kvb_phase *from)
{
	for (int i = 0; i <= KVB_T_N; i++) {
		into->ops[i] += from->ops[i];
		into->failed[i] += from->failed[i];
		kvb_hist_merge(&into->hist[i], &from->hist[i]);
	}
	kvb_hist_merge(&into->fail_hist, &from->fail_hist);
	for (unsigned i = 0; i < from->errs.kinds; i++)
		errs_add(&into->errs, from->errs.status[i], from->errs.n[i]);
	into->errs.other += from->errs.other;
}

static uint32_t value_size(struct thread *th)
{
	const struct kvb_cfg *c = th->sh->cfg;

	if (c->sizes)
		return kvb_sizedist_draw(c->sizes, kvb_rng_next(&th->rng));
	if (c->vmin == c->vmax)
		return c->vmin;
	return c->vmin + (uint32_t)(kvb_rng_next(&th->rng) % ((uint64_t)c->vmax - c->vmin + 1));
}

/* Fill the slot's request (the slot is taken from here on: req.user). */
static void prepare_req(struct thread *th, struct slot *s, int prim)
{
	struct kvb_req *r = &s->req;

	r->prim = prim;
	r->key_len = kvb_key_name(s->keynum, 0, 1, r->key, sizeof(r->key));
	r->value = th->value;
	r->value_len = prim == KVB_PUT ? value_size(th) : 0;
	r->buf = th->bufs + (size_t)(s - th->slots) * th->sh->cfg->vmax;
	r->buf_len = th->sh->cfg->vmax;
	r->user = s;
	r->status = 0;
}

static int submit(struct thread *th, struct slot *s, int prim)
{
	prepare_req(th, s, prim);
	return th->sh->cfg->drv->submit(th->conn, &s->req);
}

/* "rdma://host:port", "rdma://h1:p1,h2:p2" (a list: no port of its own), or
 * "local://MIB" (its port is a placeholder). */
static const char *target_name(const struct kvb_cfg *c, char *buf, size_t len)
{
	int port = c->port[0] && strcmp(c->port, "0") != 0;

	snprintf(buf, len, "%s://%s%s%s", c->drv->scheme, c->host, port ? ":" : "", port ? c->port : "");
	return buf;
}

/* The connection is gone: stop this thread, and the others (they talk to the
 * same server), keeping the first reason. */
static void lose(struct thread *th, int status)
{
	const struct kvb_cfg *c = th->sh->cfg;
	char t[1100];

	if (!th->failed)
		snprintf(th->err, sizeof(th->err), "connection to %.300s lost: %s", target_name(c, t, sizeof(t)),
			 c->drv->errname(status));
	th->failed = 1;
	atomic_store(&th->sh->lost, 1);
	atomic_store(&th->sh->abort, 1);
}

static int stopping(struct thread *th)
{
	return th->failed || atomic_load(&th->sh->abort) || atomic_load(&stop_signal);
}

/* A request came back: record it, or start the RMW's write. Returns 1 when
 * the slot is free again. */
/* now: when s's request was seen done (its latency ends there). */
static int finish(struct thread *th, struct slot *s, uint64_t now)
{
	struct kvb_phase *ph = th->ph;
	int st = s->req.status;
	const struct kvb_driver *d = th->sh->cfg->drv;

	if (s->type == KVB_T_RMW && s->stage == 0 && st == 0) {
		s->stage = 1;
		st = submit(th, s, KVB_PUT);
		if (st == 0)
			return 0;
	}
	if (st && d->lost && d->lost(st))
		lose(th, st);
	if (s->type == KVB_T_INSERT && th->ph == &th->run)
		kvb_ackcounter_ack(&th->sh->inserts, s->keynum); /* failed ones too, or reads would stall */
	atomic_fetch_add(&th->sh->completed, 1);
	if (st && st != KVB_NOTFOUND)
		atomic_fetch_add(&th->sh->failures, 1);
	if (!s->recorded)
		return 1;
	ph->ops[s->type]++;
	ph->ops[KVB_T_N]++;
	if (st == 0) {
		uint64_t lat = now - s->t0;

		kvb_hist_record(&ph->hist[s->type], lat);
		kvb_hist_record(&ph->hist[KVB_T_N], lat);
	} else {
		ph->failed[s->type]++;
		ph->failed[KVB_T_N]++;
		kvb_hist_record(&ph->fail_hist, now - s->t0);
		errs_add(&ph->errs, st, 1);
	}
	return 1;
}

static void release(struct slot *s)
{
	s->req.user = NULL;
}

static void drain(struct thread *th, int timeout_ms)
{
	struct kvb_req *done[64];
	int n = th->sh->cfg->drv->poll(th->conn, done, 64, timeout_ms);
	uint64_t now = n ? kvi_mono_ns() : 0;

	if (n > 0)
		th->drained_ns = now;
	for (int i = 0; i < n; i++) {
		struct slot *s = done[i]->user;

		if (finish(th, s, now)) {
			release(s);
			th->inflight--;
		}
	}
	if (n < 0) { /* the connection is gone: nothing in flight will come back */
		for (unsigned i = 0; i < th->sh->depth; i++) {
			struct slot *s = &th->slots[i];

			if (!s->req.user)
				continue;
			s->req.status = n;
			finish(th, s, now);
			release(s);
		}
		th->inflight = 0;
		lose(th, n);
	}
}

/* Stopping: give what is in flight SETTLE_MS to come back (it is recorded),
 * then abandon the rest (closing the connection takes it back). */
static void settle(struct thread *th)
{
	uint64_t end = kvi_mono_ns() + SETTLE_MS * 1000000ull;

	while (th->inflight && kvi_mono_ns() < end)
		drain(th, 10);
}

/* A request refused at once is a finished failure (never a success: an
 * RMW's read would go on to its write). */
static void refused(struct thread *th, struct slot *s, int status)
{
	s->req.status = status ? status : -1;
	finish(th, s, kvi_mono_ns());
	release(s);
}

/* Submit the prepared requests of s[0..n), together where the driver can
 * (kvc_submit_many: cheaper per request than one at a time); one refused
 * is a finished failure, and those after it are tried again -- unless the
 * connection was lost or the run stops: then they were never issued. */
static void launch_many(struct thread *th, struct slot **s, unsigned n)
{
	struct kvb_req *r[64];
	unsigned i = 0;

	for (unsigned k = 0; k < n; k++)
		r[k] = &s[k]->req;
	while (i < n) {
		int got;

		if (stopping(th)) {
			for (; i < n; i++)
				release(s[i]);
			return;
		}
		got = kvb_submit_many(th->sh->cfg->drv, th->conn, r + i, n - i);
		if (got > 0) {
			th->inflight += (unsigned)got;
			i += (unsigned)got;
		}
		if (i < n) {
			refused(th, s[i], s[i]->req.status);
			i++;
		}
	}
}

static struct slot *free_slot(struct thread *th)
{
	for (unsigned i = 0; i < th->sh->depth; i++)
		if (!th->slots[i].req.user)
			return &th->slots[i];
	return NULL;
}

/* The clock for a batch of requests that start together: the read that saw
 * the last completions, if the batch follows them (struct thread). */
static uint64_t batch_clock(struct thread *th)
{
	uint64_t now = th->drained_ns ? th->drained_ns : kvi_mono_ns();

	th->drained_ns = 0;
	return now;
}

/* Load phase: this thread inserts keys id, id + threads, ... < records. */
/* Keys first, first + step, ... below records, each with one request of
 * prim, depth at a time: the load (inserts, recorded, the keys shared out
 * among the threads) and the priming (GETs, not recorded, every key). */
static void sweep(struct thread *th, uint64_t first, uint64_t step, enum kvb_type type, int prim, int recorded)
{
	const struct kvb_cfg *c = th->sh->cfg;
	uint64_t next = first;

	th->drained_ns = 0;

	while (next < c->records || th->inflight) {
		if (stopping(th)) {
			settle(th);
			return;
		}
		if (next < c->records && th->inflight < th->sh->depth && !stopping(th)) {
			struct slot *batch[64];
			unsigned k = 0;
			uint64_t now = batch_clock(th);

			while (next < c->records && th->inflight + k < th->sh->depth && k < 64) {
				struct slot *s = free_slot(th);

				*s = (struct slot){ .type = type, .recorded = recorded, .t0 = now, .keynum = next };
				prepare_req(th, s, prim);
				batch[k++] = s;
				next += step;
			}
			launch_many(th, batch, k);
		}
		if (th->inflight)
			drain(th, POLL_MS);
	}
}

static void load(struct thread *th)
{
	th->ph = &th->load;
	sweep(th, th->id, th->sh->cfg->threads, KVB_T_INSERT, KVB_PUT, 1);
}

/* Priming. A client that has run for a while has every key it reads in its
 * location cache (a kvcache handle's; its GET is then one doorbell); a new
 * process has none, and a run over many keys spends much of its time
 * filling it. Priming reads every record once on each thread's connection
 * (each has its own cache) before the run, so that the run measures the
 * steady state; its round trips are left out of the counters reported. */
static void prime(struct thread *th)
{
	const struct kvb_driver *d = th->sh->cfg->drv;
	const char *names[16];
	unsigned kinds = 0;

	th->ph = &th->run; /* nothing recorded: a place for finish() to look */
	sweep(th, 0, 1, KVB_T_READ, KVB_GET, 0);
	if (d->round_trips && th->conn)
		d->round_trips(th->conn, th->rt_ops0, th->rt_rtts0, names, &kinds);
}

/* Claim one run-phase operation: always during the warm-up, then up to the
 * operation count or until the end time. Returns 1 = record it, 0 = warm-up, -1 = stop. */
static int claim(struct shared *sh, uint64_t now)
{
	if (atomic_load(&sh->abort) || atomic_load(&stop_signal))
		return -1;
	if (now < sh->warmup_end)
		return 0;
	if (sh->run_end)
		return now < sh->run_end ? 1 : -1;
	return atomic_fetch_add(&sh->issued, 1) < sh->cfg->operations ? 1 : -1;
}

/* Choose the slot's next operation and prepare its first request. */
static void start_op(struct thread *th, struct slot *s, int recorded, uint64_t now)
{
	const struct kvb_cfg *c = th->sh->cfg;
	int prim = KVB_GET;

	*s = (struct slot){ .recorded = recorded, .t0 = now };
	switch (kvb_workload_next_op(c->w, &th->rng)) {
	case KVB_OP_UPDATE:
		s->type = KVB_T_UPDATE;
		prim = KVB_PUT;
		break;
	case KVB_OP_INSERT:
		s->type = KVB_T_INSERT;
		prim = KVB_PUT;
		s->keynum = kvb_ackcounter_next(&th->sh->inserts);
		break;
	case KVB_OP_RMW:
		s->type = KVB_T_RMW;
		break;
	default:
		s->type = KVB_T_READ;
		break;
	}
	if (s->type != KVB_T_INSERT)
		s->keynum = kvb_choose_key(&th->kc, &th->rng, kvb_ackcounter_last(&th->sh->inserts));
	prepare_req(th, s, prim);
}

static void run(struct thread *th)
{
	int more = 1;

	th->ph = &th->run;
	th->drained_ns = 0; /* the phases before ended a while ago */
	while (more || th->inflight) {
		if (stopping(th)) {
			settle(th);
			return;
		}
		if (more && th->inflight < th->sh->depth && !th->failed) {
			struct slot *batch[64];
			unsigned n = 0;
			uint64_t now = batch_clock(th); /* one read for the batch, as sweep's */

			while (th->inflight + n < th->sh->depth && n < 64) {
				int k = claim(th->sh, now);
				struct slot *s;

				if (k < 0) {
					more = 0;
					break;
				}
				s = free_slot(th);
				start_op(th, s, k, now);
				batch[n++] = s;
			}
			launch_many(th, batch, n);
		}
		if (th->inflight)
			drain(th, POLL_MS);
	}
}

static void *thread_main(void *arg)
{
	struct thread *th = arg;
	struct shared *sh = th->sh;
	const struct kvb_cfg *c = sh->cfg;

	/* Wait until the main thread knows how many threads exist (the barriers'
	 * size), then connect. */
	pthread_mutex_lock(&sh->gate);
	while (!sh->gate_open)
		pthread_cond_wait(&sh->gate_cv, &sh->gate);
	pthread_mutex_unlock(&sh->gate);
	if (c->drv->connect(c->host, c->port, c->device, sh->depth, &th->conn, th->err, sizeof(th->err)))
		th->failed = 1;
	pthread_barrier_wait(&sh->bar); /* A: connected */
	pthread_barrier_wait(&sh->bar); /* B: go (or abort) */
	if (!atomic_load(&sh->abort) && c->load)
		load(th);
	pthread_barrier_wait(&sh->bar); /* C: load done */
	if (c->prime) {
		if (!atomic_load(&sh->abort))
			prime(th);
		pthread_barrier_wait(&sh->bar); /* P: primed */
	}
	pthread_barrier_wait(&sh->bar); /* D: run starts */
	if (!atomic_load(&sh->abort))
		run(th);
	pthread_barrier_wait(&sh->bar); /* E: run done */
	return NULL;
}

static double server_cpu(const struct kvb_cfg *c, void *conn)
{
	double s;

	return conn && c->drv->server_cpu && c->drv->server_cpu(conn, &s) == 0 ? s : -1;
}

/* Stop asking a lost server for statistics (its answers would only time out). */
static void stats_conn_drop(const struct kvb_cfg *c, void **conn)
{
	if (*conn)
		c->drv->close(*conn);
	*conn = NULL;
}

/* The progress line: a ticker thread prints the completion rate once a second
 * while the main thread waits at the phase's closing barrier. */
struct ticker {
	pthread_t t;
	struct shared *sh;
	atomic_int stop;
	const char *phase;
	uint64_t start;
	int progress;        /* the progress line on stderr */
	uint64_t interval_ns; /* the interval lines on stdout; 0: none */
};

/* One interval line: operations that succeeded (misses included) and that
 * failed, per second, over the last interval: how a run went through a
 * server's failure and return (docs/operations.md "Several servers behind one handle"). */
static void *ticker_main(void *arg)
{
	struct ticker *tk = arg;
	uint64_t last_n = 0, last_t = kvi_mono_ns(), last_in = 0, last_it = last_t, last_f = 0;

	while (!atomic_load(&tk->stop)) {
		uint64_t n, t;

		usleep(tk->interval_ns && tk->interval_ns < 1000000000u ? 20000 : 200000);
		t = kvi_mono_ns();
		n = atomic_load(&tk->sh->completed);
		if (tk->interval_ns && t - last_it >= tk->interval_ns) {
			uint64_t f = atomic_load(&tk->sh->failures);
			double s = (double)(t - last_it) / 1e9;

			printf("INTERVAL t=%.2f ok_per_s=%.0f failed_per_s=%.0f\n", (t - tk->start) / 1e9,
			       (double)(n - last_in - (f - last_f)) / s, (double)(f - last_f) / s);
			fflush(stdout);
			last_in = n;
			last_f = f;
			last_it = t;
		}
		if (!tk->progress || t - last_t < 1000000000u)
			continue;
		fprintf(stderr, "\r%-5s %7.1f s %12llu ops %10.0f ops/s   ", tk->phase, (t - tk->start) / 1e9,
			(unsigned long long)n, (double)(n - last_n) * 1e9 / (double)(t - last_t));
		last_n = n;
		last_t = t;
	}
	if (tk->progress)
		fprintf(stderr, "\r%60s\r", "");
	return NULL;
}

static void tick_start(struct ticker *tk, struct shared *sh, const char *phase, int on, double interval_s)
{
	tk->sh = sh;
	tk->phase = phase;
	tk->start = kvi_mono_ns();
	tk->progress = on;
	tk->interval_ns = interval_s > 0 ? (uint64_t)(interval_s * 1e9) : 0;
	atomic_store(&tk->stop, 0);
	atomic_store(&sh->completed, 0);
	atomic_store(&sh->failures, 0);
	if ((!on && !tk->interval_ns) || pthread_create(&tk->t, NULL, ticker_main, tk))
		tk->t = 0;
}

static void tick_stop(struct ticker *tk)
{
	atomic_store(&tk->stop, 1);
	if (tk->t)
		pthread_join(tk->t, NULL);
}

static int init_thread(struct thread *th, const struct kvb_cfg *c)
{
	th->slots = calloc(c->depth, sizeof(*th->slots));
	th->value = malloc(c->vmax ? c->vmax : 1);
	th->bufs = malloc((size_t)c->depth * (c->vmax ? c->vmax : 1));
	if (!th->slots || !th->value || !th->bufs)
		return -1;
	for (uint32_t i = 0; i < c->vmax; i++)
		th->value[i] = (char)('a' + (i + th->id) % 26);
	kvb_rng_seed(&th->rng, c->seed * 0x9e3779b97f4a7c15ull + th->id + 1);
	phase_init(&th->load);
	phase_init(&th->run);
	return 0;
}

/* Once every thread is connected, before anything is sent: the parameters
 * that depend on the target, and the key chooser, built once and copied to
 * every thread (its set-up is O(1), see kvb_zeta, but need not be repeated). */
static int prepare(struct thread *th, unsigned nthreads, const struct kvb_cfg *c, char *err, size_t errlen)
{
	struct kvb_keychooser kc;
	char t[1100];

	if (c->drv->max_value && nthreads > 0) {
		size_t mv = c->drv->max_value(th[0].conn, KVB_KEY_NAME_MAX);

		if (c->vmax > mv) {
			snprintf(err, errlen,
				 "--value-size %u is more than the target %.300s takes with kvbench's keys (up to %d "
				 "bytes): give at most %zu",
				 c->vmax, target_name(c, t, sizeof(t)), KVB_KEY_NAME_MAX, mv);
			return KVB_RUN_REFUSED;
		}
	}
	/* YCSB sizes the zipfian key space by the operation count; for a timed run
	 * assume a million operations (it only matters for workloads with inserts). */
	if (kvb_keychooser_init(&kc, c->dist, c->records, c->operations ? c->operations : 1000000, c->w->insert)) {
		snprintf(err, errlen, "cannot build the %s key chooser over %llu records",
			 c->dist == KVB_DIST_LATEST ? "latest" : c->dist == KVB_DIST_UNIFORM ? "uniform" : "zipfian",
			 (unsigned long long)c->records);
		return KVB_RUN_REFUSED;
	}
	for (unsigned i = 0; i < nthreads; i++)
		th[i].kc = kc;
	return KVB_RUN_OK;
}

static const char *signal_name(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

int kvb_run(const struct kvb_cfg *c, struct kvb_result *res, char *err, size_t errlen)
{
	struct shared sh = { .cfg = c };
	struct thread *th = calloc(c->threads, sizeof(*th));
	struct ticker tk = { 0 };
	struct sigaction sa = { .sa_handler = on_stop_signal, .sa_flags = SA_RESETHAND | SA_RESTART };
	struct sigaction old_int, old_term;
	void *stats_conn = NULL;
	char serr[400];
	unsigned nthreads = 0;
	uint64_t t0, t1;
	double cpu0, cpu1;
	int rc = 0;

	memset(res, 0, sizeof(*res));
	res->mem_after_load = -1;
	phase_init(&res->load);
	phase_init(&res->run);
	if (!th) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (kvb_ackcounter_init(&sh.inserts, c->records)) {
		snprintf(err, errlen, "out of memory");
		free(th);
		return -1;
	}
	/* Caught from here on; the first one asks for a stop, a second one kills
	 * (SA_RESETHAND), so a stuck connection attempt can still be cut short. */
	atomic_store(&stop_signal, 0);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sh.depth = c->depth < c->drv->max_depth ? c->depth : c->drv->max_depth;
	pthread_mutex_init(&sh.gate, NULL);
	pthread_cond_init(&sh.gate_cv, NULL);
	for (unsigned i = 0; i < c->threads && rc == 0; i++) {
		th[i].id = i;
		th[i].sh = &sh;
		if (init_thread(&th[i], c)) {
			snprintf(err, errlen, "cannot set up thread %u: out of memory", i);
			rc = KVB_RUN_FAILED;
		}
	}
	for (nthreads = 0; nthreads < c->threads && rc == 0; nthreads++) {
		if (pthread_create(&th[nthreads].t, NULL, thread_main, &th[nthreads])) {
			snprintf(err, errlen, "cannot start thread %u: %s", nthreads, strerror(errno));
			rc = KVB_RUN_FAILED;
			break;
		}
	}
	/* The barriers count the threads that exist (and this one); those run
	 * through every phase doing nothing when rc says to abort. */
	pthread_barrier_init(&sh.bar, NULL, nthreads + 1);
	atomic_store(&sh.abort, rc != 0);
	pthread_mutex_lock(&sh.gate);
	sh.gate_open = 1;
	pthread_cond_broadcast(&sh.gate_cv);
	pthread_mutex_unlock(&sh.gate);
	/* One more connection, the main thread's, only for server statistics. */
	if (rc == 0 && c->drv->server_cpu &&
	    c->drv->connect(c->host, c->port, c->device, 1, &stats_conn, serr, sizeof(serr)))
		stats_conn = NULL;
	pthread_barrier_wait(&sh.bar); /* A */
	for (unsigned i = 0; i < nthreads && rc == 0; i++) {
		if (th[i].failed) {
			snprintf(err, errlen, "%s", th[i].err);
			rc = KVB_RUN_FAILED;
		}
	}
	if (rc == 0 && atomic_load(&stop_signal)) {
		snprintf(err, errlen, "stopped by %s while connecting: nothing was sent",
			 signal_name(atomic_load(&stop_signal)));
		rc = KVB_RUN_FAILED;
	}
	if (rc == 0)
		rc = prepare(th, nthreads, c, err, errlen);
	atomic_store(&sh.abort, rc != 0);

	cpu0 = server_cpu(c, stats_conn);
	t0 = kvi_mono_ns();
	tick_start(&tk, &sh, "load", c->progress && c->load && rc == 0, 0);
	pthread_barrier_wait(&sh.bar); /* B: load starts */
	pthread_barrier_wait(&sh.bar); /* C: load done */
	tick_stop(&tk);
	t1 = kvi_mono_ns();
	if (atomic_load(&sh.lost)) /* a dead server would keep the statistics calls waiting */
		stats_conn_drop(c, &stats_conn);
	cpu1 = server_cpu(c, stats_conn);
	res->load.seconds = (t1 - t0) / 1e9;
	res->load.server_cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
	{
		uint64_t bytes;

		res->mem_after_load = stats_conn && c->drv->server_mem && c->drv->server_mem(stats_conn, &bytes) == 0
					      ? (int64_t)bytes
					      : -1;
	}

	if (c->prime)
		pthread_barrier_wait(&sh.bar); /* P: every thread primed */
	sh.warmup_end = kvi_mono_ns() + (uint64_t)(c->warmup_s * 1e9);
	sh.run_end = c->operations ? 0 : sh.warmup_end + (uint64_t)(c->duration_s * 1e9);
	tick_start(&tk, &sh, "run", c->progress && rc == 0, rc == 0 ? c->interval_s : 0);
	pthread_barrier_wait(&sh.bar); /* D: run starts */
	/* Sample the server's CPU when the warm-up ends, i.e. over the recorded part. */
	while (rc == 0 && kvi_mono_ns() < sh.warmup_end && !atomic_load(&sh.abort) && !atomic_load(&stop_signal))
		usleep(1000);
	if (atomic_load(&sh.lost))
		stats_conn_drop(c, &stats_conn);
	cpu0 = server_cpu(c, stats_conn);
	pthread_barrier_wait(&sh.bar); /* E: run done */
	tick_stop(&tk);
	t1 = kvi_mono_ns();
	if (atomic_load(&sh.lost))
		stats_conn_drop(c, &stats_conn);
	cpu1 = server_cpu(c, stats_conn);
	res->run.seconds = t1 > sh.warmup_end ? (t1 - sh.warmup_end) / 1e9 : 0;
	res->run.server_cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;

	for (unsigned i = 0; i < c->threads; i++) {
		if (i < nthreads)
			pthread_join(th[i].t, NULL);
		phase_merge(&res->load, &th[i].load);
		phase_merge(&res->run, &th[i].run);
		if (th[i].conn && c->drv->round_trips) {
			uint64_t ops[16], rtts[16];
			const char *names[16];
			unsigned kinds = 0;

			c->drv->round_trips(th[i].conn, ops, rtts, names, &kinds);
			for (unsigned k = 0; k < kinds && k < 16; k++) {
				res->rt_names[k] = names[k];
				res->rt_ops[k] += ops[k] - th[i].rt_ops0[k];
				res->rt_rtts[k] += rtts[k] - th[i].rt_rtts0[k];
			}
			res->rt_kinds = kinds;
		}
		/* A connection lost during the phases: the results stand, but say so. */
		if (th[i].failed && rc == 0 && th[i].err[0]) {
			snprintf(err, errlen, "%s", th[i].err);
			rc = KVB_RUN_LOST;
		}
		if (th[i].conn)
			c->drv->close(th[i].conn);
		free(th[i].slots);
		free(th[i].value);
		free(th[i].bufs);
	}
	if (stats_conn)
		c->drv->close(stats_conn);
	res->signal = atomic_load(&stop_signal);
	if (rc == KVB_RUN_OK && res->signal) {
		snprintf(err, errlen, "stopped by %s: the results cover what ran before it", signal_name(res->signal));
		rc = KVB_RUN_STOPPED;
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	pthread_barrier_destroy(&sh.bar);
	pthread_cond_destroy(&sh.gate_cv);
	pthread_mutex_destroy(&sh.gate);
	kvb_ackcounter_destroy(&sh.inserts);
	free(th);
	return rc;
}
