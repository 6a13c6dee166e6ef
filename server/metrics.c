/* kvserver's metrics endpoint: HTTP on MHD's own single thread, snapshots
 * of the server's counters (metrics.h says who writes what and how it is
 * read safely). Who owns what:
 *  - the listening socket is ours until MHD starts, then MHD's (it closes it);
 *  - struct kvs_metrics_events `ev` is written by the event loop (the
 *    callback wrappers) and copied by the HTTP thread, both under `mu`;
 *  - core and members belong to kvserver; members is only ever touched from
 *    the event loop (the wrappers run there). */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvclient_errors.h"
#include "log.h"
#include "metrics.h"

#define KVS_METRICS_BACKLOG 16
#define KVS_METRICS_MAX_CONNECTIONS 16u /* scrapers are few; a flood is turned away */
#define KVS_METRICS_CONN_TIMEOUT_S 10u

struct kvs_metrics {
	struct MHD_Daemon *d;
	struct kvs_core *core;
	struct kvs_members *members; /* event loop only */
	struct kvi_listen_cb *cb;    /* the owner's, wrapped; restored at stop */
	struct kvi_listen_cb inner;  /* the owner's callbacks */
	double start_time;
	pthread_mutex_t mu; /* guards ev */
	struct kvs_metrics_events ev;
};

/* ---- the event loop's side: count, then publish ---- */

static unsigned role_of(const struct kvi_peer *p)
{
	return p->role == KVI_ROLE_LOOPBACK ? KVS_METRICS_LOOPBACK : KVS_METRICS_CLIENT;
}

/* The membership counters, copied into ev; the caller holds mu. Reading the
 * table is fine here: we are on the event loop, its only user. */
static void publish_members(struct kvs_metrics *m)
{
	kvs_members_stats(m->members, &m->ev.members);
}

static int wrap_connect(void *arg, struct kvi_peer *p, const struct kvi_hello *h, struct kvi_welcome *w)
{
	struct kvs_metrics *m = arg;
	int rc = m->inner.on_connect(m->inner.arg, p, h, w);

	if (rc) {
		pthread_mutex_lock(&m->mu);
		m->ev.conn_refused++;
		pthread_mutex_unlock(&m->mu);
	}
	return rc;
}

static void wrap_established(void *arg, struct kvi_peer *p)
{
	struct kvs_metrics *m = arg;

	if (m->inner.on_established)
		m->inner.on_established(m->inner.arg, p);
	pthread_mutex_lock(&m->mu);
	m->ev.conn_current[role_of(p)]++;
	m->ev.conn_total[role_of(p)]++;
	publish_members(m);
	pthread_mutex_unlock(&m->mu);
}

static void wrap_read(void *arg, struct kvi_peer *p, uint64_t value, int ok)
{
	struct kvs_metrics *m = arg;

	if (m->inner.on_read)
		m->inner.on_read(m->inner.arg, p, value, ok);
}

static void wrap_disconnect(void *arg, struct kvi_peer *p)
{
	struct kvs_metrics *m = arg;
	int was = p->established;

	if (m->inner.on_disconnect)
		m->inner.on_disconnect(m->inner.arg, p);
	pthread_mutex_lock(&m->mu);
	if (was && m->ev.conn_current[role_of(p)])
		m->ev.conn_current[role_of(p)]--;
	publish_members(m);
	pthread_mutex_unlock(&m->mu);
}

static int wrap_ctrl(void *arg, struct kvi_peer *p, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_metrics *m = arg;
	unsigned t = req->type < KVS_METRICS_TYPES ? req->type : 0, code;
	int rc;

	if (m->inner.on_ctrl) {
		rc = m->inner.on_ctrl(m->inner.arg, p, req, resp);
	} else { /* what the listener answers without a handler */
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = req->seq, .status = KVC_EPROTO };
		rc = 0;
	}
	pthread_mutex_lock(&m->mu);
	m->ev.ctrl[t]++;
	if (rc < 0) {
		m->ev.ctrl_rejected[t]++;
	} else if (resp->type == KVI_CTRL_ERROR) {
		code = resp->status < 0 && -resp->status < KVS_METRICS_CODES ? (unsigned)-resp->status : 0;
		m->ev.ctrl_errors[t][code]++;
	}
	publish_members(m);
	pthread_mutex_unlock(&m->mu);
	return rc;
}

