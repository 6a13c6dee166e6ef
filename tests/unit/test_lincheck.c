/* Linearizability, checked: first the checker itself on histories whose
 * answer is known (so that it can fail), then many seeded concurrent
 * histories of real clients over the in-process transport, with TTLs of a
 * few milliseconds expiring mid-history, READs and WRITEs stretched at random
 * by hooks, and (every other seed) the server's reclaimer moving items
 * underneath; then histories with two operations in flight per client and
 * commits executing late while the reclaimer runs. Every history
 * must be linearizable (lincheck.h for the model). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "lincheck.h"

#define MSN 1000000ull

static struct lc_op mk(int kind, unsigned key, int result, uint64_t value, uint64_t ttl_ms, double inv_ms,
		       double cmp_ms)
{
	return (struct lc_op){ .kind = (uint8_t)kind, .key = key, .result = (uint8_t)result, .value = value,
			       .ttl_ns = ttl_ms * MSN, .inv = (uint64_t)(inv_ms * MSN),
			       .cmp = cmp_ms < 0 ? LC_NEVER : (uint64_t)(cmp_ms * MSN) };
}

static int check(struct lc_op *h, size_t n)
{
	struct lc_report rep;

	return lc_check(h, n, 0, &rep);
}

#define CHECK(expect, ...)                                                              \
	do {                                                                            \
		struct lc_op h_[] = { __VA_ARGS__ };                                    \
		cr_expect_eq(check(h_, sizeof(h_) / sizeof(h_[0])), expect, "line %d", __LINE__); \
	} while (0)

Test(lincheck, registers_without_ttl)
{
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 2, 3));
	/* a stale read after a newer write completed */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, 3), mk(LC_GET, 1, LC_OK, 1, 0, 4, 5));
	/* concurrent writes: the read may order either way ... */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 0.5, 30), mk(LC_GET, 1, LC_OK, 1, 0, 2, 3));
	/* ... but two reads cannot see them in opposite orders */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 10), mk(LC_PUT, 1, 0, 2, 0, 0, 10), mk(LC_GET, 1, LC_OK, 1, 0, 11, 12),
	      mk(LC_GET, 1, LC_OK, 2, 0, 13, 14), mk(LC_GET, 1, LC_OK, 1, 0, 15, 16));
	/* a value nobody wrote; a miss of an acknowledged key */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_OK, 9, 0, 2, 3));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 2, 3));
	/* deletes */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_DELETE, 1, LC_OK, 0, 0, 2, 3), mk(LC_GET, 1, LC_ABSENT, 0, 0, 4, 5),
	      mk(LC_DELETE, 1, LC_ABSENT, 0, 0, 6, 7));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_DELETE, 1, LC_OK, 0, 0, 2, 3), mk(LC_GET, 1, LC_OK, 1, 0, 4, 5));
	CHECK(0, mk(LC_DELETE, 1, LC_OK, 0, 0, 2, 3));
	/* keys are independent */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 2, 0, 2, 0, 0, 1), mk(LC_GET, 2, LC_OK, 2, 0, 2, 3),
	      mk(LC_GET, 1, LC_OK, 1, 0, 2, 3));
}

Test(lincheck, unknown_outcomes_may_or_may_not_take_effect)
{
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, -1), mk(LC_GET, 1, LC_OK, 1, 0, 10, 11));
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, -1), mk(LC_GET, 1, LC_OK, 1, 0, 10, 11),
	      mk(LC_GET, 1, LC_OK, 2, 0, 12, 13));
	/* once seen to have taken effect, it cannot be undone */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, -1), mk(LC_GET, 1, LC_OK, 2, 0, 10, 11),
	      mk(LC_GET, 1, LC_OK, 1, 0, 12, 13));
	/* nor take effect before it was invoked */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_GET, 1, LC_OK, 2, 0, 2, 3), mk(LC_PUT, 1, 0, 2, 0, 4, -1));
	CHECK(1, mk(LC_PUT, 1, 0, 1, 0, 0, 1), mk(LC_DELETE, 1, 0, 0, 0, 2, -1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 10, 11));
}

