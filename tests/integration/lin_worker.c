/* lin_worker: one process of a multi-process history for the linearizability
 * check (test_lin_verbs.c), each operation recorded with its CLOCK_REALTIME
 * invoke and complete times (tests/lincheck/lincheck.h).
 *
 *   lin_worker HOST:PORT CLIENT SEED OPS KEYS OUTFILE [plain|items|counters]
 *
 * plain (the default): random GET/PUT/DELETE on a few shared keys, half the
 * PUTs with TTLs of a few milliseconds; values are unique, CLIENT << 32 |
 * sequence, so a read names its write. items, counters: the memcached mix
 * of the unit histories (tests/lincheck/recorder.h: conditional stores, CAS
 * loops; with counters incr / decr in batches and with their modes, touch,
 * gat), on a real kvserver. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvclient.h"
#include "lincheck.h"
#include "recorder.h"

/* The memcached mix: ops operations at most, recorded by recorder.h. */
static int items(struct kvc_opts *o, unsigned client, uint64_t rng, unsigned ops, unsigned keys, const char *seed,
		 int counters, FILE *out)
{
	struct lc_op *hist = calloc(ops, sizeof(*hist));
	struct lc_rec r = { .id = (uint16_t)client, .ops = hist, .cap = ops, .counters = counters };
	char err[400], k[64], line[LC_LINE_MAX];
	kvc_t *h = NULL;
	int rc = 0;

	if (!hist)
		return 1;
	o->depth = counters ? LC_REC_DEPTH : 1;
	while (r.n + 2 * LC_REC_RMW_TRIES <= r.cap && !r.why) {
		unsigned key = (unsigned)(lc_rand(&rng) % keys);

		if (!h) {
			o->cache_entries = lc_rand(&rng) % 2 ? 256 : 0;
			if (kvc_create(o, &h, err, sizeof(err)) != 0) {
				fprintf(stderr, "lin_worker: %s\n", err);
				free(hist);
				return 1;
			}
		}
		snprintf(k, sizeof(k), "lin-%s-%s-%u", seed, counters ? "c" : "i", key);
		lc_rec_step(&r, h, &rng, key, k);
		if (r.broken) { /* a new handle: the server fences the old one's locks */
			kvc_destroy(h);
			h = NULL;
			r.broken = 0;
			continue;
		}
		if (lc_rand(&rng) % 4 == 0)
			usleep((useconds_t)(lc_rand(&rng) % 2000));
	}
	kvc_destroy(h);
	if (r.why) {
		fprintf(stderr, "lin_worker: client %u: %s\n", client, r.why);
		rc = 1;
	}
	for (size_t i = 0; i < r.n; i++) {
		lc_format(&hist[i], line, sizeof(line));
		fputs(line, out);
	}
	fprintf(stderr, "lin_worker: client %u: %zu operations (%" PRIu64 " unknown, %" PRIu64 " failed and left out)\n",
		client, r.n, r.c.unknown, r.c.failed);
	free(hist);
	return rc;
}

int main(int argc, char **argv)
{
	struct kvc_opts o;
	char err[400], k[32], v[600], got[600], line[256];
	unsigned client, ops, keys;
	uint64_t rng;
	kvc_t *h = NULL;
	FILE *out;

	if (argc != 7 && argc != 8) {
		fprintf(stderr, "usage: lin_worker HOST:PORT CLIENT SEED OPS KEYS OUTFILE [plain|items|counters]\n");
		return 2;
	}
	client = (unsigned)atoi(argv[2]);
	rng = strtoull(argv[3], NULL, 10) * 0x9e3779b97f4a7c15ull + client;
	ops = (unsigned)atoi(argv[4]);
	keys = (unsigned)atoi(argv[5]);
	out = fopen(argv[6], "w");
	if (!out || keys == 0) {
		perror("lin_worker");
		return 1;
	}
	kvc_opts_init(&o);
	o.server = argv[1];
	o.depth = 1;
	if (argc == 8 && strcmp(argv[7], "plain") != 0) {
		int rc;

		if (strcmp(argv[7], "items") != 0 && strcmp(argv[7], "counters") != 0) {
			fprintf(stderr, "lin_worker: mode '%s' is not plain, items or counters\n", argv[7]);
			return 2;
		}
		rc = items(&o, client, rng, ops, keys, argv[3], strcmp(argv[7], "counters") == 0, out);
		return fclose(out) || rc ? 1 : 0;
	}
	for (unsigned i = 0; i < ops; i++) {
		struct lc_op r = { .client = (uint16_t)client, .key = (uint32_t)(lc_rand(&rng) % keys) };
		unsigned dice = (unsigned)(lc_rand(&rng) % 100);
		size_t len = 0;
		int rc;

		if (!h) {
			o.cache_entries = lc_rand(&rng) % 2 ? 256 : 0;
			if ((rc = kvc_create(&o, &h, err, sizeof(err))) != 0) {
				fprintf(stderr, "lin_worker: %s\n", err);
				return 1;
			}
		}
		snprintf(k, sizeof(k), "lin-%s-%u", argv[3], r.key); /* fresh keys per history (seed) */
		r.inv = lc_now_ns();
		if (dice < 45) {
			r.kind = LC_GET;
			rc = kvc_get(h, k, strlen(k), got, sizeof(got) - 1, &len);
			got[rc == 0 ? len : 0] = '\0';
			if (rc == 0 && sscanf(got, "v%" SCNu64 ":", &r.value) != 1) {
				fprintf(stderr, "lin_worker: GET %s returned \"%s\", which no client writes\n", k, got);
				return 1;
			}
			r.result = rc == 0 ? LC_OK : LC_ABSENT;
		} else if (dice < 85) {
			uint64_t ttl = lc_rand(&rng) % 2 ? 1 + lc_rand(&rng) % 30 : 0;

			r.kind = LC_PUT;
			r.value = ((uint64_t)client << 32) | i;
			r.ttl_ns = ttl * 1000000u;
			snprintf(v, sizeof(v), "v%" PRIu64 ":%0*u", r.value, (int)(lc_rand(&rng) % 500), 0);
			rc = kvc_put(h, k, strlen(k), v, strlen(v), ttl);
		} else {
			r.kind = LC_DELETE;
			rc = kvc_delete(h, k, strlen(k));
			r.result = rc == 0 ? LC_OK : LC_ABSENT;
		}
		r.cmp = lc_now_ns();
		if (rc == KVC_EUNKNOWN) {
			r.cmp = LC_NEVER;
		} else if (rc && rc != KVC_ENOTFOUND) {
			/* failed cleanly: nothing changed; the handle may be broken */
			kvc_destroy(h);
			h = NULL;
			continue;
		}
		lc_format(&r, line, sizeof(line));
		fputs(line, out);
		if (lc_rand(&rng) % 4 == 0)
			usleep((useconds_t)(lc_rand(&rng) % 2000));
	}
	kvc_destroy(h);
	return fclose(out) ? 1 : 0;
}