/* ---- the HTTP thread's side ---- */

void kvs_metrics_snapshot(struct kvs_metrics *m, struct kvs_metrics_snapshot *out)
{
	enum kvi_index_state state;
	struct rusage ru;
	uint64_t epoch;

	memset(out, 0, sizeof(*out));
	kvs_core_stats(m->core, &out->core);
	kvs_core_index_status(m->core, &epoch, &state);
	out->index_migrating = state == KVI_INDEX_MIGRATING;
	out->segment_size = kvs_core_geometry(m->core)->segment_size;
	pthread_mutex_lock(&m->mu);
	out->ev = m->ev;
	pthread_mutex_unlock(&m->mu);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		out->cpu_seconds = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
				   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	out->start_time_seconds = m->start_time;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
			     size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ok;

	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO; /* MHD closes the connection */
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ok = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			      const char *version, const char *upload, size_t *upload_len, void **state)
{
	static const char not_found[] = "not found: metrics are at /metrics\n";
	static const char bad_method[] = "method not allowed: GET /metrics\n";
	struct kvs_metrics *m = cls;
	struct kvs_metrics_snapshot s;
	size_t len;
	char *body;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)state;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", (char *)bad_method,
			     sizeof(bad_method) - 1, MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics") != 0)
		return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", (char *)not_found,
			     sizeof(not_found) - 1, MHD_RESPMEM_PERSISTENT);
	/* Rendering the same snapshot twice gives the same length: measure,
	 * then write. */
	kvs_metrics_snapshot(m, &s);
	len = kvs_metrics_render(&s, NULL, 0);
	body = malloc(len + 1);
	if (!body)
		return MHD_NO;
	kvs_metrics_render(&s, body, len + 1);
	return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
		     MHD_RESPMEM_MUST_FREE);
}

/* MHD's own complaints (a broken connection, out of memory) go to our log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	kvi_warn("metrics endpoint: %s", line);
}

/* ---- start and stop ---- */

/* "ADDR:PORT" or "[ADDR]:PORT" -> its address (freeaddrinfo it), or
 * KVC_EINVAL with the reason in e. */
static int parse_spec(const char *spec, struct addrinfo **ai, struct kvi_errbuf *e)
{
	static const char example[] = "expected ADDR:PORT, e.g. 127.0.0.1:9471, 0.0.0.0:9471 or [::1]:9471";
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	const char *colon, *port, *h = spec;
	char host[256], *end;
	unsigned long pn;
	size_t hlen;
	int rc;

	colon = strrchr(spec, ':');
	if (!colon || colon == spec) {
		kvi_errbuf_set(e, "invalid --metrics '%s': %s", spec, example);
		return KVC_EINVAL;
	}
	port = colon + 1;
	hlen = (size_t)(colon - spec);
	if (spec[0] == '[') { /* an IPv6 address, in brackets because of its colons */
		if (hlen < 3 || spec[hlen - 1] != ']') {
			kvi_errbuf_set(e, "invalid --metrics '%s': %s", spec, example);
			return KVC_EINVAL;
		}
		h = spec + 1;
		hlen -= 2;
	}
	errno = 0;
	pn = strtoul(port, &end, 10);
	if (!*port || *end || errno || pn == 0 || pn > 65535 || port[0] == '-' || port[0] == '+') {
		kvi_errbuf_set(e, "invalid --metrics '%s': port '%s' is not 1..65535; %s", spec, port, example);
		return KVC_EINVAL;
	}
	if (hlen >= sizeof(host)) {
		kvi_errbuf_set(e, "invalid --metrics '%s': address too long; %s", spec, example);
		return KVC_EINVAL;
	}
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	rc = getaddrinfo(host, port, &hints, ai);
	if (rc) {
		kvi_errbuf_set(e, "invalid --metrics '%s': cannot resolve '%s': %s; %s", spec, host,
			       gai_strerror(rc), example);
		return KVC_EINVAL;
	}
	return 0;
}