Test(lincheck, ttl_as_layout_h_defines_it)
{
	/* alive well before ttl, gone well after */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 50, 51), mk(LC_GET, 1, LC_ABSENT, 0, 0, 200, 201));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 200, 201));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 50, 51));
	/* near the expiry the window [inv + ttl, cmp + ttl + 1 ms] decides, and
	 * narrows: alive at 100.5, gone at 100.8 is fine; alive again at 101 is not */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_OK, 1, 0, 100.5, 100.6),
	      mk(LC_GET, 1, LC_ABSENT, 0, 0, 100.7, 100.8));
	CHECK(0, mk(LC_PUT, 1, 0, 1, 100, 0, 1), mk(LC_GET, 1, LC_ABSENT, 0, 0, 100.5, 100.6),
	      mk(LC_GET, 1, LC_OK, 1, 0, 100.7, 100.8));
	/* The history that broke TTLs once: k held a TTL item not yet expired, then a newer
	 * value without TTL was acknowledged; a concurrent GET that missed fits
	 * no order (before the newer write the item was alive; after it, the
	 * newer value is). */
	CHECK(0, mk(LC_PUT, 1, 0, 1, 1000, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, 3), mk(LC_GET, 1, LC_ABSENT, 0, 0, 2.5, 1500));
	/* had the newer write not completed before the item expired, the miss fits */
	CHECK(1, mk(LC_PUT, 1, 0, 1, 1000, 0, 1), mk(LC_PUT, 1, 0, 2, 0, 2, 1200), mk(LC_GET, 1, LC_ABSENT, 0, 0, 2.5, 1500));
}

Test(lincheck, history_lines_round_trip)
{
	struct lc_op a = mk(LC_PUT, 7, 0, 123456789012ull, 5, 1.5, -1), b;
	char line[256];

	lc_format(&a, line, sizeof(line));
	cr_assert_eq(lc_parse(line, &b), 0, "%s", line);
	cr_expect(memcmp(&a, &b, sizeof(a)) == 0, "%s", line);
	cr_expect_neq(lc_parse("c=1 k=1 op=X r=0 v=0 ttl=0 inv=1 cmp=2", &b), 0);
	cr_expect_neq(lc_parse("c=1 k=1 op=G r=0 v=0 ttl=0 inv=5 cmp=2", &b), 0, "completes before it starts");
}

/* ---- concurrent histories of real clients ---------------------------------- */

#define THREADS 4
#define KEYS 3
#define OPS_PER_THREAD 250
#define SEEDS 24

/* Stretch about one operation in 12 by up to 150 us: READs and WRITEs of
 * different clients then overlap in more ways. */
static __thread uint64_t hook_rng;
static int stretch(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	(void)op;
	if (lc_rand(&hook_rng) % 12 == 0)
		usleep((useconds_t)(lc_rand(&hook_rng) % 150));
	return 0;
}

/* ... and hold about one READ in 8 for up to 2 ms after it copied its bytes,
 * before its completion is seen: items expire and are replaced meanwhile. */
static void hold_read(void *arg, const struct kvi_rop *op, void *dst, const void *src)
{
	(void)arg;
	(void)op;
	(void)dst;
	(void)src;
	if (lc_rand(&hook_rng) % 8 == 0)
		usleep((useconds_t)(lc_rand(&hook_rng) % 2000));
}

/* Delayed commits: about one slot WRITE in 6 -- a commit, and the
 * access marks its doorbell carries -- executes up to delay_us late, as a
 * work request retransmitted after lost packets does, while the reclaimer
 * runs. 0: none. */
static uint64_t g_delay_us, g_heap_off;
static int delay_commit(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	if (g_delay_us && op->kind == KVI_ROP_WRITE && op->len == 8 && op->roff < g_heap_off &&
	    lc_rand(&hook_rng) % 6 == 0)
		usleep((useconds_t)(lc_rand(&hook_rng) % g_delay_us));
	return stretch(arg, rm, op);
}

struct worker {
	pthread_t t;
	struct kvt_env *env;
	unsigned id;
	uint64_t seed;
	int slow;
	/* Two operations in flight at once on the handle: the second PUT
	 * (often a large one) may take a new extent, sealing the one the first
	 * reserved its object in before the first commits. */
	int pairs;
	struct lc_op ops[OPS_PER_THREAD];
	size_t n;
	unsigned failed, unknown;
	const char *why;
};

#define BIG_VALUE 16000

/* One operation chosen at random, prepared in *op and *o (key, value and
 * got are its buffers); big: a PUT's value may be up to BIG_VALUE bytes. */
