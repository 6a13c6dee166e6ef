/* kvbench: a YCSB-like benchmark for kvcache, and for the systems it is
 * compared with, driven by the same generators.
 *
 *   kvbench -w A|B|C|D|F --target rdma://HOST[:PORT] | memcached://HOST[:PORT] [options]
 *   kvbench --micro --target rdma://...    latency of each kind of operation, one at a time
 *   kvbench --raw --target rdma://...      latency of the verbs doorbells underneath
 *   kvbench --cpu-per-op --target local://MIB   client CPU time per GET and per PUT
 *
 * Everything that can be wrong with the command line or the target is found
 * before any load is sent, and reported in one line with a non-zero exit. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ca_seq.h"
#include "cpuop.h"
#include "driver.h"
#include "kvclient.h"
#include "micro.h"
#include "replay.h"
#include "report.h"
#include "runner.h"
#include "trace.h"
#include "sizedist.h"
#include "twload.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench -w WORKLOAD --target URL [options]\n"
		"       kvbench --micro | --raw --target rdma://HOST[:PORT] [-n N] [-s BYTES]\n"
		"       kvbench --cache-aside zipf|scan --target URL [-r N] [-n N] [--lru-bytes B]\n"
		"       kvbench --trace FILE --target URL [--trace-format F] [-n N] [--lru-bytes B]\n"
		"       kvbench -w twitter:N --target URL [-r N] [-n N] [--lru-bytes B]\n"
		"  -w, --workload A|B|C|D|F   YCSB core workload (E needs range scans: not offered)\n"
		"  -t, --target URL           rdma://HOST[:PORT][,HOST[:PORT]...] (kvcache, port 7471;\n"
		"                             several servers: keys spread by the library) or\n"
		"                             memcached://HOST[:PORT][,...] (port 11211; several: ketama)\n"
		"  -r, --records N            records inserted by the load phase (default 100000)\n"
		"  -n, --operations N         run-phase operations (default 100000)\n"
		"  -D, --duration SECONDS     run for this long instead of a number of operations\n"
		"  -T, --threads N            client threads, one connection each (default 1)\n"
		"  -q, --depth N              operations in flight per thread (default 8)\n"
		"  -s, --value-size SIZES     value bytes (default 100): N, MIN-MAX (uniform),\n"
		"                             lognormal:MEAN[,SIGMA[,MAX]] (SIGMA default 1, MAX\n"
		"                             16 x MEAN), or file:PATH (\"SIZE [WEIGHT]\" lines); YCSB\n"
		"                             draws one per write, --cache-aside one per key\n"
		"      --distribution NAME    uniform|zipfian|latest (default: the workload's)\n"

		"      --warmup SECONDS       run-phase time not recorded (default 1)\n"
		"      --no-load              skip the load phase (records already there)\n"
		"      --prime                before the run, each thread reads every record once,\n"
		"                             not recorded: a long-running client's steady state\n"
		"                             (rdma://: every location cached, a GET one doorbell)\n"
		"      --seed N               generator seed (default 1)\n"
		"      --json FILE            also write the results as JSON\n"
		"      --cdf FILE             write the run's latency CDF (microseconds fraction)\n"
		"      --quiet                no progress line\n"
		"      --progress             the progress line even when stderr is not a terminal\n"
		"      --interval SECONDS     also print run-phase operations per second, succeeded and\n"
		"                             failed, every SECONDS (\"INTERVAL t=... ok_per_s=...\")\n"
		"      --no-access-marks      rdma://: do not tell the server which items are read\n"
		"                             (kvc_opts.track_access = 0), to measure what it costs\n"
		"      --busy-poll-us N       rdma://: poll for N us before sleeping on the completion\n"
		"                             channel (kvc_opts.busy_poll_us; -1 never sleeps; default 50)\n"
		"  -d, --device NAME          RDMA device (--micro/--raw)\n"
		"      --secret-file PATH     rdma://: the server's shared secret (kvserver\n"
		"                             --secret-file; default: $KVC_SECRET_FILE, if set)\n"
		"Cache-aside (GET; on a miss, PUT the item, as an application with a backing store):\n"
		"      --cache-aside KIND     zipf: Zipfian 0.99 over -r keys; scan: the same plus a\n"
		"                             third of requests for keys never requested again\n"
		"                             -n requests in all (default 3 x records), the first\n"
		"                             --warmup-requests (default: records) not counted;\n"
		"                             one connection, -q in flight; each key one size (-s);\n"
		"                             prints miss ratios as --trace does\n"
		"      --lru-bytes B          the exact LRU baseline holds B bytes of items, key +\n"
		"                             value bytes each (default: the target's memory limit)\n"
		"      --warmup-requests N\n"
		"      --rate N               at most N requests per second\n"
		"Trace replay (the same cache-aside client, driven by a request trace):\n"
		"      --trace FILE           replay FILE (- : standard input, e.g. from zstd -dc):\n"
		"                             each GET, and on a miss a PUT of the trace's size\n"
		"                             (and TTL); SETs and DELETEs as they are; prints the\n"
		"                             request and byte miss ratios beside an exact LRU of\n"
		"                             --lru-bytes (default: the target's own memory)\n"
		"      --trace-format F       oracleGeneral (libCacheSim's binary), oracle-csv\n"
		"                             (time,id,size[,next]) or twitter (Twitter's cache-trace\n"
		"                             CSV); default: told from the file\n"
		"      --ttl-scale F          divide the trace's TTLs by F (a replay F times faster\n"
		"                             than the trace was recorded; default 1)\n"
		"                             -n: replay at most N requests; --warmup-requests N:\n"
		"                             the first N not counted (default 0); -q in flight\n"
		"  -w twitter:N               the same replay, of requests generated from the published\n"
		"                             statistics of Twitter's cache cluster N (Zipf alpha, key\n"
		"                             and value sizes, operation mix, TTLs: docs/benchmarking.md)\n"
		"                             over -r keys; -n requests (default 10 x records), the\n"
		"                             first --warmup-requests (default: records) not counted\n"
		"  Targets also include local://MIB: kvcache's server core and reclaimer in this\n"
		"  process (no NIC) with MIB MiB of item memory, for hit ratios at any scale.\n"
		"      --local-max-op-ms MS   local:// only: the in-process server's operation\n"
		"                             deadline (default 50; more for sanitized or emulated runs)\n"
		"      --cpu-per-op[=get|put] local://MIB only: load -r keys, then time -n GETs and\n"
		"                             -n PUTs (default 1000000 each) of uniformly chosen ones,\n"
		"                             -q in flight; prints the client thread's CPU time per\n"
		"                             operation (cpu_ns_per_get=... cpu_ns_per_put=...), the\n"
		"                             in-process transport's share of it (transport_ns_per_...:\n"
		"                             a NIC's work) and the rest (library_ns_per_...);\n"
		"                             =get or =put runs that phase only (for a profiler)\n"
		"  -h, --help\n");
}

struct cli {
	struct kvb_cfg cfg;
	const char *workload, *target, *json, *cdf, *device, *dist, *cache_aside, *trace;
	int trace_fmt;
	double ttl_scale;
	int micro, raw, have_ops, have_size, cpu_per_op;
	uint64_t lru_bytes, ca_warmup, rate;
	int have_ca_warmup;
	struct kvb_sizedist sizes; /* -s: cfg.sizes points here unless fixed or uniform */
};

