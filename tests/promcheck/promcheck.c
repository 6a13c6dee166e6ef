/* promcheck.h: a strict exposition format checker. One pass over the lines;
 * families and series seen so far are kept in growing arrays (a scrape has
 * a few hundred lines: linear searches are fine). */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "promcheck.h"

struct strs {
	char **v;
	size_t n, cap;
};

static int strs_has(const struct strs *s, const char *x)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i], x) == 0)
			return 1;
	return 0;
}

static int strs_add(struct strs *s, const char *x)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		char **v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n] = strdup(x);
	if (!s->v[s->n])
		return -1;
	s->n++;
	return 0;
}

static void strs_free(struct strs *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

struct checker {
	char *err;
	size_t errlen;
	unsigned line;
	struct strs families; /* every family begun so far */
	struct strs series;   /* canonical "name{a="1",b="2"}" of every sample */
	char fam[256];        /* the current family ("" before the first) */
	char type[16];        /* its TYPE ("" until seen) */
	int has_help, has_samples;
};

static int fail(struct checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct checker *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->errlen)
		snprintf(c->err, c->errlen, "line %u: %s", c->line, msg);
	return -1;
}

static int name_start(int ch, int colon)
{
	return isalpha(ch) || ch == '_' || (colon && ch == ':');
}

static int name_char(int ch, int colon)
{
	return isalnum(ch) || ch == '_' || (colon && ch == ':');
}

/* Length of the name at s (metric names allow ':', label names do not). */
static size_t name_len(const char *s, int colon)
{
	size_t n = 0;

	if (!name_start((unsigned char)s[0], colon))
		return 0;
	while (name_char((unsigned char)s[n], colon))
		n++;
	return n;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A family's HELP or TYPE line names it: begin it, or continue the current. */
static int family_line(struct checker *c, const char *name, int is_help, const char *rest)
{
	if (strcmp(name, c->fam) != 0) {
		if (c->fam[0] && (!c->has_help || !c->type[0]))
			return fail(c, "family %s has no %s line", c->fam, c->has_help ? "TYPE" : "HELP");
		if (strs_has(&c->families, name))
			return fail(c, "family %s appears a second time", name);
		if (strlen(name) >= sizeof(c->fam))
			return fail(c, "name too long");
		if (strs_add(&c->families, name))
			return fail(c, "out of memory");
		snprintf(c->fam, sizeof(c->fam), "%s", name);
		c->type[0] = '\0';
		c->has_help = c->has_samples = 0;
	}
	if (c->has_samples)
		return fail(c, "%s line of %s after its samples", is_help ? "HELP" : "TYPE", name);
	if (is_help) {
		if (c->has_help)
			return fail(c, "second HELP line for %s", name);
		for (const char *p = rest; *p; p++)
			if (*p == '\\' && p[1] != '\\' && p[1] != 'n')
				return fail(c, "HELP of %s: bad escape '\\%c'", name, p[1] ? p[1] : ' ');
			else if (*p == '\\')
				p++;
		c->has_help = 1;
		return 0;
	}
	if (c->type[0])
		return fail(c, "second TYPE line for %s", name);
	if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
	    strcmp(rest, "summary") && strcmp(rest, "untyped"))
		return fail(c, "TYPE of %s: unknown type '%s'", name, rest);
	if (strcmp(rest, "counter") == 0 && !ends_with(name, "_total"))
		return fail(c, "counter %s does not end in _total", name);
	snprintf(c->type, sizeof(c->type), "%s", rest);
	return 0;
}

static int comment(struct checker *c, const char *s)
{
	int is_help;
	size_t n;
	char name[256];

	if (strncmp(s, "# HELP ", 7) == 0)
		is_help = 1;
	else if (strncmp(s, "# TYPE ", 7) == 0)
		is_help = 0;
	else
		return fail(c, "a comment that is neither HELP nor TYPE: '%s'", s);
	s += 7;
	n = name_len(s, 1);
	if (!n || n >= sizeof(name))
		return fail(c, "bad metric name in '%s'", s);
	if (s[n] != ' ' || !s[n + 1])
		return fail(c, "%s line of '%.*s' has no text", is_help ? "HELP" : "TYPE", (int)n, s);
	memcpy(name, s, n);
	name[n] = '\0';
	return family_line(c, name, is_help, s + n + 1);
}

struct label {
	char text[384]; /* name="value" as written */
	char name[128];
};

static int cmp_label(const void *a, const void *b)
{
	return strcmp(((const struct label *)a)->name, ((const struct label *)b)->name);
}

