/* Threaded reclamation scenario: two writers churn a heap several times over
 * while a reader reads their keys and the reclaimer thread moves, evicts and
 * frees segments underneath them (real threads, local transport). What must
 * hold: no value a writer did not write, no writer's sequence going backwards
 * for any reader, and a writer reading its own key sees its last
 * acknowledged value (or a newer attempt that timed out), or a miss when the
 * item was evicted -- never an older one. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "scenarios.h"

#define WRITERS 2
#define KEYS 100
#define HEAP_TIMES 4

struct writer {
	pthread_t t;
	struct kvt_env *env;
	unsigned id;
	uint64_t bytes_goal;
	uint64_t acked[KEYS], tried[KEYS];
	unsigned timeouts;
	const char *why;
};

struct reader {
	pthread_t t;
	struct kvt_env *env;
	uint64_t seen[WRITERS][KEYS];
	int stop;
	unsigned hits, misses;
	const char *why;
};

static struct kvs_reclaimer *g_rcl;
static int g_stop_reclaimer;

static int parse_val(const char *v, size_t len, unsigned *w, unsigned long long *seq)
{
	char buf[32];

	if (len < 4)
		return -1;
	memcpy(buf, v, len < sizeof(buf) - 1 ? len : sizeof(buf) - 1);
	buf[len < sizeof(buf) - 1 ? len : sizeof(buf) - 1] = '\0';
	return sscanf(buf, "w%u:%llu:", w, seq) == 2 ? 0 : -1;
}

static void *writer_main(void *arg)
{
	struct writer *wr = arg;
	uint64_t written = 0, seq = 0, rng = 0x2545f4914f6cdd1dull * wr->id;
	char k[32], v[420], got[512];
	kvc_t *h = NULL;

	while (written < wr->bytes_goal && !wr->why) {
		unsigned i;
		int rc;

		if (!h && kvt_env_client(wr->env, NULL, 64, 4, &h)) {
			wr->why = "cannot open a client";
			break;
		}
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		i = (unsigned)(rng % KEYS);
		snprintf(k, sizeof(k), "w%u-k%u", wr->id, i);
		if (rng % 4) {
			snprintf(v, sizeof(v), "w%u:%llu:%0380u", wr->id, (unsigned long long)++seq, 7u);
			wr->tried[i] = seq;
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
			if (rc == 0) {
				wr->acked[i] = seq;
				written += strlen(v) + 64;
			}
		} else {
			size_t len = 0;
			unsigned w;
			unsigned long long s;

			rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
			if (rc == 0 && (parse_val(got, len, &w, &s) || w != wr->id))
				wr->why = "a writer read a value it did not write";
			else if (rc == 0 && (s < wr->acked[i] || s > wr->tried[i]))
				wr->why = "a writer read an older value than its last acknowledged one";
			else if (rc == KVC_ENOTFOUND)
				rc = 0; /* never written, or evicted */
		}
		if (rc == KVC_ETIMEDOUT || rc == KVC_ESERVERGONE) {
			/* A loaded machine: the handle may be broken; start over. */
			wr->timeouts++;
			kvc_destroy(h);
			h = NULL;
			continue;
		}
		if (rc && !wr->why)
			wr->why = "unexpected error from a writer's operation";
	}
	kvc_destroy(h);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	char k[32], got[512];
	kvc_t *h = NULL;

	while (!__atomic_load_n(&rd->stop, __ATOMIC_ACQUIRE) && !rd->why) {
		unsigned w, i, pw;
		unsigned long long s;
		size_t len = 0;
		int rc;

		if (!h && kvt_env_client(rd->env, NULL, 256, 4, &h)) {
			rd->why = "cannot open the reader";
			break;
		}
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		w = (unsigned)(rng % WRITERS);
		i = (unsigned)((rng >> 8) % (KEYS / 4)); /* a hot quarter: read, so moved */
		snprintf(k, sizeof(k), "w%u-k%u", w + 1, i);
		rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
		if (rc == 0) {
			rd->hits++;
			if (parse_val(got, len, &pw, &s) || pw != w + 1)
				rd->why = "a reader got a value its writer never wrote";
			else if (s < rd->seen[w][i])
				rd->why = "a writer's sequence went backwards for a reader";
			else
				rd->seen[w][i] = s;
		} else if (rc == KVC_ENOTFOUND) {
			rd->misses++;
		} else if (rc == KVC_ETIMEDOUT || rc == KVC_ESERVERGONE) {
			kvc_destroy(h);
			h = NULL;
		} else {
			rd->why = "unexpected error from a GET";
		}
	}
	kvc_destroy(h);
	return NULL;
}

static void *reclaimer_main(void *arg)
{
	struct kvt_env *env = arg;

	while (!__atomic_load_n(&g_stop_reclaimer, __ATOMIC_ACQUIRE)) {
		if (kvs_reclaim_run(g_rcl) < 0)
			return (void *)"the reclaimer's connection failed";
		kvs_core_tick(env->srv.core, 0);
		usleep(500);
	}
	return NULL;
}

const char *reclaim_races_readers_and_writers(void)
{
	static struct writer wr[WRITERS];
	static struct reader rd;
	struct kvs_core_opts o = { .segment_size = 64u << 10, .max_op_ms = 500, .quarantine_ms = 1010 };
	struct kvs_core_stats st;
	struct kvt_env env;
	const char *why = NULL;
	pthread_t rt;
	void *rret = NULL;

	if (kvt_env_init_opts(&env, 2, &o))
		return "cannot create the environment";
	if (kvt_env_reclaimer(&env, NULL, &g_rcl)) {
		kvt_env_fini(&env);
		return "cannot create the reclaimer";
	}
	g_stop_reclaimer = 0;
	memset(&rd, 0, sizeof(rd));
	rd.env = &env;
	if (pthread_create(&rt, NULL, reclaimer_main, &env) || pthread_create(&rd.t, NULL, reader_main, &rd))
		return "cannot start a thread";
	for (unsigned i = 0; i < WRITERS; i++) {
		memset(&wr[i], 0, sizeof(wr[i]));
		wr[i].env = &env;
		wr[i].id = i + 1;
		wr[i].bytes_goal = HEAP_TIMES * kvs_core_geometry(env.srv.core)->heap_size / WRITERS;
		if (pthread_create(&wr[i].t, NULL, writer_main, &wr[i]))
			return "cannot start a thread";
	}
	for (unsigned i = 0; i < WRITERS; i++) {
		pthread_join(wr[i].t, NULL);
		if (wr[i].why && !why)
			why = wr[i].why;
	}
	__atomic_store_n(&rd.stop, 1, __ATOMIC_RELEASE);
	pthread_join(rd.t, NULL);
	__atomic_store_n(&g_stop_reclaimer, 1, __ATOMIC_RELEASE);
	pthread_join(rt, &rret);
	if (!why)
		why = rd.why ? rd.why : (const char *)rret;
	kvs_core_stats(env.srv.core, &st);
	if (!why && st.rc.segments < HEAP_TIMES)
		why = "the heap was written several times over but hardly anything was reclaimed";
	if (!why && rd.hits == 0)
		why = "the reader never found anything";
	kvs_reclaim_destroy(g_rcl);
	kvt_env_fini(&env);
	return why;
}
