/* ctrlbench: what many connected clients cost a server's control loop.
 *
 *   ctrlbench --target HOST[:PORT] --server-pid PID -n CLIENTS [-t SECONDS] [--secret-file F]
 *   ctrlbench --local -n CLIENTS [-t SECONDS] [--lease-ms L] [--renew-ms R]
 *
 * Real RDMA (--target): opens CLIENTS handles to one kvserver (one connection
 * and lease each; one PUT each, then no data operations), then keeps them all
 * alive for SECONDS by sweeping over them every 20 ms (kvc_poll, which renews
 * a lease when it is due: every renew-ms, 250 ms by default). Measured over
 * that window: the CPU time of kvserver's control loop (its main thread:
 * /proc/PID/task/PID/schedstat), as a share of one core and per 1 000
 * clients, the renewals per second it answered (as the handles counted
 * them), and leases lost (handles that had to rejoin). Joining time is printed apart.
 *
 * In-process (--local): no transport; the control loop's own work per event
 * with CLIENTS members -- finding the peer of a completion by QP number and
 * by client id (common/u32map.h), renewing its lease and acknowledging its
 * epoch (server/members.h), and the loop's lease-expiry check -- driven by a
 * virtual clock at the rate CLIENTS clients renew, timed with the thread's
 * CPU clock. It shows how the loop's cost grows with the number of clients
 * beyond what a test machine can connect (the transport's own cost per event
 * is in the --target figure).
 *
 * Every figure is measured or the run fails (exit 1) saying why; 2 on usage
 * errors. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ids.h"
#include "kvclient.h"
#include "members.h"
#include "u32map.h"

struct args {
	const char *target, *secret_file;
	long pid;
	unsigned n;
	double seconds;
	int local;
	unsigned lease_ms, renew_ms;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ctrlbench --target HOST[:PORT] --server-pid PID -n CLIENTS [-t SECONDS] [--secret-file F]\n"
		   "       ctrlbench --local -n CLIENTS [-t SECONDS] [--lease-ms L] [--renew-ms R]\n");
}

/* CPU time (ns) of thread tid of process pid, from schedstat (ns), else
 * from stat (clock ticks). 0 and *ok = 0 when neither can be read. */
static uint64_t thread_cpu_ns(long pid, long tid, int *ok)
{
	char path[96], buf[1024];
	unsigned long long run = 0, ut, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/task/%ld/schedstat", pid, tid);
	f = fopen(path, "r");
	if (f) {
		int got = fscanf(f, "%llu", &run);

		fclose(f);
		if (got == 1 && run > 0) {
			*ok = 1;
			return run;
		}
	}
	snprintf(path, sizeof(path), "/proc/%ld/task/%ld/stat", pid, tid);
	f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f)) {
		char *p = strrchr(buf, ')');

		fclose(f);
		/* After the name: state ppid pgrp session tty tpgid flags minflt
		 * cminflt majflt cmajflt utime stime. */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2) {
			*ok = 1;
			return (ut + st) * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
		}
		return 0;
	}
	if (f)
		fclose(f);
	*ok = 0;
	return 0;
}

static int raise_fd_limit(unsigned n)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r))
		return -1;
	/* A handle holds a few descriptors (rdma_cm channel, completion channel). */
	if (r.rlim_cur < (rlim_t)n * 4 + 64) {
		r.rlim_cur = r.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &r))
			return -1;
	}
	return r.rlim_cur >= (rlim_t)n * 4 + 64 ? 0 : -1;
}

#define SWEEP_NS 20000000u /* every handle is looked at this often */

static void sweep(kvc_t **h, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct kvc_op *d;

		(void)kvc_poll(h[i], &d, 1, 0);
	}
}