int kvs_metrics_parse(const char *spec, struct kvi_errbuf *e)
{
	struct addrinfo *ai;
	int rc = parse_spec(spec, &ai, e);

	if (rc == 0)
		freeaddrinfo(ai);
	return rc;
}

/* A listening socket on spec's address, or -1 with the reason in e: a bad
 * spec (*bad_spec set), or an address that is busy or not this host's. */
static int listen_on(const char *spec, int *v6, struct kvi_errbuf *e, int *bad_spec)
{
	struct addrinfo *ai;
	int fd, one = 1;

	*bad_spec = parse_spec(spec, &ai, e) != 0;
	if (*bad_spec)
		return -1;
	*v6 = ai->ai_family == AF_INET6;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		kvi_errbuf_set(e, "--metrics %s: socket: %s", spec, strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	/* A restarted server binds again at once (connections of the last one
	 * in TIME_WAIT); a live listener on the address still fails. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, KVS_METRICS_BACKLOG)) {
		kvi_errbuf_set(e, "--metrics %s: cannot listen there: %s%s", spec, strerror(errno),
			       errno == EADDRINUSE      ? " (another process serves that port: pick another)"
			       : errno == EADDRNOTAVAIL ? " (not an address of this host)"
							: "");
		close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	return fd;
}

int kvs_metrics_start(struct kvs_metrics **out, const char *spec, struct kvs_core *core,
		      struct kvs_members *members, struct kvi_listen_cb *cb, struct kvi_errbuf *e)
{
	struct kvs_metrics *m;
	struct timespec now;
	int fd, v6 = 0, bad_spec;

	*out = NULL;
	if (!spec)
		return 0;
	fd = listen_on(spec, &v6, e, &bad_spec);
	if (fd < 0)
		return bad_spec ? KVC_EINVAL : KVC_ESYS;
	m = calloc(1, sizeof(*m));
	if (!m || pthread_mutex_init(&m->mu, NULL)) {
		kvi_errbuf_set(e, "--metrics %s: out of memory", spec);
		free(m);
		close(fd);
		return KVC_ESYS;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	m->start_time = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
	m->core = core;
	m->members = members;
	publish_members(m);
	/* MHD_USE_INTERNAL_POLLING_THREAD: one thread of MHD's own answers every
	 * scrape; MHD_USE_AUTO: epoll on Linux. */
	m->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0), 0,
				NULL, NULL, answer, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
				MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
				KVS_METRICS_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
				KVS_METRICS_CONN_TIMEOUT_S, MHD_OPTION_END);
	if (!m->d) {
		kvi_errbuf_set(e, "--metrics %s: cannot start the HTTP server (libmicrohttpd)", spec);
		pthread_mutex_destroy(&m->mu);
		free(m);
		close(fd);
		return KVC_ESYS;
	}
	m->cb = cb;
	m->inner = *cb;
	*cb = (struct kvi_listen_cb){ .arg = m, .on_connect = wrap_connect, .on_established = wrap_established,
				      .on_disconnect = wrap_disconnect, .on_ctrl = wrap_ctrl, .on_read = wrap_read };
	kvi_info("metrics at http://%s/metrics", spec);
	*out = m;
	return 0;
}

void kvs_metrics_stop(struct kvs_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d); /* joins its thread, closes the socket */
	*m->cb = m->inner;
	pthread_mutex_destroy(&m->mu);
	free(m);
}
