/* lin_worker: one process of a multi-process history for the linearizability
 * check (test_lin_verbs.c): random GET/PUT/DELETE on a few shared keys, half
 * the PUTs with TTLs of a few milliseconds, each operation recorded with its
 * CLOCK_REALTIME invoke and complete times (tests/lincheck/lincheck.h).
 *
 *   lin_worker HOST:PORT CLIENT SEED OPS KEYS OUTFILE
 *
 * Values are unique: CLIENT << 32 | sequence, so a read names its write. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvclient.h"
#include "lincheck.h"

int main(int argc, char **argv)
{
	struct kvc_opts o;
	char err[400], k[32], v[600], got[600], line[256];
	unsigned client, ops, keys;
	uint64_t rng;
	kvc_t *h = NULL;
	FILE *out;

	if (argc != 7) {
		fprintf(stderr, "usage: lin_worker HOST:PORT CLIENT SEED OPS KEYS OUTFILE\n");
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
