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
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "core.h"
#include "kvclient_errors.h"
#include "listener.h"
#include "log.h"
#include "evictor.h"
#include "fence.h"
#include "members.h"
#include "metrics.h"
#include "migrate.h"
#include "loopkey.h"
#include "region.h"

#define KVS_VERSION "0.1.0"
#define KVS_DEFAULT_PORT "7471"

struct kvs_opts {
	const char *listen;
	const char *port;
	const char *device;
	uint64_t memory_mib;
	enum kvs_hugepages huge;
	struct kvs_core_opts core;
	uint32_t lease_ms, renew_ms;
	unsigned resize_load_pct; /* migrate.h load trigger; 0 = off */
	const char *secret_file; /* --secret-file, or NULL */
	const char *metrics;     /* --metrics ADDR:PORT, or NULL (off) */
	int verbose;
};

struct kvs_server {
	struct kvs_opts o;
	struct kvi_listener *l;
	struct kvs_region region;
	struct kvs_core *core;
	struct kvs_fence *fence; /* releases dead clients' locks; NULL if unavailable */
	struct kvs_evictor *evictor; /* reclaims sealed segments */
	struct kvs_members *members; /* who is alive (leases); lock reports */
	struct kvs_metrics *metrics; /* --metrics: the Prometheus endpoint; NULL if off */
	int stopping;            /* shutting down: clients leave by our doing */
	uint32_t next_client_id;
	unsigned nclients;
	uint8_t secret[KVI_AUTH_SECRET_MAX]; /* --secret-file's contents */
	struct kvi_auth_gate gate;           /* who may join, and as what */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvserver [options]\n"
		"  -l, --listen ADDR       address to listen on (default: all addresses)\n"
		"  -p, --port PORT         rdma_cm port (default " KVS_DEFAULT_PORT ")\n"
		"  -m, --memory MIB        size of the registered region in MiB (default 64)\n"
		"  -d, --device NAME       RDMA device to serve on (default: the one the address is on,\n"
		"                          or the only one with atomics)\n"
		"      --hugepages MODE    auto|on|off: back the region with 2 MiB pages (default auto)\n"
		"      --buckets N         index buckets of 15 slots, at least 2 (default: one per\n"
		"                          2 KiB of memory, at least 64)\n"
		"      --segment-size KIB  heap segment granted to clients: 64, 128, 256, 512 or 1024\n"
		"                          (default 1024; it bounds the largest item)\n"
		"Cache policy:\n"
		"      --no-evict          never evict a live item: a PUT fails with 'out of memory'\n"
		"                          when live data fills the heap (memcached -M); garbage\n"
		"                          (replaced, deleted, expired items) is still reclaimed\n"
		"      --reclaim-low PCT   start reclaiming when free segments fall below PCT %%\n"
		"                          of the heap (default %u)\n"
		"      --reclaim-high PCT  ... and stop when they reach PCT %% (default %u)\n"
		"      --max-op-ms MS      longest operation deadline clients may use; they clamp\n"
		"                          theirs to it (default %u)\n"
		"      --quarantine-ms MS  reclaimed memory is reused after this; at least\n"
		"                          2 x max-op-ms + %u (default %u)\n"
		"      --client-quota-pct PCT  share of the heap one client may hold while\n"
		"                          another waits for memory (at least 2 segments;\n"
		"                          default %u; 100: no quota)\n"
		"Index:\n"
		"      --resize-load-pct PCT  double the index (online) when sampled buckets have\n"
		"                          more than PCT %% of their slots used (0..99; 0: only\n"
		"                          when an insert finds both buckets full; default %u)\n"
		"Membership:\n"
		"      --lease-ms MS       a client that has not renewed its lease for this long\n"
		"                          is fenced (%u..%u, default %u)\n"
		"      --renew-ms MS       clients renew every MS while they are used; at most\n"
		"                          half the lease (default %u)\n"
		"Security:\n"
		"      --secret-file PATH  clients must prove they hold the secret in PATH (at least\n"
		"                          16 bytes; mode 0600) to join; without it anyone who can\n"
		"                          reach the port can read and write all of the region\n"
		"Monitoring:\n"
		"      --metrics ADDR:PORT serve Prometheus metrics at http://ADDR:PORT/metrics\n"
		"                          (e.g. 127.0.0.1:9471; off by default)\n"
		"  -v, --verbose           more log (repeat for debug)\n"
		"  -h, --help              this text\n"
		"  -V, --version           print the version\n",
		KVS_DEFAULT_RECLAIM_LOW_PCT, KVS_DEFAULT_RECLAIM_HIGH_PCT, KVS_DEFAULT_MAX_OP_MS,
		KVS_QUARANTINE_MARGIN_MS, KVS_DEFAULT_QUARANTINE_MS, KVS_DEFAULT_CLIENT_QUOTA_PCT,
		KVS_DEFAULT_RESIZE_LOAD_PCT, KVS_MIN_LEASE_MS, KVS_MAX_LEASE_MS, KVS_DEFAULT_LEASE_MS, KVS_DEFAULT_RENEW_MS);
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (!s || !*s || *s == '-')
		return -1;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct kvs_opts *o)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "port", required_argument, NULL, 'p' },
		{ "memory", required_argument, NULL, 'm' },
		{ "device", required_argument, NULL, 'd' },
		{ "hugepages", required_argument, NULL, 'H' },
		{ "buckets", required_argument, NULL, 'B' },
		{ "segment-size", required_argument, NULL, 'S' },
		{ "no-evict", no_argument, NULL, 'E' },
		{ "reclaim-low", required_argument, NULL, 'L' },
		{ "reclaim-high", required_argument, NULL, 'U' },
		{ "max-op-ms", required_argument, NULL, 'O' },
		{ "quarantine-ms", required_argument, NULL, 'Q' },
		{ "client-quota-pct", required_argument, NULL, 'C' },
		{ "resize-load-pct", required_argument, NULL, 'Z' },
		{ "lease-ms", required_argument, NULL, 'A' },
		{ "renew-ms", required_argument, NULL, 'R' },
		{ "secret-file", required_argument, NULL, 'K' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct kvi_geometry sb;
	struct kvi_errbuf e;
	uint64_t port, v;
	int c;

	*o = (struct kvs_opts){ .port = KVS_DEFAULT_PORT, .memory_mib = 64, .huge = KVS_HUGE_AUTO,
				.lease_ms = KVS_DEFAULT_LEASE_MS, .resize_load_pct = KVS_DEFAULT_RESIZE_LOAD_PCT };
	while ((c = getopt_long(argc, argv, "l:p:m:d:vhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			o->listen = optarg;
			break;
		case 'p':
			if (parse_u64(optarg, 1, 65535, &port)) {
				fprintf(stderr, "kvserver: invalid port '%s': expected 1..65535\n", optarg);
				return 2;
			}
			o->port = optarg;
			break;
		case 'm':
			/* Slots address 4 TiB (layout.h): the region can be no larger. */
			if (parse_u64(optarg, 1, 1u << 22, &o->memory_mib)) {
				fprintf(stderr, "kvserver: invalid --memory '%s': expected MiB in 1..4194304 (4 TiB)\n",
					optarg);
				return 2;
			}
			break;
		case 'd':
			o->device = optarg;
			break;
		case 'H':
			if (strcmp(optarg, "auto") == 0)
				o->huge = KVS_HUGE_AUTO;
			else if (strcmp(optarg, "on") == 0)
				o->huge = KVS_HUGE_ON;
			else if (strcmp(optarg, "off") == 0)
				o->huge = KVS_HUGE_OFF;
			else {
				fprintf(stderr, "kvserver: invalid --hugepages '%s': expected auto, on or off\n",
					optarg);
				return 2;
			}
			break;
		case 'B':
			if (parse_u64(optarg, 1, UINT64_MAX / 2, &o->core.buckets)) {
				fprintf(stderr, "kvserver: invalid --buckets '%s': expected a positive count\n",
					optarg);
				return 2;
			}
			break;
		case 'S':
			if (parse_u64(optarg, KVS_MIN_SEGMENT_SIZE >> 10, KVS_MAX_SEGMENT_SIZE >> 10, &v) ||
			    (v & (v - 1))) {
				fprintf(stderr, "kvserver: invalid --segment-size '%s': expected KiB, a power of "
						"two from %u to %u\n",
					optarg, KVS_MIN_SEGMENT_SIZE >> 10, KVS_MAX_SEGMENT_SIZE >> 10);
				return 2;
			}
			o->core.segment_size = v << 10;
			break;
		case 'E':
			o->core.no_evict = 1;
			break;
		case 'L':
		case 'U':
			if (parse_u64(optarg, 1, 95, &v)) {
				fprintf(stderr, "kvserver: invalid --reclaim-%s '%s': expected a percentage, 1..95\n",
					c == 'L' ? "low" : "high", optarg);
				return 2;
			}
			*(c == 'L' ? &o->core.reclaim_low_pct : &o->core.reclaim_high_pct) = (unsigned)v;
			break;
		case 'O':
		case 'Q':
			if (parse_u64(optarg, 1, c == 'O' ? 600000 : 3600000, &v)) {
				fprintf(stderr, "kvserver: invalid --%s '%s': expected milliseconds, 1..%s\n",
					c == 'O' ? "max-op-ms" : "quarantine-ms", optarg, c == 'O' ? "600000" : "3600000");
				return 2;
			}
			*(c == 'O' ? &o->core.max_op_ms : &o->core.quarantine_ms) = (uint32_t)v;
			break;
		case 'C':
			if (parse_u64(optarg, 1, 100, &v)) {
				fprintf(stderr, "kvserver: invalid --client-quota-pct '%s': expected a percentage of "
						"the heap, 1..100\n", optarg);
				return 2;
			}
			o->core.client_quota_pct = (unsigned)v;
			break;
		case 'Z':
			if (parse_u64(optarg, 0, 99, &v)) {
				fprintf(stderr, "kvserver: invalid --resize-load-pct '%s': expected a percentage of "
						"slots used, 0..99 (0: off)\n", optarg);
				return 2;
			}
			o->resize_load_pct = (unsigned)v;
			break;
		case 'A':
			if (parse_u64(optarg, KVS_MIN_LEASE_MS, KVS_MAX_LEASE_MS, &v)) {
				fprintf(stderr, "kvserver: invalid --lease-ms '%s': expected milliseconds, %u..%u\n",
					optarg, KVS_MIN_LEASE_MS, KVS_MAX_LEASE_MS);
				return 2;
			}
			o->lease_ms = (uint32_t)v;
			break;
		case 'R':
			if (parse_u64(optarg, 1, KVS_MAX_LEASE_MS, &v)) {
				fprintf(stderr, "kvserver: invalid --renew-ms '%s': expected milliseconds, 1 to half "
						"the lease\n", optarg);
				return 2;
			}
			o->renew_ms = (uint32_t)v;
			break;
		case 'M': /* bound by kvs_metrics_start; a typo is found now */
			if (kvs_metrics_parse(optarg, &e)) {
				fprintf(stderr, "kvserver: %s\n", e.msg);
				return 2;
			}
			o->metrics = optarg;
			break;
		case 'K':
			o->secret_file = optarg;
			break;
		case 'v':
			o->verbose++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvserver %s\n", KVS_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvserver: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	if (o->renew_ms == 0)
		o->renew_ms = o->lease_ms / 4 < KVS_DEFAULT_RENEW_MS ? o->lease_ms / 4 : KVS_DEFAULT_RENEW_MS;
	if (o->renew_ms == 0 || o->renew_ms > o->lease_ms / 2) {
		fprintf(stderr, "kvserver: --renew-ms %u is more than half of --lease-ms %u: a client must be "
				"able to miss a renewal and still keep its lease; lower --renew-ms\n",
			o->renew_ms, o->lease_ms);
		return 2;
	}
	/* Flags that only make sense together (buckets for this much memory) are
	 * a usage error too: check the layout now, before mapping anything. */
	if (kvs_core_plan(0, o->memory_mib << 20, &o->core, &sb, &e)) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		return 2;
	}
	return -1; /* go on */
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The admission gate: the shared secret (if any), the loopback key, and the
 * replay cache. 0, or the exit status (a bad secret file is a usage error). */
static int auth_setup(struct kvs_server *s)
{
	struct kvi_errbuf e = { { 0 } };
	int loose;

	s->gate.loopback_key = kvs_loopback_key();
	s->gate.replay = kvi_auth_replay_create(0);
	if (!s->gate.loopback_key || !s->gate.replay) {
		fprintf(stderr, "kvserver: cannot set up authentication: %s\n",
			s->gate.replay ? "no random bytes from the kernel (getrandom)" : "out of memory");
		return 1;
	}
	if (!s->o.secret_file)
		return 0;
	if (kvi_auth_load_secret(s->o.secret_file, s->secret, &s->gate.secret_len, &loose, &e)) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		return 2;
	}
	if (loose)
		kvi_warn("secret file %s can be read by group or others: chmod 600 %s", s->o.secret_file,
			 s->o.secret_file);
	s->gate.secret = s->secret;
	return 0;
}

static int on_connect(void *arg, struct kvi_peer *p, const struct kvi_hello *h, struct kvi_welcome *w)
{
	struct kvs_server *s = arg;

	(void)h;
	/* Ids are lock owners (22 bits in a lock word) and are never reused. */
	if (s->next_client_id > KVI_MAX_CLIENT_ID) {
		kvi_warn("refusing a client: all %u client ids have been used", KVI_MAX_CLIENT_ID);
		return KVI_REJECT_FULL;
	}
	/* A member from now: its QP can carry RDMA from the moment we accept,
	 * so a lock word naming it is never mistaken for a departed client's.
	 * The server's own loopbacks hold no lease. */
	if (kvs_members_join(s->members, s->next_client_id, p->role != KVI_ROLE_LOOPBACK, mono_ns())) {
		kvi_warn("refusing a client: out of memory for the membership table");
		return KVI_REJECT_FULL;
	}
	w->client_id = s->next_client_id++;
	w->rkey = s->region.mr->rkey;
	w->region_addr = (uintptr_t)s->region.base;
	w->geo = *kvs_core_geometry(s->core); /* never read from the region (layout.h "Geometry") */
	w->lease_ms = 0; /* no leases yet */
	kvs_core_limits(s->core, &w->max_op_ms, &w->quarantine_ms, &w->flags);
	kvi_info("client %u joining", w->client_id);
	(void)p;
	return 0;
}

static void on_established(void *arg, struct kvi_peer *p)
{
	struct kvs_server *s = arg;

	s->nclients++;
	kvi_info("client %u connected (%u connected)", p->client_id, s->nclients);
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
	rc = kvs_fence_client(s->fence, p->client_id);
	if (rc)
		kvi_err("client %u left; its bucket locks (if any) cannot be released: %s", p->client_id,
			kvc_strerror(rc));
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
	kvs_core_summary(s->core, sum, sizeof(sum));
	kvi_info("client %u left (%u connected); %s", p->client_id, s->nclients, sum);
}

/* Cut a member off (lease over, or a lock it kept too long): fence it now
 * (its QP in error, its locks queued for release, its extent sealed), then
 * disconnect it; on_disconnect follows whenever the peer's side answers. */
static void expel(struct kvs_server *s, uint32_t id, const char *why)
{
	struct kvi_peer *p = kvi_listener_peer(s->l, id);

	kvi_warn("client %u %s: fencing it", id, why);
	if (!p) {
		kvs_members_leave(s->members, id); /* gone already */
		return;
	}
	if (!p->fenced)
		fence_client(s, p);
	kvs_core_client_left(s->core, id);
	kvi_listener_drop(s->l, p);
}

/* A writer keeps finding `word` in bucket arg[0] of the index of epoch arg[2]
 * (members.h "Lock reports"). */
static int lock_report(struct kvs_server *s, uint32_t reporter, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	enum kvi_report_verdict v;
	uint64_t current, off;
	uint32_t owner;

	if (kvs_core_bucket_of_epoch(s->core, req->arg[2], req->arg[0], &off)) {
		/* An index retired since (or never ours): nothing to clear there. */
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq,
					   .arg = { KVI_REPORT_CHANGED } };
		return 0;
	}
	/* Reading a lock word with the CPU is fine; changing it is the NIC's job. */
	current = __atomic_load_n((const uint64_t *)(const void *)(kvs_core_region(s->core) + off), __ATOMIC_RELAXED);
	if (current == KVI_LOCK_MOVED || current == KVI_LOCK_UNMIGRATED) {
		/* Resize marks name nobody and are never cleared (layout.h): the
		 * reporter follows them (it knows, or fetches, the other index). */
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq,
					   .arg = { KVI_REPORT_CHANGED } };
		return 0;
	}
	v = kvs_members_report(s->members, reporter, off, req->arg[1], current, mono_ns(), &owner);
	if (v == KVI_REPORT_CLEARING) {
		kvi_warn("bucket %" PRIu64 " (epoch %" PRIu64 ") is locked by %u, which is not a client (reported by "
			 "client %u): releasing it", req->arg[0], req->arg[2], kvi_lock_owner(current), reporter);
		kvs_fence_clear_word(s->fence, off, current);
	} else if (v == KVI_REPORT_FENCING) {
		expel(s, owner, "kept a bucket lock past every operation deadline");
	}
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq, .arg = { v } };
	return 0;
}

