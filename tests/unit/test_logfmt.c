/* logfmt lines (common/logfmt.c, kvi_event) and kvserver's log sink
 * (server/logsink.c): values quoted and escaped only when they must be,
 * fields from printf conversions, one whole line per event even when
 * several threads log at once, and a reopen after the file was moved. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "logfmt.h"
#include "logsink.h"

static const char *value(const char *v)
{
	static char buf[256];

	kvi_logfmt_value(buf, sizeof(buf), 0, v);
	return buf;
}

Test(logfmt, values_are_bare_unless_they_must_be_quoted)
{
	cr_expect_str_eq(value("abc"), "abc");
	cr_expect_str_eq(value("10.0.0.2"), "10.0.0.2");
	cr_expect_str_eq(value("/var/log/kv.log"), "/var/log/kv.log");
	cr_expect_str_eq(value(""), "\"\"");
	cr_expect_str_eq(value(NULL), "\"\"");
	cr_expect_str_eq(value("two words"), "\"two words\"");
	cr_expect_str_eq(value("a=b"), "\"a=b\"");
	cr_expect_str_eq(value("say \"hi\""), "\"say \\\"hi\\\"\"");
	cr_expect_str_eq(value("back\\slash"), "\"back\\\\slash\"");
	cr_expect_str_eq(value("line\nbreak\ttab"), "\"line\\nbreak\\ttab\"");
	cr_expect_str_eq(value("bell\a"), "\"bell?\"");
}

Test(logfmt, a_truncated_value_still_ends_its_quote)
{
	char buf[16];
	size_t len = kvi_logfmt_value(buf, sizeof(buf), 0, "a value \"far\" too long for the buffer");

	cr_expect_lt(len, sizeof(buf));
	cr_expect_eq(strlen(buf), len);
	cr_expect_eq(buf[0], '"');
	cr_expect_eq(buf[len - 1], '"', "%s", buf);
}

static char got_event[64], got_body[1024];
static int got_level;

static void capture(void *arg, int level, const char *event, const char *body)
{
	(void)arg;
	got_level = level;
	snprintf(got_event, sizeof(got_event), "%s", event ? event : "(none)");
	snprintf(got_body, sizeof(got_body), "%s", body);
}

Test(logfmt, event_fields_quote_whole_values_only)
{
	kvi_log_set_ev(capture, NULL, KVI_LOG_DEBUG);
	kvi_ev_warn("auth_refused", "addr=%s reason=%s", "10.0.0.2", "wrong proof (a different secret?)");
	cr_expect_eq(got_level, KVI_LOG_WARN);
	cr_expect_str_eq(got_event, "auth_refused");
	cr_expect_str_eq(got_body, "addr=10.0.0.2 reason=\"wrong proof (a different secret?)\"");

	kvi_ev_info("mixed", "n=%" PRIu64 " off=%#" PRIx64 " sz=%zu ms=%.3f c=%c neg=%d pct=%u%% s=%s", UINT64_MAX,
		    (uint64_t)0x1000, (size_t)42, 1.5, 'x', -3, 87u, "");
	cr_expect_str_eq(got_body, "n=18446744073709551615 off=0x1000 sz=42 ms=1.500 c=x neg=-3 pct=87% s=\"\"");

	kvi_ev_info("literal", "msg=\"already quoted %u\" k=v%s", 5u, "x y");
	cr_expect_str_eq(got_body, "msg=\"already quoted 5\" k=vx y", "only whole values are quoted");

	kvi_ev_info("short", "a=%hhu b=%hd c=%ld d=%lld e=%jd f=%td", (unsigned char)200, (short)-2, -4L, -5LL,
		    (intmax_t)6, (ptrdiff_t)7);
	cr_expect_str_eq(got_body, "a=200 b=-2 c=-4 d=-5 e=6 f=7");

	kvi_info("free text: %d", 3);
	cr_expect_str_eq(got_event, "(none)");
	cr_expect_str_eq(got_body, "free text: 3");
	kvi_log_set(NULL, NULL, 0);
}

Test(logfmt, levels_above_the_maximum_are_dropped)
{
	got_body[0] = 0;
	kvi_log_set_ev(capture, NULL, KVI_LOG_WARN);
	kvi_ev_info("quiet", "x=%d", 1);
	cr_expect_str_eq(got_body, "");
	cr_expect_not(kvi_log_enabled(KVI_LOG_INFO));
	cr_expect(kvi_log_enabled(KVI_LOG_ERROR));
	kvi_log_set(NULL, NULL, 0);
}

static char plain[512];

static void capture_plain(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	snprintf(plain, sizeof(plain), "%s", msg);
}

Test(logfmt, a_plain_callback_gets_events_as_text)
{
	kvi_log_set(capture_plain, NULL, KVI_LOG_INFO);
	kvi_ev_info("client_joined", "client=%u addr=%s", 7u, "10.0.0.2");
	cr_expect_str_eq(plain, "event=client_joined client=7 addr=10.0.0.2");
	kvi_log_set(NULL, NULL, 0);
}

Test(logfmt, lines_carry_time_level_and_event)
{
	struct timespec ts = { .tv_sec = 1796119200, .tv_nsec = 123456789 }; /* 2026-12-01T10:00:00Z */
	char line[256];
	size_t len;

	len = kvi_logfmt_line(line, sizeof(line), &ts, KVI_LOG_INFO, "client_joined", "client=7 addr=10.0.0.2");
	cr_expect_str_eq(line, "ts=2026-12-01T10:00:00.123Z level=info event=client_joined client=7 addr=10.0.0.2\n");
	cr_expect_eq(len, strlen(line));
	kvi_logfmt_line(line, sizeof(line), &ts, KVI_LOG_WARN, "shutdown", "");
	cr_expect_str_eq(line, "ts=2026-12-01T10:00:00.123Z level=warn event=shutdown\n");
	kvi_logfmt_line(line, sizeof(line), &ts, KVI_LOG_ERROR, NULL, "cannot register \"x\"");
	cr_expect_str_eq(line, "ts=2026-12-01T10:00:00.123Z level=error event=message msg=\"cannot register \\\"x\\\"\"\n");
	kvi_logfmt_line(line, sizeof(line), &ts, KVI_LOG_DEBUG, NULL, "x");
	cr_expect(strstr(line, " level=debug ") != NULL, "%s", line);
}