static void pick(struct worker *w, uint64_t *rng, unsigned i, int big, struct kvc_op *op, struct lc_op *o, char *k,
		 char *v, char *got, size_t cap)
{
	unsigned key = (unsigned)(lc_rand(rng) % KEYS), dice = (unsigned)(lc_rand(rng) % 100);

	*o = (struct lc_op){ .key = key, .client = (uint16_t)w->id };
	snprintf(k, 16, "key-%u", key);
	if (dice < 40) {
		o->kind = LC_GET;
		*op = (struct kvc_op){ .type = KVC_OP_GET, .key = k, .key_len = strlen(k), .buf = got,
				       .buf_len = cap - 1 };
	} else if (dice < 85) {
		uint64_t ttl = lc_rand(rng) % 2 ? 1 + lc_rand(rng) % 12 : 0;
		unsigned len = (unsigned)(lc_rand(rng) % (big ? BIG_VALUE : 3000));

		o->kind = LC_PUT;
		o->value = ((uint64_t)w->id << 32) | i;
		o->ttl_ns = ttl * MSN;
		/* values of varied length: objects of several sizes in the segments */
		snprintf(v, cap, "v%" PRIu64 ":%0*u", o->value, (int)len, 0);
		*op = (struct kvc_op){ .type = KVC_OP_PUT, .key = k, .key_len = strlen(k), .value = v,
				       .value_len = strlen(v), .ttl_ms = ttl };
	} else {
		o->kind = LC_DELETE;
		*op = (struct kvc_op){ .type = KVC_OP_DELETE, .key = k, .key_len = strlen(k) };
	}
}

/* The outcome rc of o (got[0..len): a GET's value) into the history.
 * Returns 1 when it failed cleanly: left out, and the handle is replaced. */
static int record(struct worker *w, struct lc_op *o, int rc, char *got, size_t len)
{
	if (o->kind == LC_GET) {
		got[rc == 0 ? len : 0] = '\0';
		if (rc == 0 && sscanf(got, "v%" SCNu64 ":", &o->value) != 1)
			w->why = "a GET returned bytes no client wrote";
	}
	if (o->kind != LC_PUT)
		o->result = rc == 0 ? LC_OK : LC_ABSENT;
	if (rc == KVC_ECORRUPT) {
		/* a slot naming memory that was zeroed or reused */
		w->why = "KVC_ECORRUPT: a slot names an object that is not there";
		return 0;
	}
	if (rc == KVC_EUNKNOWN) {
		o->cmp = LC_NEVER;
		w->unknown++;
	} else if (rc && rc != KVC_ENOTFOUND) {
		w->failed++; /* changed nothing: left out of the history */
		return 1;
	} else if (rc == KVC_ENOTFOUND && o->kind == LC_PUT) {
		w->why = "PUT answered KVC_ENOTFOUND";
	}
	w->ops[w->n++] = *o;
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct kvi_local_hooks hk = { .before_op = delay_commit, .after_read = hold_read };
	uint64_t rng = w->seed * 0x9e3779b97f4a7c15ull + w->id;
	unsigned nop = w->pairs ? 2 : 1;
	kvc_t *h = NULL;
	char k[2][16];
	static __thread char v[2][BIG_VALUE + 100], got[2][BIG_VALUE + 100];

	hook_rng = rng ^ 0x5555;
	for (unsigned i = 0; i + nop <= OPS_PER_THREAD && !w->why; i += nop) {
		struct kvc_op op[2];
		struct lc_op o[2];
		unsigned pending = 0, replace = 0;

		if (!h && kvt_env_client(w->env, &hk, lc_rand(&rng) % 2 ? 64 : 0, nop, &h)) {
			w->why = "cannot open a client";
			break;
		}
		for (unsigned j = 0; j < nop; j++) {
			pick(w, &rng, i + j, j == 1, &op[j], &o[j], k[j], v[j], got[j], sizeof(got[j]));
			o[j].inv = lc_now_ns();
			op[j].status = kvc_submit(h, &op[j]);
			if (op[j].status) /* not started */
				o[j].cmp = lc_now_ns();
			else
				pending |= 1u << j;
		}
		while (pending) {
			struct kvc_op *done[2];
			int n = kvc_poll(h, done, 2, -1);
			uint64_t now = lc_now_ns();

			for (int d = 0; d < n; d++) {
				unsigned j = done[d] == &op[0] ? 0 : 1;

				o[j].cmp = now;
				pending &= ~(1u << j);
			}
		}
		for (unsigned j = 0; j < nop; j++)
			replace |= record(w, &o[j], op[j].status, got[j], op[j].value_len);
		if (replace) {
			/* a failure may have broken the handle: a new one, and its
			 * locks released as kvserver does when a connection breaks
			 * (one it abandoned would stop its keys for good) */
			uint32_t id = kvi_client_conn(h, 0)->rm->client_id;

			kvc_destroy(h);
			h = NULL;
			kvt_env_fence_locks(w->env, id);
			continue;
		}
		/* let TTLs run out mid-history; with the reclaimer, let segments
		 * settle (max-op + 10 ms after sealing) while the clients run */
		if (w->slow || lc_rand(&rng) % 3 == 0)
			usleep((useconds_t)(lc_rand(&rng) % (w->slow ? 1500 : 400)));
	}
	kvc_destroy(h);
	return NULL;
}

