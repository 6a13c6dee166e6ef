/* rmem_peer: the passive side of the verbs transport tests. It registers a plain
 * region whose 8-byte words hold their own index (word i == i), admits clients
 * through the real listener, prints "READY <port>" and serves until killed.
 * It has no control handler: the listener answers every control request with
 * KVI_CTRL_ERROR / KVC_EPROTO.
 *
 *   rmem_peer [--addr A] [--port P] [--device D] [--size BYTES] [--advertise-extra BYTES] [--silent]
 *
 * --silent listens and never answers a connection request: a server that is
 * up but does not answer (its CPU stalled, a port blackholed), which a
 * client's join must not wait for.
 * --advertise-extra makes it lie about its size, so that a client's access past
 * the registered memory reaches the NIC's bounds check (remote access error). */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_bound.h"
#include "listener.h"
#include "log.h"

struct peer {
	struct ibv_mr *mr;
	uint64_t *base;
	uint64_t size, extra;
	uint32_t next_id;
	uint32_t exec_ms; /* the execution bound it states (--exec-ms; default ours) */
};

static int on_connect(void *arg, struct kvi_peer *p, const struct kvi_hello *h, struct kvi_welcome *w)
{
	struct peer *s = arg;

	(void)p;
	(void)h;
	w->client_id = s->next_id++;
	w->rkey = s->mr->rkey;
	w->region_addr = (uintptr_t)s->base;
	/* A geometry the client accepts (it addresses raw offsets here, no index). */
	w->geo = (struct kvi_geometry){ .layout_version = KVI_LAYOUT_VERSION, .epoch = 1,
					.region_size = s->size + s->extra, .index_off = KVI_SUPERBLOCK_SIZE,
					.bucket_count = 2, .heap_off = 2 * KVI_SUPERBLOCK_SIZE,
					.heap_size = s->size + s->extra - 2 * KVI_SUPERBLOCK_SIZE,
					.segment_size = KVI_MIN_SEGMENT_SIZE };
	w->max_op_ms = 1000;
	w->exec_ms = s->exec_ms;
	w->quarantine_ms = 2 * w->max_op_ms + w->exec_ms + 10;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "addr", required_argument, NULL, 'a' },   { "port", required_argument, NULL, 'p' },
		{ "device", required_argument, NULL, 'd' }, { "size", required_argument, NULL, 's' },
		{ "advertise-extra", required_argument, NULL, 'x' }, { "exec-ms", required_argument, NULL, 'e' },
		{ "silent", no_argument, NULL, 'q' },    { 0 },
	};
	struct kvi_listen_opts o = { .port = "0" };
	/* By default the bound its QPs meet (listener.c sets them as ours). */
	struct peer s = { .size = 1 << 20, .next_id = 1, .exec_ms = KVI_EXEC_BOUND_MS };
	struct kvi_listen_cb cb = { .arg = &s, .on_connect = on_connect };
	struct kvi_errbuf e = { { 0 } };
	struct kvi_listener *l;
	int c, silent = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'a':
			o.addr = optarg;
			break;
		case 'p':
			o.port = optarg;
			break;
		case 'd':
			o.device = optarg;
			break;
		case 's':
			s.size = strtoull(optarg, NULL, 0);
			break;
		case 'x':
			s.extra = strtoull(optarg, NULL, 0);
			break;
		case 'e':
			s.exec_ms = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'q':
			silent = 1;
			break;
		default:
			return 2;
		}
	}
	kvi_log_set(kvi_log_stderr, "rmem_peer", KVI_LOG_INFO);
	if (kvi_listener_create(&o, &l, &e)) {
		fprintf(stderr, "rmem_peer: %s\n", e.msg);
		return 1;
	}
	s.base = aligned_alloc(4096, s.size);
	for (uint64_t i = 0; s.base && i < s.size / 8; i++)
		s.base[i] = i;
	s.mr = s.base ? ibv_reg_mr(kvi_listener_pd(l), s.base, s.size,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)
			: NULL;
	if (!s.mr) {
		fprintf(stderr, "rmem_peer: cannot register %llu bytes: %s\n", (unsigned long long)s.size,
			strerror(errno));
		return 1;
	}
	printf("READY %u %s\n", kvi_listener_port(l), kvi_listener_device(l));
	fflush(stdout);
	while (silent)
		pause(); /* requests queue on the listener's channel, unanswered */
	for (;;) {
		struct pollfd p = { .fd = kvi_listener_fd(l), .events = POLLIN };

		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return 1;
		if (kvi_listener_dispatch(l, &cb))
			return 1;
	}
}
