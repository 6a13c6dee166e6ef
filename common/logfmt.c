#include "logfmt.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int needs_quotes(const char *v)
{
	if (!*v)
		return 1;
	for (; *v; v++)
		if ((unsigned char)*v <= ' ' || *v == '"' || *v == '=' || *v == '\\' || *v == 0x7f)
			return 1;
	return 0;
}

static size_t put(char *buf, size_t n, size_t len, char c)
{
	if (len + 1 < n)
		buf[len++] = c;
	buf[len] = 0;
	return len;
}

size_t kvi_logfmt_value(char *buf, size_t n, size_t len, const char *v)
{
	if (!n)
		return 0;
	if (len >= n)
		len = n - 1;
	if (!v)
		v = "";
	if (!needs_quotes(v)) {
		size_t m = strlen(v);

		if (m > n - 1 - len)
			m = n - 1 - len;
		memcpy(buf + len, v, m);
		buf[len + m] = 0;
		return len + m;
	}
	len = put(buf, n, len, '"');
	for (; *v && len + 3 < n; v++) {
		unsigned char c = (unsigned char)*v;

		if (c == '"' || c == '\\') {
			len = put(buf, n, len, '\\');
			len = put(buf, n, len, (char)c);
		} else if (c == '\n' || c == '\t' || c == '\r') {
			len = put(buf, n, len, '\\');
			len = put(buf, n, len, c == '\n' ? 'n' : c == '\t' ? 't' : 'r');
		} else {
			len = put(buf, n, len, c < ' ' || c == 0x7f ? '?' : (char)c);
		}
	}
	/* The closing quote has room: the loop stops three bytes short. */
	return put(buf, n, len, '"');
}

/* Format the one conversion spec[0..speclen) with its argument from ap. */
static void one_conversion(char *out, size_t n, const char *spec, size_t speclen, va_list *ap)
{
	char f[32];
	char conv = spec[speclen - 1];
	const char *lm; /* length modifier */

	if (speclen >= sizeof(f)) {
		snprintf(out, n, "?");
		return;
	}
	memcpy(f, spec, speclen);
	f[speclen] = 0;
	lm = f + strspn(f + 1, "-+ #0123456789.") + 1;
	switch (conv) {
	case 's':
		snprintf(out, n, f, va_arg(*ap, const char *) ?: "(null)");
		break;
	case 'p':
		snprintf(out, n, f, va_arg(*ap, void *));
		break;
	case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
		if (*lm == 'L')
			snprintf(out, n, f, va_arg(*ap, long double));
		else
			snprintf(out, n, f, va_arg(*ap, double));
		break;
	case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c':
		if (lm[0] == 'l' && lm[1] == 'l')
			snprintf(out, n, f, va_arg(*ap, long long));
		else if (lm[0] == 'l')
			snprintf(out, n, f, va_arg(*ap, long));
		else if (lm[0] == 'z')
			snprintf(out, n, f, va_arg(*ap, size_t));
		else if (lm[0] == 'j')
			snprintf(out, n, f, va_arg(*ap, intmax_t));
		else if (lm[0] == 't')
			snprintf(out, n, f, va_arg(*ap, ptrdiff_t));
		else
			snprintf(out, n, f, va_arg(*ap, int)); /* hh, h and none: promoted to int */
		break;
	default:
		snprintf(out, n, "?");
	}
}

static size_t vfields(char *buf, size_t n, const char *fmt, va_list *ap)
{
	size_t len = 0;
	char val[512];

	buf[0] = 0;
	for (const char *p = fmt; *p;) {
		size_t speclen;

		if (*p != '%') {
			len = put(buf, n, len, *p++);
			continue;
		}
		if (p[1] == '%') {
			len = put(buf, n, len, '%');
			p += 2;
			continue;
		}
		speclen = 1 + strspn(p + 1, "-+ #0123456789.hlLqjzt");
		if (!p[speclen]) /* a lone '%' at the end */
			break;
		speclen++;
		one_conversion(val, sizeof(val), p, speclen, ap);
		if (p > fmt && p[-1] == '=' && (p[speclen] == ' ' || !p[speclen]))
			len = kvi_logfmt_value(buf, n, len, val);
		else
			for (const char *v = val; *v; v++)
				len = put(buf, n, len, *v);
		p += speclen;
	}
	return len;
}

size_t kvi_logfmt_vfields(char *buf, size_t n, const char *fmt, va_list ap)
{
	va_list cp;
	size_t len;

	if (!n)
		return 0;
	va_copy(cp, ap);
	len = vfields(buf, n, fmt, &cp);
	va_end(cp);
	return len;
}

size_t kvi_logfmt_ts(char *buf, size_t n, const struct timespec *ts)
{
	struct tm tm;
	int r;

	if (!n)
		return 0;
	gmtime_r(&ts->tv_sec, &tm);
	r = snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
		     tm.tm_hour, tm.tm_min, tm.tm_sec, ts->tv_nsec / 1000000);
	return r < 0 ? 0 : (size_t)r >= n ? n - 1 : (size_t)r;
}

size_t kvi_logfmt_line(char *buf, size_t n, const struct timespec *ts, int level, const char *event,
		       const char *body)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	size_t len, m;

	if (n < 2)
		return 0;
	n--; /* room for the newline, whatever gets cut */
	len = (size_t)snprintf(buf, n, "ts=");
	len += kvi_logfmt_ts(buf + len, n - len, ts);
	m = (size_t)snprintf(buf + len, n - len, " level=%s event=",
			     names[level < 0 ? 0 : level > 3 ? 3 : level]);
	len = len + m >= n ? n - 1 : len + m;
	if (event) {
		len = kvi_logfmt_value(buf, n, len, event);
		if (body && *body) {
			len = put(buf, n, len, ' ');
			m = strlen(body);
			if (m > n - 1 - len)
				m = n - 1 - len;
			memcpy(buf + len, body, m);
			len += m;
		}
	} else {
		m = (size_t)snprintf(buf + len, n - len, "message msg=");
		len = len + m >= n ? n - 1 : len + m;
		len = kvi_logfmt_value(buf, n, len, body);
	}
	buf[len++] = '\n';
	buf[len] = 0;
	return len;
}
