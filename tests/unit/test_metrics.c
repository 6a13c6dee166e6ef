/* The metrics exposition text (server/metrics_text.c): for made-up
 * snapshots it passes the strict checker (tests/promcheck), carries the
 * snapshot's numbers under the documented names, and is cut safely in a
 * short buffer. The checker itself is shown to refuse what it promises to. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"
#include "metrics.h"
#include "promcheck.h"

static char *render(const struct kvs_metrics_snapshot *s)
{
	size_t len = kvs_metrics_render(s, NULL, 0), again;
	char *buf = malloc(len + 1);

	cr_assert_not_null(buf);
	again = kvs_metrics_render(s, buf, len + 1);
	cr_assert_eq(again, len, "the length changed between two renders: %zu, %zu", len, again);
	cr_assert_eq(strlen(buf), len);
	return buf;
}

static void assert_valid(const char *text)
{
	char err[600];

	cr_assert_eq(kvt_prom_check(text, err, sizeof(err)), 0, "%s\n--- text:\n%s", err, text);
}

static double value(const char *text, const char *series)
{
	double v = -1;

	cr_assert_eq(kvt_prom_value(text, series, &v), 0, "no series %s in:\n%s", series, text);
	return v;
}

/* Every field a different number, so that a field shown under the wrong
 * name is caught. */
static void busy_snapshot(struct kvs_metrics_snapshot *s)
{
	uint64_t *core = (uint64_t *)(void *)&s->core;

	memset(s, 0, sizeof(*s));
	_Static_assert(sizeof(s->core) % sizeof(uint64_t) == 0, "core stats are counters");
	for (size_t i = 0; i < sizeof(s->core) / sizeof(uint64_t); i++)
		core[i] = 1000 + i;
	s->ev.members = (struct kvs_members_stats){ .lease_expiries = 3, .renewals = 400, .reports = 9,
						    .reports_cleared = 2, .reports_fenced = 1 };
	s->ev.conn_current[KVS_METRICS_CLIENT] = 5;
	s->ev.conn_current[KVS_METRICS_LOOPBACK] = 2;
	s->ev.conn_total[KVS_METRICS_CLIENT] = 50;
	s->ev.conn_total[KVS_METRICS_LOOPBACK] = 3;
	s->ev.conn_refused = 1;
	for (unsigned t = 0; t < KVS_METRICS_TYPES; t++)
		s->ev.ctrl[t] = 10 * t;
	s->ev.ctrl[0] = 4; /* an unknown type */
	s->ev.ctrl_errors[KVI_CTRL_SEG_REQ][-KVC_EAGAIN] = 17;
	s->ev.ctrl_errors[KVI_CTRL_SEG_REQ][-KVC_ENOMEM] = 6;
	s->ev.ctrl_errors[KVI_CTRL_LEASE_RENEW][-KVC_EFENCED] = 2;
	s->ev.ctrl_errors[KVI_CTRL_STATS_REQ][0] = 1; /* a code out of range */
	s->ev.ctrl_errors[0][-KVC_EPROTO] = 1;
	s->ev.ctrl_rejected[KVI_CTRL_SEG_GRANT] = 7;
	s->index_migrating = 1;
	s->segment_size = 1u << 20;
	s->cpu_seconds = 12.5;
	s->start_time_seconds = 1790000000.25;
}

Test(metrics, an_idle_server_renders_valid_text_with_every_family)
{
	static const char *const families[] = {
		"process_cpu_seconds_total", "process_start_time_seconds", "kvcache_current_connections",
		"kvcache_connections_total", "kvcache_writing_clients", "kvcache_limit_bytes",
		"kvcache_current_bytes", "kvcache_segments", "kvcache_limit_segments",
		"kvcache_items_evicted_total", "kvcache_items_expired_total", "kvcache_segments_reclaimed_total",
		"kvcache_segment_grants_total", "kvcache_segment_grants_refused_total",
		"kvcache_segment_grants_deferred_total", "kvcache_index_buckets", "kvcache_index_resizes_total",
		"kvcache_fencings_total", "kvcache_fence_locks_released_total", "kvcache_lease_expiries_total",
		"kvcache_control_requests_total", "kvcache_control_errors_total",
	};
	struct kvs_metrics_snapshot s = { 0 };
	char *text = render(&s), want[128];

	assert_valid(text);
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		snprintf(want, sizeof(want), "# TYPE %s ", families[i]);
		cr_expect_not_null(strstr(text, want), "no family %s", families[i]);
	}
	/* Client requests are listed from the start; errors only once seen. */
	cr_expect_eq(value(text, "kvcache_control_requests_total{type=\"seg_req\"}"), 0);
	cr_expect_eq(value(text, "kvcache_control_requests_total{type=\"lease_renew\"}"), 0);
	cr_expect_null(strstr(text, "kvcache_control_errors_total{"));
	free(text);
}

