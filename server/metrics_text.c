/* The Prometheus text exposition (format 0.0.4) of a metrics snapshot
 * (metrics.h). Names: prefix kvcache_, and memcached_exporter's names where
 * the quantity is the same thing (current_bytes, limit_bytes,
 * items_evicted_total, ...); process_ for the process's own. The server
 * statistics that STATS reports too are shown as common/server_stats.h lists
 * them. Label values are fixed identifiers from tables here and there:
 * nothing needs escaping. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvclient_errors.h"
#include "metrics.h"

struct out {
	char *buf;
	size_t cap, len; /* len counts what did not fit too */
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->len < o->cap ? o->buf + o->len : NULL, o->len < o->cap ? o->cap - o->len : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len += (size_t)n;
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One family with one unlabelled sample. */
static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
	family(o, name, "counter", help);
	put(o, "%s %" PRIu64 "\n", name, v);
}

static void gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
	family(o, name, "gauge", help);
	put(o, "%s %" PRIu64 "\n", name, v);
}

static void seconds(struct out *o, const char *name, const char *type, const char *help, double v)
{
	family(o, name, type, help);
	put(o, "%s %.6f\n", name, v);
}

static double ns_to_s(uint64_t ns)
{
	return (double)ns / 1e9;
}

static const char *const type_names[KVS_METRICS_TYPES] = {
	[0] = "unknown",
	[KVI_CTRL_SEG_REQ] = "seg_req",
	[KVI_CTRL_SEG_GRANT] = "seg_grant",
	[KVI_CTRL_ERROR] = "error",
	[KVI_CTRL_SHUTDOWN] = "shutdown",
	[KVI_CTRL_STATS_REQ] = "stats_req",
	[KVI_CTRL_STATS] = "stats",
	[KVI_CTRL_SEG_RETURN] = "seg_return",
	[KVI_CTRL_SEG_RETURNED] = "seg_returned",
	[KVI_CTRL_LEASE_RENEW] = "lease_renew",
	[KVI_CTRL_LEASE] = "lease",
	[KVI_CTRL_LOCK_REPORT] = "lock_report",
	[KVI_CTRL_LOCK_REPORTED] = "lock_reported",
	[KVI_CTRL_INDEX_REQ] = "index_req",
	[KVI_CTRL_INDEX] = "index",
	[KVI_CTRL_GROW] = "grow",
	[KVI_CTRL_GROWING] = "growing",
	[KVI_CTRL_COUNTS] = "counts",
	[KVI_CTRL_COUNTED] = "counted",
};
_Static_assert(KVI_CTRL_TYPE_MAX == 18, "name the new control type in type_names");

const char *kvs_metrics_type_name(unsigned type)
{
	return type < KVS_METRICS_TYPES && type_names[type] ? type_names[type] : type_names[0];
}

/* The requests a client sends: always listed, zero or not, so that a
 * dashboard finds every series from the first scrape. Other types (a
 * server-to-client type a broken client sent) appear once seen. */
static int client_request(unsigned t)
{
	return t == KVI_CTRL_SEG_REQ || t == KVI_CTRL_STATS_REQ || t == KVI_CTRL_SEG_RETURN ||
	       t == KVI_CTRL_LEASE_RENEW || t == KVI_CTRL_LOCK_REPORT || t == KVI_CTRL_INDEX_REQ ||
	       t == KVI_CTRL_GROW || t == KVI_CTRL_COUNTS;
}

static void control(struct out *o, const struct kvs_metrics_events *ev)
{
	family(o, "kvcache_control_requests_total", "counter",
	       "Control messages received from clients, by type.");
	for (unsigned t = 0; t < KVS_METRICS_TYPES; t++)
		if (client_request(t) || ev->ctrl[t])
			put(o, "kvcache_control_requests_total{type=\"%s\"} %" PRIu64 "\n", kvs_metrics_type_name(t),
			    ev->ctrl[t]);
	family(o, "kvcache_control_errors_total", "counter",
	       "Control requests answered with an error, by request type and error code.");
	for (unsigned t = 0; t < KVS_METRICS_TYPES; t++)
		for (unsigned c = 0; c < KVS_METRICS_CODES; c++)
			if (ev->ctrl_errors[t][c])
				put(o, "kvcache_control_errors_total{type=\"%s\",code=\"%s\"} %" PRIu64 "\n",
				    kvs_metrics_type_name(t), c ? kvc_err_name(-(int)c) : "KVC_UNKNOWN",
				    ev->ctrl_errors[t][c]);
	family(o, "kvcache_control_rejected_total", "counter",
	       "Control requests no well-behaved client sends; the client was disconnected. By type.");
	for (unsigned t = 0; t < KVS_METRICS_TYPES; t++)
		if (ev->ctrl_rejected[t])
			put(o, "kvcache_control_rejected_total{type=\"%s\"} %" PRIu64 "\n", kvs_metrics_type_name(t),
			    ev->ctrl_rejected[t]);
}

static void connections(struct out *o, const struct kvs_metrics_events *ev)
{
	static const char *const role[KVS_METRICS_ROLES] = { "client", "loopback" };

	family(o, "kvcache_current_connections", "gauge",
	       "Open connections: clients, and the server's own loopbacks (fencing, reclamation).");
	for (unsigned r = 0; r < KVS_METRICS_ROLES; r++)
		put(o, "kvcache_current_connections{role=\"%s\"} %" PRIu64 "\n", role[r], ev->conn_current[r]);
	family(o, "kvcache_connections_total", "counter", "Connections established since the server started.");
	for (unsigned r = 0; r < KVS_METRICS_ROLES; r++)
		put(o, "kvcache_connections_total{role=\"%s\"} %" PRIu64 "\n", role[r], ev->conn_total[r]);
	counter(o, "kvcache_connections_refused_total",
		"Joins refused after authentication (client ids used up, out of memory).", ev->conn_refused);
}

