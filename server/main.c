/* kvserver: owns one registered memory region and admits clients to it.
 *
 * Clients serve themselves with one-sided RDMA; this process only runs the
 * control path (joins, segment grants, leaves): it sleeps in epoll on the
 * listener (rdma_cm and control completions) and a signalfd, so an idle
 * server, or one whose clients only do GET/PUT/DELETE, uses no CPU.
 *
 * The program is glue: region.c maps and registers the memory, core.c formats
 * it and answers control requests, listener.c carries them over verbs. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "auth_admit.h"
#include "clock.h"
#include "config.h"
#include "core.h"
#include "kvclient_errors.h"
#include "listener.h"
#include "log.h"
#include "reclaim_thread.h"
#include "fence.h"
#include "ids.h"
#include "member_ctrl.h"
#include "members.h"
#include "migrate.h"
#include "logsink.h"
#include "metrics.h"
#include "notify.h"
#include "loopkey.h"
#include "region.h"

/* Client ids handed out: all a lock word can name. A test build shrinks it
 * (tests/integration: kvserver-fewids) to show that ids are recycled. */
#ifndef KVS_CLIENT_ID_LIMIT
#define KVS_CLIENT_ID_LIMIT KVI_MAX_CLIENT_ID
#endif
_Static_assert(KVS_CLIENT_ID_LIMIT >= 4 && KVS_CLIENT_ID_LIMIT <= KVI_MAX_CLIENT_ID, "client id limit");

struct kvs_server {
	struct kvs_config cfg; /* settings; cfg.o the values */
	struct kvs_metrics *metrics; /* --metrics: the Prometheus endpoint; NULL if off */
	struct kvs_logsink log;
	struct kvi_listener *l;
	struct kvs_region region;
	struct kvs_core *core;
	struct kvs_fence *fence; /* releases dead clients' locks; NULL if unavailable */
	struct kvs_reclaim_thread *reclaim; /* reclaims sealed segments, runs the migrator */
	struct kvs_members *members; /* who is alive (leases); lock reports */
	struct kvs_ids *ids;         /* client ids: handed out, and recycled once nothing names them */
	int stopping;            /* shutting down: clients leave by our doing */
	unsigned nclients;
	uint8_t secret[KVI_AUTH_SECRET_MAX]; /* --secret-file's contents */
	struct kvi_auth_gate gate;           /* who may join, and as what */
};

/* The admission gate: the shared secret (if any), the loopback key, and the
 * replay caches (clients', loopback's). 0, or the exit status (a bad secret
 * file, group- or world-readable included, is a usage error). */
static int auth_setup(struct kvs_server *s)
{
	struct kvi_errbuf e = { { 0 } };

	s->gate.loopback_key = kvs_loopkey();
	s->gate.replay = kvi_auth_replay_create(0);
	s->gate.loop_replay = kvi_auth_replay_create(0);
	if (!s->gate.loopback_key || !s->gate.replay || !s->gate.loop_replay) {
		fprintf(stderr, "kvserver: cannot set up authentication: %s\n",
			s->gate.loopback_key ? "out of memory, or no random bytes from the kernel (getrandom)"
					     : "no random bytes from the kernel (getrandom)");
		return 1;
	}
	if (!s->cfg.o.secret_file)
		return 0;
	if (kvi_auth_load_secret(s->cfg.o.secret_file, s->secret, &s->gate.secret_len, &e)) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		return 2;
	}
	s->gate.secret = s->secret;
	return 0;
}