/* While an old index waits to retire (migrate.h "Retiring"), tell the core
 * once every member with a live lease uses the new epoch. */
static void update_acks(struct kvs_server *s)
{
	uint64_t epoch, last;

	if (kvs_core_acks_wanted(s->core, &epoch) && kvs_members_acked(s->members, epoch, mono_ns(), &last))
		kvs_core_set_acked(s->core, epoch, last);
}

static int fence_idle(void *arg)
{
	return kvs_fence_wait_idle(arg, 0) == 0;
}

static int on_ctrl(void *arg, struct kvi_peer *p, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_server *s = arg;
	enum kvi_index_state state;
	uint64_t epoch;
	uint32_t lease;

	switch (req->type) {
	case KVI_CTRL_LEASE_RENEW:
		lease = kvs_members_renew(s->members, p->client_id, mono_ns());
		kvs_core_index_status(s->core, &epoch, &state);
		if (!lease) { /* expelled already, or a loopback */
			*resp = (struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = req->seq, .status = KVC_EFENCED };
			return 0;
		}
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LEASE, .seq = req->seq,
					   .arg = { lease, s->o.renew_ms, epoch, state } };
		/* arg0: the epoch it uses, its acknowledgement of a resize. */
		kvs_members_ack(s->members, p->client_id, req->arg[0], mono_ns());
		update_acks(s);
		return 0;
	case KVI_CTRL_LOCK_REPORT:
		return lock_report(s, p->client_id, req, resp);
	default:
		return kvs_core_ctrl(s->core, p->client_id, req, resp);
	}
}

