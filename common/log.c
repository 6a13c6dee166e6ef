#include "log.h"

#include <stdarg.h>
#include <stdio.h>

#include "logfmt.h"

/* Set once at start-up, before threads exist; read-only afterwards. */
static kvi_log_fn log_fn;
static kvi_log_ev_fn log_ev_fn;
static void *log_arg;
static int log_max = KVI_LOG_WARN;

void kvi_log_set(kvi_log_fn fn, void *arg, int max_level)
{
	log_fn = fn;
	log_ev_fn = NULL;
	log_arg = arg;
	log_max = max_level;
}

void kvi_log_set_ev(kvi_log_ev_fn fn, void *arg, int max_level)
{
	log_ev_fn = fn;
	log_fn = NULL;
	log_arg = arg;
	log_max = max_level;
}

int kvi_log_enabled(int level)
{
	return (log_fn || log_ev_fn) && level <= log_max;
}

void kvi_log(int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!kvi_log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (log_ev_fn)
		log_ev_fn(log_arg, level, NULL, buf);
	else
		log_fn(log_arg, level, buf);
}

void kvi_event(int level, const char *event, const char *fmt, ...)
{
	char buf[768];
	size_t len = 0;
	va_list ap;

	if (!kvi_log_enabled(level))
		return;
	if (!log_ev_fn)
		len = (size_t)snprintf(buf, sizeof(buf), "event=%s ", event);
	va_start(ap, fmt);
	kvi_logfmt_vfields(buf + len, sizeof(buf) - len, fmt, ap);
	va_end(ap);
	if (log_ev_fn)
		log_ev_fn(log_arg, level, event, buf);
	else
		log_fn(log_arg, level, buf);
}

void kvi_log_stderr(void *arg, int level, const char *msg)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	fprintf(stderr, "%s: %s: %s\n", arg ? (const char *)arg : "kv",
		names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}