Test(metrics, a_busy_server_renders_its_numbers_under_the_documented_names)
{
	struct kvs_metrics_snapshot s;
	char *text;

	busy_snapshot(&s);
	text = render(&s);
	assert_valid(text);
	cr_expect_eq(value(text, "kvcache_segments{state=\"free\"}"), (double)s.core.segments_free);
	cr_expect_eq(value(text, "kvcache_segments{state=\"sealed\"}"), (double)s.core.segments_sealed);
	cr_expect_eq(value(text, "kvcache_segments{state=\"index\"}"), (double)s.core.segments_index);
	cr_expect_eq(value(text, "kvcache_limit_segments"), (double)s.core.segments_total);
	cr_expect_eq(value(text, "kvcache_limit_bytes"), (double)s.core.heap_bytes);
	cr_expect_eq(value(text, "kvcache_current_bytes"), (double)s.core.carved_bytes);
	cr_expect_eq(value(text, "kvcache_writing_clients"), (double)s.core.clients);
	cr_expect_eq(value(text, "kvcache_items_evicted_total"),
		     (double)(s.core.rc.evictions + s.core.counts[KVI_COUNT_INDEX_EVICTIONS]),
		     "the reclaimer's and the clients' evictions");
	cr_expect_eq(value(text, "kvcache_commands_total{command=\"get\",status=\"hit\"}"),
		     (double)s.core.counts[KVI_COUNT_GET_HITS]);
	cr_expect_eq(value(text, "kvcache_items_expired_total"), (double)s.core.rc.expired);
	cr_expect_eq(value(text, "kvcache_segments_reclaimed_total"), (double)s.core.rc.segments);
	cr_expect_eq(value(text, "kvcache_segment_grants_total"), (double)s.core.grants);
	cr_expect_eq(value(text, "kvcache_segment_grants_refused_total"), (double)s.core.grants_refused);
	cr_expect_eq(value(text, "kvcache_segment_grants_deferred_total"), (double)s.core.grants_deferred);
	cr_expect_eq(value(text, "kvcache_index_buckets"), (double)s.core.index_buckets);
	cr_expect_eq(value(text, "kvcache_index_resizes_total"), (double)s.core.resizes);
	cr_expect_eq(value(text, "kvcache_index_migrating"), 1);
	cr_expect_eq(value(text, "kvcache_fencings_total"), (double)s.core.fencings);
	cr_expect_eq(value(text, "kvcache_fence_locks_released_total"), (double)s.core.fence_released);
	cr_expect_float_eq(value(text, "kvcache_fence_cpu_seconds_total"), s.core.fence_cpu_ns / 1e9, 1e-6);
	cr_expect_eq(value(text, "kvcache_lease_expiries_total"), 3);
	cr_expect_eq(value(text, "kvcache_current_connections{role=\"client\"}"), 5);
	cr_expect_eq(value(text, "kvcache_connections_total{role=\"loopback\"}"), 3);
	cr_expect_eq(value(text, "kvcache_control_requests_total{type=\"grow\"}"), 10 * KVI_CTRL_GROW);
	cr_expect_eq(value(text, "kvcache_control_requests_total{type=\"unknown\"}"), 4);
	cr_expect_eq(value(text, "kvcache_control_errors_total{type=\"seg_req\",code=\"KVC_EAGAIN\"}"), 17);
	cr_expect_eq(value(text, "kvcache_control_errors_total{type=\"seg_req\",code=\"KVC_ENOMEM\"}"), 6);
	cr_expect_eq(value(text, "kvcache_control_errors_total{type=\"lease_renew\",code=\"KVC_EFENCED\"}"), 2);
	cr_expect_eq(value(text, "kvcache_control_errors_total{type=\"stats_req\",code=\"KVC_UNKNOWN\"}"), 1);
	cr_expect_eq(value(text, "kvcache_control_rejected_total{type=\"seg_grant\"}"), 7);
	cr_expect_float_eq(value(text, "process_cpu_seconds_total"), 12.5, 1e-9);
	cr_expect_float_eq(value(text, "process_start_time_seconds"), 1790000000.25, 1e-3);
	free(text);
}

/* Every statistic server_stats.h shows appears under its family with the
 * value STATS reports for the same counters. */
