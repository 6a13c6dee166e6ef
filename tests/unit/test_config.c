/* kvserver's settings table (server/config.c): every kind of bad value from
 * every source is one line naming where it came from and the expected form;
 * defaults < file < environment < command line; the cross-checks; and
 * --print-config output loads back to the same settings. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "exec_bound.h"
#include "log.h"
#include "members.h"
#include "migrate.h"
#include "region.h"

static struct kvs_config cfg;
static struct kvi_errbuf err;
static char conf_path[64];

static void setup(void)
{
	extern char **environ;

	/* The runner's own environment must not leak in. */
	for (char **p = environ; p && *p;) {
		if (strncmp(*p, "KVSERVER_", 9) == 0) {
			char name[128];

			snprintf(name, sizeof(name), "%.*s", (int)strcspn(*p, "="), *p);
			unsetenv(name);
			p = environ;
		} else {
			p++;
		}
	}
	conf_path[0] = 0;
}

static void teardown(void)
{
	kvs_config_free(&cfg);
	if (conf_path[0])
		unlink(conf_path);
}

TestSuite(config, .init = setup, .fini = teardown);

/* Parse "kvserver" followed by the NULL-terminated arguments. */
static int parse(const char *first, ...)
{
	char *argv[64] = { "kvserver" };
	int argc = 1;
	va_list ap;

	va_start(ap, first);
	for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
		argv[argc++] = (char *)a;
	va_end(ap);
	argv[argc] = NULL;
	kvs_config_free(&cfg);
	err.msg[0] = 0;
	return kvs_config_parse(&cfg, argc, argv, &err);
}