static int on_connect(void *arg, struct kvi_peer *p, const struct kvi_hello *h, struct kvi_welcome *w)
{
	struct kvs_server *s = arg;
	char addr[64];

	(void)h;
	/* Ids are lock owners (a lock word's 22 bits), recycled once nothing
	 * can name their last holder (ids.h). */
	w->client_id = kvs_ids_take(s->ids, kvi_mono_ns(), kvs_fence_done(s->fence));
	if (!w->client_id) {
		kvi_ev_warn("client_refused", "addr=%s reason=%s", kvi_peer_addr(p, addr, sizeof(addr)),
			    "every client id is in use by a connected or departing client");
		return KVI_REJECT_FULL;
	}
	/* A member from now: its QP can carry RDMA from the moment we accept,
	 * so a lock word naming it is never mistaken for a departed client's.
	 * The server's own loopbacks hold no lease. */
	if (kvs_members_join(s->members, w->client_id, p->role != KVI_ROLE_LOOPBACK, kvi_mono_ns())) {
		kvi_ev_warn("client_refused", "addr=%s reason=%s", kvi_peer_addr(p, addr, sizeof(addr)),
			    "out of memory for the membership table");
		kvs_ids_put(s->ids, w->client_id, kvi_mono_ns(), 0);
		return KVI_REJECT_FULL;
	}
	/* Connections from one host share one quota (core.h "Quota"); the
	 * server's own loopbacks take none. */
	if (p->role != KVI_ROLE_LOOPBACK)
		kvs_core_client_host(s->core, w->client_id, kvi_peer_addr(p, addr, sizeof(addr)));
	w->rkey = s->region.mr->rkey;
	w->region_addr = (uintptr_t)s->region.base;
	w->geo = *kvs_core_geometry(s->core); /* never read from the region (layout.h "Geometry") */
	w->lease_ms = 0; /* no leases yet */
	kvs_core_limits(s->core, &w->max_op_ms, &w->quarantine_ms, &w->flags);
	w->exec_ms = kvs_core_exec_ms(s->core); /* the client checks its QP meets it */
	kvi_ev_info("client_joined", "client=%u addr=%s role=%s", w->client_id, kvi_peer_addr(p, addr, sizeof(addr)),
		    p->role == KVI_ROLE_LOOPBACK ? "loopback" : "client");
	return 0;
}

static void on_established(void *arg, struct kvi_peer *p)
{
	struct kvs_server *s = arg;

	s->nclients++;
	kvi_ev_info("client_connected", "client=%u connected=%u", p->client_id, s->nclients);
}

/* A client left (or died): fence it, then have its locks released. The QP is
 * confirmed in the error state (or destroyed) here, so that no late WRITE of
 * it can land after a lock is released; the release itself runs on the fence
 * thread: nothing here waits for the NIC or scans the index. */
static void fence_client(struct kvs_server *s, struct kvi_peer *p)
{
	int rc;

	p->fenced = 1;
	kvi_listener_fence_peer(s->l, p);
	rc = kvs_fence_client_ticket(s->fence, p->client_id, &p->fence_ticket);
	if (rc)
		kvi_ev_err("fence_failed", "client=%u reason=%s msg=%s", p->client_id, kvc_strerror(rc),
			   "its bucket locks (if any) cannot be released");
}

static void on_disconnect(void *arg, struct kvi_peer *p)
{
	struct kvs_server *s = arg;
	char sum[160];

	/* Every peer that may hold bucket locks is fenced, whatever its hello
	 * said: clients, and the reclaimer's loopback (it locks buckets to
	 * switch slots; if its connection breaks mid-batch, its locks must not
	 * stay). Only the fencer's own connections, which never take a lock,
	 * are not: told apart by the id we gave them, not by their word. */
	if (!s->stopping && !p->fenced && !kvs_fence_is_own(s->fence, p->client_id))
		fence_client(s, p);
	if (p->established)
		s->nclients--;
	kvs_members_leave(s->members, p->client_id);
	kvs_core_client_left(s->core, p->client_id);
	kvs_fence_forget_own(s->fence, p->client_id);
	/* Its QP is fenced or gone (or it never held a lock: the fencer's own,
	 * or we are stopping): the id is free once the fencer's pass released
	 * its locks and a quarantine passed (ids.h). */
	kvs_ids_put(s->ids, p->client_id, kvi_mono_ns(), p->fence_ticket);
	kvs_core_summary(s->core, sum, sizeof(sum));
	kvi_ev_info("client_left", "client=%u connected=%u %s", p->client_id, s->nclients, sum);
}

/* Cut a member off (lease over, or a lock it kept too long): fence it now
 * (its QP in error, its locks queued for release, its extent sealed), then
 * disconnect it; on_disconnect follows whenever the peer's side answers. */
static void expel(struct kvs_server *s, uint32_t id, const char *event, const char *why)
{
	struct kvi_peer *p = kvi_listener_peer(s->l, id);

	kvi_ev_warn(event, "client=%u msg=%s", id, why);
	if (!p) {
		kvs_members_leave(s->members, id); /* gone already */
		return;
	}
	if (!p->fenced)
		fence_client(s, p);
	kvs_core_client_left(s->core, id);
	kvi_listener_drop(s->l, p);
}