/* Expel every member whose lease ended; returns ms until the next one may. */
static int expire_leases(struct kvs_server *s)
{
	uint32_t ids[64];
	unsigned n;

	update_acks(s); /* members that left or lost their lease count no more */
	do {
		n = kvs_members_expired(s->members, mono_ns(), ids, 64);
		for (unsigned i = 0; i < n; i++)
			expel(s, ids[i], "let its lease run out");
	} while (n == 64);
	return kvs_members_next_due(s->members, mono_ns(), 1000);
}

static int serve(struct kvs_server *s, const struct kvi_listen_cb *cb)
{
	struct epoll_event ev = { .events = EPOLLIN }, got[4];
	int ep, sfd, rc = 0, stop = 0;
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || ep < 0) {
		kvi_err("cannot set up the event loop: %s", strerror(errno));
		rc = 1;
		goto clean_fds;
	}
	ev.data.fd = sfd;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) == 0) {
		ev.data.fd = kvi_listener_fd(s->l);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev) == 0)
			goto run;
	}
	kvi_err("cannot set up the event loop: epoll_ctl: %s", strerror(errno));
	rc = 1;
	goto clean_fds;
run:
	while (!stop) {
		int n = epoll_wait(ep, got, 4, expire_leases(s));

		if (n < 0 && errno != EINTR) {
			kvi_err("epoll_wait: %s", strerror(errno));
			rc = 1;
			break;
		}
		for (int i = 0; i < n; i++) {
			if (got[i].data.fd == sfd) {
				struct signalfd_siginfo si;

				if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
					kvi_info("signal %u: shutting down", si.ssi_signo);
				stop = 1;
			} else if (kvi_listener_dispatch(s->l, cb)) {
				kvi_err("RDMA device %s failed or was removed: shutting down",
					kvi_listener_device(s->l));
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
	struct kvs_server s = { .next_client_id = 1 };
	struct kvi_listen_cb cb = { .arg = &s, .on_connect = on_connect, .on_established = on_established,
				    .on_disconnect = on_disconnect, .on_ctrl = on_ctrl };
	const struct kvi_geometry *sb;
	struct kvi_errbuf e = { { 0 } };
	uint32_t max_op_ms, quarantine_ms;
	uint16_t flags;
	sigset_t mask;
	int rc;

	rc = parse_args(argc, argv, &s.o);
	if (rc >= 0)
		return rc;
	kvi_log_set(kvi_log_stderr, "kvserver", KVI_LOG_WARN + s.o.verbose);
	rc = auth_setup(&s);
	if (rc)
		goto clean_auth;
	/* Block the signals before any thread exists (librdmacm may start one), so
	 * they are only ever delivered through the signalfd. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = kvi_listener_create(&(struct kvi_listen_opts){ .addr = s.o.listen, .port = s.o.port,
							     .device = s.o.device, .auth = &s.gate },
				 &s.l, &e);
	if (rc) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		rc = 1;
		goto clean_auth;
	}
	rc = kvs_region_create(&s.region, (size_t)s.o.memory_mib << 20, s.o.huge, kvi_listener_pd(s.l), &e);
	if (rc) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		goto clean_listener;
	}
	if (kvs_evictor_create(&s.evictor)) {
		fprintf(stderr, "kvserver: out of memory\n");
		rc = 1;
		goto clean_region;
	}
	s.o.core.wake = kvs_evictor_wake;
	s.o.core.wake_arg = s.evictor;
	rc = kvs_core_create(s.region.base, s.region.size, &s.o.core, &s.core, &e);
	if (rc) {
		fprintf(stderr, "kvserver: %s\n", e.msg);
		goto clean_region;
	}
	kvs_core_limits(s.core, &max_op_ms, &quarantine_ms, &flags);
	/* Old indexes retire only once every member uses the new one. */
	kvs_core_require_acks(s.core);
	if (kvs_members_create(&s.members, s.o.lease_ms, max_op_ms)) {
		fprintf(stderr, "kvserver: out of memory\n");
		rc = 1;
		goto clean_core;
	}
	rc = kvs_metrics_start(&s.metrics, s.o.metrics, s.core, s.members, &cb, &e);
	if (rc) { /* a bad or busy address: a usage error */
		fprintf(stderr, "kvserver: %s\n", e.msg);
		kvs_members_destroy(s.members);
		rc = 2;
		goto clean_core;
	}
	sb = kvs_core_geometry(s.core);
	/* Said once the port and region are set up, before "listening" (tests
	 * wait for that line): a bad flag or device is then the only
	 * line a failed start prints. */
	if (!s.o.secret_file)
		kvi_warn("no --secret-file: anyone who can reach port %u can read and write all of this "
			 "server's memory; give --secret-file PATH to require a shared secret", kvi_listener_port(s.l));
	printf("kvserver %s: listening on %s port %u, device %s, region %" PRIu64 " MiB (%s), "
	       "%" PRIu64 " buckets, %" PRIu64 " segments of %" PRIu64 " KiB\n",
	       KVS_VERSION, s.o.listen ? s.o.listen : "*", kvi_listener_port(s.l),
	       kvi_listener_device(s.l), s.o.memory_mib, s.region.huge ? "2 MiB hugepages" : "4 KiB pages",
	       sb->bucket_count, sb->heap_size / sb->segment_size, sb->segment_size >> 10);
	fflush(stdout);

	/* The loopback for fencing connects to our own listening address; with a
	 * wildcard listener there is no address to name. */
	if (s.o.listen && s.o.listen[0]) {
		char port[8];

		snprintf(port, sizeof(port), "%u", kvi_listener_port(s.l));
		if (kvs_fence_start(&s.fence, s.core, s.o.listen, port, kvi_listener_device(s.l)))
			kvi_warn("cannot start the loopback connection: locks of clients that die are not released");
		kvs_evictor_set_migrate(s.evictor, &(struct kvs_migrate_opts){
							   .load_pct = s.o.resize_load_pct,
							   .fence_idle = s.fence ? fence_idle : NULL, .fence_arg = s.fence });
		if (kvs_evictor_start(s.evictor, s.core, s.o.listen, port, kvi_listener_device(s.l)))
			kvi_warn("cannot start the reclaimer thread: memory is never reclaimed");
	} else {
		kvi_warn("listening on all addresses: locks held by clients that die are not released and "
			 "memory is never reclaimed (give -l ADDR for the loopback connection both need)");
	}
	rc = serve(&s, &cb);
	s.stopping = 1;
	kvs_metrics_stop(s.metrics);
	/* Tell every client first (their operations fail fast with
	 * KVC_ESERVERGONE; reconnecting is the application's choice), give
	 * the notices a moment to leave, then disconnect: their next operation
	 * fails at once with KVC_ESERVERGONE instead of waiting for transport
	 * timeouts. */
	if (kvi_listener_notify_all(s.l, &(struct kvi_ctrl){ .type = KVI_CTRL_SHUTDOWN }) > 0 &&
	    kvi_listener_flush_sends(s.l, 500))
		kvi_info("some clients did not take the shutdown notice in time");
	kvs_evictor_destroy(s.evictor);
	s.evictor = NULL;
	kvi_listener_disconnect_all(s.l, &cb);
	kvs_fence_destroy(s.fence);
	kvs_members_destroy(s.members);
clean_core:
	kvs_core_destroy(s.core);
clean_region:
	kvs_evictor_destroy(s.evictor);
	kvs_region_destroy(&s.region);
clean_listener:
	kvi_listener_destroy(s.l, NULL);
	rc = rc == 2 ? 2 : rc ? 1 : 0; /* 2: a usage error found late (--metrics) */
clean_auth:
	kvi_auth_replay_destroy(s.gate.replay);
	kvi_auth_wipe(s.secret, sizeof(s.secret));
	return rc;
}
