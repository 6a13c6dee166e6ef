#include "log.h"

#include <stdarg.h>
#include <stdio.h>

/* Set once at start-up, before threads exist; read-only afterwards. */
static kvi_log_fn log_fn;
static void *log_arg;
static int log_max = KVI_LOG_WARN;

void kvi_log_set(kvi_log_fn fn, void *arg, int max_level)
{
	log_fn = fn;
	log_arg = arg;
	log_max = max_level;
}

void kvi_log(int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!log_fn || level > log_max)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	log_fn(log_arg, level, buf);
}

void kvi_log_stderr(void *arg, int level, const char *msg)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	fprintf(stderr, "%s: %s: %s\n", arg ? (const char *)arg : "kv",
		names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}
