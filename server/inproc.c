#include "inproc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "member_ctrl.h"

int kvs_inproc_init(struct kvs_inproc *s, uint64_t region_bytes, const struct kvs_core_opts *o,
		    struct kvi_errbuf *e)
{
	int rc;

	memset(s, 0, sizeof(*s));
	s->next_id = 1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->fl_mu, NULL);
	pthread_cond_init(&s->fl_cv, NULL);
	s->reg = kvi_local_region_create(region_bytes);
	if (!s->reg) {
		snprintf(e->msg, sizeof(e->msg), "cannot map a %llu-byte region", (unsigned long long)region_bytes);
		pthread_mutex_destroy(&s->lock);
		pthread_mutex_destroy(&s->fl_mu);
		pthread_cond_destroy(&s->fl_cv);
		return KVC_ENOMEM;
	}
	rc = kvs_core_create(kvi_local_region_base(s->reg), region_bytes, o, &s->core, e);
	if (rc) {
		kvi_local_region_destroy(s->reg);
		s->reg = NULL;
		pthread_mutex_destroy(&s->lock);
		pthread_mutex_destroy(&s->fl_mu);
		pthread_cond_destroy(&s->fl_cv);
	}
	return rc;
}

void kvs_inproc_fini(struct kvs_inproc *s)
{
	if (s->rcl_running) {
		__atomic_store_n(&s->rcl_stop, 1, __ATOMIC_RELEASE);
		pthread_join(s->rcl_thread, NULL);
	}
	if (s->fl_running) {
		pthread_mutex_lock(&s->fl_mu);
		s->fl_stop = 1;
		pthread_cond_signal(&s->fl_cv);
		pthread_mutex_unlock(&s->fl_mu);
		pthread_join(s->fl_thread, NULL);
	}
	kvi_rmem_destroy(s->fl_rm);
	kvs_reclaim_destroy(s->rcl);
	kvs_flush_destroy(s->fl);
	kvs_members_destroy(s->members);
	kvs_core_destroy(s->core);
	kvi_local_region_destroy(s->reg);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->fl_mu);
	pthread_cond_destroy(&s->fl_cv);
	memset(s, 0, sizeof(*s));
}

int kvs_inproc_leases(struct kvs_inproc *s, uint32_t lease_ms, uint32_t renew_ms)
{
	uint32_t max_op, quarantine;
	uint16_t flags;

	kvs_core_limits(s->core, &max_op, &quarantine, &flags);
	s->renew_ms = renew_ms;
	return kvs_members_create(&s->members, lease_ms, max_op);
}

/* kvserver's lock_report (server/main.c), but for what needs a network: a
 * word is changed with the CPU (the local transport's atomics are the CPU's),
 * and a condemned owner is recorded, not expelled. */