static int run_target(const struct args *a)
{
	kvc_t **h = calloc(a->n, sizeof(*h));
	uint64_t cpu0 = 0, cpu1, rejoins0 = 0, rejoins1 = 0, renewals0 = 0, renewals1 = 0, t0 = 0, t1, join0;
	uint64_t sweeps = 0, sweep_max = 0, last;
	char err[400];
	struct kvc_opts o;
	int ok = 1, rc = 1;
	unsigned i;

	if (!h || raise_fd_limit(a->n)) {
		fprintf(stderr, "ctrlbench: cannot hold %u handles: %s\n", a->n,
			h ? "too few file descriptors (ulimit -n)" : "out of memory");
		free(h);
		return 1;
	}
	kvc_opts_init(&o);
	o.server = a->target;
	o.secret_file = a->secret_file;
	o.depth = 1;
	o.cache_entries = 0;
	join0 = last = kvi_mono_ns();
	for (i = 0; i < a->n; i++) {
		int r = kvc_create(&o, &h[i], err, sizeof(err));

		if (r == 0 && (r = kvc_put(h[i], &i, sizeof(i), "v", 1, 0)) != 0)
			snprintf(err, sizeof(err), "its PUT: %s", kvc_strerror(r));
		if (r) {
			fprintf(stderr, "ctrlbench: client %u of %u: %s\n", i + 1, a->n, err);
			goto out;
		}
		/* Keep those already joined alive while the others join. */
		if (kvi_mono_ns() - last >= SWEEP_NS) {
			sweep(h, i + 1);
			last = kvi_mono_ns();
		}
	}
	printf("joined: %u clients in %.2f s\n", a->n, (double)(kvi_mono_ns() - join0) / 1e9);
	/* A second of sweeps first: the joins' burst is over. */
	for (int pass = 0; pass < 2; pass++) {
		uint64_t end = kvi_mono_ns() + (uint64_t)((pass ? a->seconds : 1.0) * 1e9);

		if (pass) {
			cpu0 = thread_cpu_ns(a->pid, a->pid, &ok);
			for (i = 0; i < a->n; i++) {
				struct kvc_stats st;

				kvc_get_stats(h[i], &st);
				rejoins0 += st.rejoins;
				renewals0 += st.lease_renewals;
			}
			t0 = kvi_mono_ns();
		}
		while (kvi_mono_ns() < end) {
			uint64_t took = kvi_mono_ns();

			sweep(h, a->n);
			took = kvi_mono_ns() - took;
			if (pass) {
				sweeps++;
				if (took > sweep_max)
					sweep_max = took;
			}
			if (took < SWEEP_NS)
				usleep((useconds_t)((SWEEP_NS - took) / 1000u));
		}
	}
	t1 = kvi_mono_ns();
	cpu1 = thread_cpu_ns(a->pid, a->pid, &ok);
	/* A handle the server expelled meanwhile (its lease lost) rejoins on
	 * its next operation: one GET each tells. */
	for (i = 0; i < a->n; i++) {
		char v[8];
		size_t len;
		int r = kvc_get(h[i], &i, sizeof(i), v, sizeof(v), &len);

		if (r) {
			fprintf(stderr, "ctrlbench: client %u: its GET after the window: %s\n", i + 1, kvc_strerror(r));
			goto out;
		}
	}
	if (!ok) {
		fprintf(stderr, "ctrlbench: cannot read the CPU time of process %ld (/proc/%ld/task/%ld)\n", a->pid,
			a->pid, a->pid);
		goto out;
	}
	for (i = 0; i < a->n; i++) {
		struct kvc_stats st;

		kvc_get_stats(h[i], &st);
		rejoins1 += st.rejoins;
		renewals1 += st.lease_renewals;
	}
	{
		double secs = (double)(t1 - t0) / 1e9, share = (double)(cpu1 - cpu0) / 1e9 / secs;
		uint64_t renewals = renewals1 - renewals0;

		printf("clients=%u seconds=%.2f loop_cpu_pct=%.2f loop_cpu_pct_per_1000_clients=%.3f "
		       "renewals_per_s=%.0f loop_us_per_renewal=%.1f leases_lost=%" PRIu64 " sweeps=%" PRIu64
		       " sweep_max_ms=%.1f\n",
		       a->n, secs, 100 * share, 100 * share * 1000 / a->n, (double)renewals / secs,
		       renewals ? (double)(cpu1 - cpu0) / 1e3 / (double)renewals : 0.0, rejoins1 - rejoins0, sweeps,
		       (double)sweep_max / 1e6);
		if (!renewals) {
			fprintf(stderr, "ctrlbench: the server answered no renewal: nothing was measured\n");
			goto out;
		}
	}
	rc = 0;
out:
	for (i = 0; i < a->n; i++)
		kvc_destroy(h[i]);
	free(h);
	return rc;
}

