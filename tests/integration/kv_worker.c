/* kv_worker: one client process of the multi-process verbs tests.
 *
 *   kv_worker -s HOST:PORT --id N --seconds S [--shared K] [--own K] [--survive]
 *
 * Runs mixed GET/PUT/DELETE through libkvclient for S seconds on K shared keys
 * (written by every worker) and K own keys (written only by this one). Values
 * are "w<id>:<seq>". It checks as it goes that, per key and writer, sequence
 * numbers never go backwards and that its own keys read back what it last
 * wrote. Prints "READY" after its first operations, then at the end one line
 * "ACK <key> <value>" per own key it wrote and "DONE <ops> <violations>".
 * Exit 0 when all held, 3 on a violation (described on stderr), 2 on errors.
 * --survive: a failure a stalled or cut-off client meets (KVC_EFENCED,
 * KVC_ESERVERGONE, KVC_ETIMEDOUT, KVC_EUNKNOWN) is counted, not fatal: the
 * handle rejoins on its next call (an own key whose write had an unknown
 * outcome is not checked until it is written again). DONE then also says
 * "survived <n>". */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvclient.h"

#define MAX_KEYS 64
#define MAX_WRITERS 64

static unsigned long long seen[MAX_KEYS][MAX_WRITERS + 1];
static unsigned long long acked[MAX_KEYS];
static unsigned char unknown[MAX_KEYS]; /* own key whose last write's outcome is unknown */

/* The first violation, said again last (before DONE): a test's failure
 * message shows the end of a worker's output, after its ACK lines. */
static char first_violation[256];

