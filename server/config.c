/* kvserver's configuration table and its readers (config.h).
 *
 * Each setting is one row of `keys`: its name (the long flag; the config file
 * key; KVSERVER_<NAME> with '-' as '_'), type, bounds, default (written as a
 * user would write it, and parsed by the same code), help, and where its
 * value goes in struct kvs_opts. To add a setting, add a row (and a section
 * to `sections` if it starts one); nothing else lists the settings. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "exec_bound.h"
#include "log.h"
#include "members.h"
#include "migrate.h"
#include "region.h"

enum cfg_type { T_U64, T_BOOL, T_STR, T_ENUM, T_PATH };

#define CFG_POW2 1u /* T_U64: a power of two */

struct cfg_key {
	const char *name;
	int shortopt; /* 0: long only */
	enum cfg_type type;
	const char *section;
	uint64_t lo, hi;
	unsigned flags;
	const char *const *words; /* T_ENUM: allowed words; the stored value is the index */
	const char *def;          /* default as a user writes it; NULL: unset */
	const char *metavar;      /* in --help: --memory MIB */
	const char *kind;         /* T_U64: what the number counts, for "expected ..." */
	const char *help;         /* '\n' separates lines of --help */
	size_t off, size;         /* destination in struct kvs_opts */
};

#define AT(field) .off = offsetof(struct kvs_opts, field), .size = sizeof(((struct kvs_opts *)0)->field)

static const char *const sections[] = { "General", "Cache policy", "Index", "Membership", "Security", "Monitoring",
					 "Logging" };
static const char *const huge_words[] = { "auto", "on", "off", NULL }; /* enum kvs_hugepages order */
static const char *const level_words[] = { "error", "warn", "info", "debug", NULL }; /* enum kvi_log_level */

/* The defaults are those of core.h, members.h and migrate.h, written out:
 * kvs_config_init parses them like any other value. */
