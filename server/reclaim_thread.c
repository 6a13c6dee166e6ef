#define _GNU_SOURCE /* pthread_setname_np */
#include "reclaim_thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "flush.h"
#include "kvclient_errors.h"
#include "log.h"
#include "loopkey.h"
#include "migrate.h"
#include "reclaim.h"
#include "rmem_verbs.h"

#define CONNECT_TIMEOUT_MS 5000
#define IDLE_WAKE_MS 1000 /* look at the quarantine at least this often */
#define RECONNECT_MS 500

struct kvs_reclaim_thread {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int kicked, stop, started;
	pthread_t t;
	struct kvs_core *core;
	struct kvs_migrate_opts mo;
	struct kvs_migrator *mig; /* survives reconnections: a migration resumes */
	struct kvs_flusher *fl;   /* ... and so does a flush's walk */
	char host[256], port[16], device[64];
};

int kvs_reclaim_thread_create(struct kvs_reclaim_thread **out)
{
	struct kvs_reclaim_thread *rt = calloc(1, sizeof(*rt));
	pthread_condattr_t ca;

	*out = NULL;
	if (!rt)
		return KVC_ENOMEM;
	pthread_mutex_init(&rt->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rt->cv, &ca);
	pthread_condattr_destroy(&ca);
	*out = rt;
	return 0;
}

void kvs_reclaim_thread_wake(void *arg)
{
	struct kvs_reclaim_thread *rt = arg;

	pthread_mutex_lock(&rt->mu);
	rt->kicked = 1;
	pthread_cond_signal(&rt->cv);
	pthread_mutex_unlock(&rt->mu);
}

/* Sleep up to ms or until kicked or stopped; returns 1 when stopping. */
static int nap(struct kvs_reclaim_thread *rt, int ms)
{
	struct timespec ts = kvi_abstime_in(CLOCK_MONOTONIC, ms);
	int stop;

	pthread_mutex_lock(&rt->mu);
	while (!rt->kicked && !rt->stop)
		if (pthread_cond_timedwait(&rt->cv, &rt->mu, &ts) == ETIMEDOUT)
			break;
	rt->kicked = 0;
	stop = rt->stop;
	pthread_mutex_unlock(&rt->mu);
	return stop;
}

static struct kvs_reclaimer *connect_reclaimer(struct kvs_reclaim_thread *rt)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvs_reclaimer *r;
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	int rc;

	rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = rt->host, .port = rt->port,
								 .device = rt->device[0] ? rt->device : NULL,
								 .lbuf_size = 4096, .timeout_ms = CONNECT_TIMEOUT_MS,
								 .role = KVI_ROLE_LOOPBACK,
								 .secret = kvs_loopkey(),
								 .secret_len = KVI_AUTH_LOOPBACK_KEY_LEN },
				    &rm, &w, &e);
	if (rc) {
		kvi_ev_warn("reclaimer_connect_failed", "reason=%s msg=%s", e.msg, "no loopback connection yet: retrying");
		return NULL;
	}
	if (kvs_reclaim_create(rt->core, rm, NULL, &r)) {
		kvi_ev_err("reclaimer_failed", "reason=%s", "out of memory");
		return NULL;
	}
	kvs_reclaim_set_migrator(r, rt->mig);
	kvs_reclaim_set_flusher(r, rt->fl);
	kvi_ev_info("reclaimer_connected", "client=%u", w.client_id);
	return r;
}

static void *thread_main(void *arg)
{
	struct kvs_reclaim_thread *rt = arg;
	struct kvs_reclaimer *r = NULL;
	int ms = 0;

	pthread_setname_np(pthread_self(), "kvs-reclaim"); /* top -H, perf, tests */

	while (!nap(rt, ms)) {
		int rc;

		if (!r && !(r = connect_reclaimer(rt))) {
			ms = RECONNECT_MS;
			continue;
		}
		rc = kvs_reclaim_run(r);
		if (rc < 0) {
			kvi_ev_err("reclaimer_loopback_failed", "reason=%s msg=%s", kvc_strerror(rc), "reconnecting");
			kvs_reclaim_destroy(r);
			r = NULL;
			ms = RECONNECT_MS;
			continue;
		}
		/* Wake again when something settles or leaves quarantine, or
		 * when the migrator has work (at once while it migrates), or a
		 * flush (its walk, or a delayed one coming due). */
		ms = kvs_core_tick(rt->core, IDLE_WAKE_MS);
		if (ms < 1)
			ms = 1;
		ms = kvs_migrate_next_ms(rt->mig, ms);
		ms = kvs_flush_next_ms(rt->fl, ms);
	}
	kvs_reclaim_destroy(r);
	return NULL;
}

void kvs_reclaim_thread_set_migrate(struct kvs_reclaim_thread *rt, const struct kvs_migrate_opts *o)
{
	rt->mo = *o;
}

int kvs_reclaim_thread_start(struct kvs_reclaim_thread *rt, struct kvs_core *core, const char *host,
			     const char *port, const char *device)
{
	rt->core = core;
	if (kvs_migrate_create(core, &rt->mo, &rt->mig) || kvs_flush_create(core, &rt->fl))
		return KVC_ENOMEM;
	snprintf(rt->host, sizeof(rt->host), "%s", host);
	snprintf(rt->port, sizeof(rt->port), "%s", port);
	snprintf(rt->device, sizeof(rt->device), "%s", device ? device : "");
	if (pthread_create(&rt->t, NULL, thread_main, rt))
		return KVC_ESYS;
	rt->started = 1;
	return 0;
}

void kvs_reclaim_thread_destroy(struct kvs_reclaim_thread *rt)
{
	if (!rt)
		return;
	if (rt->started) {
		pthread_mutex_lock(&rt->mu);
		rt->stop = 1;
		pthread_cond_signal(&rt->cv);
		pthread_mutex_unlock(&rt->mu);
		pthread_join(rt->t, NULL);
	}
	kvs_migrate_destroy(rt->mig);
	kvs_flush_destroy(rt->fl);
	pthread_cond_destroy(&rt->cv);
	pthread_mutex_destroy(&rt->mu);
	free(rt);
}