/* The control loop's own work per event at n members (see the top). */
static int run_local(const struct args *a)
{
	const uint64_t ms = 1000000u, renew_ns = a->renew_ms * ms, span = (uint64_t)(a->seconds * 1e9);
	struct kvi_u32map by_qpn = { 0 }, by_id = { 0 };
	struct kvs_members *m = NULL;
	struct kvs_ids *ids = NULL;
	uint32_t *id = calloc(a->n, sizeof(*id)), expired[64];
	uint64_t events = 0, cpu0, cpu, vnow = ms, lost = 0;
	int rc = 1;

	if (!id || kvs_members_create(&m, a->lease_ms, 1000) || kvs_ids_create(&ids, 1u << 22, 0)) {
		fprintf(stderr, "ctrlbench: out of memory\n");
		goto out;
	}
	for (unsigned i = 0; i < a->n; i++) {
		id[i] = kvs_ids_take(ids, vnow, 0);
		if (!id[i] || kvs_members_join(m, id[i], 1, vnow) || kvi_u32map_put(&by_qpn, 0x100 + i * 7, &id[i]) ||
		    kvi_u32map_put(&by_id, id[i], &id[i])) {
			fprintf(stderr, "ctrlbench: cannot admit client %u\n", i + 1);
			goto out;
		}
	}
	/* Each client renews every renew_ns, spread evenly: event k is client
	 * k mod n at k x renew_ns / n. The loop checks leases at every event,
	 * as kvserver's does before it waits again. */
	cpu0 = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (uint64_t k = 0;; k++) {
		uint64_t t = vnow + k * renew_ns / a->n;
		unsigned c = (unsigned)(k % a->n);
		uint32_t *who;

		if (t - vnow >= span)
			break;
		who = kvi_u32map_get(&by_qpn, 0x100 + c * 7);
		if (!who || kvi_u32map_get(&by_id, *who) != who || !kvs_members_renew(m, *who, t)) {
			fprintf(stderr, "ctrlbench: client %u lost its lease\n", c + 1);
			goto out;
		}
		kvs_members_ack(m, *who, 1, t);
		lost += kvs_members_expired(m, t, expired, 64);
		(void)kvs_members_next_due(m, t, 1000);
		events++;
	}
	cpu = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	printf("local clients=%u virtual_seconds=%.1f renewals=%" PRIu64 " loop_ns_per_renewal=%.0f "
	       "loop_cpu_pct=%.3f loop_cpu_pct_per_1000_clients=%.4f leases_lost=%" PRIu64
	       " (control logic only: no transport)\n",
	       a->n, a->seconds, events, (double)cpu / (double)events, 100.0 * (double)cpu / (double)span,
	       100.0 * (double)cpu / (double)span * 1000 / a->n, lost);
	rc = lost ? 1 : 0;
out:
	kvi_u32map_free(&by_qpn);
	kvi_u32map_free(&by_id);
	kvs_members_destroy(m);
	kvs_ids_destroy(ids);
	free(id);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "target", required_argument, NULL, 'T' },
					    { "server-pid", required_argument, NULL, 'P' },
					    { "secret-file", required_argument, NULL, 'S' },
					    { "local", no_argument, NULL, 'L' },
					    { "lease-ms", required_argument, NULL, 'l' },
					    { "renew-ms", required_argument, NULL, 'r' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	struct args a = { .seconds = 10, .lease_ms = 1000, .renew_ms = 250 };
	int c;

	while ((c = getopt_long(argc, argv, "n:t:h", lo, NULL)) != -1) {
		char *end = NULL;

		errno = 0;
		switch (c) {
		case 'T': a.target = optarg; break;
		case 'S': a.secret_file = optarg; break;
		case 'L': a.local = 1; break;
		case 'P': a.pid = strtol(optarg, &end, 10); break;
		case 'n': a.n = (unsigned)strtoul(optarg, &end, 10); break;
		case 't': a.seconds = strtod(optarg, &end); break;
		case 'l': a.lease_ms = (unsigned)strtoul(optarg, &end, 10); break;
		case 'r': a.renew_ms = (unsigned)strtoul(optarg, &end, 10); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (end && (*end || errno)) {
			fprintf(stderr, "ctrlbench: bad number '%s'\n", optarg);
			return 2;
		}
	}
	if (optind != argc || a.n == 0 || a.n > 1000000 || !(a.seconds > 0) || a.seconds > 3600 ||
	    a.renew_ms == 0 || a.renew_ms >= a.lease_ms || (!a.local && (!a.target || a.pid <= 0))) {
		usage(stderr);
		return 2;
	}
	return a.local ? run_local(&a) : run_target(&a);
}