static const struct cfg_key keys[] = {
	{ "listen", 'l', T_STR, "General", .metavar = "ADDR",
	  .help = "address to listen on (default: all addresses)", .def = NULL, AT(listen) },
	{ "port", 'p', T_U64, "General", 1, 65535, .def = "7471", .metavar = "PORT", .kind = "a port number",
	  .help = "rdma_cm port", AT(port) },
	/* Slots address 1 TiB (layout.h): the region can be no larger. */
	{ "memory", 'm', T_U64, "General", 1, 1u << 20, .def = "64", .metavar = "MIB", .kind = "MiB",
	  .help = "size of the registered region in MiB (at most 1 TiB)", AT(memory_mib) },
	{ "device", 'd', T_STR, "General", .metavar = "NAME",
	  .help = "RDMA device to serve on (default: the one the address is on,\n"
		  "or the only one with atomics)", AT(device) },
	{ "hugepages", 0, T_ENUM, "General", .words = huge_words, .def = "auto", .metavar = "MODE",
	  .help = "auto|on|off: back the region with 2 MiB pages", AT(huge) },
	{ "buckets", 0, T_U64, "General", 0, UINT64_MAX / 2, .def = "0", .metavar = "N", .kind = "a count",
	  .help = "index buckets of 31 slots, at least 2 (0: one per 4 KiB\n"
		  "of memory, at least 64)", AT(core.buckets) },
	{ "segment-size", 0, T_U64, "General", KVS_MIN_SEGMENT_SIZE >> 10, KVS_MAX_SEGMENT_SIZE >> 10, CFG_POW2,
	  .def = "1024", .metavar = "KIB", .kind = "KiB",
	  .help = "heap segment granted to clients: 64, 128, 256, 512 or 1024\n"
		  "(it bounds the largest item)", AT(segment_kib) },

	{ "no-evict", 0, T_BOOL, "Cache policy", .def = "false",
	  .help = "never evict a live item: a PUT fails with 'out of memory'\n"
		  "when live data fills the heap (memcached -M); garbage\n"
		  "(replaced, deleted, expired items) is still reclaimed", AT(core.no_evict) },
	{ "reclaim-low", 0, T_U64, "Cache policy", 1, 90, .def = "2", .metavar = "PCT",
	  .kind = "a percentage", .help = "start reclaiming when free segments fall below PCT %\nof the heap",
	  AT(core.reclaim_low_pct) },
	{ "reclaim-high", 0, T_U64, "Cache policy", 1, 95, .def = "4", .metavar = "PCT", .kind = "a percentage",
	  .help = "... and stop when they reach PCT % (default: reclaim-low + 2)", AT(core.reclaim_high_pct) },
	{ "max-op-ms", 0, T_U64, "Cache policy", 1, 600000, .def = "1000", .metavar = "MS", .kind = "milliseconds",
	  .help = "longest operation deadline clients may use; they clamp\ntheirs to it", AT(core.max_op_ms) },
	{ "quarantine-ms", 0, T_U64, "Cache policy", 1, 3600000, .def = "3000", .metavar = "MS",
	  .kind = "milliseconds",
	  .help = "reclaimed memory is reused after this; at least\n"
		  "2 x max-op-ms + 597 (default 3000, or that if max-op-ms is set)",
	  AT(core.quarantine_ms) },
	{ "client-quota-pct", 0, T_U64, "Cache policy", 1, 100, .def = "25", .metavar = "PCT",
	  .kind = "a percentage of the heap",
	  .help = "share of the heap one client may hold while another\n"
		  "waits for memory (at least 2 segments; 100: no quota)", AT(core.client_quota_pct) },

	{ "resize-load-pct", 0, T_U64, "Index", 0, 99, .def = "87", .metavar = "PCT",
	  .kind = "a percentage of slots used (0: off)",
	  .help = "double the index (online) when sampled buckets have\n"
		  "more than PCT % of their slots used (0: only when an\n"
		  "insert finds both buckets full)", AT(resize_load_pct) },

	{ "lease-ms", 0, T_U64, "Membership", KVS_MIN_LEASE_MS, KVS_MAX_LEASE_MS, .def = "1000", .metavar = "MS",
	  .kind = "milliseconds",
	  .help = "a client that has not renewed its lease for this long\nis fenced", AT(lease_ms) },
	{ "renew-ms", 0, T_U64, "Membership", 1, KVS_MAX_LEASE_MS, .def = "250", .metavar = "MS",
	  .kind = "milliseconds",
	  .help = "clients renew every MS while they are used; at most half\n"
		  "the lease (default: a quarter of the lease, at most 250)", AT(renew_ms) },

	{ "secret-file", 0, T_PATH, "Security", .metavar = "PATH",
	  .help = "clients must prove they hold the secret in PATH (at least\n"
		  "16 bytes; mode 0600) to join; without it anyone who can\n"
		  "reach the port can read and write all of the region", AT(secret_file) },

	{ "metrics", 0, T_STR, "Monitoring", .metavar = "ADDR:PORT",
	  .help = "serve Prometheus metrics at http://ADDR:PORT/metrics\n"
		  "(e.g. 127.0.0.1:9471; default: off)", AT(metrics) },

	{ "log-level", 0, T_ENUM, "Logging", .words = level_words, .def = "warn", .metavar = "LEVEL",
	  .help = "error|warn|info|debug: log events up to LEVEL", AT(log_level) },
	{ "log-file", 0, T_PATH, "Logging", .metavar = "PATH",
	  .help = "append log lines to PATH, reopened on SIGHUP (for\n"
		  "logrotate) (default: standard error)", AT(log_file) },
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))
_Static_assert(NKEYS <= KVS_CFG_MAX_KEYS, "raise KVS_CFG_MAX_KEYS");

/* getopt values of the options that are not settings */
enum { OPT_CONFIG = 1000, OPT_PRINT, OPT_KEY0 = 2000 };