Test(logfmt, a_long_line_is_cut_but_stays_one_line)
{
	struct timespec ts = { 0 };
	char body[600], line[128];
	size_t len;

	memset(body, 'a', sizeof(body) - 1);
	body[sizeof(body) - 1] = 0;
	len = kvi_logfmt_line(line, sizeof(line), &ts, KVI_LOG_INFO, "long", body);
	cr_expect_eq(len, sizeof(line) - 1);
	cr_expect_eq(line[len - 1], '\n');
	cr_expect_eq(strchr(line, '\n'), line + len - 1);
	cr_expect(strncmp(line, "ts=1970-01-01T00:00:00.000Z level=info event=long aaa", 53) == 0, "%s", line);
}

static struct kvs_logsink sink;

static void hammer_one(int thread, int i)
{
	kvi_ev_warn("hammer", "thread=%d i=%d pad=%s", thread, i,
		    "padding padding padding padding padding padding padding padding padding");
}

static void *hammer(void *arg)
{
	for (int i = 0; i < 2000; i++)
		hammer_one((int)(intptr_t)arg, i);
	return NULL;
}

static int count_good_lines(const char *path, int *bad)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(path, "r");

	*bad = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		n++;
		if (strncmp(line, "ts=", 3) != 0 || !strstr(line, " level=warn event=hammer thread=") ||
		    !strstr(line, "padding padding\"\n"))
			(*bad)++;
	}
	fclose(f);
	return n;
}

Test(logsink, threads_never_interleave_lines_and_sighup_reopens)
{
	char path[] = "/tmp/test_logsink.XXXXXX", moved[64];
	struct kvi_errbuf e;
	pthread_t t[4];
	int fd = mkstemp(path), bad, n1, n2;

	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(kvs_logsink_open(&sink, path, &e), 0, "%s", e.msg);
	kvi_log_set_ev(kvs_logsink_write, &sink, KVI_LOG_INFO);
	for (intptr_t i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, hammer, (void *)i);
	/* logrotate, meanwhile: move the file away, then reopen. */
	usleep(2000);
	snprintf(moved, sizeof(moved), "%s.1", path);
	cr_assert_eq(rename(path, moved), 0);
	cr_assert_eq(kvs_logsink_reopen(&sink, &e), 0, "%s", e.msg);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	hammer_one(4, 0); /* at least this one after the reopen */
	kvi_log_set(NULL, NULL, 0);
	kvs_logsink_close(&sink);
	n1 = count_good_lines(moved, &bad);
	cr_expect_eq(bad, 0, "%d torn lines in the moved file", bad);
	n2 = count_good_lines(path, &bad);
	cr_expect_eq(bad, 0, "%d torn lines in the new file", bad);
	cr_expect_eq(n1 + n2, 4 * 2000 + 1, "every line lands in one of the files: %d + %d", n1, n2);
	cr_expect_gt(n2, 0, "lines after the reopen go to the new file");
	unlink(path);
	unlink(moved);
}

Test(logsink, a_log_file_that_cannot_be_opened_is_named)
{
	struct kvi_errbuf e;

	cr_expect_eq(kvs_logsink_open(&sink, "/nonexistent/dir/kv.log", &e), -1);
	cr_expect(strstr(e.msg, "/nonexistent/dir/kv.log") != NULL, "%s", e.msg);
}