static int g_stop;

static void *reclaimer_main(void *arg)
{
	struct kvs_reclaimer *r = arg;

	while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
		/* whatever the watermarks say: every settled segment, at once */
		if (kvs_reclaim_one(r) < 0)
			return (void *)"the reclaimer's connection failed";
		usleep(200);
	}
	return NULL;
}

/* seeds histories; every odd one (or, with delays, every one) with the
 * reclaimer running. exec_ms: the execution bound the core assumes;
 * delay_ms: how late a commit may execute. */
static void histories(uint64_t seeds, uint32_t exec_ms, uint32_t delay_ms)
{
	uint64_t ops = 0, states = 0, unknown = 0, failed = 0, reclaimed = 0;
	struct lc_op *all = malloc(sizeof(struct lc_op) * THREADS * OPS_PER_THREAD);

	cr_assert(all);
	for (uint64_t seed = 1; seed <= seeds; seed++) {
		/* small segments in a small heap, no eviction: the reclaimer (odd
		 * seeds) moves live items while clients read and write them */
		struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = 50, .exec_ms = exec_ms,
					   .quarantine_ms = 110 + exec_ms, .no_evict = 1 };
		static struct worker w[THREADS];
		struct kvs_reclaimer *rcl = NULL;
		struct kvs_core_stats cs;
		struct lc_report rep;
		struct kvt_env env;
		pthread_t rt;
		size_t n = 0;

		cr_assert_eq(kvt_env_init_opts(&env, 2, &o), 0);
		g_stop = 0;
		g_delay_us = (uint64_t)delay_ms * 1000u;
		g_heap_off = kvs_core_geometry(env.srv.core)->heap_off;
		if (seed % 2 || delay_ms) {
			cr_assert_eq(kvt_env_reclaimer(&env, NULL, &rcl), 0);
			cr_assert_eq(pthread_create(&rt, NULL, reclaimer_main, rcl), 0);
		}
		for (unsigned i = 0; i < THREADS; i++) {
			memset(&w[i], 0, sizeof(w[i]));
			w[i] = (struct worker){ .env = &env, .id = i + 1, .seed = seed, .slow = rcl != NULL,
						.pairs = delay_ms != 0 };
			cr_assert_eq(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
		}
		for (unsigned i = 0; i < THREADS; i++)
			pthread_join(w[i].t, NULL);
		if (rcl) { /* stop every thread before any assertion can end the test */
			void *rret = NULL;

			__atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
			pthread_join(rt, &rret);
			cr_assert_null(rret, "%s", (const char *)rret);
		}
		for (unsigned i = 0; i < THREADS; i++) {
			cr_assert_null(w[i].why, "seed %" PRIu64 " client %u: %s", seed, i + 1, w[i].why);
			memcpy(all + n, w[i].ops, w[i].n * sizeof(struct lc_op));
			n += w[i].n;
			unknown += w[i].unknown;
			failed += w[i].failed;
		}
		kvs_core_stats(env.srv.core, &cs);
		reclaimed += cs.rc.segments;
		cr_assert_eq(lc_check(all, n, 2000000, &rep), 1, "seed %" PRIu64 ": %s", seed, rep.why);
		ops += n;
		states += rep.states;
		kvs_reclaim_destroy(rcl);
		kvt_env_fini(&env);
	}
	g_delay_us = 0;
	printf("lincheck: %" PRIu64 " histories, %" PRIu64 " operations (%" PRIu64 " unknown outcomes, %" PRIu64
	       " failed and left out), %" PRIu64 " search states, %" PRIu64 " segments reclaimed meanwhile, "
	       "commits up to %u ms late: 0 violations\n",
	       seeds, ops, unknown, failed, states, reclaimed, delay_ms);
	free(all);
}

Test(lincheck, concurrent_histories_of_real_clients_are_linearizable, .timeout = 300)
{
	histories(SEEDS, 0, 0);
}

/* Commits execute up to 100 ms late (an execution bound of 110 ms: settle
 * 50 + 110 + 10 ms) while the reclaimer runs. The settle time must cover the
 * bound: else a late commit names a reclaimed, zeroed segment, the PUT is
 * acknowledged and the key then fails KVC_ECORRUPT. */
Test(lincheck, histories_with_commits_landing_late_while_the_reclaimer_runs, .timeout = 300)
{
	histories(8, 110, 100);
}