/* A writer keeps finding a lock word in a bucket of the index of an epoch
 * (members.h "Lock reports", kvs_members_judge). */
static int lock_report(struct kvs_server *s, uint32_t reporter, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	const struct kvi_ctrl_lock_report *lr = &req->lock_report;
	struct kvs_report_action a;
	uint64_t current, off;

	if (kvs_member_ctrl_report(s->members, s->core, reporter, req, resp, &a, &off, &current))
		return 0; /* an index retired since (or never ours): nothing to clear there */
	if (a.set && kvi_lock_legal(current)) {
		kvi_ev_warn("lock_report_cleared", "bucket=%" PRIu64 " epoch=%" PRIu64 " owner=%u reporter=%u msg=%s",
			    lr->bucket, lr->epoch, kvi_lock_owner(current), reporter,
			    "the lock owner is not a client: releasing the lock");
		kvs_fence_clear_word(s->fence, off, current);
	} else if (a.set) {
		kvi_ev_warn("lock_report_junk", "bucket=%" PRIu64 " epoch=%" PRIu64 " word=0x%016" PRIx64 " reporter=%u msg=%s",
			    lr->bucket, lr->epoch, current, reporter, "no lock word at all: repairing it");
		kvs_fence_repair_word(s->fence, off, a.set_from, a.set_to);
	}
	if (a.fence_owner) {
		/* Who said so, for the operator: a forged word costs its victim a
		 * reconnect (docs/operations.md "Trust model"). */
		kvi_ev_warn("lock_report_fencing", "bucket=%" PRIu64 " epoch=%" PRIu64 " owner=%u reporter=%u",
			    lr->bucket, lr->epoch, a.fence_owner, reporter);
		expel(s, a.fence_owner, "lock_holder_fenced", "kept a bucket lock past every operation deadline: fencing it");
	}
	return 0;
}

static void update_acks(struct kvs_server *s)
{
	kvs_member_ctrl_update_acks(s->members, s->core);
}

static int fence_idle(void *arg)
{
	return kvs_fence_wait_idle(arg, 0) == 0;
}

static int on_ctrl(void *arg, struct kvi_peer *p, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_server *s = arg;

	switch (req->type) {
	case KVI_CTRL_LEASE_RENEW:
		if (kvs_member_ctrl_renew(s->members, s->core, p->client_id, s->cfg.o.renew_ms, req, resp)) {
			char addr[64];

			/* Its core record went with its extent at the lapse. */
			kvs_core_client_host(s->core, p->client_id, kvi_peer_addr(p, addr, sizeof(addr)));
			kvi_ev_info("client_readmitted", "client=%u msg=%s", p->client_id, "renewed after an idle lapse");
		}
		return 0;
	case KVI_CTRL_LOCK_REPORT:
		return lock_report(s, p->client_id, req, resp);
	default:
		return kvs_core_ctrl(s->core, p->client_id, req, resp);
	}
}

/* A member whose lease ended (or a lapsed one due to be looked at again):
 * read its idle word (members.h "Idleness"); without one, expel it. */
static void lease_ended(struct kvs_server *s, uint32_t id)
{
	struct kvi_peer *p = kvi_listener_peer(s->l, id);
	uint64_t addr;
	uint32_t rkey;

	if (p && !p->fenced && kvs_members_probe(s->members, id, &addr, &rkey) &&
	    kvi_listener_read_word(s->l, p, addr, rkey) == 0) {
		kvs_members_probe_start(s->members, id);
		return; /* on_read decides, unless it renews first */
	}
	expel(s, id, "lease_expired", "let its lease run out: fencing it");
}

/* The idle word of a member whose lease ended. */
static void on_read(void *arg, struct kvi_peer *p, uint64_t value, int ok)
{
	struct kvs_server *s = arg;

	if (p->fenced || !kvs_members_is_probing(s->members, p->client_id))
		return; /* renewed or expelled meanwhile */
	if (ok && value == 0) {
		/* Idle: nothing of it in flight, nothing posted before it renews.
		 * Its open extent is sealed (it gets a new one when it writes). */
		if (kvs_members_lapse(s->members, p->client_id, kvi_mono_ns()) == 1) {
			kvs_core_client_left(s->core, p->client_id);
			kvi_ev_info("lease_lapsed", "client=%u msg=%s", p->client_id,
				    "idle when its lease ended: kept connected until it renews");
		}
		update_acks(s);
		return;
	}
	kvs_members_expel(s->members, p->client_id);
	expel(s, p->client_id, "lease_expired",
	      ok ? "let its lease run out while busy: fencing it" : "let its lease run out and did not answer: fencing it");
}

