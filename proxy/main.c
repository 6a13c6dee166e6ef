/* kvproxy: memcached's text and meta protocols in front of libkvclient.
 *
 *   kvproxy [options] rdma://HOST[:PORT][,HOST[:PORT]...] | local://MIB
 *
 * The main thread listens (TCP and/or a unix socket) and hands connections
 * to the worker threads round robin; each worker speaks to the tier through
 * its own handle (worker.h). */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "stats.h"
#include "tier.h"
#include "worker.h"

#define MAX_THREADS 256

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void usage(FILE *f)
{
	struct kvc_opts lib;

	kvc_opts_init(&lib); /* the library's defaults, where kvproxy keeps them */
	fprintf(f, "usage: kvproxy [options] TARGET\n"
		   "memcached's text and meta protocols in front of a kvcache tier.\n"
		   "TARGET:\n"
		   "  rdma://HOST[:PORT][,HOST[:PORT]...]  kvserver(s) (port default %d)\n"
		   "  local://MIB                   a whole kvcache server inside kvproxy, MIB MiB of\n"
		   "                                items (for tests and trials; no RDMA needed)\n"
		   "options:\n"
		   "  -p, --port PORT          TCP port (default 11211; 0: no TCP)\n"
		   "  -l, --listen ADDR        address to listen on (default 127.0.0.1)\n"
		   "  -s, --unix-socket PATH   also listen on this unix socket\n"
		   "  -t, --threads N          worker threads, each with its own handle (default 4)\n"
		   "  -c, --max-conns N        connections at most (default 1024); more are\n"
		   "                           accepted, told ERROR and closed, as memcached does\n"
		   "  -d, --device NAME        RDMA device (default: the one routing to the server)\n"
		   "      --secret-file PATH   the servers' shared secret (kvserver --secret-file)\n"
		   "      --busy-poll US       poll for completions this long before sleeping\n"
		   "                           (kvc_opts.busy_poll_us; -1 never sleeps; default %d)\n"
		   "      --cache-entries N    locations cached per worker and server, 32 bytes\n"
		   "                           each (kvc_opts.cache_entries; default %u; 0: none)\n"
		   "  -h, --help               this text\n"
		   "  -V, --version            kvproxy's version\n",
		   KVC_DEFAULT_PORT, lib.busy_poll_us, KVP_CACHE_ENTRIES_DEFAULT);
}

static int parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || end == s || *end || *s == '-' || *out < lo || *out > hi ? -1 : 0;
}

