/* kvserver --metrics over real verbs: a scrape with a real HTTP client (curl)
 * passes the strict exposition checker (tests/promcheck) and shows the
 * counters a client's PUTs and GETs moved; other paths are 404; a bad or
 * busy address is a usage error (exit 2, one line) before the server
 * serves. And, printed only: GET p50 of a kvbench run with and without a
 * scraper hitting /metrics every 100 ms. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "harness.h"
#include "kvclient.h"
#include "kvclient_errors.h"
#include "promcheck.h"
#include "rmem_verbs.h"

TestSuite(metrics_verbs, .init = kvt_require_rdma, .timeout = 240);

/* method url with curl: the HTTP status (0 if curl failed), the body in
 * *body (malloc'd, NUL-terminated) and the content type in ctype. */
static int curl(const char *method, const char *url, char **body, char *ctype, size_t ctlen)
{
	static unsigned serial;
	char file[128], cmd[512], out[256] = "";
	int status = 0;
	long len;
	FILE *f;

	snprintf(file, sizeof(file), "/tmp/kvt-metrics-%d-%u.txt", (int)getpid(), __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
	snprintf(cmd, sizeof(cmd), "curl -sS --max-time 30 -X %s -o %s -w '%%{http_code} %%{content_type}' '%s'",
		 method, file, url);
	f = popen(cmd, "r");
	cr_assert_not_null(f, "popen curl");
	if (!fgets(out, sizeof(out), f))
		out[0] = '\0';
	pclose(f);
	if (sscanf(out, "%d", &status) != 1)
		status = 0;
	if (ctype) {
		const char *sp = strchr(out, ' ');

		snprintf(ctype, ctlen, "%s", sp ? sp + 1 : "");
	}
	*body = NULL;
	f = fopen(file, "r");
	if (f) {
		fseek(f, 0, SEEK_END);
		len = ftell(f);
		rewind(f);
		*body = calloc(1, (size_t)len + 1);
		cr_assert_not_null(*body);
		cr_assert_eq(fread(*body, 1, (size_t)len, f), (size_t)len);
		fclose(f);
		unlink(file);
	}
	return status;
}

/* A scrape of /metrics that must pass the checker. */
static char *scrape(const char *base)
{
	char url[128], ctype[128], err[600], *body;
	int status;

	snprintf(url, sizeof(url), "%s/metrics", base);
	status = curl("GET", url, &body, ctype, sizeof(ctype));
	cr_assert_eq(status, 200, "GET %s: status %d", url, status);
	cr_expect_str_eq(ctype, "text/plain; version=0.0.4; charset=utf-8");
	cr_assert_not_null(body);
	cr_assert_eq(kvt_prom_check(body, err, sizeof(err)), 0, "%s\n--- scrape:\n%s", err, body);
	return body;
}

static double value(const char *text, const char *series)
{
	double v = -1;

	cr_assert_eq(kvt_prom_value(text, series, &v), 0, "no series %s in the scrape:\n%s", series, text);
	return v;
}

/* Scrape until series reaches at least `want` (what other threads of the
 * server count arrives a moment later); returns the last value. */
static double wait_value(const char *base, const char *series, double want, double timeout_s)
{
	double t0 = kvi_mono_s(), v;

	for (;;) {
		char *text = scrape(base);

		v = value(text, series);
		free(text);
		if (v >= want || kvi_mono_s() - t0 > timeout_s)
			return v;
		usleep(100 * 1000);
	}
}

Test(metrics_verbs, a_scrape_shows_what_a_client_did_and_other_paths_are_not_found)
{
	/* A long lease: the guest of deploy/rdma-env is slow, and a client idle
	 * for a lease (while curl runs) would be expelled. */
	const char *extra[] = { "--metrics", "127.0.0.1:9581", "--segment-size", "64", "--lease-ms", "60000", NULL };
	const char *base = "http://127.0.0.1:9581";
	char key[32], val[100], buf[128], url[128], *text, *body;
	struct kvi_ctrl req = { .type = KVI_CTRL_STATS_REQ, .stats_req = { .page = 9999 } }, resp;
	struct kvt_proc srv;
	struct kvi_rmem *rm;
	size_t len;
	kvc_t *h;

	kvt_start_server(&srv, "7801", extra);
	/* Before any client: valid, and nothing granted yet. */
	text = scrape(base);
	cr_expect_eq(value(text, "kvcache_segment_grants_total"), 0);
	cr_expect_eq(value(text, "kvcache_current_connections{role=\"client\"}"), 0);
	cr_expect_gt(value(text, "kvcache_limit_bytes"), 0);
	cr_expect_gt(value(text, "kvcache_index_buckets"), 0);
	free(text);

	h = kvt_kv_connect("7801", 8, 0);
	memset(val, 'v', sizeof(val));
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		cr_assert_eq(kvc_put(h, key, strlen(key), val, sizeof(val), 0), 0, "put %s", key);
	}
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		cr_assert_eq(kvc_get(h, key, strlen(key), buf, sizeof(buf), &len), 0, "get %s", key);
		cr_assert_eq(len, sizeof(val));
	}
	/* A control request answered with an error: a STATS page that does not exist. */
	rm = kvt_rmem_connect("7801");
	cr_assert_eq(kvi_rmem_ctrl_call(rm, &req, &resp, 20000), 0);
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_EINVAL);
	cr_expect_eq(kvc_get(h, "key-0", 5, buf, sizeof(buf), &len), 0); /* h renews its lease */

	text = scrape(base);
	cr_expect_geq(value(text, "kvcache_segment_grants_total"), 1);
	cr_expect_geq(value(text, "kvcache_control_requests_total{type=\"seg_req\"}"), 1);
	cr_expect_geq(value(text, "kvcache_control_requests_total{type=\"lease_renew\"}"), 1);
	cr_expect_geq(value(text, "kvcache_lease_renewals_total"), 1);
	cr_expect_geq(value(text, "kvcache_control_requests_total{type=\"stats_req\"}"), 1);
	cr_expect_eq(value(text, "kvcache_control_errors_total{type=\"stats_req\",code=\"KVC_EINVAL\"}"), 1);
	cr_expect_eq(value(text, "kvcache_current_connections{role=\"client\"}"), 2);
	cr_expect_geq(value(text, "kvcache_connections_total{role=\"client\"}"), 2);
	cr_expect_geq(value(text, "kvcache_writing_clients"), 1);
	cr_expect_gt(value(text, "kvcache_current_bytes"), 0);
	cr_expect_geq(value(text, "kvcache_segments{state=\"open\"}"), 1);
	cr_expect_gt(value(text, "process_cpu_seconds_total"), 0);
	free(text);

	/* A protocol breaker is disconnected, and counted as such. */
	req = (struct kvi_ctrl){ .type = KVI_CTRL_SEG_GRANT };
	cr_expect_neq(kvi_rmem_ctrl_call(rm, &req, &resp, 10000), 0);
	kvi_rmem_destroy(rm);
	/* Clients that leave are fenced (by the fence thread, a moment later). */
	kvc_destroy(h);
	cr_expect_eq(wait_value(base, "kvcache_control_rejected_total{type=\"seg_grant\"}", 1, 30), 1);
	cr_expect_geq(wait_value(base, "kvcache_fencings_total", 2, 60), 2);
	text = scrape(base);
	cr_expect_eq(value(text, "kvcache_current_connections{role=\"client\"}"), 0, "%s", text);
	free(text);

	/* Anything but /metrics is not found; only GET and HEAD are served. */
	snprintf(url, sizeof(url), "%s/", base);
	cr_expect_eq(curl("GET", url, &body, NULL, 0), 404);
	free(body);
	snprintf(url, sizeof(url), "%s/metrics/x", base);
	cr_expect_eq(curl("GET", url, &body, NULL, 0), 404);
	free(body);
	snprintf(url, sizeof(url), "%s/metrics", base);
	cr_expect_eq(curl("POST", url, &body, NULL, 0), 405);
	free(body);

	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 30000), 0, "kvserver: %s", srv.all);
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* kvserver with --metrics spec must exit 2 with one line naming --metrics,
 * before it serves. A malformed spec is found among the options: that line
 * is all it prints. An address that cannot be bound is found once the
 * region is set up: warnings about the host may come before the line. */