/* Members whose lease ended: read or expel them; returns ms until the next one may. */
static int expire_leases(struct kvs_server *s)
{
	uint32_t ids[64];
	unsigned n;

	do {
		n = kvs_members_expired(s->members, kvi_mono_ns(), ids, 64);
		for (unsigned i = 0; i < n; i++)
			lease_ended(s, ids[i]);
	} while (n == 64);
	/* Members that left, and those just expelled, count no more: an old
	 * index waiting only for them may go now, not at the next turn of the
	 * loop (up to a second later). */
	update_acks(s);
	return kvs_members_next_due(s->members, kvi_mono_ns(), 1000);
}

/* SIGHUP: logrotate moved the log file away; write to a new one. */
static void reopen_log(struct kvs_server *s)
{
	struct kvi_errbuf e = { { 0 } };

	if (kvs_logsink_reopen(&s->log, &e))
		kvi_ev_err("log_reopen_failed", "path=%s reason=%s", s->cfg.o.log_file, e.msg);
	else
		kvi_ev_info("log_reopened", "path=%s", s->cfg.o.log_file ? s->cfg.o.log_file : "stderr");
}

static int serve(struct kvs_server *s, const struct kvi_listen_cb *cb)
{
	struct epoll_event ev = { .events = EPOLLIN }, got[4];
	int ep, sfd, rc = 0, stop = 0;
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || ep < 0) {
		kvi_ev_err("event_loop_failed", "call=%s reason=%s", sfd < 0 ? "signalfd" : "epoll_create1",
			   strerror(errno));
		rc = 1;
		goto clean_fds;
	}
	ev.data.fd = sfd;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) == 0) {
		ev.data.fd = kvi_listener_fd(s->l);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev) == 0)
			goto run;
	}
	kvi_ev_err("event_loop_failed", "call=epoll_ctl reason=%s", strerror(errno));
	rc = 1;
	goto clean_fds;