static int key_index(const char *name, size_t len)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strlen(keys[i].name) == len && strncmp(keys[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

static int find_key(const char *name)
{
	return key_index(name, strlen(name));
}

static void put_uint(void *dst, size_t size, uint64_t v)
{
	if (size == sizeof(uint64_t)) {
		uint64_t x = v;
		memcpy(dst, &x, size);
	} else {
		uint32_t x = (uint32_t)v; /* unsigned, int and uint32_t fields */
		_Static_assert(sizeof(unsigned) == sizeof(uint32_t) && sizeof(int) == sizeof(uint32_t), "field sizes");
		memcpy(dst, &x, size);
	}
}

static uint64_t get_uint(const void *src, size_t size)
{
	if (size == sizeof(uint64_t)) {
		uint64_t x;
		memcpy(&x, src, size);
		return x;
	} else {
		uint32_t x;
		memcpy(&x, src, size);
		return x;
	}
}

static uint64_t opt_uint(const struct kvs_opts *o, const struct cfg_key *k)
{
	return get_uint((const char *)o + k->off, k->size);
}

/* "expected ..." for k. */
static void expected(const struct cfg_key *k, char *buf, size_t n)
{
	size_t len;

	switch (k->type) {
	case T_U64:
		snprintf(buf, n, "%s%s in %" PRIu64 "..%" PRIu64, k->kind, k->flags & CFG_POW2 ? ", a power of two" : "",
			 k->lo, k->hi);
		break;
	case T_BOOL:
		snprintf(buf, n, "true, false, yes, no, 1 or 0");
		break;
	case T_ENUM:
		snprintf(buf, n, "one of");
		for (const char *const *w = k->words; *w; w++) {
			len = strlen(buf);
			snprintf(buf + len, n - len, " %s%s", *w, w[1] ? "," : "");
		}
		break;
	default:
		snprintf(buf, n, "a %s", k->type == T_PATH ? "path" : "value");
	}
}

static int parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!isdigit((unsigned char)s[0])) /* no sign, no blanks, not empty */
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "true", "yes", "1", "on" }, *const no[] = { "false", "no", "0", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return *out = 1, 0;
		if (strcasecmp(s, no[i]) == 0)
			return *out = 0, 0;
	}
	return -1;
}

/* Store text v (NULL: a flag given without a value: a bool's "true") as
 * key i's value. 0, or -1 if v is not of the key's form. */
static int set_value(struct kvs_config *c, size_t i, const char *v)
{
	const struct cfg_key *k = &keys[i];
	void *dst = (char *)&c->o + k->off;
	uint64_t u;
	int b;

	switch (k->type) {
	case T_U64:
		if (!v || parse_u64(v, &u) || u < k->lo || u > k->hi || ((k->flags & CFG_POW2) && (u & (u - 1))))
			return -1;
		put_uint(dst, k->size, u);
		return 0;
	case T_BOOL:
		if (!v)
			b = 1;
		else if (parse_bool(v, &b))
			return -1;
		put_uint(dst, k->size, (uint64_t)b);
		return 0;
	case T_ENUM:
		for (size_t w = 0; v && k->words[w]; w++)
			if (strcmp(v, k->words[w]) == 0)
				return put_uint(dst, k->size, w), 0;
		return -1;
	default: {
		char **s = dst;
		char *copy = v && *v ? strdup(v) : NULL; /* empty: unset */

		if (v && *v && !copy)
			return -1;
		free(*s);
		*s = copy;
		return 0;
	}
	}
}

/* KVSERVER_LEASE_MS for lease-ms. */
static void env_name(const char *name, char *buf, size_t n)
{
	size_t j = (size_t)snprintf(buf, n, "KVSERVER_");

	for (; *name && j + 1 < n; name++)
		buf[j++] = *name == '-' ? '_' : (char)toupper((unsigned char)*name);
	buf[j] = 0;
}

/* Where key i's value came from, for an error: "--lease-ms", "FILE:3",
 * "KVSERVER_LEASE_MS" or "default". */
static void where(const struct kvs_config *c, size_t i, char *buf, size_t n)
{
	switch (c->from[i].src) {
	case KVS_SRC_FLAG:
		snprintf(buf, n, "--%s", keys[i].name);
		break;
	case KVS_SRC_ENV:
		env_name(keys[i].name, buf, n);
		break;
	case KVS_SRC_FILE:
		snprintf(buf, n, "%s:%u", c->file ? c->file : "config", c->from[i].line);
		break;
	default:
		snprintf(buf, n, "default");
	}
}

