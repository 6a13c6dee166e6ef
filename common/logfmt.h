/* logfmt: one log event per line, as key=value pairs a machine can split and
 * a person can read:
 *
 *   ts=2026-12-01T10:00:00.123Z level=info event=client_joined client=7 addr=10.0.0.2
 *
 * A value is written bare unless it is empty or holds a blank, '"', '=', '\'
 * or a control character; then it is quoted, with '"' and '\' escaped as \"
 * and \\ and newlines, tabs and carriage returns as \n, \t, \r (a line is
 * always one line). Used by kvi_event (log.h) and by kvserver's log sink;
 * every function truncates to the buffer and always terminates it. */
#ifndef KVI_LOGFMT_H
#define KVI_LOGFMT_H

#include <stdarg.h>
#include <stddef.h>
#include <time.h>

/* Append v as a value at buf[len]; returns the new length (< n). */
size_t kvi_logfmt_value(char *buf, size_t n, size_t len, const char *v);

/* printf fmt into buf, where fmt is "key=%u key2=%s ...": a conversion that
 * is a whole value (right after '=', followed by a blank or the end of fmt)
 * is quoted as a value needs; other text is copied as it is. Knows the
 * conversions d i u x X o c s p f e g a and % with flags, width, precision
 * (not '*') and the hh h l ll z j t L length modifiers. Returns the length. */
size_t kvi_logfmt_vfields(char *buf, size_t n, const char *fmt, va_list ap);

/* "2026-12-01T10:00:00.123Z" (UTC, milliseconds); returns the length. */
size_t kvi_logfmt_ts(char *buf, size_t n, const struct timespec *ts);

/* A whole line, newline included: "ts=... level=... event=EVENT BODY\n",
 * where body is logfmt fields; event NULL: a free-text message, written
 * "event=message msg=\"BODY\"". Returns the length. */
size_t kvi_logfmt_line(char *buf, size_t n, const struct timespec *ts, int level, const char *event,
		       const char *body);

#endif