Test(metrics, every_server_statistic_shows_what_stats_reports)
{
	static const struct {
		enum kvi_stat_kind kind;
		const char *family, *label;
	} rows[KVI_STAT_COUNT] = {
#define ROW(id, name, field, kind, family, label, help) [KVI_STAT_##id] = { KVI_STAT_KIND_##kind, family, label },
		KVI_SERVER_STATS(ROW)
#undef ROW
	};
	struct kvs_metrics_snapshot s;
	uint64_t v[KVI_STAT_COUNT];
	char *text, series[160];
	unsigned shown = 0;

	busy_snapshot(&s);
	kvs_core_stat_values(&s.core, v);
	text = render(&s);
	assert_valid(text);
	for (unsigned i = 0; i < KVI_STAT_COUNT; i++) {
		if (rows[i].kind == KVI_STAT_KIND_NONE)
			continue;
		if (rows[i].label)
			snprintf(series, sizeof(series), "%s{%s}", rows[i].family, rows[i].label);
		else
			snprintf(series, sizeof(series), "%s", rows[i].family);
		if (rows[i].kind == KVI_STAT_KIND_SECONDS)
			cr_expect_float_eq(value(text, series), (double)v[i] / 1e9, 1e-6, "%s", series);
		else
			cr_expect_eq(value(text, series), (double)v[i], "%s", series);
		shown++;
	}
	cr_expect_eq(shown, KVI_STAT_COUNT - 5, "all but cpu_ns, segments_used, bytes_used, cmd_get and cmd_touch");
	free(text);
}

Test(metrics, a_short_buffer_gets_a_terminated_prefix_and_the_full_length)
{
	struct kvs_metrics_snapshot s;
	char *full, small[100];
	size_t len;

	busy_snapshot(&s);
	full = render(&s);
	len = kvs_metrics_render(&s, small, sizeof(small));
	cr_expect_eq(len, strlen(full));
	cr_expect_eq(strlen(small), sizeof(small) - 1);
	cr_expect_eq(strncmp(small, full, sizeof(small) - 1), 0);
	free(full);
}

Test(metrics, type_names)
{
	cr_expect_str_eq(kvs_metrics_type_name(KVI_CTRL_SEG_REQ), "seg_req");
	cr_expect_str_eq(kvs_metrics_type_name(KVI_CTRL_GROWING), "growing");
	cr_expect_str_eq(kvs_metrics_type_name(0), "unknown");
	cr_expect_str_eq(kvs_metrics_type_name(KVS_METRICS_TYPES), "unknown");
}

/* ---- the checker refuses what it should ---- */

static void refused(const char *text, const char *why)
{
	char err[600];

	cr_expect_neq(kvt_prom_check(text, err, sizeof(err)), 0, "accepted (%s):\n%s", why, text);
	cr_expect_neq(err[0], '\0', "no reason given (%s)", why);
}

#define FAM(n, t) "# HELP " n " Help.\n# TYPE " n " " t "\n"

Test(promcheck, accepts_a_good_text)
{
	char err[600];
	const char *good = FAM("a_total", "counter") "a_total{x=\"1\",y=\"q\\\"\\\\\\n\"} 3\na_total{x=\"2\"} 0\n"
			   FAM("b", "gauge") "b -1.5e3\n" FAM("c", "gauge") "c NaN\n";

	cr_expect_eq(kvt_prom_check(good, err, sizeof(err)), 0, "%s", err);
}

Test(promcheck, refuses_bad_texts)
{
	refused("", "empty");
	refused(FAM("a", "gauge") "a 1", "no trailing newline");
	refused(FAM("a", "counter") "a 1\n", "a counter without _total");
	refused("a 1\n", "a sample without a family");
	refused("# HELP a Help.\na 1\n", "no TYPE");
	refused("# TYPE a gauge\na 1\n", "no HELP");
	refused(FAM("a", "gauge") "a 1\n# HELP a More.\n", "HELP after samples");
	refused(FAM("a", "gauge") "a 1\n" FAM("b", "gauge") "b 1\n" FAM("a", "gauge") "a 2\n", "a family twice");
	refused(FAM("a", "gauge") "b 1\n", "a sample under another family");
	refused(FAM("a", "gauge") "a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 2\n", "a duplicate series");
	refused(FAM("a", "gauge") "a 1\na 2\n", "a duplicate bare series");
	refused(FAM("a", "gauge") "a{x=\"1\",x=\"2\"} 1\n", "a label twice");
	refused(FAM("1a", "gauge") "1a 1\n", "a bad name");
	refused(FAM("a-b", "gauge") "a-b 1\n", "a bad name");
	refused(FAM("a", "gauge") "a{x:y=\"1\"} 1\n", "a bad label name");
	refused(FAM("a", "gauge") "a{__x=\"1\"} 1\n", "a reserved label name");
	refused(FAM("a", "gauge") "a{x=\"\\t\"} 1\n", "a bad escape");
	refused(FAM("a", "gauge") "a{x=\"1} 1\n", "an unterminated label value");
	refused(FAM("a", "gauge") "a 1 1700000000\n", "a timestamp");
	refused(FAM("a", "gauge") "a one\n", "not a number");
	refused(FAM("a", "gauge") "a  1\n", "two spaces");
	refused(FAM("a_total", "counter") "a_total -1\n", "a negative counter");
	refused(FAM("a", "gauge") "\na 1\n", "a blank line");
	refused(FAM("a", "gauge") "# just a comment\na 1\n", "another comment");
	refused(FAM("a", "gauge") "# TYPE a counter\na 1\n", "a second TYPE");
	refused("# HELP a Help.\n# TYPE a gauges\na 1\n", "an unknown type");
}