void kvs_config_init(struct kvs_config *c)
{
	memset(c, 0, sizeof(*c)); /* padding too: tests compare settings with memcmp */
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].def && set_value(c, i, keys[i].def))
			abort(); /* a default outside its own bounds: a bug in the table */
}

void kvs_config_free(struct kvs_config *c)
{
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].type == T_STR || keys[i].type == T_PATH) {
			char **s = (char **)(void *)((char *)&c->o + keys[i].off);

			free(*s);
			*s = NULL;
		}
	}
	free(c->file);
	c->file = NULL;
}

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = 0;
	return s;
}

int kvs_config_load_file(struct kvs_config *c, const char *path, struct kvi_errbuf *e)
{
	unsigned seen[KVS_CFG_MAX_KEYS] = { 0 }, lineno = 0;
	char *line = NULL, *key, *val, *eq, form[160];
	size_t cap = 0;
	int rc = -1, i;
	FILE *f;

	f = fopen(path, "r");
	if (!f) {
		kvi_errbuf_set(e, "cannot read config file %s: %s", path, strerror(errno));
		return -1;
	}
	if (c->file != path) {
		free(c->file);
		c->file = strdup(path);
	}
	while (getline(&line, &cap, f) >= 0) {
		lineno++;
		/* A comment starts with '#' at the start of a line or after a blank,
		 * so that print-config's trailing comments load back. */
		for (char *h = line; (h = strchr(h, '#')); h++) {
			if (h == line || isspace((unsigned char)h[-1])) {
				*h = 0;
				break;
			}
		}
		key = trim(line);
		if (!*key)
			continue;
		eq = strchr(key, '=');
		if (!eq) {
			kvi_errbuf_set(e, "%s:%u: no '=' in '%.40s': expected key = value", path, lineno, key);
			goto out;
		}
		*eq = 0;
		val = trim(eq + 1);
		key = trim(key);
		i = find_key(key);
		if (i < 0) {
			kvi_errbuf_set(e, "%s:%u: unknown key '%.40s': expected a long option name (kvserver --help)",
				       path, lineno, key);
			goto out;
		}
		if (seen[i]) {
			kvi_errbuf_set(e, "%s:%u: duplicate key '%s' (first set on line %u): give it once", path,
				       lineno, key, seen[i]);
			goto out;
		}
		seen[i] = lineno;
		if (set_value(c, (size_t)i, val)) {
			expected(&keys[i], form, sizeof(form));
			kvi_errbuf_set(e, "%s:%u: invalid %s '%.40s': expected %s", path, lineno, key, val, form);
			goto out;
		}
		c->from[i].src = KVS_SRC_FILE;
		c->from[i].line = lineno;
	}
	if (ferror(f)) {
		kvi_errbuf_set(e, "cannot read config file %s: %s", path, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(line);
	fclose(f);
	return rc;
}

/* KVSERVER_* variables; one the table does not know is refused (a typo
 * would otherwise be silently ignored). */
static int load_env(struct kvs_config *c, struct kvi_errbuf *e)
{
	extern char **environ;
	char name[64], form[160];
	const char *v;

	for (size_t i = 0; i < NKEYS; i++) {
		env_name(keys[i].name, name, sizeof(name));
		v = getenv(name);
		if (!v)
			continue;
		if (set_value(c, i, v)) {
			expected(&keys[i], form, sizeof(form));
			kvi_errbuf_set(e, "invalid %s '%.40s': expected %s", name, v, form);
			return -1;
		}
		c->from[i].src = KVS_SRC_ENV;
	}
	for (char **p = environ; p && *p; p++) {
		size_t len = strcspn(*p, "=");
		int known = 0;

		if (strncmp(*p, "KVSERVER_", 9) != 0)
			continue;
		for (size_t i = 0; i < NKEYS && !known; i++) {
			env_name(keys[i].name, name, sizeof(name));
			known = strlen(name) == len && strncmp(*p, name, len) == 0;
		}
		if (!known) {
			kvi_errbuf_set(e, "unknown environment variable %.*s: expected KVSERVER_<LONG_OPTION> "
					  "(kvserver --help), or unset it", (int)(len > 60 ? 60 : len), *p);
			return -1;
		}
	}
	return 0;
}

/* The getopt tables, from keys[]. */
static void build_getopt(struct option *lo, char *so)
{
	size_t n = 0, s = 0;

	so[s++] = ':'; /* a missing value is ':', not '?' */
	for (size_t i = 0; i < NKEYS; i++) {
		int arg = keys[i].type == T_BOOL ? no_argument : required_argument;

		lo[n++] = (struct option){ keys[i].name, arg, NULL, keys[i].shortopt ? keys[i].shortopt : OPT_KEY0 + (int)i };
		if (keys[i].shortopt) {
			so[s++] = (char)keys[i].shortopt;
			if (arg == required_argument)
				so[s++] = ':';
		}
	}
	lo[n++] = (struct option){ "config", required_argument, NULL, OPT_CONFIG };
	lo[n++] = (struct option){ "print-config", no_argument, NULL, OPT_PRINT };
	lo[n++] = (struct option){ "verbose", no_argument, NULL, 'v' };
	lo[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[n++] = (struct option){ "version", no_argument, NULL, 'V' };
	lo[n] = (struct option){ 0 };
	memcpy(so + s, "vhV", 4);
}

static int opt_key(int opt)
{
	if (opt >= OPT_KEY0 && opt < OPT_KEY0 + (int)NKEYS)
		return opt - OPT_KEY0;
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].shortopt && keys[i].shortopt == opt)
			return (int)i;
	return -1;
}

/* Settings whose default follows another setting, unless set themselves. */
static void derive(struct kvs_config *c)
{
	struct kvs_opts *o = &c->o;
	int i;

	i = find_key("reclaim-high");
	if (c->from[i].src == KVS_SRC_DEFAULT) {
		o->core.reclaim_high_pct = o->core.reclaim_low_pct + (KVS_DEFAULT_RECLAIM_HIGH_PCT - KVS_DEFAULT_RECLAIM_LOW_PCT);
		c->from[i].derived = 1;
	}
	/* kvserver serves verbs: what its QPs may take to execute a work
	 * request (exec_bound.h) is added to settle and quarantine. */
	o->core.exec_ms = KVI_EXEC_BOUND_MS;
	i = find_key("quarantine-ms");
	if (c->from[i].src == KVS_SRC_DEFAULT && o->core.max_op_ms != KVS_DEFAULT_MAX_OP_MS) {
		o->core.quarantine_ms = 2 * o->core.max_op_ms + KVI_EXEC_BOUND_MS + KVS_QUARANTINE_MARGIN_MS;
		c->from[i].derived = 1;
	}
	i = find_key("renew-ms");
	if (c->from[i].src == KVS_SRC_DEFAULT) {
		o->renew_ms = o->lease_ms / 4 < KVS_DEFAULT_RENEW_MS ? o->lease_ms / 4 : KVS_DEFAULT_RENEW_MS;
		c->from[i].derived = 1;
	}
}

/* The settings that only make sense together. */
static int cross_check(struct kvs_config *c, struct kvi_errbuf *e)
{
	struct kvs_opts *o = &c->o;
	struct kvi_geometry g;
	char a[160], b[160];
	int ia, ib;

	ia = find_key("renew-ms"), ib = find_key("lease-ms");
	if (o->renew_ms > o->lease_ms / 2) {
		where(c, (size_t)ia, a, sizeof(a));
		where(c, (size_t)ib, b, sizeof(b));
		kvi_errbuf_set(e, "renew-ms %u (%s) is more than half of lease-ms %u (%s): a client must be able "
				  "to miss a renewal and still keep its lease; lower renew-ms", o->renew_ms, a, o->lease_ms, b);
		return -1;
	}
	ia = find_key("quarantine-ms"), ib = find_key("max-op-ms");
	if ((uint64_t)o->core.quarantine_ms < 2ull * o->core.max_op_ms + KVI_EXEC_BOUND_MS + KVS_QUARANTINE_MARGIN_MS) {
		where(c, (size_t)ia, a, sizeof(a));
		where(c, (size_t)ib, b, sizeof(b));
		kvi_errbuf_set(e, "quarantine-ms %u (%s) is unsafe with max-op-ms %u (%s): the quarantine must be "
				  "at least twice the operation deadline plus %u ms (a late write's execution bound "
				  "and a margin)", o->core.quarantine_ms, a,
			       o->core.max_op_ms, b, KVI_EXEC_BOUND_MS + KVS_QUARANTINE_MARGIN_MS);
		return -1;
	}
	ia = find_key("reclaim-low"), ib = find_key("reclaim-high");
	if (o->core.reclaim_low_pct >= o->core.reclaim_high_pct) {
		where(c, (size_t)ia, a, sizeof(a));
		where(c, (size_t)ib, b, sizeof(b));
		kvi_errbuf_set(e, "reclaim-low %u (%s) is not below reclaim-high %u (%s): the reclaim watermarks "
				  "need low < high", o->core.reclaim_low_pct, a, o->core.reclaim_high_pct, b);
		return -1;
	}
	o->core.segment_size = o->segment_kib << 10;
	/* Buckets for this much memory: check the layout now, before mapping anything. */
	if (kvs_core_plan(0, o->memory_mib << 20, &o->core, &g, e))
		return -1;
	snprintf(o->port_str, sizeof(o->port_str), "%u", (unsigned)o->port);
	return 0;
}

static void bad_option(int opt, char **argv, struct kvi_errbuf *e)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "?";
	char shortname[3] = { '-', (char)optopt, 0 };

	if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < 256)
		arg = shortname; /* one of a cluster such as -vx */
	if (opt == '?' && strncmp(arg, "--", 2) == 0 && strchr(arg, '='))
		kvi_errbuf_set(e, "option '%.*s' takes no value (see --help)", (int)strcspn(arg, "="), arg);
	else if (opt == ':')
		kvi_errbuf_set(e, "option '%.60s' needs a value (see --help)", arg);
	else
		kvi_errbuf_set(e, "unknown option '%.60s' (see --help)", arg);
}