static void violation(unsigned id, unsigned long long op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void violation(unsigned id, unsigned long long op, const char *fmt, ...)
{
	char msg[200];
	int at = snprintf(msg, sizeof(msg), "kv_worker %u: VIOLATION: ", id);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg + at, sizeof(msg) - (size_t)at, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", msg);
	if (!first_violation[0])
		snprintf(first_violation, sizeof(first_violation), "%s (operation %llu)", msg, op);
}

static int parse(const char *v, size_t len, unsigned *w, unsigned long long *seq)
{
	char buf[40];

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, v, len);
	buf[len] = '\0';
	return sscanf(buf, "w%u:%llu", w, seq) == 2 && *w >= 1 && *w <= MAX_WRITERS ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "server", required_argument, NULL, 's' }, { "id", required_argument, NULL, 'i' },
		{ "seconds", required_argument, NULL, 't' }, { "shared", required_argument, NULL, 'k' },
		{ "own", required_argument, NULL, 'o' },    { "survive", no_argument, NULL, 'v' },
		{ 0 },
	};
	struct kvc_opts o;
	unsigned id = 1, nshared = 8, nown = 8, seconds = 5, violations = 0, c, survived = 0;
	unsigned long long seq = 0, ops = 0;
	int survive = 0;
	uint64_t rng;
	char err[400], k[48], v[40], got[64];
	time_t end;
	kvc_t *h;

	kvc_opts_init(&o);
	o.op_timeout_ms = 10000;
	while ((c = (unsigned)getopt_long(argc, argv, "s:", lo, NULL)) != (unsigned)-1) {
		switch (c) {
		case 's':
			o.server = optarg;
			break;
		case 'i':
			id = (unsigned)atoi(optarg);
			break;
		case 't':
			seconds = (unsigned)atoi(optarg);
			break;
		case 'k':
			nshared = (unsigned)atoi(optarg);
			break;
		case 'o':
			nown = (unsigned)atoi(optarg);
			break;
		case 'v':
			survive = 1;
			break;
		default:
			return 2;
		}
	}
	if (id == 0 || id > MAX_WRITERS || nshared == 0 || nshared > MAX_KEYS || nown == 0 || nown > MAX_KEYS)
		return 2;
	if (kvc_create(&o, &h, err, sizeof(err))) {
		fprintf(stderr, "kv_worker %u: %s\n", id, err);
		return 2;
	}
	rng = 0x9e3779b97f4a7c15ull * id;
	end = time(NULL) + seconds;
	while (time(NULL) < end) {
		unsigned r, key;
		size_t len = 0;
		unsigned w;
		unsigned long long s;
		int rc;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		r = (unsigned)(rng % 10);
		key = (unsigned)(rng >> 20);
		if (r < 3) {
			snprintf(k, sizeof(k), "shared-%u", key % nshared);
			snprintf(v, sizeof(v), "w%u:%llu", id, ++seq);
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
		} else if (r < 5) {
			snprintf(k, sizeof(k), "own-%u-%u", id, key % nown);
			snprintf(v, sizeof(v), "w%u:%llu", id, ++seq);
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
			if (rc == 0)
				acked[key % nown] = seq;
			else if (rc == KVC_EUNKNOWN)
				unknown[key % nown] = 1;
			if (rc == 0)
				unknown[key % nown] = 0;
		} else if (r < 6) {
			snprintf(k, sizeof(k), "tmp-%u", id);
			rc = kvc_put(h, k, strlen(k), "t", 1, 0);
			if (rc == 0)
				rc = kvc_delete(h, k, strlen(k));
			/* Only a value read back is a violation; a GET that failed
			 * (a stalled client's lease ran out) is judged as any failure. */
			if (rc == 0) {
				rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
				if (rc == 0) {
					violation(id, ops, "deleted %s still readable ('%.*s')", k, (int)len, got);
					violations++;
				} else if (rc == KVC_ENOTFOUND) {
					rc = 0;
				}
			}
		} else if (r < 8) {
			unsigned sk = key % nshared;

			snprintf(k, sizeof(k), "shared-%u", sk);
			rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
			if (rc == 0) {
				if (parse(got, len, &w, &s)) {
					violation(id, ops, "%s holds '%.*s'", k, (int)len, got);
					violations++;
				} else if (s < seen[sk][w]) {
					violation(id, ops, "%s went back from w%u:%llu to w%u:%llu", k, w, seen[sk][w], w, s);
					violations++;
				} else {
					seen[sk][w] = s;
				}
			} else if (rc == KVC_ENOTFOUND) {
				rc = 0;
			}
		} else {
			unsigned ok = key % nown;

			snprintf(k, sizeof(k), "own-%u-%u", id, ok);
			rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
			if (unknown[ok] && (rc == 0 || rc == KVC_ENOTFOUND)) {
				rc = 0; /* its last write may or may not have landed */
			} else if (rc == KVC_ENOTFOUND && acked[ok] == 0) {
				rc = 0;
			} else if (rc == 0 && (parse(got, len, &w, &s) || w != id || s != acked[ok])) {
				violation(id, ops, "%s reads '%.*s', last written w%u:%llu", k,
					(int)len, got, id, acked[ok]);
				violations++;
			}
		}
		if (rc && survive &&
		    (rc == KVC_EFENCED || rc == KVC_ESERVERGONE || rc == KVC_ETIMEDOUT || rc == KVC_EUNKNOWN)) {
			survived++;
			rc = 0;
		}
		if (rc) {
			fprintf(stderr, "kv_worker %u: operation on %s failed: %s\n", id, k, kvc_strerror(rc));
			kvc_destroy(h);
			return 2;
		}
		if (++ops == 50) {
			printf("READY\n");
			fflush(stdout);
		}
	}
	for (unsigned i = 0; i < nown; i++)
		if (acked[i])
			printf("ACK own-%u-%u w%u:%llu\n", id, i, id, acked[i]);
	if (first_violation[0])
		printf("FIRST %s\n", first_violation);
	if (survive)
		printf("DONE %llu %u survived %u\n", ops, violations, survived);
	else
		printf("DONE %llu %u\n", ops, violations);
	kvc_destroy(h);
	return violations ? 3 : 0;
}