run:
	while (!stop) {
		int n = epoll_wait(ep, got, 4, expire_leases(s));

		if (n < 0 && errno != EINTR) {
			kvi_ev_err("event_loop_failed", "call=epoll_wait reason=%s", strerror(errno));
			rc = 1;
			break;
		}
		for (int i = 0; i < n; i++) {
			if (got[i].data.fd == sfd) {
				struct signalfd_siginfo si;

				if (read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
					continue;
				if (si.ssi_signo == SIGHUP) {
					reopen_log(s);
					continue;
				}
				kvi_ev_info("shutdown", "signal=%s", si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
				stop = 1;
			} else if (kvi_listener_dispatch(s->l, cb)) {
				kvi_ev_err("device_failed", "device=%s msg=%s", kvi_listener_device(s->l),
					   "the RDMA device failed or was removed: shutting down");
				rc = 1;
				stop = 1;
			}
		}
	}
clean_fds:
	if (ep >= 0)
		close(ep);
	if (sfd >= 0)
		close(sfd);
	return rc;
}

int main(int argc, char **argv)
{
	struct kvs_server s = { 0 };
	struct kvi_listen_cb cb = { .arg = &s, .on_connect = on_connect, .on_established = on_established,
				    .on_disconnect = on_disconnect, .on_ctrl = on_ctrl, .on_read = on_read };
	const struct kvi_geometry *sb;
	struct kvi_errbuf e = { { 0 } };
	uint32_t max_op_ms, quarantine_ms;
	uint16_t flags;
	sigset_t mask;
	int rc;

	rc = kvs_config_parse(&s.cfg, argc, argv, &e);
	switch (rc) {
	case KVS_CFG_RUN:
		break;
	case KVS_CFG_HELP:
		kvs_config_help(stdout);
		rc = 0;
		goto clean_config;
	case KVS_CFG_VERSION:
		printf("kvserver %s\n", KVS_VERSION);
		rc = 0;
		goto clean_config;
	case KVS_CFG_PRINT:
		kvs_config_print(&s.cfg, stdout);
		rc = 0;
		goto clean_config;
	default:
		fprintf(stderr, "kvserver: %s\n", e.msg);
		rc = 2;
		goto clean_config;
	}
	/* The metrics address is bound later, but a typo is a bad setting now. */
	if (s.cfg.o.metrics && kvs_metrics_parse(s.cfg.o.metrics, &e)) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		rc = 2;
		goto clean_config;
	}
	/* A log file that cannot be opened is a bad setting: said before anything starts. */
	if (kvs_logsink_open(&s.log, s.cfg.o.log_file, &e)) {
		fprintf(stderr, "kvserver: %s: check --log-file\n", e.msg);
		rc = 2;
		goto clean_config;
	}
	kvi_log_set_ev(kvs_logsink_write, &s.log, s.cfg.o.log_level);
	rc = auth_setup(&s);
	if (rc)
		goto clean_auth;
	/* Block the signals before any thread exists (librdmacm may start one), so
	 * they are only ever delivered through the signalfd. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = kvi_listener_create(&(struct kvi_listen_opts){ .addr = s.cfg.o.listen, .port = s.cfg.o.port_str,
							     .device = s.cfg.o.device, .auth = &s.gate },
				 &s.l, &e);
	if (rc) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		rc = 1;
		goto clean_auth;
	}
	rc = kvs_region_create(&s.region, (size_t)s.cfg.o.memory_mib << 20, (enum kvs_hugepages)s.cfg.o.huge, kvi_listener_pd(s.l), &e);
	if (rc) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		goto clean_listener;
	}
	if (kvs_reclaim_thread_create(&s.reclaim)) {
		fprintf(stderr, "kvserver: out of memory\n");
		rc = 1;
		goto clean_region;
	}
	s.cfg.o.core.wake = kvs_reclaim_thread_wake;
	s.cfg.o.core.wake_arg = s.reclaim;
	rc = kvs_core_create(s.region.base, s.region.size, &s.cfg.o.core, &s.core, &e);
	if (rc) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		goto clean_region;
	}
	kvs_core_limits(s.core, &max_op_ms, &quarantine_ms, &flags);
	/* Old indexes retire only once every member uses the new one. */
	kvs_core_require_acks(s.core);
	if (kvs_members_create(&s.members, s.cfg.o.lease_ms, max_op_ms) ||
	    kvs_ids_create(&s.ids, KVS_CLIENT_ID_LIMIT, (uint64_t)quarantine_ms * 1000000u)) {
		fprintf(stderr, "kvserver: out of memory\n");
		kvs_members_destroy(s.members);
		rc = 1;
		goto clean_core;
	}
	rc = kvs_metrics_start(&s.metrics, s.cfg.o.metrics, s.core, s.members, &cb, &e);
	if (rc) { /* a busy address, or not this host's: a usage error */
		fprintf(stderr, "kvserver: %s\n", e.msg);
		kvs_members_destroy(s.members);
		kvs_ids_destroy(s.ids);
		rc = 2;
		goto clean_core;
	}
	sb = kvs_core_geometry(s.core);
	/* Said once the port and region are set up, before "listening" (tests
	 * wait for that line): a bad flag or device is then the only
	 * line a failed start prints. */
	if (!s.cfg.o.secret_file)
		kvi_ev_warn("no_secret_file", "port=%u msg=\"no --secret-file: anyone who can reach port %u can read and "
			    "write all of this server's memory; give --secret-file PATH to require a shared secret\"",
			    kvi_listener_port(s.l), kvi_listener_port(s.l));
	/* The log line first: whoever waits for "listening on" on stdout finds it
	 * in the log too. */
	kvi_ev_info("listening", "version=%s addr=%s port=%u device=%s memory_mib=%" PRIu64 " hugepages=%s buckets=%" PRIu64
		    " segments=%" PRIu64 " segment_kib=%" PRIu64, KVS_VERSION, s.cfg.o.listen ? s.cfg.o.listen : "*",
		    kvi_listener_port(s.l), kvi_listener_device(s.l), s.cfg.o.memory_mib, s.region.huge ? "on" : "off",
		    sb->bucket_count, sb->heap_size / sb->segment_size, sb->segment_size >> 10);
	printf("kvserver %s: listening on %s port %u, device %s, region %" PRIu64 " MiB (%s), "
	       "%" PRIu64 " buckets, %" PRIu64 " segments of %" PRIu64 " KiB\n",
	       KVS_VERSION, s.cfg.o.listen ? s.cfg.o.listen : "*", kvi_listener_port(s.l),
	       kvi_listener_device(s.l), s.cfg.o.memory_mib, s.region.huge ? "2 MiB hugepages" : "4 KiB pages",
	       sb->bucket_count, sb->heap_size / sb->segment_size, sb->segment_size >> 10);
	fflush(stdout);

	/* The loopback for fencing and reclamation connects to our own listening
	 * address; a wildcard listener is reached at an address of its device. */
	char self[INET6_ADDRSTRLEN];

	if (kvi_listener_self_addr(s.l, self, sizeof(self)) == 0) {
		char port[8];

		snprintf(port, sizeof(port), "%u", kvi_listener_port(s.l));
		if (!s.cfg.o.listen || !s.cfg.o.listen[0])
			kvi_ev_info("loopback_address", "addr=%s device=%s msg=%s", self, kvi_listener_device(s.l),
				    "listening on all addresses: fencing and reclamation connect here");
		if (kvs_fence_start(&s.fence, s.core, self, port, kvi_listener_device(s.l)))
			kvi_ev_warn("fencer_unavailable", "msg=%s",
				    "cannot start the loopback connection: locks of clients that die are not released");
		kvs_reclaim_thread_set_migrate(s.reclaim, &(struct kvs_migrate_opts){
							   .load_pct = s.cfg.o.resize_load_pct,
							   .fence_idle = s.fence ? fence_idle : NULL, .fence_arg = s.fence });
		if (kvs_reclaim_thread_start(s.reclaim, s.core, self, port, kvi_listener_device(s.l)))
			kvi_ev_warn("reclaimer_unavailable", "msg=%s", "cannot start the reclaimer thread: memory is never reclaimed");
	} else {
		kvi_ev_warn("no_loopback_address", "device=%s msg=%s", kvi_listener_device(s.l),
			    "listening on all addresses, and the device has no IP address to connect to: locks held by "
			    "clients that die are not released and memory is never reclaimed (give -l ADDR)");
	}
	/* Ready for clients: tell a Type=notify service manager (notify.h). */
	if (kvs_notify("READY=1"))
		kvi_ev_warn("notify_failed", "msg=%s",
			    "cannot tell the service manager we are ready (NOTIFY_SOCKET): it may time out");
	rc = serve(&s, &cb);
	s.stopping = 1;
	kvs_notify("STOPPING=1");
	kvs_metrics_stop(s.metrics);
	/* Tell every client first (their operations fail fast with
	 * KVC_ESERVERGONE; reconnecting is the application's choice), give
	 * the notices a moment to leave, then disconnect: their next operation
	 * fails at once with KVC_ESERVERGONE instead of waiting for transport
	 * timeouts. */
	if (kvi_listener_notify_all(s.l, &(struct kvi_ctrl){ .type = KVI_CTRL_SHUTDOWN }) > 0 &&
	    kvi_listener_flush_sends(s.l, 500))
		kvi_ev_info("shutdown_notice_late", "msg=%s", "some clients did not take the shutdown notice in time");
	kvs_reclaim_thread_destroy(s.reclaim);
	s.reclaim = NULL;
	kvi_listener_disconnect_all(s.l, &cb);
	kvs_fence_destroy(s.fence);
	kvs_members_destroy(s.members);
	kvs_ids_destroy(s.ids);
clean_core:
	kvs_core_destroy(s.core);
clean_region:
	kvs_reclaim_thread_destroy(s.reclaim);
	kvs_region_destroy(&s.region);
clean_listener:
	kvi_listener_destroy(s.l, NULL);
	rc = rc == 2 ? 2 : rc ? 1 : 0; /* 2: a usage error found late (--metrics) */
clean_auth:
	kvi_auth_replay_destroy(s.gate.replay);
	kvi_auth_replay_destroy(s.gate.loop_replay);
	kvi_auth_wipe(s.secret, sizeof(s.secret));
	kvi_log_set(NULL, NULL, 0);
	kvs_logsink_close(&s.log);
clean_config:
	kvs_config_free(&s.cfg);
	return rc;
}