int kvs_config_parse(struct kvs_config *c, int argc, char **argv, struct kvi_errbuf *e)
{
	struct option lo[NKEYS + 6];
	char so[3 * NKEYS + 8], form[160];
	int opt, help = 0, version = 0, print = 0, i;

	kvs_config_init(c);
	build_getopt(lo, so);
	opterr = 0;
	/* Pass 1: the options that decide what to read, and malformed ones. */
	optind = 0;
	while ((opt = getopt_long(argc, argv, so, lo, NULL)) != -1) {
		if (opt == '?' || opt == ':') {
			bad_option(opt, argv, e);
			return -1;
		}
		if (opt == 'h')
			help = 1;
		else if (opt == 'V')
			version = 1;
		else if (opt == OPT_PRINT)
			print = 1;
		else if (opt == OPT_CONFIG) {
			free(c->file);
			c->file = strdup(optarg);
		}
	}
	if (help)
		return KVS_CFG_HELP;
	if (version)
		return KVS_CFG_VERSION;
	if (optind < argc) {
		kvi_errbuf_set(e, "unexpected argument '%.60s' (see --help)", argv[optind]);
		return -1;
	}
	if (c->file && kvs_config_load_file(c, c->file, e))
		return -1;
	if (load_env(c, e))
		return -1;
	/* Pass 2: the command line, last and so strongest. */
	optind = 0;
	while ((opt = getopt_long(argc, argv, so, lo, NULL)) != -1) {
		if (opt == 'v') {
			i = find_key("log-level");
			if (c->o.log_level < KVI_LOG_DEBUG)
				c->o.log_level++;
			c->from[i].src = KVS_SRC_FLAG;
			continue;
		}
		i = opt_key(opt);
		if (i < 0)
			continue;
		if (set_value(c, (size_t)i, keys[i].type == T_BOOL ? NULL : optarg)) {
			expected(&keys[i], form, sizeof(form));
			kvi_errbuf_set(e, "invalid --%s '%.40s': expected %s", keys[i].name, optarg, form);
			return -1;
		}
		c->from[i].src = KVS_SRC_FLAG;
	}
	derive(c);
	if (cross_check(c, e))
		return -1;
	return print ? KVS_CFG_PRINT : KVS_CFG_RUN;
}

