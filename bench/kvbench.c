/* kvbench: measures a kvserver from a client's side.
 *
 * Until the key-value data path exists this runs the verbs round trip that
 * everything else is built on: it connects like a client, then times single
 * READs, WRITEs and CASes against the server's region (one round trip each) and
 * prints their latency distribution. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvclient_errors.h"
#include "log.h"
#include "rmem_verbs.h"

struct bench_opts {
	char host[256];
	char port[16];
	const char *device;
	uint64_t ops;
	uint32_t size;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvbench --target rdma://HOST[:PORT] [options]\n"
		   "  -t, --target URL     server to measure (rdma://HOST:PORT, default port 7471)\n"
		   "  -d, --device NAME    RDMA device to use (default: the one routing to HOST)\n"
		   "  -n, --operations N   operations per kind (default 2000)\n"
		   "  -s, --size BYTES     READ/WRITE size (default 64)\n"
		   "  -h, --help\n");
}

static int parse_target(const char *url, struct bench_opts *o)
{
	const char *hp, *colon;
	size_t hl;

	if (strncmp(url, "rdma://", 7) != 0) {
		fprintf(stderr, "kvbench: unsupported target '%s': expected rdma://HOST[:PORT]\n", url);
		return -1;
	}
	hp = url + 7;
	colon = strrchr(hp, ':');
	hl = colon ? (size_t)(colon - hp) : strlen(hp);
	if (hl == 0 || hl >= sizeof(o->host) || (colon && (!colon[1] || strlen(colon + 1) >= sizeof(o->port) ||
							     strspn(colon + 1, "0123456789") != strlen(colon + 1)))) {
		fprintf(stderr, "kvbench: malformed target '%s': expected rdma://HOST[:PORT]\n", url);
		return -1;
	}
	memcpy(o->host, hp, hl);
	o->host[hl] = '\0';
	snprintf(o->port, sizeof(o->port), "%s", colon ? colon + 1 : "7471");
	return 0;
}

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		{ "target", required_argument, NULL, 't' },  { "device", required_argument, NULL, 'd' },
		{ "operations", required_argument, NULL, 'n' }, { "size", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },          { 0 },
	};
	int c, have_target = 0;
	char *end;

	*o = (struct bench_opts){ .ops = 2000, .size = 64 };
	while ((c = getopt_long(argc, argv, "t:d:n:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			if (parse_target(optarg, o))
				return 2;
			have_target = 1;
			break;
		case 'd':
			o->device = optarg;
			break;
		case 'n':
			errno = 0;
			o->ops = strtoull(optarg, &end, 10);
			if (errno || *end || *optarg == '-' || o->ops == 0 || o->ops > 100000000) {
				fprintf(stderr, "kvbench: invalid --operations '%s': expected 1..100000000\n", optarg);
				return 2;
			}
			break;
		case 's':
			errno = 0;
			o->size = (uint32_t)strtoul(optarg, &end, 10);
			if (errno || *end || *optarg == '-' || o->size == 0 || o->size > 65536) {
				fprintf(stderr, "kvbench: invalid --size '%s': expected 1..65536\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!have_target) {
		fprintf(stderr, "kvbench: --target is required (e.g. --target rdma://10.0.0.1:7471)\n");
		return 2;
	}
	return -1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *sorted, uint64_t n, double p)
{
	uint64_t i = (uint64_t)(p * (double)(n - 1) + 0.5);

	return (double)sorted[i] / 1000.0;
}

/* Time o->ops single-operation round trips of one kind. */
static int run_kind(struct kvi_rmem *rm, const struct bench_opts *o, const char *name, int kind,
		    uint64_t *lat)
{
	size_t lsize;
	char *lbuf = kvi_rmem_lbuf(rm, &lsize);
	uint64_t *word = (uint64_t *)(void *)lbuf;
	uint64_t span = rm->region_size - o->size;

	for (uint64_t i = 0; i < o->ops; i++) {
		/* Walk the region so every op touches a fresh cache line at the server. */
		uint64_t off = ((i * 4096u) % (span + 1)) & ~(uint64_t)63;
		struct kvi_rop op;
		uint64_t t0;
		int rc;

		switch (kind) {
		case KVI_ROP_READ:
			op = kvi_rop_read(off, lbuf + 64, o->size);
			break;
		case KVI_ROP_WRITE:
			op = kvi_rop_write(off, lbuf + 64, o->size);
			break;
		default:
			op = kvi_rop_cas(off, word, i, i + 1);
			break;
		}
		t0 = now_ns();
		rc = kvi_rmem_exec(rm, &op, 1, 5000);
		lat[i] = now_ns() - t0;
		if (rc) {
			fprintf(stderr, "kvbench: %s failed after %" PRIu64 " operations: %s\n", name, i,
				kvc_strerror(rc));
			return rc;
		}
	}
	qsort(lat, o->ops, sizeof(*lat), cmp_u64);
	printf("%-8s %10" PRIu64 " %10.1f %10.1f %10.1f %10.1f %8d\n", name, o->ops, pct_us(lat, o->ops, 0.5),
	       pct_us(lat, o->ops, 0.9), pct_us(lat, o->ops, 0.99), (double)lat[o->ops - 1] / 1000.0, 1);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct kvi_errbuf e = { { 0 } };
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	uint64_t *lat;
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	kvi_log_set(kvi_log_stderr, "kvbench", KVI_LOG_WARN);
	rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = o.host, .port = o.port,
							      .device = o.device,
							      .lbuf_size = 64 + (size_t)o.size,
							      .timeout_ms = 5000 },
				    &rm, &w, &e);
	if (rc) {
		fprintf(stderr, "kvbench: %s\n", e.msg);
		return 1;
	}
	if (rm->region_size < o.size) {
		fprintf(stderr, "kvbench: --size %u is larger than the server's region\n", o.size);
		kvi_rmem_destroy(rm);
		return 1;
	}
	lat = calloc(o.ops, sizeof(*lat));
	if (!lat) {
		fprintf(stderr, "kvbench: out of memory for %" PRIu64 " samples\n", o.ops);
		kvi_rmem_destroy(rm);
		return 1;
	}
	printf("kvbench: rdma://%s:%s via %s, client id %u, region %" PRIu64 " MiB, %u-byte READ/WRITE\n",
	       o.host, o.port, kvi_rmem_verbs_device(rm), w.client_id, w.region_size >> 20, o.size);
	printf("%-8s %10s %10s %10s %10s %10s %8s\n", "op", "count", "p50_us", "p90_us", "p99_us", "max_us",
	       "rtt/op");
	rc = run_kind(rm, &o, "READ", KVI_ROP_READ, lat);
	if (!rc)
		rc = run_kind(rm, &o, "WRITE", KVI_ROP_WRITE, lat);
	if (!rc)
		rc = run_kind(rm, &o, "CAS", KVI_ROP_CAS, lat);
	free(lat);
	kvi_rmem_destroy(rm);
	return rc ? 1 : 0;
}
