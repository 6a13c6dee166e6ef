/* kvcli: one key-value operation from a terminal or a script.
 *
 *   kvcli -s HOST[:PORT] get KEY
 *   kvcli -s HOST[:PORT] put KEY VALUE [--ttl SECONDS]     (VALUE "-" reads stdin)
 *   kvcli -s HOST[:PORT] del KEY
 *   kvcli -s HOST[:PORT] flush_all [DELAY_SECONDS]
 *
 * Exit status: 0 success, 1 key not found, 2 any error (one line on stderr). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: kvcli -s HOST[:PORT] [-d DEVICE] [-t MS] [--secret-file PATH] COMMAND\n"
		   "commands:\n"
		   "  get KEY                        print the value (and a newline, unless -n)\n"
		   "  put KEY VALUE [--ttl SECONDS]  store; VALUE '-' reads it from stdin\n"
		   "  del KEY                        remove\n"
		   "  stats                          the server's statistics, one \"STAT name value\" line each\n"
		   "  flush_all [DELAY_SECONDS]      every item gone (on every server of the list) at\n"
		   "                                 once, or DELAY_SECONDS from now\n"
		   "options:\n"
		   "  -s, --server HOST[:PORT][,...]  kvserver to use (port default %d), or a list of\n"
		   "                            them: keys are spread over it as libkvclient does\n"
		   "  -d, --device NAME         RDMA device (default: the one routing to HOST)\n"
		   "  -t, --timeout MS          connection and operation timeout (default 5000)\n"
		   "      --secret-file PATH    the server's shared secret (kvserver --secret-file;\n"
		   "                            default: the file named by KVC_SECRET_FILE, if set)\n"
		   "  -n, --no-newline          get: print the value only\n"
		   "      --ttl SECONDS         put: expire after SECONDS (fractions: 1.5 = 1500 ms)\n"
		   "exit status: 0 done, 1 key not found, 2 error\n",
		   KVC_DEFAULT_PORT);
}

static int fail(const char *what, const char *detail)
{
	fprintf(stderr, "kvcli: %s: %s\n", what, detail);
	return 2;
}

/* The whole of stdin, for put KEY -. */
static char *read_stdin(size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);

	while (buf) {
		size_t got = fread(buf + n, 1, cap - n, stdin);

		n += got;
		if (got == 0)
			break;
		if (n == cap) {
			char *nb = realloc(buf, cap * 2);

			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	*len = n;
	return buf;
}

/* SECONDS with up to millisecond precision ("60", "1.5", "0.25") into ms. */
static int parse_seconds_ms(const char *s, uint64_t *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !*s || !(v >= 0) || v > 1e9 || (v > 0 && v < 0.001))
		return -1;
	*ms = (uint64_t)(v * 1000.0 + 0.5);
	return 0;
}

static int parse_u32(const char *s, uint32_t *ttl)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || !*s || *s == '-' || v > UINT32_MAX)
		return -1;
	*ttl = (uint32_t)v;
	return 0;
}

/* "STAT name value" lines, as memcached's stats command prints them. */
static int print_stats(const struct kvc_opts *o)
{
	struct kvc_server_stats st;
	const char *const *names;
	char err[400];
	size_t n;
	kvc_t *h;
	int rc;

	rc = kvc_create(o, &h, err, sizeof(err));
	if (rc)
		return fail("stats", err);
	rc = kvc_server_stats(h, &st);
	kvc_destroy(h);
	if (rc)
		return fail("stats", kvc_strerror(rc));
	names = kvc_server_stat_names(&n);
	for (size_t i = 0; i < n; i++)
		printf("STAT %s %llu\n", names[i], (unsigned long long)((const uint64_t *)&st)[i]);
	return fflush(stdout) == 0 ? 0 : fail("stats", "cannot write to stdout");
}

/* memcached's flush_all [delay]: returns once every server has done it (or,
 * with a delay, scheduled it). */