void kvs_config_help(FILE *f)
{
	char head[64];

	fprintf(f, "usage: kvserver [options]\n"
		   "Settings come from, lowest precedence first: defaults, --config FILE (key = value lines\n"
		   "named like the long options), KVSERVER_<NAME> environment variables (e.g.\n"
		   "KVSERVER_LEASE_MS=2000), the command line.\n");
	for (size_t s = 0; s < sizeof(sections) / sizeof(sections[0]); s++) {
		fprintf(f, "%s:\n", sections[s]);
		for (size_t i = 0; i < NKEYS; i++) {
			const struct cfg_key *k = &keys[i];
			const char *h = k->help;
			int first = 1;

			if (strcmp(k->section, sections[s]) != 0)
				continue;
			if (k->shortopt)
				snprintf(head, sizeof(head), "  -%c, --%s%s%s", k->shortopt, k->name, k->metavar ? " " : "",
					 k->metavar ? k->metavar : "");
			else
				snprintf(head, sizeof(head), "      --%s%s%s", k->name, k->metavar ? " " : "",
					 k->metavar ? k->metavar : "");
			fprintf(f, "%-28s", head);
			if (strlen(head) >= 28)
				fprintf(f, "\n%-28s", "");
			while (*h) {
				size_t len = strcspn(h, "\n");

				fprintf(f, "%s%.*s", first ? "" : "\n                            ", (int)len, h);
				first = 0;
				h += len + (h[len] == '\n');
			}
			/* Defaults the help does not spell out itself. */
			if (k->def && !strstr(k->help, "default") && k->type != T_BOOL)
				fprintf(f, " (default %s)", k->def);
			fprintf(f, "\n");
		}
	}
	fprintf(f, "Other:\n"
		   "      --config FILE         read settings from FILE first ('#' comments; booleans take\n"
		   "                            true/false/yes/no/1/0)\n"
		   "      --print-config        print the effective settings as a config file and exit\n"
		   "  -v, --verbose             one log level more (-v: info, -vv: debug)\n"
		   "  -h, --help                this text\n"
		   "  -V, --version             print the version\n");
}

