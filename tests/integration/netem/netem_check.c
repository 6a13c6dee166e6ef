/* netem_check: a verifying client for the wire-fault scenario (run.sh).
 *
 *   netem_check -s HOST:PORT [--keys N] [--value-size B] [--op-timeout-ms MS]
 *   netem_check --self-test      (feeds the checks wrong values; exit 0 if all caught)
 *
 * Runs blocking PUT and GET on N keys of its own until stdin ends, while the
 * scenario script changes the network under it. Each line read from stdin
 * names a new phase ("base", "loss5", "after-loss5", ...); "end" or EOF stops.
 * It prints "READY" once connected; when a phase ends, one line:
 *   PHASE <name> secs=<s> ok=<n> ops_per_s=<x> failed=<n> reconnects=<n>
 *         violations=<n> lock_conflicts=<n> [KVC_<code>=<n> ...]
 * and at the very end, after reading every key back on the healed network,
 *   DONE ok=<n> failed=<n> unexpected=<n> violations=<n>
 *
 * What it checks. Every value names its key and a per-key sequence number and
 * is filled with bytes derived from both, so a GET can tell a torn, stale or
 * foreign value from the right one. A GET must return the value of a PUT we
 * made to that key, no older than the last PUT that succeeded or any value
 * read before (reads never go back), no newer than the last PUT attempted. A
 * PUT that failed may or may not have taken effect, so it only widens what a
 * later GET may see. Failures are allowed only with the codes a network fault
 * explains: KVC_ETIMEDOUT, KVC_ESERVERGONE (then the handle is replaced),
 * KVC_EFENCED (a fault outlasted the lease; the handle rejoins by itself) and
 * KVC_EUNKNOWN; any other code is "unexpected".
 *
 * Exit status: 0 all held; 3 a violation (wrong data; described on stderr);
 * 4 an unexpected error code; 2 bad arguments or no connection at start. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvclient.h"

#define MAX_KEYS 256
#define MAX_VALUE 8192
#define NCODES 32 /* KVC_ codes are -1..-(NCODES-1) */

struct key_state {
	unsigned long long floor;     /* value seen or acknowledged last: reads may not go below */
	unsigned long long attempted; /* highest sequence number ever sent */
};

struct phase {
	char name[64];
	double start;
	unsigned long long ok, failed, reconnects, violations, by_code[NCODES];
	unsigned long long conflicts_at_start;
};

static struct key_state keys[MAX_KEYS];
static struct kvc_opts opts;
static kvc_t *h;
static unsigned long long total_ok, total_failed, total_unexpected, total_violations;
static unsigned long long conflicts_done; /* lock conflicts counted by handles already destroyed */

/* Lock conflicts seen so far, all handles together: a fault that leaves a
 * dead client's bucket locks behind shows here. */
static unsigned long long lock_conflicts(void)
{
	struct kvc_stats st;

	if (!h)
		return conflicts_done;
	kvc_get_stats(h, &st);
	return conflicts_done + st.lock_conflicts;
}