static void refused(const char *port, const char *spec, int malformed, const char *why)
{
	char *argv[] = { KV_SERVER_BIN, "-l", (char *)kvt_rdma_addr(), "-p", (char *)port, "-m", "64",
			 "--metrics", (char *)spec, NULL };
	struct kvt_proc p;
	int rc;

	cr_assert_eq(kvt_start(&p, argv), 0);
	rc = kvt_wait(&p, 60000);
	cr_expect_eq(rc, 2, "--metrics %s (%s): exit %d: %s", spec, why, rc, p.all);
	cr_expect(strstr(p.all, "--metrics") != NULL, "--metrics %s (%s): %s", spec, why, p.all);
	cr_expect(strstr(p.all, "listening on") == NULL, "--metrics %s: it served: %s", spec, why, p.all);
	if (malformed) {
		cr_expect_eq(count_lines(p.all), 1, "--metrics %s (%s): not one line: %s", spec, why, p.all);
	} else {
		const char *line = p.all;
		int errors = 0;

		/* Warnings logged while starting (logfmt, level=warn: e.g. no
		 * hugepages) come before the error line; they are not errors. */
		for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1) {
			const char *w = strstr(line, "level=warn ");

			if (!w || w > nl)
				errors++;
		}
		cr_expect_eq(errors, 1, "--metrics %s (%s): more than one error line: %s", spec, why, p.all);
	}
}