/* A config file with these contents; its path. */
static const char *conf(const char *text)
{
	int fd;

	if (conf_path[0])
		unlink(conf_path);
	snprintf(conf_path, sizeof(conf_path), "/tmp/test_config.XXXXXX");
	fd = mkstemp(conf_path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return conf_path;
}

static void expect_error(int rc, const char *a, const char *b)
{
	cr_expect_eq(rc, -1, "rc %d, message '%s'", rc, err.msg);
	cr_expect(strstr(err.msg, a) != NULL, "'%s' should name '%s'", err.msg, a);
	if (b)
		cr_expect(strstr(err.msg, b) != NULL, "'%s' should say '%s'", err.msg, b);
	cr_expect_null(strchr(err.msg, '\n'), "one line: '%s'", err.msg);
}

Test(config, defaults_match_the_servers_constants)
{
	cr_assert_eq(parse(NULL), KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.memory_mib, 64);
	cr_expect_eq(cfg.o.port, 7471);
	cr_expect_str_eq(cfg.o.port_str, "7471");
	cr_expect_eq(cfg.o.huge, KVS_HUGE_AUTO);
	cr_expect_eq(cfg.o.segment_kib, 1024);
	cr_expect_eq(cfg.o.core.segment_size, 1u << 20);
	cr_expect_eq(cfg.o.core.reclaim_low_pct, KVS_DEFAULT_RECLAIM_LOW_PCT);
	cr_expect_eq(cfg.o.core.reclaim_high_pct, KVS_DEFAULT_RECLAIM_HIGH_PCT);
	cr_expect_eq(cfg.o.core.max_op_ms, KVS_DEFAULT_MAX_OP_MS);
	cr_expect_eq(cfg.o.core.quarantine_ms, KVS_DEFAULT_QUARANTINE_MS);
	cr_expect_eq(cfg.o.core.client_quota_pct, KVS_DEFAULT_CLIENT_QUOTA_PCT);
	cr_expect_eq(cfg.o.resize_load_pct, KVS_DEFAULT_RESIZE_LOAD_PCT);
	cr_expect_eq(cfg.o.lease_ms, KVS_DEFAULT_LEASE_MS);
	cr_expect_eq(cfg.o.renew_ms, KVS_DEFAULT_RENEW_MS);
	cr_expect_eq(cfg.o.log_level, KVI_LOG_WARN);
	cr_expect_null(cfg.o.listen);
	cr_expect_null(cfg.o.log_file);
	cr_expect_eq(cfg.o.core.no_evict, 0);
}

Test(config, every_flag_keeps_its_name_and_meaning)
{
	cr_assert_eq(parse("-l", "10.0.0.1", "-p", "7000", "-m", "256", "-d", "rxe0", "--hugepages", "off",
			   "--buckets", "4096", "--segment-size", "256", "--no-evict", "--reclaim-low", "5",
			   "--reclaim-high", "9", "--max-op-ms", "2000", "--quarantine-ms", "5000",
			   "--client-quota-pct", "50", "--resize-load-pct", "0", "--lease-ms", "3000", "--renew-ms",
			   "1000", "--secret-file", "/etc/kv.secret", "-v", NULL),
		     KVS_CFG_RUN, "%s", err.msg);
	cr_expect_str_eq(cfg.o.listen, "10.0.0.1");
	cr_expect_str_eq(cfg.o.port_str, "7000");
	cr_expect_eq(cfg.o.memory_mib, 256);
	cr_expect_str_eq(cfg.o.device, "rxe0");
	cr_expect_eq(cfg.o.huge, KVS_HUGE_OFF);
	cr_expect_eq(cfg.o.core.buckets, 4096);
	cr_expect_eq(cfg.o.core.segment_size, 256u << 10);
	cr_expect_eq(cfg.o.core.no_evict, 1);
	cr_expect_eq(cfg.o.core.reclaim_low_pct, 5);
	cr_expect_eq(cfg.o.core.reclaim_high_pct, 9);
	cr_expect_eq(cfg.o.core.max_op_ms, 2000);
	cr_expect_eq(cfg.o.core.quarantine_ms, 5000);
	cr_expect_eq(cfg.o.core.client_quota_pct, 50);
	cr_expect_eq(cfg.o.resize_load_pct, 0);
	cr_expect_eq(cfg.o.lease_ms, 3000);
	cr_expect_eq(cfg.o.renew_ms, 1000);
	cr_expect_str_eq(cfg.o.secret_file, "/etc/kv.secret");
	cr_expect_eq(cfg.o.log_level, KVI_LOG_INFO);
}

Test(config, bad_command_line_values_name_the_flag_and_the_expected_form)
{
	expect_error(parse("-m", "0", NULL), "--memory '0'", "1..1048576");
	expect_error(parse("-m", "1048577", NULL), "--memory", "1..1048576");
	expect_error(parse("-m", "abc", NULL), "--memory 'abc'", "expected MiB");
	expect_error(parse("-m", "12x", NULL), "--memory '12x'", "expected");
	expect_error(parse("-m", "-5", NULL), "--memory '-5'", "expected");
	expect_error(parse("-m", "+5", NULL), "--memory '+5'", "expected");
	expect_error(parse("-m", " 5", NULL), "--memory", "expected");
	expect_error(parse("-m", "", NULL), "--memory", "expected");
	expect_error(parse("-m", "99999999999999999999999", NULL), "--memory", "expected");
	expect_error(parse("-p", "70000", NULL), "--port '70000'", "1..65535");
	expect_error(parse("--segment-size", "100", NULL), "--segment-size '100'", "power of two");
	expect_error(parse("--hugepages", "maybe", NULL), "--hugepages 'maybe'", "one of auto, on, off");
	expect_error(parse("--log-level", "loud", NULL), "--log-level 'loud'", "error, warn, info, debug");
	expect_error(parse("--lease-ms", "10", NULL), "--lease-ms", "50..600000");
	expect_error(parse("--reclaim-low", "96", NULL), "--reclaim-low", "1..90");
	expect_error(parse("--max-op-ms", "0", NULL), "--max-op-ms", "1..600000");
}

Test(config, malformed_command_lines_are_one_line_each)
{
	expect_error(parse("--bogus", NULL), "unknown option '--bogus'", "--help");
	expect_error(parse("-x", NULL), "unknown option '-x'", NULL);
	expect_error(parse("--memory", NULL), "'--memory' needs a value", NULL);
	expect_error(parse("-m", NULL), "'-m' needs a value", NULL);
	expect_error(parse("--no-evict=yes", NULL), "'--no-evict' takes no value", NULL);
	expect_error(parse("extra-arg", NULL), "unexpected argument 'extra-arg'", NULL);
}

Test(config, help_and_version_answer_whatever_else_is_wrong)
{
	setenv("KVSERVER_MEMORY", "abc", 1);
	cr_expect_eq(parse("--help", NULL), KVS_CFG_HELP);
	cr_expect_eq(parse("-V", "--config", "/nonexistent", NULL), KVS_CFG_VERSION);
	expect_error(parse(NULL), "KVSERVER_MEMORY 'abc'", "expected MiB");
}

Test(config, bad_file_lines_name_file_line_key_and_form)
{
	const char *p;
	char want[96];

	p = conf("# a comment\n\nmemory = 12x\n");
	snprintf(want, sizeof(want), "%s:3: invalid memory '12x'", p);
	expect_error(parse("--config", p, NULL), want, "expected MiB in 1..1048576");

	p = conf("port = 7000\nmemory 128\n");
	snprintf(want, sizeof(want), "%s:2: no '='", p);
	expect_error(parse("--config", p, NULL), want, "key = value");

	p = conf("memroy = 128\n");
	snprintf(want, sizeof(want), "%s:1: unknown key 'memroy'", p);
	expect_error(parse("--config", p, NULL), want, NULL);

	p = conf("memory = 128\nlease-ms = 2000\nmemory = 256\n");
	snprintf(want, sizeof(want), "%s:3: duplicate key 'memory'", p);
	expect_error(parse("--config", p, NULL), want, "line 1");

	p = conf("no-evict = maybe\n");
	snprintf(want, sizeof(want), "%s:1: invalid no-evict 'maybe'", p);
	expect_error(parse("--config", p, NULL), want, "true, false, yes, no, 1 or 0");

	p = conf("hugepages = sometimes\n");
	snprintf(want, sizeof(want), "%s:1: invalid hugepages 'sometimes'", p);
	expect_error(parse("--config", p, NULL), want, "one of auto, on, off");

	p = conf("lease-ms = -1000\n");
	snprintf(want, sizeof(want), "%s:1: invalid lease-ms '-1000'", p);
	expect_error(parse("--config", p, NULL), want, NULL);

	expect_error(parse("--config", "/nonexistent/kv.conf", NULL), "cannot read config file /nonexistent/kv.conf",
		     NULL);
}

Test(config, file_format_comments_blanks_and_booleans)
{
	static const char *const yes[] = { "true", "yes", "1" }, *const no[] = { "false", "no", "0" };

	cr_assert_eq(parse("--config", conf("  # indented comment\n\n\tmemory\t=  128   # trailing comment\n"
					     "listen = 10.0.0.2\nsecret-file = /etc/kv#1\n"),
			   NULL),
		     KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.memory_mib, 128);
	cr_expect_str_eq(cfg.o.listen, "10.0.0.2");
	cr_expect_str_eq(cfg.o.secret_file, "/etc/kv#1", "a '#' inside a value is kept");
	for (int i = 0; i < 3; i++) {
		char text[64];

		snprintf(text, sizeof(text), "no-evict = %s\n", yes[i]);
		cr_assert_eq(parse("--config", conf(text), NULL), KVS_CFG_RUN, "%s", err.msg);
		cr_expect_eq(cfg.o.core.no_evict, 1, "%s", yes[i]);
		snprintf(text, sizeof(text), "no-evict = %s\n", no[i]);
		cr_assert_eq(parse("--config", conf(text), NULL), KVS_CFG_RUN, "%s", err.msg);
		cr_expect_eq(cfg.o.core.no_evict, 0, "%s", no[i]);
	}
}

Test(config, bad_environment_variables_are_named)
{
	setenv("KVSERVER_LEASE_MS", "lots", 1);
	expect_error(parse(NULL), "KVSERVER_LEASE_MS 'lots'", "milliseconds in 50..600000");
	unsetenv("KVSERVER_LEASE_MS");
	setenv("KVSERVER_NO_EVICT", "perhaps", 1);
	expect_error(parse(NULL), "KVSERVER_NO_EVICT 'perhaps'", "true, false");
	unsetenv("KVSERVER_NO_EVICT");
	setenv("KVSERVER_MEMROY", "128", 1);
	expect_error(parse(NULL), "unknown environment variable KVSERVER_MEMROY", NULL);
	unsetenv("KVSERVER_MEMROY");
	setenv("KVSERVER_SEGMENT_SIZE", "256", 1);
	cr_expect_eq(parse(NULL), KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.core.segment_size, 256u << 10);
}

Test(config, precedence_defaults_file_environment_command_line)
{
	const char *p = conf("memory = 100\nport = 7001\nlease-ms = 2000\n");

	setenv("KVSERVER_MEMORY", "200", 1);
	setenv("KVSERVER_PORT", "7002", 1);
	cr_assert_eq(parse("--config", p, "-m", "300", NULL), KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.memory_mib, 300, "the command line beats the environment");
	cr_expect_eq(cfg.o.port, 7002, "the environment beats the file");
	cr_expect_eq(cfg.o.lease_ms, 2000, "the file beats the default");
	cr_expect_eq(cfg.o.resize_load_pct, KVS_DEFAULT_RESIZE_LOAD_PCT);
	unsetenv("KVSERVER_MEMORY");
	cr_assert_eq(parse("--config", p, NULL), KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.memory_mib, 100);
	/* -v counts up from the level the other sources set. */
	setenv("KVSERVER_LOG_LEVEL", "error", 1);
	cr_assert_eq(parse("-v", NULL), KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.log_level, KVI_LOG_WARN);
	cr_assert_eq(parse("--log-level", "info", "-vv", NULL), KVS_CFG_RUN, "%s", err.msg);
	cr_expect_eq(cfg.o.log_level, KVI_LOG_DEBUG);
}

Test(config, derived_defaults_follow_their_setting_unless_set)
{
	cr_assert_eq(parse("--lease-ms", "200", "--max-op-ms", "2000", "--reclaim-low", "10", NULL), KVS_CFG_RUN,
		     "%s", err.msg);
	cr_expect_eq(cfg.o.renew_ms, 50, "a quarter of the lease");
	cr_expect_eq(cfg.o.core.quarantine_ms, 2 * 2000 + KVI_EXEC_BOUND_MS + KVS_QUARANTINE_MARGIN_MS);
	cr_expect_eq(cfg.o.core.reclaim_high_pct, 12);
}

Test(config, cross_checks_name_both_settings_and_their_sources)
{
	const char *p;
	char want[96];

	expect_error(parse("--renew-ms", "600", NULL), "renew-ms 600 (--renew-ms)", "lease-ms 1000 (default)");
	p = conf("lease-ms = 400\n");
	setenv("KVSERVER_RENEW_MS", "300", 1);
	snprintf(want, sizeof(want), "lease-ms 400 (%s:1)", p);
	expect_error(parse("--config", p, NULL), "renew-ms 300 (KVSERVER_RENEW_MS)", want);
	unsetenv("KVSERVER_RENEW_MS");
	expect_error(parse("--quarantine-ms", "100", NULL), "quarantine-ms 100 (--quarantine-ms)", "max-op-ms 1000");
	expect_error(parse("--max-op-ms", "2000", "--quarantine-ms", "3000", NULL), "quarantine", "twice");
	expect_error(parse("--reclaim-high", "1", NULL), "reclaim-low 2 (default)", "watermarks");
	expect_error(parse("--reclaim-low", "20", "--reclaim-high", "20", NULL), "reclaim-low 20", "low < high");
	/* The layout: more buckets than the memory holds. */
	expect_error(parse("-m", "1", "--buckets", "1000000", NULL), "buckets", "1 MiB");
}

static void expect_same(const struct kvs_opts *a, const struct kvs_opts *b)
{
	struct kvs_opts x = *a, y = *b;

#define SAME_STR(f) cr_expect((!x.f && !y.f) || (x.f && y.f && strcmp(x.f, y.f) == 0), #f)
	SAME_STR(listen);
	SAME_STR(device);
	SAME_STR(secret_file);
	SAME_STR(log_file);
	x.listen = y.listen = x.device = y.device = x.secret_file = y.secret_file = x.log_file = y.log_file = NULL;
	cr_expect_eq(memcmp(&x, &y, sizeof(x)), 0, "every other setting is the same");
}

static void round_trip(void)
{
	struct kvs_config again;
	char *text = NULL, *argv[] = { "kvserver", "--config", conf_path, NULL };
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int fd;

	cr_assert_not_null(f);
	kvs_config_print(&cfg, f);
	fclose(f);
	if (conf_path[0])
		unlink(conf_path);
	snprintf(conf_path, sizeof(conf_path), "/tmp/test_config.XXXXXX");
	fd = mkstemp(conf_path);
	cr_assert_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	cr_assert_eq(kvs_config_parse(&again, 3, argv, &err), KVS_CFG_RUN, "%s\n%s", err.msg, text);
	expect_same(&cfg.o, &again.o);
	cr_expect(strstr(text, "memory = ") && strstr(text, "log-file =") && strstr(text, "no-evict = "), "%s", text);
	kvs_config_free(&again);
	free(text);
}

Test(config, print_config_loads_back_to_the_same_settings)
{
	cr_assert_eq(parse(NULL), KVS_CFG_RUN, "%s", err.msg);
	round_trip();
	setenv("KVSERVER_LEASE_MS", "4000", 1);
	cr_assert_eq(parse("--config", conf("memory = 128\nno-evict = yes\n"), "-l", "10.0.0.1", "--max-op-ms", "700",
			   "--hugepages", "on", "--secret-file", "/etc/kv.secret", "--log-file", "/var/log/kv.log",
			   "--segment-size", "64", "-vv", "--print-config", NULL),
		     KVS_CFG_PRINT, "%s", err.msg);
	round_trip();
}

Test(config, print_config_says_where_each_value_came_from)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	setenv("KVSERVER_LEASE_MS", "4000", 1);
	cr_assert_eq(parse("--config", conf("\n\nmemory = 128\n"), "-p", "7000", NULL), KVS_CFG_RUN, "%s", err.msg);
	f = open_memstream(&text, &len);
	kvs_config_print(&cfg, f);
	fclose(f);
	cr_expect(strstr(text, "port = 7000") && strstr(text, "# command line"), "%s", text);
	cr_expect(strstr(text, "lease-ms = 4000") && strstr(text, "# environment KVSERVER_LEASE_MS"), "%s", text);
	cr_expect(strstr(text, "memory = 128") && strstr(text, ":3\n"), "%s", text);
	cr_expect(strstr(text, "client-quota-pct = 25") && strstr(text, "# default"), "%s", text);
	cr_expect(strstr(text, "renew-ms = 250") != NULL, "the derived value, written out: %s", text);
	free(text);
}

Test(config, help_lists_every_setting_by_section)
{
	static const char *const want[] = { "General:", "Cache policy:", "Index:", "Membership:", "Security:",
					    "Logging:", "-m, --memory MIB", "--lease-ms MS", "--no-evict", "--log-file PATH",
					    "--log-level LEVEL", "--config FILE", "--print-config", "KVSERVER_" };
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	kvs_config_help(f);
	fclose(f);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect(strstr(text, want[i]) != NULL, "%s missing: %s", want[i], text);
	free(text);
}