static int sample(struct checker *c, const char *s)
{
	struct label lab[16];
	unsigned nl = 0;
	char name[256], key[2048], *end;
	const char *p;
	size_t n, k;
	double v;

	n = name_len(s, 1);
	if (!n || n >= sizeof(name))
		return fail(c, "bad metric name in '%s'", s);
	memcpy(name, s, n);
	name[n] = '\0';
	if (!c->fam[0] || !c->has_help || !c->type[0])
		return fail(c, "sample of %s before its family's HELP and TYPE", name);
	if (strcmp(name, c->fam) != 0) {
		int derived = (!strcmp(c->type, "histogram") || !strcmp(c->type, "summary")) &&
			      strncmp(name, c->fam, strlen(c->fam)) == 0 &&
			      (!strcmp(name + strlen(c->fam), "_sum") || !strcmp(name + strlen(c->fam), "_count") ||
			       (!strcmp(c->type, "histogram") && !strcmp(name + strlen(c->fam), "_bucket")));

		if (!derived)
			return fail(c, "sample of %s inside family %s (no HELP/TYPE of its own?)", name, c->fam);
	}
	p = s + n;
	if (*p == '{') {
		p++;
		while (*p != '}') {
			const char *start = p;
			size_t ln = name_len(p, 0);

			if (nl == sizeof(lab) / sizeof(lab[0]))
				return fail(c, "too many labels");
			if (!ln || ln >= sizeof(lab[nl].name))
				return fail(c, "bad label name in '%s'", s);
			if (p[0] == '_' && p[1] == '_')
				return fail(c, "label names starting with __ are reserved: '%s'", s);
			memcpy(lab[nl].name, p, ln);
			lab[nl].name[ln] = '\0';
			p += ln;
			if (p[0] != '=' || p[1] != '"')
				return fail(c, "label %s: expected =\"value\"", lab[nl].name);
			for (p += 2; *p != '"'; p++) {
				if (!*p)
					return fail(c, "label %s: unterminated value", lab[nl].name);
				if (*p == '\\') {
					if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
						return fail(c, "label %s: bad escape", lab[nl].name);
					p++;
				}
			}
			p++;
			if ((size_t)(p - start) >= sizeof(lab[nl].text))
				return fail(c, "label %s: too long", lab[nl].name);
			memcpy(lab[nl].text, start, (size_t)(p - start));
			lab[nl].text[p - start] = '\0';
			for (unsigned i = 0; i < nl; i++)
				if (strcmp(lab[i].name, lab[nl].name) == 0)
					return fail(c, "label %s twice in one sample", lab[nl].name);
			nl++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				return fail(c, "expected , or } after label %s", lab[nl - 1].name);
		}
		p++;
	}
	if (*p != ' ' || !p[1] || p[1] == ' ')
		return fail(c, "sample of %s: expected one space, then the value", name);
	v = strtod(p + 1, &end);
	if (end == p + 1 || *end)
		return fail(c, "sample of %s: value '%s' is not a number (or has a timestamp)", name, p + 1);
	if (!strcmp(c->type, "counter") && (isnan(v) || v < 0))
		return fail(c, "counter %s is %s", name, p + 1);
	/* The series, its labels in name order. */
	qsort(lab, nl, sizeof(lab[0]), cmp_label);
	k = (size_t)snprintf(key, sizeof(key), "%s{", name);
	for (unsigned i = 0; i < nl && k < sizeof(key); i++)
		k += (size_t)snprintf(key + k, sizeof(key) - k, "%s%s", i ? "," : "", lab[i].text);
	if (k + 2 > sizeof(key))
		return fail(c, "series too long");
	strcat(key, "}");
	if (strs_has(&c->series, key))
		return fail(c, "series %s appears twice", key);
	if (strs_add(&c->series, key))
		return fail(c, "out of memory");
	c->has_samples = 1;
	return 0;
}

int kvt_prom_check(const char *text, char *err, size_t errlen)
{
	struct checker c = { .err = err, .errlen = errlen };
	char line[4096];
	const char *p = text, *nl;
	int rc = 0;

	if (errlen)
		err[0] = '\0';
	if (!*text)
		return fail(&c, "empty text");
	if (text[strlen(text) - 1] != '\n')
		return fail(&c, "the text does not end with a newline");
	for (; *p && !rc; p = nl + 1) {
		size_t n;

		c.line++;
		nl = strchr(p, '\n');
		n = (size_t)(nl - p);
		if (n >= sizeof(line))
			return fail(&c, "line too long");
		memcpy(line, p, n);
		line[n] = '\0';
		if (!n)
			rc = fail(&c, "blank line");
		else if (memchr(line, '\r', n) || memchr(line, '\t', n))
			rc = fail(&c, "carriage return or tab in a line");
		else if (line[0] == '#')
			rc = comment(&c, line);
		else
			rc = sample(&c, line);
	}
	if (!rc && c.fam[0] && (!c.has_help || !c.type[0]))
		rc = fail(&c, "family %s has no %s line", c.fam, c.has_help ? "TYPE" : "HELP");
	strs_free(&c.families);
	strs_free(&c.series);
	return rc;
}

int kvt_prom_value(const char *text, const char *series, double *v)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ') {
			*v = strtod(p + n + 1, NULL);
			return 0;
		}
	}
	return -1;
}