static int bad(const char *what, const char *value, const char *expected)
{
	fprintf(stderr, "kvbench: invalid %s '%s': expected %s\n", what, value, expected);
	return 2;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo) || !(v <= hi))
		return -1;
	*out = v;
	return 0;
}

/* -s: sizedist.h; the run draws from cl->sizes unless it is fixed or uniform
 * (the runner's own draw, as before). */
static int parse_size(const char *s, struct cli *cl)
{
	char err[600];

	kvb_sizedist_free(&cl->sizes);
	if (kvb_sizedist_parse(s, &cl->sizes, err, sizeof(err))) {
		fprintf(stderr, "kvbench: invalid --value-size %s\n", err);
		return -1;
	}
	cl->cfg.vmin = cl->sizes.min;
	cl->cfg.vmax = cl->sizes.max;
	cl->cfg.sizes = cl->sizes.kind == KVB_SIZE_UNIFORM ? NULL : &cl->sizes;
	return 0;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct cli *cl)
{
	enum { O_DIST = 256, O_CDF, O_WARMUP, O_NOLOAD, O_SEED, O_JSON, O_QUIET, O_MICRO, O_RAW, O_CA, O_LRU,
	       O_CAWARM, O_NOMARKS, O_SECRET, O_RATE, O_CPUOP, O_PROGRESS, O_LOCALOP, O_INTERVAL, O_BUSY,
	       O_TRACE, O_TRACEFMT, O_TTLSCALE, O_PRIME };
	static const struct option lo[] = {
		{ "workload", required_argument, NULL, 'w' },  { "target", required_argument, NULL, 't' },
		{ "records", required_argument, NULL, 'r' },   { "operations", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'D' },  { "threads", required_argument, NULL, 'T' },
		{ "depth", required_argument, NULL, 'q' },     { "value-size", required_argument, NULL, 's' },
		{ "size", required_argument, NULL, 's' },      { "distribution", required_argument, NULL, O_DIST },
		{ "warmup", required_argument, NULL, O_WARMUP }, { "cdf", required_argument, NULL, O_CDF },
		{ "no-load", no_argument, NULL, O_NOLOAD },    { "seed", required_argument, NULL, O_SEED },
		{ "prime", no_argument, NULL, O_PRIME },
		{ "json", required_argument, NULL, O_JSON },   { "quiet", no_argument, NULL, O_QUIET },
		{ "micro", no_argument, NULL, O_MICRO },       { "raw", no_argument, NULL, O_RAW },
		{ "device", required_argument, NULL, 'd' },    { "help", no_argument, NULL, 'h' },
		{ "cache-aside", required_argument, NULL, O_CA }, { "lru-bytes", required_argument, NULL, O_LRU },
		{ "warmup-requests", required_argument, NULL, O_CAWARM },
		{ "no-access-marks", no_argument, NULL, O_NOMARKS },
		{ "busy-poll-us", required_argument, NULL, O_BUSY },
		{ "secret-file", required_argument, NULL, O_SECRET },
		{ "rate", required_argument, NULL, O_RATE },
		{ "cpu-per-op", optional_argument, NULL, O_CPUOP },
		{ "progress", no_argument, NULL, O_PROGRESS },
		{ "interval", required_argument, NULL, O_INTERVAL },
		{ "local-max-op-ms", required_argument, NULL, O_LOCALOP },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "trace-format", required_argument, NULL, O_TRACEFMT },
		{ "ttl-scale", required_argument, NULL, O_TTLSCALE },
		{ 0 },
	};
	struct kvb_cfg *c = &cl->cfg;
	uint64_t v;
	int o;

	*c = (struct kvb_cfg){ .records = 100000, .operations = 100000, .warmup_s = 1.0,
			       .threads = 1, .depth = 8, .vmin = 100, .vmax = 100, .seed = 1, .load = 1,
			       .progress = 1 };
	while ((o = getopt_long(argc, argv, "w:t:r:n:D:T:q:s:d:h", lo, NULL)) != -1) {
		switch (o) {
		case 'w':
			cl->workload = optarg;
			break;
		case 't':
			cl->target = optarg;
			break;
		case 'r':
			if (parse_u64(optarg, 1, 1ull << 40, &c->records))
				return bad("--records", optarg, "1..2^40");
			break;
		case 'n':
			if (parse_u64(optarg, 1, 1ull << 40, &c->operations))
				return bad("--operations", optarg, "1..2^40");
			cl->have_ops = 1;
			break;
		case 'D':
			if (parse_double(optarg, 0.1, 86400, &c->duration_s))
				return bad("--duration", optarg, "seconds, 0.1..86400");
			break;
		case 'T':
			if (parse_u64(optarg, 1, 256, &v))
				return bad("--threads", optarg, "1..256");
			c->threads = (unsigned)v;
			break;
		case 'q':
			if (parse_u64(optarg, 1, 64, &v))
				return bad("--depth", optarg, "1..64");
			c->depth = (unsigned)v;
			break;
		case 's':
			if (parse_size(optarg, cl))
				return 2;
			cl->have_size = 1;
			break;
		case O_DIST:
			cl->dist = optarg;
			break;
		case O_WARMUP:
			if (parse_double(optarg, 0, 3600, &c->warmup_s))
				return bad("--warmup", optarg, "seconds, 0..3600");
			break;
		case O_NOLOAD:
			c->load = 0;
			break;
		case O_PRIME:
			c->prime = 1;
			break;
		case O_SEED:
			if (parse_u64(optarg, 0, UINT64_MAX, &c->seed))
				return bad("--seed", optarg, "a non-negative integer");
			break;
		case O_JSON:
			cl->json = optarg;
			break;
		case O_CDF:
			cl->cdf = optarg;
			break;
		case O_QUIET:
			c->progress = 0;
			break;
		case O_PROGRESS:
			c->progress = 2; /* forced */
			break;
		case O_INTERVAL:
			if (parse_double(optarg, 0.01, 3600, &c->interval_s))
				return bad("--interval", optarg, "seconds, 0.01..3600");
			break;
		case O_LOCALOP: {
			uint64_t ms;

			if (parse_u64(optarg, 1, 600000, &ms))
				return bad("--local-max-op-ms", optarg, "milliseconds, 1..600000");
			kvb_local_opts.max_op_ms = (unsigned)ms;
			break;
		}
		case O_MICRO:
			cl->micro = 1;
			break;
		case O_RAW:
			cl->raw = 1;
			break;
		case 'd':
			cl->device = optarg;
			break;
		case O_CA:
			if (!kvb_ca_kind_parse(optarg))
				return bad("--cache-aside", optarg, "zipf or scan");
			cl->cache_aside = optarg;
			break;
		case O_LRU:
			if (parse_u64(optarg, 1, 1ull << 44, &cl->lru_bytes))
				return bad("--lru-bytes", optarg, "bytes, 1..2^44");
			break;
		case O_TRACE:
			cl->trace = optarg;
			break;
		case O_TRACEFMT:
			cl->trace_fmt = kvb_trace_fmt_parse(optarg);
			if (!cl->trace_fmt)
				return bad("--trace-format", optarg, "oracleGeneral, oracle-csv or twitter");
			break;
		case O_TTLSCALE:
			if (parse_double(optarg, 1e-6, 1e9, &cl->ttl_scale))
				return bad("--ttl-scale", optarg, "a factor, 1e-6..1e9");
			break;
		case O_RATE:
			if (parse_u64(optarg, 1, 100000000, &cl->rate))
				return bad("--rate", optarg, "requests per second, 1..100000000");
			break;
		case O_CPUOP:
			if (optarg && strcmp(optarg, "get") && strcmp(optarg, "put"))
				return bad("--cpu-per-op", optarg, "get or put (or nothing: both)");
			cl->cpu_per_op = !optarg ? KVB_CPUOP_BOTH : optarg[0] == 'g' ? KVB_CPUOP_GET : KVB_CPUOP_PUT;
			break;
		case O_NOMARKS:
			kvb_rdma_track_access = 0;
			break;
		case O_BUSY: {
			uint64_t us;

			if (strcmp(optarg, "-1") == 0)
				kvb_rdma_busy_poll_us = -1;
			else if (parse_u64(optarg, 0, 1000000, &us))
				return bad("--busy-poll-us", optarg, "-1 (never sleep) or 0..1000000 microseconds");
			else
				kvb_rdma_busy_poll_us = (int)us;
			break;
		}
		case O_SECRET:
			kvb_rdma_secret_file = optarg;
			break;
		case O_CAWARM:
			if (parse_u64(optarg, 0, 1ull << 40, &cl->ca_warmup))
				return bad("--warmup-requests", optarg, "0..2^40");
			cl->have_ca_warmup = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvbench: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	if (!cl->target) {
		fprintf(stderr, "kvbench: --target is required (e.g. --target rdma://10.0.0.1:7471)\n");
		return 2;
	}
	return -1;
}

/* Workload, distribution and target, all checked before anything is sent. */
static int check_ycsb(struct cli *cl)
{
	struct kvb_cfg *c = &cl->cfg;
	char err[400];

	if (!cl->workload || strlen(cl->workload) != 1 || !kvb_workload_find((char)(cl->workload[0] & ~0x20))) {
		fprintf(stderr, "kvbench: unknown workload '%s': expected one of A, B, C, D, F (YCSB core workloads)\n",
			cl->workload ? cl->workload : "(none: use -w)");
		return 2;
	}
	c->w = kvb_workload_find((char)(cl->workload[0] & ~0x20));
	if (c->w->scan > 0) {
		fprintf(stderr, "kvbench: workload %c needs ordered range scans, which a hash index cannot "
				"serve; kvcache does not offer them\n", c->w->name);
		return 2;
	}
	c->dist = c->w->dist;
	if (cl->dist) {
		if (strcmp(cl->dist, "uniform") == 0)
			c->dist = KVB_DIST_UNIFORM;
		else if (strcmp(cl->dist, "zipfian") == 0)
			c->dist = KVB_DIST_ZIPFIAN;
		else if (strcmp(cl->dist, "latest") == 0)
			c->dist = KVB_DIST_LATEST;
		else
			return bad("--distribution", cl->dist, "uniform, zipfian or latest");
	}
	/* YCSB's skewed-latest generator counts back from the newest record and
	 * never picks key 0, so one record leaves it nothing to choose. */
	if (c->dist == KVB_DIST_LATEST && c->records < 2) {
		fprintf(stderr, "kvbench: --records %llu is too few for the latest distribution%s: give 2..2^40\n",
			(unsigned long long)c->records, cl->dist ? "" : " (workload D's)");
		return 2;
	}
	if (c->duration_s > 0 && !cl->have_ops) {
		c->operations = 0;
	} else if (c->duration_s > 0) {
		fprintf(stderr, "kvbench: --duration and --operations exclude each other: give one\n");
		return 2;
	}
	c->device = cl->device;
	c->drv = kvb_driver_parse(cl->target, c->host, sizeof(c->host), c->port, sizeof(c->port), err, sizeof(err));
	if (!c->drv) {
		fprintf(stderr, "kvbench: %s\n", err);
		return 2;
	}
	if (c->vmax == 0) {
		fprintf(stderr, "kvbench: --value-size must allow at least 1 byte\n");
		return 2;
	}
	if (c->progress == 1 && !isatty(STDERR_FILENO))
		c->progress = 0;
	return -1;
}

/* Open an output file before the run, so that a bad path is found before any
 * load is sent. */
static int open_out(const char *path, FILE **f)
{
	*f = NULL;
	if (!path)
		return 0;
	*f = fopen(path, "w");
	if (!*f) {
		fprintf(stderr, "kvbench: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int close_out(const char *path, FILE *f)
{
	if (f && fclose(f)) {
		fprintf(stderr, "kvbench: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int run_ycsb(struct cli *cl)
{
	struct kvb_result *res = malloc(sizeof(*res));
	FILE *json = NULL, *cdf = NULL;
	char err[400];
	int rc, status;

	if (!res) {
		fprintf(stderr, "kvbench: out of memory\n");
		return 1;
	}
	if (open_out(cl->json, &json) || open_out(cl->cdf, &cdf)) {
		if (json)
			fclose(json);
		free(res);
		return 1;
	}
	rc = kvb_run(&cl->cfg, res, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvbench: %s\n", err);
		status = res->signal ? 128 + res->signal : rc == KVB_RUN_REFUSED ? 2 : 1;
		goto out;
	}
	kvb_report_text(stdout, &cl->cfg, res);
	fflush(stdout); /* the results before the line that says why they stop short */
	if (json)
		kvb_report_json(json, &cl->cfg, res);
	if (cdf)
		kvb_hist_write_cdf(&res->run.hist[KVB_T_N], cdf);
	if (rc != KVB_RUN_OK)
		fprintf(stderr, "kvbench: %s\n", err);
	if (rc == KVB_RUN_LOST || res->run.failed[KVB_T_N] || res->load.failed[KVB_T_N])
		status = 3;
	else
		status = 0;
	if (rc == KVB_RUN_STOPPED) /* as a shell reports a command a signal ended */
		status = 128 + res->signal;
out:
	if (close_out(cl->json, json) | close_out(cl->cdf, cdf))
		status = status ? status : 1;
	free(res);
	return status;
}

static int run_replay(struct cli *cl, struct kvb_replay_cfg *c, const char *what);

/* --cache-aside: the key sequence of ca_seq.h, each key's item of one size
 * (-s), through the trace replayer: request and byte miss ratios, beside an
 * exact LRU of equal bytes. */
static int run_cache_aside(struct cli *cl)
{
	struct kvb_replay_cfg c = { 0 };
	struct kvb_sizedist uni = { .kind = KVB_SIZE_UNIFORM, .min = cl->cfg.vmin, .max = cl->cfg.vmax };
	struct kvb_ca_src src;
	char what[400], sizes[160];

	c.max_requests = cl->have_ops ? cl->cfg.operations : 3 * cl->cfg.records;
	c.warmup = cl->have_ca_warmup ? cl->ca_warmup : cl->cfg.records;
	if (c.warmup >= c.max_requests) {
		fprintf(stderr, "kvbench: the warm-up (%llu requests) leaves nothing to count of %llu\n",
			(unsigned long long)c.warmup, (unsigned long long)c.max_requests);
		return 2;
	}
	if (cl->cfg.vmin == 0) {
		fprintf(stderr, "kvbench: --cache-aside needs values of at least 1 byte\n");
		return 2;
	}
	if (kvb_ca_src_init(&src, kvb_ca_kind_parse(cl->cache_aside), cl->cfg.records, cl->cfg.seed,
			    cl->cfg.sizes ? cl->cfg.sizes : &uni)) {
		fprintf(stderr, "kvbench: cannot generate --cache-aside %s over %llu keys\n", cl->cache_aside,
			(unsigned long long)cl->cfg.records);
		return 2;
	}
	c.next = kvb_ca_src_next;
	c.arg = &src;
	kvb_sizedist_describe(src.sizes, sizes, sizeof(sizes));
	printf("cache-aside %s: %llu keys, values %s, working set %llu bytes; %llu requests, the first %llu not "
	       "counted\n", cl->cache_aside, (unsigned long long)cl->cfg.records, sizes,
	       (unsigned long long)kvb_ca_src_bytes(&src), (unsigned long long)c.max_requests,
	       (unsigned long long)c.warmup);
	fflush(stdout);
	snprintf(what, sizeof(what), "cache-aside %s", cl->cache_aside);
	return run_replay(cl, &c, what);
}

static void replay_row(const char *who, const struct kvb_replay_side *s)
{
	printf("%-28s request miss ratio %.4f  byte miss ratio %.4f  (%llu hits of %llu GETs)\n", who,
	       1.0 - (double)s->hits / (double)s->gets, 1.0 - (double)s->hit_bytes / (double)s->get_bytes,
	       (unsigned long long)s->hits, (unsigned long long)s->gets);
}

/* A replay of c (a trace or a generator; the target still to parse), then its
 * report: what was replayed, then the cache's and the baseline's miss ratios. */
static int run_replay(struct cli *cl, struct kvb_replay_cfg *c, const char *what)
{
	struct kvb_replay_result r;
	char err[400], lru[64];

	c->depth = cl->cfg.depth;
	c->device = cl->device;
	c->lru_bytes = cl->lru_bytes;
	c->rate = cl->rate;
	c->ttl_scale = cl->ttl_scale;
	c->drv = kvb_driver_parse(cl->target, c->host, sizeof(c->host), c->port, sizeof(c->port), err, sizeof(err));
	if (!c->drv) {
		fprintf(stderr, "kvbench: %s\n", err);
		return 2;
	}
	if (c->depth > c->drv->max_depth)
		c->depth = c->drv->max_depth;
	if (kvb_replay(c, &r, err, sizeof(err))) {
		fprintf(stderr, "kvbench: %s\n", err);
		return 1;
	}
	printf("%s%s%s%s: %llu requests replayed (%llu counted GETs, %llu sets, %llu deletes), %llu skipped "
	       "(%llu other operations, %llu items larger than %s takes); %llu PUTs after misses, %.1f s\n",
	       what, r.fmt ? " (" : "", r.fmt ? kvb_trace_fmt_name(r.fmt) : "", r.fmt ? ")" : "", (unsigned long long)r.requests,
	       (unsigned long long)r.cache.gets, (unsigned long long)r.sets, (unsigned long long)r.deletes,
	       (unsigned long long)(r.others + r.too_large), (unsigned long long)r.others,
	       (unsigned long long)r.too_large, c->drv->name, (unsigned long long)r.fill_puts, r.seconds);
	if (r.cache.gets == 0 || r.lru.gets == 0 || r.cache.get_bytes == 0 || r.lru.get_bytes == 0) {
		fprintf(stderr, "kvbench: no GET was counted (of %llu requests): no miss ratio to report\n",
			(unsigned long long)r.requests);
		return 1;
	}
	replay_row(c->drv->name, &r.cache);
	snprintf(lru, sizeof(lru), "exact LRU of %llu bytes", (unsigned long long)r.lru_bytes);
	replay_row(lru, &r.lru);
	/* Equal memory is the premise of the comparison: what the target really
	 * held (memcached keeps a slab page per size class whatever its -m). */
	if (r.target_bytes)
		printf("%s held %llu bytes at the end (items, garbage and index)\n", c->drv->name,
		       (unsigned long long)r.target_bytes);
	else
		printf("%s cannot say how much memory it held\n", c->drv->name);
	if (r.errors)
		fprintf(stderr, "kvbench: %llu requests failed, the first %s\n", (unsigned long long)r.errors,
			c->drv->errname(r.first_error));
	return r.errors ? 3 : 0;
}

static int run_trace(struct cli *cl)
{
	struct kvb_replay_cfg c = { .path = cl->trace, .fmt = cl->trace_fmt,
				    .max_requests = cl->have_ops ? cl->cfg.operations : 0,
				    .warmup = cl->have_ca_warmup ? cl->ca_warmup : 0 };
	char what[300];

	snprintf(what, sizeof(what), "trace %s", cl->trace);
	return run_replay(cl, &c, what);
}

/* -w twitter:N: the generator of twload.h through the trace replayer. */
static int run_twitter(struct cli *cl)
{
	const char *num = cl->workload + strlen("twitter:");
	const struct kvb_twl_cluster *tc;
	struct kvb_replay_cfg c = { 0 };
	struct kvb_twl w;
	uint64_t id;
	char what[400];

	if (parse_u64(num, 1, 1000, &id) || !(tc = kvb_twl_find((unsigned)id))) {
		fprintf(stderr, "kvbench: unknown workload '%s': the Twitter clusters offered are %s\n", cl->workload,
			kvb_twl_list());
		return 2;
	}
	if (kvb_twl_init(&w, tc, cl->cfg.records, cl->cfg.seed)) {
		fprintf(stderr, "kvbench: cannot generate %s over %llu keys\n", cl->workload,
			(unsigned long long)cl->cfg.records);
		return 2;
	}
	c.next = kvb_twl_next;
	c.arg = &w;
	c.max_requests = cl->have_ops ? cl->cfg.operations : 10 * cl->cfg.records;
	c.warmup = cl->have_ca_warmup ? cl->ca_warmup : cl->cfg.records;
	if (c.warmup >= c.max_requests) {
		fprintf(stderr, "kvbench: the warm-up (%llu requests) leaves nothing to count of %llu\n",
			(unsigned long long)c.warmup, (unsigned long long)c.max_requests);
		return 2;
	}
	printf("workload %s (twitter/cache-trace stat/2020Mar.md: Zipf %.4f, key %u B, value %u B mean, "
	       "get %.2f set %.2f delete %.2f other %.2f): %llu keys, working set %llu bytes; %llu requests, the first "
	       "%llu not counted\n", cl->workload, tc->alpha, tc->key_size, tc->value_size, tc->get, tc->set, tc->del,
	       tc->other, (unsigned long long)cl->cfg.records, (unsigned long long)kvb_twl_bytes(&w),
	       (unsigned long long)c.max_requests, (unsigned long long)c.warmup);
	fflush(stdout);
	snprintf(what, sizeof(what), "workload %s", cl->workload);
	return run_replay(cl, &c, what);
}

static void cpuop_row(const char *name, const struct kvb_cpuop_phase *p, const struct kvb_cpuop_result *r,
		      const struct kvb_driver *d)
{
	printf("%-4s %10llu ops %8.3f s %10.0f ops/s  client CPU %8.1f ns/op  errors %llu%s%s\n", name,
	       (unsigned long long)p->ops, p->wall_ns / 1e9, p->wall_ns ? p->ops * 1e9 / p->wall_ns : 0.0,
	       p->ops ? (double)p->cpu_ns / (double)p->ops : 0.0, (unsigned long long)p->failed,
	       p->failed ? ", first " : "", p->failed ? d->errname(p->first_error) : "");
	if (p->ops && p->transport_ns)
		printf("     of which the in-process transport doing a NIC's work %.1f ns/op; the library (and the loop) "
		       "%.1f ns/op\n",
		       (double)p->transport_ns / (double)p->ops, (double)(p->cpu_ns - p->transport_ns) / (double)p->ops);
	printf("     as counted by the library:");
	for (unsigned k = 0; k < r->rt_kinds; k++)
		if (p->rt_ops[k])
			printf(" %s %.1f %%", r->rt_names[k], 100.0 * (double)p->rt_ops[k] / (double)p->ops);
	printf("\n");
}

/* The machine-readable line's figures for one phase: all of the thread's
 * CPU, the transport's share, and the rest (what a core spends per
 * operation once a NIC does the transport). */
static void cpuop_figures(const char *name, const struct kvb_cpuop_phase *p)
{
	double ops = p->ops ? (double)p->ops : 1.0;

	printf("cpu_ns_per_%s=%.1f transport_ns_per_%s=%.1f library_ns_per_%s=%.1f ", name, (double)p->cpu_ns / ops,
	       name, (double)p->transport_ns / ops, name, (double)(p->cpu_ns - p->transport_ns) / ops);
}

static int run_cpu_per_op(struct cli *cl)
{
	struct kvb_cpuop_cfg c = { .records = cl->cfg.records, .operations = cl->have_ops ? cl->cfg.operations : 1000000,
				   .depth = cl->cfg.depth, .value_size = cl->cfg.vmax, .seed = cl->cfg.seed,
				   .phases = cl->cpu_per_op };
	struct kvb_cpuop_result r;
	char err[400];
	int rc;

	c.drv = kvb_driver_parse(cl->target, c.host, sizeof(c.host), c.port, sizeof(c.port), err, sizeof(err));
	if (!c.drv) {
		fprintf(stderr, "kvbench: %s\n", err);
		return 2;
	}
	if (c.drv != &kvb_driver_local) {
		fprintf(stderr, "kvbench: --cpu-per-op needs a local://MIB target: elsewhere the thread's CPU "
				"time would include its waits on the network\n");
		return 2;
	}
	if (cl->cfg.vmin != cl->cfg.vmax || c.value_size == 0) {
		fprintf(stderr, "kvbench: --cpu-per-op takes one --value-size of at least 1 byte\n");
		return 2;
	}
	if (c.records >= UINT32_MAX || c.operations >= UINT32_MAX) {
		fprintf(stderr, "kvbench: --cpu-per-op takes -r and -n below 2^32 (its key tables are in memory)\n");
		return 2;
	}
	if (c.depth > c.drv->max_depth)
		c.depth = c.drv->max_depth;
	kvb_local_opts.prefault = 1;
	if (!kvb_local_opts.max_op_ms)
		kvb_local_opts.max_op_ms = 1000;
	rc = kvb_cpu_per_op(&c, &r, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "kvbench: %s\n", err);
		return rc == -2 ? 2 : 1;
	}
	printf("cpu per op on %s://%s: %llu keys of %u-byte values loaded, %u in flight, one thread\n",
	       c.drv->scheme, c.host, (unsigned long long)c.records, c.value_size, c.depth);
	cpuop_row("load", &r.load, &r, c.drv);
	if (c.phases & KVB_CPUOP_GET)
		cpuop_row("GET", &r.get, &r, c.drv);
	if (c.phases & KVB_CPUOP_PUT)
		cpuop_row("PUT", &r.put, &r, c.drv);
	printf("the timing loop alone (key copy, request hand-over; included above): %.1f ns/op\n",
	       (double)r.harness.cpu_ns / (double)r.harness.ops);
	if (c.phases & KVB_CPUOP_GET)
		cpuop_figures("get", &r.get);
	if (c.phases & KVB_CPUOP_PUT)
		cpuop_figures("put", &r.put);
	printf("loop_ns_per_op=%.1f\n", (double)r.harness.cpu_ns / (double)r.harness.ops);
	return r.get.failed || r.put.failed || r.load.failed ? 3 : 0;
}

static int run(struct cli *cl);

int main(int argc, char **argv)
{
	struct cli cl = { 0 };
	int rc = parse_args(argc, argv, &cl);

	if (rc < 0)
		rc = run(&cl);
	kvb_sizedist_free(&cl.sizes);
	return rc;
}

static int run(struct cli *clp)
{
	struct cli cl = *clp; /* the sizes it points to stay clp's */
	int rc;

	if (cl.cfg.prime && (cl.micro || cl.raw || cl.cache_aside || cl.trace || cl.cpu_per_op ||
			     (cl.workload && strncmp(cl.workload, "twitter:", 8) == 0))) {
		fprintf(stderr, "kvbench: --prime is for YCSB runs (-w A|B|C|D|F)\n");
		return 2;
	}
	if (cl.micro || cl.raw) {
		struct kvb_micro_opts o = { .device = cl.device, .ops = cl.have_ops ? cl.cfg.operations : 2000,
					    .size = cl.have_size ? cl.cfg.vmax : 64 };
		char err[400];

		if (cl.have_size && (cl.cfg.vmin != cl.cfg.vmax || o.size == 0)) {
			fprintf(stderr, "kvbench: --micro and --raw take one --size of at least 1 byte\n");
			return 2;
		}
		if (kvb_driver_parse(cl.target, o.host, sizeof(o.host), o.port, sizeof(o.port), err, sizeof(err)) !=
		    &kvb_driver_rdma) {
			fprintf(stderr, "kvbench: --micro and --raw need an rdma:// target\n");
			return 2;
		}
		return cl.raw ? kvb_raw(&o) : kvb_micro(&o);
	}
	if (cl.cache_aside && cl.trace) {
		fprintf(stderr, "kvbench: --cache-aside and --trace exclude each other: give one\n");
		return 2;
	}
	if (cl.cache_aside)
		return run_cache_aside(&cl);
	if (cl.trace)
		return run_trace(&cl);
	if (cl.workload && strncmp(cl.workload, "twitter:", 8) == 0)
		return run_twitter(&cl);
	if (cl.cpu_per_op)
		return run_cpu_per_op(&cl);
	rc = check_ycsb(&cl);
	if (rc >= 0)
		return rc;
	return run_ycsb(&cl);
}