static void drop_handle(void)
{
	conflicts_done = lock_conflicts();
	kvc_destroy(h);
	h = NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The value for (key, seq): a header naming both, then filler that depends on
 * both, so that any mix-up of bytes shows. */
static size_t make_value(char *out, size_t size, unsigned key, unsigned long long seq)
{
	int n = snprintf(out, size, "k%u:s%llu:", key, seq);
	uint64_t x = seq * 0x9e3779b97f4a7c15ull + key + 1;

	for (size_t i = (size_t)n; i < size; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		out[i] = (char)('a' + x % 26);
	}
	return size;
}

static void violation(struct phase *p, unsigned key, const char *what, const char *got, size_t len)
{
	fprintf(stderr, "netem_check: VIOLATION in phase %s: key k%u: %s (got %zu bytes: '%.*s')\n", p->name, key,
		what, len, (int)(len < 40 ? len : 40), got);
	p->violations++;
	total_violations++;
}

/* Check a GET's value against what this key may hold. */
static void check_value(struct phase *p, unsigned key, const char *got, size_t len, size_t vsize)
{
	static char want[MAX_VALUE];
	unsigned k;
	unsigned long long seq;
	struct key_state *s = &keys[key];

	if (len != vsize || sscanf(got, "k%u:s%llu:", &k, &seq) != 2) {
		violation(p, key, "not a value this checker writes", got, len);
		return;
	}
	if (k != key) {
		violation(p, key, "value of another key", got, len);
		return;
	}
	make_value(want, vsize, key, seq);
	if (memcmp(want, got, vsize) != 0) {
		violation(p, key, "value bytes differ from what that sequence number wrote (torn or corrupt)", got,
			  len);
		return;
	}
	if (seq < s->floor) {
		char what[128];

		snprintf(what, sizeof(what), "sequence went back from %llu to %llu", s->floor, seq);
		violation(p, key, what, got, len);
		return;
	}
	if (seq > s->attempted) {
		violation(p, key, "sequence number never written", got, len);
		return;
	}
	s->floor = seq;
}

static void count_failure(struct phase *p, int rc)
{
	p->failed++;
	total_failed++;
	if (rc < 0 && rc > -NCODES)
		p->by_code[-rc]++;
	if (rc != KVC_ETIMEDOUT && rc != KVC_ESERVERGONE && rc != KVC_EUNKNOWN && rc != KVC_EFENCED) {
		total_unexpected++;
		fprintf(stderr, "netem_check: unexpected failure in phase %s: %s (%s)\n", p->name, kvc_err_name(rc),
			kvc_strerror(rc));
	}
}

/* Replace a handle whose connection is gone. A failed connect is counted like
 * a failed operation (it is the same fault seen from kvc_create); the caller
 * tries again on its next round. */
static void reconnect(struct phase *p)
{
	char err[400];
	int rc;

	if (h)
		drop_handle();
	rc = kvc_create(&opts, &h, err, sizeof(err));
	if (rc) {
		h = NULL;
		p->failed++;
		total_failed++;
		if (rc < 0 && rc > -NCODES)
			p->by_code[-rc]++;
		/* Any code may come from a connect under faults; say why once per phase. */
		if (p->reconnects == 0)
			fprintf(stderr, "netem_check: reconnect in phase %s failed: %s\n", p->name, err);
		return;
	}
	p->reconnects++;
}

/* One PUT or GET on a random key. */
static void one_op(struct phase *p, uint64_t *rng, size_t vsize, unsigned nkeys)
{
	static char val[MAX_VALUE], buf[MAX_VALUE];
	char k[32];
	unsigned key;
	size_t len = 0;
	int rc, put;
	double t0;

	if (!h) {
		reconnect(p);
		if (!h) {
			usleep(50000);
			return;
		}
	}
	*rng ^= *rng << 13;
	*rng ^= *rng >> 7;
	*rng ^= *rng << 17;
	key = (unsigned)(*rng % nkeys);
	put = (*rng >> 32) & 1;
	snprintf(k, sizeof(k), "netem-k%u", key);
	t0 = now_s();
	if (put) {
		unsigned long long seq = ++keys[key].attempted;

		make_value(val, vsize, key, seq);
		rc = kvc_put(h, k, strlen(k), val, vsize, 0);
		if (rc == 0)
			keys[key].floor = seq;
	} else {
		rc = kvc_get(h, k, strlen(k), buf, sizeof(buf), &len);
		if (rc == 0)
			check_value(p, key, buf, len, vsize);
		else if (rc == KVC_ENOTFOUND && keys[key].floor == 0)
			rc = 0; /* never written, or no write known to have landed */
		else if (rc == KVC_ENOTFOUND)
			violation(p, key, "not found, but a PUT of it succeeded", "", 0);
	}
	if (rc == 0 || rc == KVC_ENOTFOUND) {
		p->ok++;
		total_ok++;
		return;
	}
	count_failure(p, rc);
	/* The first few failures of a phase in detail: what failed, after how long. */
	if (p->failed <= 5)
		fprintf(stderr, "netem_check: phase %s: %s %s: %s after %.0f ms\n", p->name, put ? "PUT" : "GET", k,
			kvc_err_name(rc), (now_s() - t0) * 1000);
	if (rc == KVC_ESERVERGONE)
		drop_handle();
}

static void end_phase(const struct phase *p)
{
	double secs = now_s() - p->start;

	printf("PHASE %s secs=%.1f ok=%llu ops_per_s=%.0f failed=%llu reconnects=%llu violations=%llu "
	       "lock_conflicts=%llu",
	       p->name, secs, p->ok, secs > 0 ? (double)p->ok / secs : 0.0, p->failed, p->reconnects, p->violations,
	       lock_conflicts() - p->conflicts_at_start);
	for (int c = 1; c < NCODES; c++)
		if (p->by_code[c])
			printf(" %s=%llu", kvc_err_name(-c), p->by_code[c]);
	printf("\n");
	fflush(stdout);
}

/* Read what stdin has without waiting. Returns 1 and the next phase name in
 * name when a whole line came, -1 at EOF or "end", 0 otherwise. */
static int next_phase(char *name, size_t size)
{
	static char line[256];
	static size_t have;
	char *nl;
	ssize_t n;

	for (;;) {
		nl = memchr(line, '\n', have);
		if (nl) {
			size_t l = (size_t)(nl - line);

			snprintf(name, size, "%.*s", (int)l, line);
			memmove(line, nl + 1, have - l - 1);
			have -= l + 1;
			return strcmp(name, "end") == 0 ? -1 : 1;
		}
		if (have == sizeof(line))
			have = 0; /* an absurd line: drop it */
		n = read(0, line + have, sizeof(line) - have);
		if (n == 0)
			return -1;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		have += (size_t)n;
	}
}

/* The healed network: every key must read back within its bounds. */
static void final_sweep(struct phase *p, size_t vsize, unsigned nkeys)
{
	static char buf[MAX_VALUE];
	char k[32];

	for (unsigned key = 0; key < nkeys; key++) {
		size_t len = 0;
		int rc = KVC_ESERVERGONE;

		for (int tries = 0; tries < 5 && rc != 0 && rc != KVC_ENOTFOUND; tries++) {
			if (!h)
				reconnect(p);
			if (!h)
				continue;
			snprintf(k, sizeof(k), "netem-k%u", key);
			rc = kvc_get(h, k, strlen(k), buf, sizeof(buf), &len);
			if (rc == KVC_ESERVERGONE)
				drop_handle();
		}
		if (rc == 0)
			check_value(p, key, buf, len, vsize);
		else if (rc == KVC_ENOTFOUND && keys[key].floor > 0)
			violation(p, key, "not found at the end, but a PUT of it succeeded", "", 0);
		else if (rc != KVC_ENOTFOUND)
			count_failure(p, rc); /* five tries on a healed network: counted against it */
	}
}

/* The checks above must catch what they are for: feed them wrong values. */
static int self_test(void)
{
	static char v[MAX_VALUE];
	struct phase p = { .name = "self-test" };
	const size_t vs = 100;
	unsigned long long before;
	int bad = 0;

	keys[1] = (struct key_state){ .floor = 5, .attempted = 9 };
	make_value(v, vs, 1, 7); /* fine: between floor and attempted */
	check_value(&p, 1, v, vs, vs);
	bad |= p.violations != 0 || keys[1].floor != 7;
	struct {
		const char *what;
		unsigned key;
		unsigned long long seq;
		size_t flip; /* byte to change, 0 for none */
		size_t len;
	} cases[] = {
		{ "stale", 1, 6, 0, vs },	  { "never written", 1, 10, 0, vs }, { "another key", 2, 8, 0, vs },
		{ "torn", 1, 8, vs - 1, vs }, { "short", 1, 8, 0, vs - 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		make_value(v, vs, cases[i].key, cases[i].seq);
		if (cases[i].flip)
			v[cases[i].flip] ^= 1;
		before = p.violations;
		fprintf(stderr, "netem_check: self-test, expect a violation (%s):\n", cases[i].what);
		check_value(&p, 1, v, cases[i].len, vs);
		if (p.violations != before + 1) {
			fprintf(stderr, "netem_check: self-test FAILED: a %s value was not caught\n", cases[i].what);
			bad = 1;
		}
	}
	memset(keys, 0, sizeof(keys));
	total_violations = 0;
	printf("SELFTEST %s\n", bad ? "FAILED" : "ok");
	return bad ? 3 : 0;
}

static int number(const char *s, unsigned long lo, unsigned long hi, const char *what, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	if (errno || *end || end == s || *out < lo || *out > hi) {
		fprintf(stderr, "netem_check: %s must be a number from %lu to %lu (got '%s')\n", what, lo, hi, s);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "server", required_argument, NULL, 's' },	   { "keys", required_argument, NULL, 'k' },
		{ "value-size", required_argument, NULL, 'v' },	   { "op-timeout-ms", required_argument, NULL, 't' },
		{ "self-test", no_argument, NULL, 'T' },	   { 0 },
	};
	unsigned long nkeys = 16, vsize = 1500, tmo = 0;
	struct phase p = { .name = "start" };
	uint64_t rng = 0x2545f4914f6cdd1dull;
	char err[400], name[64];
	int c, rc;

	kvc_opts_init(&opts);
	opts.connect_timeout_ms = 10000; /* a software-emulated guest under faults is slow to connect */
	while ((c = getopt_long(argc, argv, "s:", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			opts.server = optarg;
			break;
		case 'k':
			if (number(optarg, 1, MAX_KEYS, "--keys", &nkeys))
				return 2;
			break;
		case 'v':
			if (number(optarg, 32, MAX_VALUE, "--value-size", &vsize))
				return 2;
			break;
		case 't':
			if (number(optarg, 1, 600000, "--op-timeout-ms", &tmo))
				return 2;
			opts.op_timeout_ms = (int)tmo;
			break;
		case 'T':
			return self_test();
		default:
			fprintf(stderr, "usage: netem_check -s HOST:PORT [--keys N] [--value-size B] "
					"[--op-timeout-ms MS] < phase names\n"
					"       netem_check --self-test\n");
			return 2;
		}
	}
	if (!opts.server || optind != argc) {
		fprintf(stderr, "netem_check: give the server as -s HOST:PORT and no other arguments\n");
		return 2;
	}
	if (fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK)) {
		fprintf(stderr, "netem_check: cannot make stdin non-blocking: %s\n", strerror(errno));
		return 2;
	}
	rc = kvc_create(&opts, &h, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "netem_check: %s\n", err);
		return 2;
	}
	printf("READY\n"); /* connected: the script may start the first phase */
	fflush(stdout);
	p.start = now_s();
	for (;;) {
		int r = next_phase(name, sizeof(name));

		if (r != 0) {
			if (strcmp(p.name, "start") != 0)
				end_phase(&p);
			if (r < 0)
				break;
			memset(&p, 0, sizeof(p));
			snprintf(p.name, sizeof(p.name), "%s", name);
			p.start = now_s();
			p.conflicts_at_start = lock_conflicts();
		}
		one_op(&p, &rng, vsize, (unsigned)nkeys);
	}
	memset(&p, 0, sizeof(p));
	snprintf(p.name, sizeof(p.name), "final-read");
	final_sweep(&p, vsize, (unsigned)nkeys);
	printf("DONE ok=%llu failed=%llu unexpected=%llu violations=%llu\n", total_ok, total_failed, total_unexpected,
	       total_violations);
	if (h)
		drop_handle();
	if (total_violations)
		return 3;
	return total_unexpected ? 4 : 0;
}
