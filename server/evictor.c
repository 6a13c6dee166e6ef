#define _GNU_SOURCE /* pthread_setname_np */
#include "evictor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"
#include "loopkey.h"
#include "migrate.h"
#include "reclaim.h"
#include "rmem_verbs.h"

#define CONNECT_TIMEOUT_MS 5000
#define IDLE_WAKE_MS 1000 /* look at the quarantine at least this often */
#define RECONNECT_MS 500

struct kvs_evictor {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int kicked, stop, started;
	pthread_t t;
	struct kvs_core *core;
	struct kvs_migrate_opts mo;
	struct kvs_migrator *mig; /* survives reconnections: a migration resumes */
	char host[256], port[16], device[64];
};

int kvs_evictor_create(struct kvs_evictor **out)
{
	struct kvs_evictor *ev = calloc(1, sizeof(*ev));
	pthread_condattr_t ca;

	*out = NULL;
	if (!ev)
		return KVC_ENOMEM;
	pthread_mutex_init(&ev->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ev->cv, &ca);
	pthread_condattr_destroy(&ca);
	*out = ev;
	return 0;
}

void kvs_evictor_wake(void *arg)
{
	struct kvs_evictor *ev = arg;

	pthread_mutex_lock(&ev->mu);
	ev->kicked = 1;
	pthread_cond_signal(&ev->cv);
	pthread_mutex_unlock(&ev->mu);
}

/* Sleep up to ms or until kicked or stopped; returns 1 when stopping. */
static int nap(struct kvs_evictor *ev, int ms)
{
	struct timespec ts = kvi_abstime_in(CLOCK_MONOTONIC, ms);
	int stop;

	pthread_mutex_lock(&ev->mu);
	while (!ev->kicked && !ev->stop)
		if (pthread_cond_timedwait(&ev->cv, &ev->mu, &ts) == ETIMEDOUT)
			break;
	ev->kicked = 0;
	stop = ev->stop;
	pthread_mutex_unlock(&ev->mu);
	return stop;
}

static struct kvs_reclaimer *connect_reclaimer(struct kvs_evictor *ev)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvs_reclaimer *r;
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	int rc;

	rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = ev->host, .port = ev->port,
								 .device = ev->device[0] ? ev->device : NULL,
								 .lbuf_size = 4096, .timeout_ms = CONNECT_TIMEOUT_MS,
								 .role = KVI_ROLE_LOOPBACK,
								 .secret = kvs_loopback_key(),
								 .secret_len = KVI_AUTH_LOOPBACK_KEY_LEN },
				    &rm, &w, &e);
	if (rc) {
		kvi_ev_warn("reclaimer_connect_failed", "reason=%s msg=%s", e.msg, "no loopback connection yet: retrying");
		return NULL;
	}
	if (kvs_reclaimer_create(ev->core, rm, NULL, &r)) {
		kvi_ev_err("reclaimer_failed", "reason=%s", "out of memory");
		return NULL;
	}
	kvs_reclaimer_set_migrator(r, ev->mig);
	kvi_ev_info("reclaimer_connected", "client=%u", w.client_id);
	return r;
}

static void *evictor_main(void *arg)
{
	struct kvs_evictor *ev = arg;
	struct kvs_reclaimer *r = NULL;
	int ms = 0;

	pthread_setname_np(pthread_self(), "kvs-reclaim"); /* top -H, perf, tests */

	while (!nap(ev, ms)) {
		int rc;

		if (!r && !(r = connect_reclaimer(ev))) {
			ms = RECONNECT_MS;
			continue;
		}
		rc = kvs_reclaim_run(r);
		if (rc < 0) {
			kvi_ev_err("reclaimer_loopback_failed", "reason=%s msg=%s", kvc_strerror(rc), "reconnecting");
			kvs_reclaimer_destroy(r);
			r = NULL;
			ms = RECONNECT_MS;
			continue;
		}
		/* Wake again when something settles or leaves quarantine, or
		 * when the migrator has work (at once while it migrates). */
		ms = kvs_core_tick(ev->core, IDLE_WAKE_MS);
		if (ms < 1)
			ms = 1;
		ms = kvs_migrate_next_ms(ev->mig, ms);
	}
	kvs_reclaimer_destroy(r);
	return NULL;
}

void kvs_evictor_set_migrate(struct kvs_evictor *ev, const struct kvs_migrate_opts *o)
{
	ev->mo = *o;
}

int kvs_evictor_start(struct kvs_evictor *ev, struct kvs_core *core, const char *host, const char *port,
		      const char *device)
{
	ev->core = core;
	if (kvs_migrator_create(core, &ev->mo, &ev->mig))
		return KVC_ENOMEM;
	snprintf(ev->host, sizeof(ev->host), "%s", host);
	snprintf(ev->port, sizeof(ev->port), "%s", port);
	snprintf(ev->device, sizeof(ev->device), "%s", device ? device : "");
	if (pthread_create(&ev->t, NULL, evictor_main, ev))
		return KVC_ESYS;
	ev->started = 1;
	return 0;
}

void kvs_evictor_destroy(struct kvs_evictor *ev)
{
	if (!ev)
		return;
	if (ev->started) {
		pthread_mutex_lock(&ev->mu);
		ev->stop = 1;
		pthread_cond_signal(&ev->cv);
		pthread_mutex_unlock(&ev->mu);
		pthread_join(ev->t, NULL);
	}
	kvs_migrator_destroy(ev->mig);
	pthread_cond_destroy(&ev->cv);
	pthread_mutex_destroy(&ev->mu);
	free(ev);
}