/* One row of server_stats.h, as the endpoint shows it. */
struct stat_row {
	enum kvi_stat_kind kind;
	const char *family, *label, *help;
};

static const struct stat_row stat_rows[KVI_STAT_COUNT] = {
#define KVI_STAT_ROW(id, name, field, kind, family, label, help) \
	[KVI_STAT_##id] = { KVI_STAT_KIND_##kind, family, label, help },
	KVI_SERVER_STATS(KVI_STAT_ROW)
#undef KVI_STAT_ROW
};

/* Rows i and j are samples of one labelled family. */
static int same_family(unsigned i, unsigned j)
{
	const struct stat_row *a = &stat_rows[i], *b = &stat_rows[j];

	return j < KVI_STAT_COUNT && a->label && b->label && strcmp(a->family, b->family) == 0;
}

/* Samples of a labelled family that are not server statistics: they follow
 * the family's rows. */
static void family_rest(struct out *o, const char *family, const struct kvs_metrics_snapshot *s)
{
	if (strcmp(family, "kvcache_segments") == 0)
		put(o, "kvcache_segments{state=\"index\"} %" PRIu64 "\n", s->core.segments_index);
}

/* The server statistics (server_stats.h), with the values STATS reports. */
static void server_stats(struct out *o, const struct kvs_metrics_snapshot *s)
{
	uint64_t v[KVI_STAT_COUNT];

	kvs_core_stat_values(&s->core, v);
	for (unsigned i = 0; i < KVI_STAT_COUNT; i++) {
		const struct stat_row *r = &stat_rows[i];
		const char *type = r->kind == KVI_STAT_KIND_GAUGE ? "gauge" : "counter";

		if (r->kind == KVI_STAT_KIND_NONE)
			continue;
		if (r->kind == KVI_STAT_KIND_SECONDS) {
			seconds(o, r->family, type, r->help, ns_to_s(v[i]));
			continue;
		}
		if (!r->label) {
			family(o, r->family, type, r->help);
			put(o, "%s %" PRIu64 "\n", r->family, v[i]);
			continue;
		}
		if (i == 0 || !same_family(i - 1, i))
			family(o, r->family, type, r->help);
		put(o, "%s{%s} %" PRIu64 "\n", r->family, r->label, v[i]);
		if (!same_family(i, i + 1))
			family_rest(o, r->family, s);
	}
}

size_t kvs_metrics_render(const struct kvs_metrics_snapshot *s, char *buf, size_t cap)
{
	const struct kvs_core_stats *c = &s->core;
	const struct kvs_members_stats *m = &s->ev.members;
	struct out o = { .buf = buf, .cap = cap };

	if (cap)
		buf[0] = '\0';
	/* Process. */
	seconds(&o, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
		s->cpu_seconds);
	seconds(&o, "process_start_time_seconds", "gauge",
		"Start time of the process since unix epoch in seconds.", s->start_time_seconds);
	/* Clients. */
	connections(&o, &s->ev);
	/* What STATS reports. */
	server_stats(&o, s);
	/* Memory, beyond what STATS reports. */
	gauge(&o, "kvcache_index_bytes", "Bytes of the index (current and, while resizing, previous).",
	      c->index_bytes);
	gauge(&o, "kvcache_client_quota_bytes", "Bytes one client may hold while another waits for memory.",
	      c->quota_bytes);
	gauge(&o, "kvcache_segment_size_bytes", "Bytes of one heap segment (the largest item fits in one).",
	      s->segment_size);
	/* Reclamation. */
	counter(&o, "kvcache_lock_words_repaired_by_server_total",
		"Lock words holding junk that the reclaimer repaired.", c->rc.junk_repaired);
	/* Segment grants. */
	counter(&o, "kvcache_segment_grants_throttled_total",
		"Of the deferred: the client was over its quota while another starved.", c->grants_throttled);
	counter(&o, "kvcache_segment_grants_over_quota_total", "Of the refused: over quota (KVC_EQUOTA).",
		c->grants_over_quota);
	counter(&o, "kvcache_segment_tails_returned_total", "Unused extent tails writers gave back.",
		c->tails_returned);
	/* Index. */
	gauge(&o, "kvcache_index_migrating", "1 while the index is being resized (migrating), else 0.",
	      s->index_migrating ? 1 : 0);
	/* Membership. */
	counter(&o, "kvcache_lease_expiries_total", "Clients expelled because their lease ran out.",
		m->lease_expiries);
	counter(&o, "kvcache_lease_renewals_total", "Lease renewals.", m->renewals);
	counter(&o, "kvcache_lock_reports_total", "Lock reports judged (a writer kept finding a bucket locked).",
		m->reports);
	counter(&o, "kvcache_lock_reports_cleared_total",
		"Of those, naming no member: the lock word was released.", m->reports_cleared);
	counter(&o, "kvcache_lock_reports_fenced_total", "Of those, whose owner was expelled.", m->reports_fenced);
	counter(&o, "kvcache_lock_reports_limited_total", "Lock reports not judged: their reporter sent too many.",
		m->reports_limited);
	counter(&o, "kvcache_lock_words_repaired_total", "Reported lock words that held junk, repaired.",
		m->reports_repaired);
	/* Control messages. */
	control(&o, &s->ev);
	return o.len;
}