Test(metrics_verbs, a_bad_or_busy_address_is_a_usage_error)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(9582) };
	int fd, one = 1;

	refused("7802", "nonsense", 1, "no port");
	refused("7802", "127.0.0.1:", 1, "empty port");
	refused("7802", "127.0.0.1:0", 1, "port 0");
	refused("7802", "127.0.0.1:70000", 1, "port too large");
	refused("7802", ":9582", 1, "no address");
	refused("7802", "[::1:9582", 1, "unclosed bracket");
	refused("7802", "192.0.2.1:9582", 0, "not an address of this host");
	/* Busy: someone else listens there. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 1), 0);
	refused("7802", "127.0.0.1:9582", 0, "busy");
	close(fd);
}

/* ---- measured, not asserted: GET p50 with and without a scraper ---- */

struct scraper {
	int stop; /* __atomic */
	unsigned port;
	unsigned ok, failed;
	double busy_s; /* time spent in scrapes */
};

/* A Prometheus-like scraper: GET /metrics every 100 ms on a fresh
 * connection (raw socket: no process started per scrape). */
static void *scrape_loop(void *arg)
{
	struct scraper *s = arg;
	char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", buf[65536];

	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->port) };
		double t0 = kvi_mono_s();
		size_t got = 0;
		ssize_t n;
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
		    write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
			while ((n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0 && got < sizeof(buf) - 1)
				got += (size_t)n;
		}
		if (fd >= 0)
			close(fd);
		buf[got] = '\0';
		if (strncmp(buf, "HTTP/1.1 200", 12) == 0 && strstr(buf, "kvcache_control_requests_total"))
			s->ok++;
		else
			s->failed++;
		s->busy_s += kvi_mono_s() - t0;
		usleep(100 * 1000);
	}
	return NULL;
}

/* GET p50 (µs) of one kvbench -w C run, from its text report. */
static double bench_p50(const char *port, int load)
{
	char target[128];
	char *argv[24] = { KV_BENCH_BIN, "-w", "C", "--target", target, "-r", "5000", "-D", "3", "--warmup", "1",
			   "-T", "1", "-q", "1", "--quiet" };
	struct kvt_proc b;
	const char *run, *row;
	double p50 = -1, ops;
	unsigned long long count;
	int n = 16, rc;

	snprintf(target, sizeof(target), "rdma://%s:%s", kvt_rdma_addr(), port);
	if (!load)
		argv[n++] = "--no-load";
	argv[n] = NULL;
	cr_assert_eq(kvt_start(&b, argv), 0);
	rc = kvt_wait(&b, 120000);
	cr_assert_eq(rc, 0, "kvbench: exit %d: %s", rc, b.all);
	run = strstr(b.all, "run phase:");
	cr_assert_not_null(run, "%s", b.all);
	row = strstr(run, "\nREAD ");
	cr_assert_not_null(row, "%s", b.all);
	cr_assert_eq(sscanf(row + 6, "%llu %lf %lf", &count, &ops, &p50), 3, "%s", b.all);
	return p50;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define ROUNDS 3

Test(metrics_verbs, get_latency_with_and_without_a_scraper, .timeout = 600)
{
	const char *extra[] = { "--metrics", "127.0.0.1:9583", "--lease-ms", "60000", NULL };
	struct scraper s = { .port = 9583 };
	double without[ROUNDS], with[ROUNDS];
	struct kvt_proc srv;
	pthread_t t;

	kvt_start_server(&srv, "7803", extra);
	bench_p50("7803", 1); /* loads the records; a first run warms up */
	/* Alternating, so that drift (a busy host) falls on both sides. */
	for (int r = 0; r < ROUNDS; r++) {
		without[r] = bench_p50("7803", 0);
		__atomic_store_n(&s.stop, 0, __ATOMIC_RELAXED);
		cr_assert_eq(pthread_create(&t, NULL, scrape_loop, &s), 0);
		with[r] = bench_p50("7803", 0);
		__atomic_store_n(&s.stop, 1, __ATOMIC_RELAXED);
		pthread_join(t, NULL);
		printf("metrics: round %d: GET p50 %.2f us without a scraper, %.2f us with\n", r, without[r], with[r]);
	}
	qsort(without, ROUNDS, sizeof(double), cmp_double);
	qsort(with, ROUNDS, sizeof(double), cmp_double);
	printf("metrics: kvbench -w C -T 1 -q 1 GET p50 (median of %d runs): %.2f us without a scraper, %.2f us "
	       "with one scraping /metrics every 100 ms (%u scrapes, %u failed, %.2f ms each)\n",
	       ROUNDS, without[ROUNDS / 2], with[ROUNDS / 2], s.ok, s.failed,
	       s.ok + s.failed ? 1000 * s.busy_s / (s.ok + s.failed) : 0);
	fflush(stdout);
	cr_expect_gt(s.ok, 0, "the scraper got nothing");
	cr_expect_eq(s.failed, 0);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 30000), 0, "kvserver: %s", srv.all);
}