static int flush_all(const struct kvc_opts *o, uint64_t delay_ms)
{
	char err[400];
	kvc_t *h;
	int rc;

	rc = kvc_create(o, &h, err, sizeof(err));
	if (rc)
		return fail("flush_all", err);
	rc = kvc_flush_all(h, delay_ms);
	kvc_destroy(h);
	return rc ? fail("flush_all", kvc_strerror(rc)) : 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "server", required_argument, NULL, 's' }, { "device", required_argument, NULL, 'd' },
		{ "timeout", required_argument, NULL, 't' }, { "no-newline", no_argument, NULL, 'n' },
		{ "ttl", required_argument, NULL, 'T' },    { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },      { "secret-file", required_argument, NULL, 'K' },
		{ 0 },
	};
	struct kvc_opts o;
	char err[400], what[300];
	const char *cmd, *key;
	uint64_t ttl = 0; /* ms */
	int c, newline = 1, rc;
	kvc_t *h;

	kvc_opts_init(&o);
	o.connect_timeout_ms = o.op_timeout_ms = 5000;
	o.depth = 1;
	o.cache_entries = 0;
	while ((c = getopt_long(argc, argv, "+s:d:t:nhV", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			o.server = optarg;
			break;
		case 'd':
			o.device = optarg;
			break;
		case 't': {
			uint32_t ms;

			if (parse_u32(optarg, &ms) || ms == 0 || ms > 3600000)
				return fail("invalid --timeout", "expected milliseconds in 1..3600000");
			o.connect_timeout_ms = o.op_timeout_ms = (int)ms;
			break;
		}
		case 'K':
			o.secret_file = optarg;
			break;
		case 'n':
			newline = 0;
			break;
		case 'T':
			if (parse_seconds_ms(optarg, &ttl))
				return fail("invalid --ttl", "expected seconds, 0.001 to 1e9 (e.g. 60 or 1.5)");
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvcli (libkvclient %s)\n", kvc_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	/* Options may also follow the command (put KEY VALUE --ttl 10). */
	if (optind >= argc)
		return fail("no command", "expected get, put, del, stats or flush_all (see --help)");
	cmd = argv[optind++];
	if (!o.server && !getenv("KVC_SERVERS") && !getenv("KVC_SERVERS_FILE"))
		return fail(cmd, "no server given: use -s HOST[:PORT] (or set KVC_SERVERS)");
	if (strcmp(cmd, "stats") == 0)
		return optind < argc ? fail(cmd, "unexpected argument") : print_stats(&o);
	if (strcmp(cmd, "flush_all") == 0) {
		uint64_t delay_ms = 0;

		if (optind < argc && parse_seconds_ms(argv[optind++], &delay_ms))
			return fail("invalid delay", "expected seconds, 0 to 1e9 (e.g. 60 or 1.5)");
		return optind < argc ? fail(cmd, "unexpected argument") : flush_all(&o, delay_ms);
	}
	if (optind >= argc)
		return fail(cmd, "missing KEY");
	key = argv[optind++];
	snprintf(what, sizeof(what), "%s %s", cmd, key);
	if (strcmp(cmd, "put") == 0) {
		if (optind >= argc)
			return fail(what, "missing VALUE");
		optind++;
		while (optind < argc) {
			if (strcmp(argv[optind], "--ttl") == 0 && optind + 1 < argc) {
				if (parse_seconds_ms(argv[optind + 1], &ttl))
					return fail("invalid --ttl", "expected seconds, 0.001 to 1e9 (e.g. 60 or 1.5)");
				optind += 2;
			} else {
				return fail(what, "unexpected argument after VALUE");
			}
		}
	} else if (strcmp(cmd, "get") == 0 || strcmp(cmd, "del") == 0) {
		if (optind < argc)
			return fail(what, "unexpected argument after KEY");
	} else {
		return fail(cmd, "unknown command: expected get, put, del, stats or flush_all");
	}
	if (strlen(key) == 0 || strlen(key) > KVC_MAX_KEY)
		return fail(what, kvc_strerror(KVC_EKEYSIZE));

	rc = kvc_create(&o, &h, err, sizeof(err));
	if (rc)
		return fail(what, err);
	if (strcmp(cmd, "get") == 0) {
		size_t cap = kvc_max_value(h, strlen(key)), len = 0;
		char *buf = malloc(cap + 1);

		rc = buf ? kvc_get(h, key, strlen(key), buf, cap, &len) : KVC_ENOMEM;
		if (rc == 0) {
			fwrite(buf, 1, len, stdout);
			if (newline)
				fputc('\n', stdout);
		}
		free(buf);
	} else if (strcmp(cmd, "put") == 0) {
		const char *val = argv[optind - 1];
		size_t len = strlen(val);
		char *in = NULL;

		/* The VALUE argument sits just before any --ttl pair. */
		for (int i = 1; i < argc; i++)
			if (argv[i] == key && i + 1 < argc)
				val = argv[i + 1];
		len = strlen(val);
		if (strcmp(val, "-") == 0) {
			in = read_stdin(&len);
			if (!in) {
				kvc_destroy(h);
				return fail(what, "cannot read the value from stdin");
			}
			val = in;
		}
		rc = kvc_put(h, key, strlen(key), val, len, ttl);
		free(in);
	} else {
		rc = kvc_delete(h, key, strlen(key));
	}
	kvc_destroy(h);
	if (rc == KVC_ENOTFOUND) {
		fprintf(stderr, "kvcli: %s: not found\n", what);
		return 1;
	}
	if (rc)
		return fail(what, kvc_strerror(rc));
	return fflush(stdout) == 0 ? 0 : fail(what, "cannot write to stdout");
}