static int listen_tcp(const char *addr, unsigned long port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct addrinfo *ai;
	char ps[24];
	int fd = -1, one = 1, rc;

	snprintf(ps, sizeof(ps), "%lu", port);
	rc = getaddrinfo(addr, ps, &hints, &ai);
	if (rc) {
		fprintf(stderr, "kvproxy: -l %s: %s\n", addr, gai_strerror(rc));
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
		fprintf(stderr, "kvproxy: cannot listen on %s port %lu: %s\n", addr, port, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "kvproxy: -s %s: path too long\n", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	unlink(path); /* a socket left by an earlier run */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1024)) {
		fprintf(stderr, "kvproxy: cannot listen on %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* As many descriptors as allowed: 10 000 idle connections must fit. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* Accept what is waiting on fd; over the limit, memcached's answer. */
static void accept_all(int fd, int tcp, struct kvp_shared *sh, unsigned long max_conns, struct kvp_worker *w,
		       unsigned nw, unsigned *next)
{
	static const char too_many[] = "ERROR Too many open connections\r\n";

	for (;;) {
		int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;

		if (c < 0) {
			if (errno == EMFILE || errno == ENFILE) /* no descriptor: back off a little */
				poll(NULL, 0, 10);
			return;
		}
		if (__atomic_load_n(&sh->curr_connections, __ATOMIC_RELAXED) >= max_conns) {
			if (write(c, too_many, sizeof(too_many) - 1) < 0) {
				/* the client is gone already: nothing to tell */
			}
			close(c);
			__atomic_fetch_add(&sh->rejected_connections, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (tcp)
			setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		__atomic_fetch_add(&sh->curr_connections, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&sh->total_connections, 1, __ATOMIC_RELAXED);
		if (kvp_worker_give(&w[*next], c)) {
			close(c);
			__atomic_fetch_sub(&sh->curr_connections, 1, __ATOMIC_RELAXED);
		}
		*next = (*next + 1) % nw;
	}
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "port", required_argument, NULL, 'p' },      { "listen", required_argument, NULL, 'l' },
		{ "unix-socket", required_argument, NULL, 's' }, { "threads", required_argument, NULL, 't' },
		{ "max-conns", required_argument, NULL, 'c' }, { "device", required_argument, NULL, 'd' },
		{ "secret-file", required_argument, NULL, 'K' }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },         { "busy-poll", required_argument, NULL, 'B' },
		{ "cache-entries", required_argument, NULL, 'C' }, { 0 },
	};
	struct kvp_tier_opts to = { .depth = 64, .busy_poll_us = KVP_BUSY_POLL_LIBRARY,
				    .cache_entries = KVP_CACHE_ENTRIES_DEFAULT };
	unsigned long port = 11211, threads = 4, max_conns = 1024, bp, ce;
	const char *addr = "127.0.0.1", *unix_path = NULL;
	static struct kvp_worker workers[MAX_THREADS];
	static struct kvp_counters *ctrs[MAX_THREADS];
	struct kvp_shared sh = { .workers = ctrs, .reset_mu = PTHREAD_MUTEX_INITIALIZER };
	struct pollfd pf[2];
	unsigned npf = 0, next = 0, started = 0;
	char err[512];
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "p:l:s:t:c:d:hV", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_uint(optarg, 0, 65535, &port)) {
				fprintf(stderr, "kvproxy: -p %s: a port, 0..65535\n", optarg);
				return 2;
			}
			break;
		case 'l':
			addr = optarg;
			break;
		case 's':
			unix_path = optarg;
			break;
		case 't':
			if (parse_uint(optarg, 1, MAX_THREADS, &threads)) {
				fprintf(stderr, "kvproxy: -t %s: threads, 1..%d\n", optarg, MAX_THREADS);
				return 2;
			}
			break;
		case 'c':
			if (parse_uint(optarg, 1, 10000000, &max_conns)) {
				fprintf(stderr, "kvproxy: -c %s: connections, 1..10000000\n", optarg);
				return 2;
			}
			break;
		case 'd':
			to.device = optarg;
			break;
		case 'K':
			to.secret_file = optarg;
			break;
		case 'C':
			if (parse_uint(optarg, 0, 1ul << 24, &ce)) {
				fprintf(stderr, "kvproxy: --cache-entries %s: entries, 0..16777216\n", optarg);
				return 2;
			}
			to.cache_entries = (unsigned)ce;
			break;
		case 'B':
			if (!strcmp(optarg, "-1")) {
				to.busy_poll_us = -1;
			} else if (parse_uint(optarg, 0, 1000000, &bp)) {
				fprintf(stderr, "kvproxy: --busy-poll %s: microseconds, -1 or 0..1000000\n", optarg);
				return 2;
			} else {
				to.busy_poll_us = (int)bp;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvproxy %s (libkvclient %s)\n", KVP_VERSION, kvc_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "kvproxy: %s\n", optind == argc ? "a TARGET is required (rdma://HOST or local://MIB)"
							      : "one TARGET only");
		usage(stderr);
		return 2;
	}
	to.target = argv[optind];
	if (kvp_tier_check(to.target, err, sizeof(err))) {
		fprintf(stderr, "kvproxy: %s\n", err);
		return 2;
	}
	if (port == 0 && !unix_path) {
		fprintf(stderr, "kvproxy: -p 0 and no -s: nothing to listen on\n");
		return 2;
	}
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (port) {
		pf[npf].fd = listen_tcp(addr, port);
		pf[npf++].events = POLLIN;
	}
	if (unix_path) {
		pf[npf].fd = listen_unix(unix_path);
		pf[npf++].events = POLLIN;
	}
	for (unsigned i = 0; i < npf; i++)
		if (pf[i].fd < 0)
			return 1;
	sh.started = time(NULL);
	for (; started < threads; started++) {
		if (kvp_worker_start(&workers[started], &to, &sh, err, sizeof(err))) {
			fprintf(stderr, "kvproxy: %s\n", err);
			rc = 1;
			break;
		}
	}
	while (!rc && !stopping) {
		if (poll(pf, npf, 1000) < 0 && errno != EINTR) {
			fprintf(stderr, "kvproxy: poll: %s\n", strerror(errno));
			rc = 1;
			break;
		}
		for (unsigned i = 0; i < npf; i++)
			if (pf[i].revents & POLLIN)
				accept_all(pf[i].fd, port && i == 0, &sh, max_conns, workers, started, &next);
	}
	for (unsigned i = 0; i < started; i++)
		kvp_worker_stop(&workers[i]);
	for (unsigned i = 0; i < npf; i++)
		close(pf[i].fd);
	if (unix_path)
		unlink(unix_path);
	return rc;
}