void kvs_config_print(const struct kvs_config *c, FILE *f)
{
	char line[512], env[64];

	fprintf(f, "# kvserver %s settings (kvserver --print-config); load with --config FILE\n", KVS_VERSION);
	for (size_t s = 0; s < sizeof(sections) / sizeof(sections[0]); s++) {
		fprintf(f, "\n# %s\n", sections[s]);
		for (size_t i = 0; i < NKEYS; i++) {
			const struct cfg_key *k = &keys[i];
			const void *src = (const char *)&c->o + k->off;
			uint64_t v;
			int n;

			if (strcmp(k->section, sections[s]) != 0)
				continue;
			switch (k->type) {
			case T_U64:
				n = snprintf(line, sizeof(line), "%s = %" PRIu64, k->name, opt_uint(&c->o, k));
				break;
			case T_BOOL:
				n = snprintf(line, sizeof(line), "%s = %s", k->name, opt_uint(&c->o, k) ? "true" : "false");
				break;
			case T_ENUM:
				v = opt_uint(&c->o, k);
				n = snprintf(line, sizeof(line), "%s = %s", k->name, k->words[v]);
				break;
			default: {
				const char *str = *(char *const *)src;

				n = snprintf(line, sizeof(line), "%s =%s%s", k->name, str ? " " : "", str ? str : "");
			}
			}
			fprintf(f, "%s%*s", line, n < 32 ? 32 - n : 1, "");
			switch (c->from[i].src) {
			case KVS_SRC_FILE:
				fprintf(f, "# %s:%u\n", c->file ? c->file : "config", c->from[i].line);
				break;
			case KVS_SRC_ENV:
				env_name(k->name, env, sizeof(env));
				fprintf(f, "# environment %s\n", env);
				break;
			case KVS_SRC_FLAG:
				fprintf(f, "# command line\n");
				break;
			default:
				fprintf(f, "# default%s\n", c->from[i].derived ? " (follows other settings)"
								 : (k->type == T_STR || k->type == T_PATH) ? " (unset)" : "");
			}
		}
	}
}