static void lock_report(struct kvs_inproc *s, uint32_t reporter, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_report_action a;
	uint64_t off, current;

	if (kvs_member_ctrl_report(s->members, s->core, reporter, req, resp, &a, &off, &current))
		return;
	s->verdicts[a.verdict]++;
	if (a.set)
		__atomic_compare_exchange_n((uint64_t *)(void *)(kvs_core_region(s->core) + off), &a.set_from, a.set_to,
					    0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	if (a.fence_owner)
		s->fenced_owner = a.fence_owner;
}

/* The flush thread: kvs_flush_run whenever there is a walk to do, else
 * asleep until kicked (a FLUSH) or a delayed flush comes due. */
static void *flusher_main(void *arg)
{
	struct kvs_inproc *s = arg;

	for (;;) {
		int rc = kvs_flush_run(s->fl, s->fl_rm, kvi_rmem_lbuf(s->fl_rm, NULL), KVS_FLUSH_LBUF);
		int ms = rc < 0 ? 1000 : kvs_flush_next_ms(s->fl, 1000);
		struct timespec ts = kvi_abstime_in(CLOCK_REALTIME, ms);

		pthread_mutex_lock(&s->fl_mu);
		while (ms > 0 && !s->fl_kick && !s->fl_stop)
			if (pthread_cond_timedwait(&s->fl_cv, &s->fl_mu, &ts))
				break;
		s->fl_kick = 0;
		if (s->fl_stop) {
			pthread_mutex_unlock(&s->fl_mu);
			return NULL;
		}
		pthread_mutex_unlock(&s->fl_mu);
	}
}

/* A FLUSH came and nobody walks yet: the flush thread, over a loopback of
 * its own. Under s->lock. 0 or a code (then FLUSH is answered KVC_ENOTSUP). */
static int start_flusher(struct kvs_inproc *s)
{
	int rc = kvs_inproc_loopback(s, KVS_FLUSH_LBUF, NULL, kvs_inproc_new_id(s), &s->fl_rm);

	if (rc)
		return rc;
	if ((rc = kvs_flush_create(s->core, &s->fl)) != 0)
		return rc;
	if (pthread_create(&s->fl_thread, NULL, flusher_main, s))
		return KVC_ESYS; /* the flusher stays attached: fini frees it */
	s->fl_running = 1;
	return 0;
}

int kvs_inproc_ctrl(void *arg, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_inproc *s = arg;
	int rc = 0, kick;

	pthread_mutex_lock(&s->lock);
	if (req->type == KVI_CTRL_FLUSH && !s->fl && !kvs_core_has_flusher(s->core))
		start_flusher(s);
	kick = req->type == KVI_CTRL_FLUSH && s->fl_running;
	if (s->members && req->type == KVI_CTRL_LEASE_RENEW)
		kvs_member_ctrl_renew(s->members, s->core, client_id, s->renew_ms, req, resp);
	else if (s->members && req->type == KVI_CTRL_LOCK_REPORT)
		lock_report(s, client_id, req, resp);
	else
		rc = kvs_core_ctrl(s->core, client_id, req, resp);
	pthread_mutex_unlock(&s->lock);
	if (kick) {
		pthread_mutex_lock(&s->fl_mu);
		s->fl_kick = 1;
		pthread_cond_signal(&s->fl_cv);
		pthread_mutex_unlock(&s->fl_mu);
	}
	return rc;
}

uint32_t kvs_inproc_new_id(struct kvs_inproc *s)
{
	return __atomic_fetch_add(&s->next_id, 1, __ATOMIC_RELAXED);
}

int kvs_inproc_loopback(struct kvs_inproc *s, size_t lbuf, const struct kvi_local_hooks *hooks, uint32_t id,
			struct kvi_rmem **out)
{
	uint32_t max_op, quarantine;
	uint16_t flags;
	int rc = kvi_rmem_local_create(s->reg, lbuf, hooks, out);

	if (rc)
		return rc;
	kvi_rmem_local_set_ctrl(*out, kvs_inproc_ctrl, s, id);
	kvs_core_limits(s->core, &max_op, &quarantine, &flags);
	kvi_rmem_local_set_limits(*out, max_op, quarantine, flags);
	/* As kvserver's welcome does: the core's geometry, never the region's. */
	kvi_rmem_local_set_geometry(*out, kvs_core_geometry(s->core));
	return 0;
}

int kvs_inproc_connect(struct kvs_inproc *s, size_t lbuf, const struct kvi_local_hooks *hooks, struct kvi_rmem **out)
{
	uint32_t id = kvs_inproc_new_id(s);
	int rc = kvs_inproc_loopback(s, lbuf, hooks, id, out);

	if (rc || !s->members)
		return rc;
	pthread_mutex_lock(&s->lock);
	rc = kvs_members_join(s->members, id, 1, kvi_mono_ns());
	pthread_mutex_unlock(&s->lock);
	return rc;
}

unsigned kvs_inproc_expire(struct kvs_inproc *s, unsigned *lapsed)
{
	uint32_t ids[64];
	unsigned n, expelled = 0;

	*lapsed = 0;
	pthread_mutex_lock(&s->lock);
	n = kvs_members_expired(s->members, kvi_mono_ns(), ids, 64);
	for (unsigned i = 0; i < n; i++) {
		uint64_t addr;
		uint32_t rkey;

		if (kvs_members_probe(s->members, ids[i], &addr, &rkey) &&
		    kvs_members_probe_start(s->members, ids[i]) == 0 &&
		    __atomic_load_n((const uint64_t *)(uintptr_t)addr, __ATOMIC_SEQ_CST) == 0) {
			if (kvs_members_lapse(s->members, ids[i], kvi_mono_ns()) == 1)
				kvs_core_client_left(s->core, ids[i]);
			(*lapsed)++;
		} else {
			kvs_members_expel(s->members, ids[i]);
			expelled++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return expelled;
}

static void *reclaimer_main(void *arg)
{
	struct kvs_inproc *s = arg;

	while (!__atomic_load_n(&s->rcl_stop, __ATOMIC_ACQUIRE)) {
		if (kvs_reclaim_run(s->rcl) < 0)
			break;
		kvs_core_tick(s->core, 0);
		usleep(100);
	}
	return NULL;
}

int kvs_inproc_run_reclaimer(struct kvs_inproc *s)
{
	struct kvi_rmem *rm;
	int rc = kvs_inproc_loopback(s, 4096, NULL, kvs_inproc_new_id(s), &rm);

	if (rc)
		return rc;
	rc = kvs_reclaim_create(s->core, rm, NULL, &s->rcl);
	if (rc)
		return rc;
	/* Flushes on this thread too, unless a flusher walks already. */
	pthread_mutex_lock(&s->lock);
	if (!s->fl && !kvs_core_has_flusher(s->core) && kvs_flush_create(s->core, &s->fl) == 0)
		kvs_reclaim_set_flusher(s->rcl, s->fl);
	pthread_mutex_unlock(&s->lock);
	if (pthread_create(&s->rcl_thread, NULL, reclaimer_main, s)) {
		kvs_reclaim_destroy(s->rcl);
		s->rcl = NULL;
		return KVC_ENOMEM;
	}
	s->rcl_running = 1;
	return 0;
}

/* The server, on first use. Caller holds sh->mu. */
static int share_start(struct kvs_inproc_shared *sh, uint64_t region_bytes, const struct kvs_core_opts *o,
		       int prefault, char *err, size_t errlen)
{
	struct kvi_errbuf e = { { 0 } };

	if (kvs_inproc_init(&sh->s, region_bytes, o, &e)) {
		snprintf(err, errlen, "cannot create the in-process server: %s", e.msg[0] ? e.msg : "out of memory");
		return -1;
	}
	if (prefault) {
		volatile unsigned char *b = kvi_local_region_base(sh->s.reg);

		/* A write of what is there (the core has formatted it; nothing
		 * else runs yet): a read alone would map the shared zero page. */
		for (uint64_t off = 0; off < region_bytes; off += 4096)
			b[off] = b[off];
	}
	if (kvs_inproc_run_reclaimer(&sh->s)) {
		kvs_inproc_fini(&sh->s);
		snprintf(err, errlen, "cannot start the in-process server's reclaimer");
		return -1;
	}
	return 0;
}

int kvs_inproc_share(struct kvs_inproc_shared *sh, uint64_t region_bytes, const struct kvs_core_opts *o,
		     int prefault, struct kvi_rmem **out, char *err, size_t errlen)
{
	struct kvi_rmem *rm = NULL;
	int rc = 0;

	pthread_mutex_lock(&sh->mu);
	if (!sh->users && share_start(sh, region_bytes, o, prefault, err, errlen))
		rc = -1;
	if (!rc && (kvs_inproc_connect(&sh->s, 4096, NULL, &rm) || kvi_rmem_local_set_deferred(rm, 1))) {
		kvi_rmem_destroy(rm); /* accepts NULL */
		rm = NULL;
		if (!sh->users)
			kvs_inproc_fini(&sh->s);
		snprintf(err, errlen, "cannot connect to the in-process server: out of memory");
		rc = -1;
	}
	if (!rc)
		sh->users++;
	pthread_mutex_unlock(&sh->mu);
	*out = rm;
	return rc;
}

void kvs_inproc_unshare(struct kvs_inproc_shared *sh)
{
	pthread_mutex_lock(&sh->mu);
	if (sh->users && --sh->users == 0)
		kvs_inproc_fini(&sh->s);
	pthread_mutex_unlock(&sh->mu);
}
