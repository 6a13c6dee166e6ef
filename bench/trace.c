#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define LINE_MAX_BYTES (64u << 10)
/* Room for a whole longest line and its \r\n, whatever is left unread before
 * it: a line that does not fit is too long, never a reason to grow. */
#define BUF_BYTES (2 * LINE_MAX_BYTES)
#define REC_BYTES 24    /* an oracleGeneral record */
#define DETECT_BYTES 24 /* one record: a binary trace has a NUL in it in practice */
#define SHOW_MAX 40     /* how much of a bad field an error message quotes */
#define TW_KEY_SIZE_MAX 250 /* memcached's key limit, which the traced caches kept */

struct kvb_trace {
	FILE *f;
	int own; /* f was opened here; stdin is left open */
	int fmt;
	int eof;       /* f has nothing more: what is in buf is the rest */
	int failed;    /* msg holds the error every later call repeats */
	int past_head; /* oracle-csv: the first non-blank line (a header?) was read */
	uint64_t line; /* text: lines read, blank ones included */
	uint64_t base; /* the stream's offset of buf[0] */
	size_t pos, len; /* buf[pos, len) is read from f but not yet parsed */
	char name[128];  /* the path as error messages give it */
	char msg[512];
	unsigned char buf[BUF_BYTES];
};

struct field {
	const char *p;
	size_t n;
};

static const char *const fmt_names[] = {
	[KVB_TRACE_ORACLE_BIN] = "oracleGeneral",
	[KVB_TRACE_ORACLE_CSV] = "oracle-csv",
	[KVB_TRACE_TWITTER] = "twitter",
};

int kvb_trace_fmt_parse(const char *name)
{
	if (!name)
		return 0;
	if (!strcmp(name, "oracle"))
		return KVB_TRACE_ORACLE_BIN;
	for (int i = KVB_TRACE_ORACLE_BIN; i <= KVB_TRACE_TWITTER; i++)
		if (!strcmp(name, fmt_names[i]))
			return i;
	return 0;
}

const char *kvb_trace_fmt_name(int fmt)
{
	return fmt >= KVB_TRACE_ORACLE_BIN && fmt <= KVB_TRACE_TWITTER ? fmt_names[fmt] : "?";
}

int kvb_trace_fmt_of(const struct kvb_trace *t)
{
	return t->fmt;
}

static void put_err(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
}

/* Records the error (text formats: at the line just read) and makes it sticky. */
static int fail(struct kvb_trace *t, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(struct kvb_trace *t, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->fmt == KVB_TRACE_ORACLE_BIN)
		n = snprintf(t->msg, sizeof(t->msg), "%s: ", t->name);
	else
		n = snprintf(t->msg, sizeof(t->msg), "%s line %" PRIu64 ": ", t->name, t->line);
	if (n < 0 || (size_t)n >= sizeof(t->msg))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(t->msg + n, sizeof(t->msg) - (size_t)n, fmt, ap);
	va_end(ap);
	t->failed = 1;
	put_err(err, errlen, t->msg);
	return -1;
}

/* Moves the unread bytes to the front of buf and reads after them: 1 when
 * bytes were added, 0 when f has no more (or buf is full), -1 on a read error.
 * fread returns short only at the end or on an error, pipes included. */
static int refill(struct kvb_trace *t)
{
	size_t want, n;

	if (t->pos) {
		memmove(t->buf, t->buf + t->pos, t->len - t->pos);
		t->base += t->pos;
		t->len -= t->pos;
		t->pos = 0;
	}
	if (t->eof || t->len == sizeof(t->buf))
		return 0;
	want = sizeof(t->buf) - t->len;
	n = fread(t->buf + t->len, 1, want, t->f);
	t->len += n;
	if (n < want) {
		if (ferror(t->f))
			return -1;
		t->eof = 1;
	}
	return n > 0;
}

static int read_failed(struct kvb_trace *t, char *err, size_t errlen)
{
	int e = errno;

	if (t->fmt == KVB_TRACE_ORACLE_BIN)
		return fail(t, err, errlen, "read error after byte %" PRIu64 ": %s", t->base + t->len, strerror(e));
	return fail(t, err, errlen, "read error: %s", strerror(e));
}

/* The next line, without its \n or \r\n, in buf (valid until the next call):
 * 1 with *s and *n; 0 at the end; -1 failed. The last line may lack its \n. */
static int next_line(struct kvb_trace *t, const char **s, size_t *n, char *err, size_t errlen)
{
	size_t scanned = 0; /* bytes after pos known to hold no \n */

	for (;;) {
		const unsigned char *p = t->buf + t->pos, *nl;
		size_t avail = t->len - t->pos, len;
		int rc;

		nl = memchr(p + scanned, '\n', avail - scanned);
		if (nl) {
			len = (size_t)(nl - p);
			t->pos += len + 1;
		} else if (avail > LINE_MAX_BYTES + 1) {
			t->line++;
			return fail(t, err, errlen, "longer than %u bytes", LINE_MAX_BYTES);
		} else if ((rc = refill(t)) < 0) {
			t->line++;
			return read_failed(t, err, errlen);
		} else if (rc > 0) {
			scanned = avail;
			continue;
		} else if (avail == 0) {
			return 0;
		} else {
			len = avail;
			t->pos += len;
		}
		t->line++;
		if (len && p[len - 1] == '\r')
			len--;
		if (len > LINE_MAX_BYTES)
			return fail(t, err, errlen, "longer than %u bytes", LINE_MAX_BYTES);
		*s = (const char *)p;
		*n = len;
		return 1;
	}
}

static int is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t')
			return 0;
	return 1;
}

static struct field trim(struct field f)
{
	while (f.n && (f.p[0] == ' ' || f.p[0] == '\t')) {
		f.p++;
		f.n--;
	}
	while (f.n && (f.p[f.n - 1] == ' ' || f.p[f.n - 1] == '\t'))
		f.n--;
	return f;
}

/* Splits s at commas: the number of fields, of which the first max are in f. */
static size_t split(const char *s, size_t n, struct field *f, size_t max)
{
	const char *end = s + n;
	size_t k = 0;

	for (;;) {
		const char *c = memchr(s, ',', (size_t)(end - s));
		const char *e = c ? c : end;

		if (k < max)
			f[k] = (struct field){ s, (size_t)(e - s) };
		k++;
		if (!c)
			return k;
		s = c + 1;
	}
}

enum { NUM_OK, NUM_EMPTY, NUM_NAN, NUM_RANGE };

/* A decimal in [0, max]; a '-' before digits is out of range, not a non-number. */
static int scan_u64(struct field f, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;
	size_t i = 0;
	int neg = 0;

	f = trim(f);
	if (!f.n)
		return NUM_EMPTY;
	if (f.p[0] == '-' && f.n > 1) {
		neg = 1;
		i = 1;
	}
	for (; i < f.n; i++) {
		unsigned d = (unsigned char)f.p[i] - '0';

		if (d > 9)
			return NUM_NAN;
		if (x > (UINT64_MAX - d) / 10)
			neg = 2; /* overflow: keep checking that it is a number */
		else
			x = x * 10 + d;
	}
	if (neg || x > max)
		return NUM_RANGE;
	*v = x;
	return NUM_OK;
}

/* A decimal int64 (oracle's next_access_vtime, -1 for never). */
static int scan_i64(struct field f)
{
	uint64_t v;

	f = trim(f);
	if (f.n > 1 && f.p[0] == '-') {
		f.p++;
		f.n--;
		return scan_u64(f, (uint64_t)INT64_MAX + 1, &v);
	}
	return scan_u64(f, INT64_MAX, &v);
}

static int bad_number(struct kvb_trace *t, char *err, size_t errlen, int rc, const char *what, struct field f,
		      uint64_t min, uint64_t max)
{
	int show;

	f = trim(f);
	show = f.n > SHOW_MAX ? SHOW_MAX : (int)f.n;
	if (rc == NUM_EMPTY)
		return fail(t, err, errlen, "%s is empty", what);
	if (rc == NUM_NAN)
		return fail(t, err, errlen, "%s \"%.*s%s\" is not a number", what, show, f.p,
			    f.n > SHOW_MAX ? "..." : "");
	return fail(t, err, errlen, "%s %.*s%s is out of range (%" PRIu64 "..%" PRIu64 ")", what, show, f.p,
		    f.n > SHOW_MAX ? "..." : "", min, max);
}

/* A field that must be a number in [min, max]: 0 with *v, or -1 failed. */
static int number(struct kvb_trace *t, char *err, size_t errlen, const char *what, struct field f, uint64_t min,
		  uint64_t max, uint64_t *v)
{
	int rc = scan_u64(f, max, v);

	if (rc == NUM_OK && *v < min)
		rc = NUM_RANGE;
	return rc == NUM_OK ? 0 : bad_number(t, err, errlen, rc, what, f, min, max);
}

static void oracle_key(struct kvb_trace_req *r)
{
	r->key_len = (size_t)snprintf(r->key, sizeof(r->key), "o%" PRIu64, r->id);
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int next_bin(struct kvb_trace *t, struct kvb_trace_req *r, char *err, size_t errlen)
{
	const unsigned char *p;
	int rc = 1;

	while (t->len - t->pos < REC_BYTES && (rc = refill(t)) > 0)
		;
	if (rc < 0)
		return read_failed(t, err, errlen);
	if (t->len == t->pos)
		return 0;
	if (t->len - t->pos < REC_BYTES)
		return fail(t, err, errlen, "truncated record at byte %" PRIu64 " (%zu of %d bytes)", t->base + t->pos,
			    t->len - t->pos, REC_BYTES);
	p = t->buf + t->pos;
	t->pos += REC_BYTES;
	/* {u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime}, packed;
	 * next_access_vtime is for offline optimal policies, not for a replay. */
	memset(r, 0, sizeof(*r));
	r->time = le(p, 4);
	r->id = le(p + 4, 8);
	r->value_size = (uint32_t)le(p + 12, 4);
	r->op = KVB_TOP_GET;
	oracle_key(r);
	return 1;
}

/* libCacheSim writes a header naming the columns: a line with no number in it. */
static int is_header(const struct field *f, size_t nf)
{
	int text = 0;

	for (size_t i = 0; i < nf; i++) {
		uint64_t v;
		int rc = scan_u64(f[i], UINT64_MAX, &v);

		if (rc == NUM_OK || rc == NUM_RANGE)
			return 0;
		text |= rc == NUM_NAN;
	}
	return text;
}

/* The next non-blank line, split into at most max fields (*nf: how many):
 * 1, 0 at the end, -1 on an error. */
static int next_fields(struct kvb_trace *t, struct field *f, size_t max, size_t *nf, char *err, size_t errlen)
{
	for (;;) {
		const char *s = NULL;
		size_t n = 0;
		int rc = next_line(t, &s, &n, err, errlen);

		if (rc <= 0)
			return rc;
		if (is_blank(s, n))
			continue;
		*nf = split(s, n, f, max);
		return 1;
	}
}

static int next_csv(struct kvb_trace *t, struct kvb_trace_req *r, char *err, size_t errlen)
{
	for (;;) {
		struct field f[5];
		size_t nf;
		uint64_t v;
		int rc = next_fields(t, f, 5, &nf, err, errlen);

		if (rc <= 0)
			return rc;
		if (!t->past_head) {
			t->past_head = 1;
			if (nf <= 5 && is_header(f, nf))
				continue;
		}
		if (nf < 3 || nf > 4)
			return fail(t, err, errlen, "%zu fields, expected 3 or 4 (time,id,size[,next_access])", nf);
		memset(r, 0, sizeof(*r));
		if (number(t, err, errlen, "time", f[0], 0, UINT64_MAX, &r->time) ||
		    number(t, err, errlen, "id", f[1], 0, UINT64_MAX, &r->id) ||
		    number(t, err, errlen, "size", f[2], 0, UINT32_MAX, &v))
			return -1;
		r->value_size = (uint32_t)v;
		if (nf == 4 && (rc = scan_i64(f[3])) != NUM_OK)
			return bad_number(t, err, errlen, rc, "next_access", f[3], 0, INT64_MAX);
		r->op = KVB_TOP_GET;
		oracle_key(r);
		return 1;
	}
}

static const struct {
	const char *name;
	int op;
} tw_ops[] = {
	{ "get", KVB_TOP_GET },	       { "gets", KVB_TOP_GET },	     { "set", KVB_TOP_SET },
	{ "add", KVB_TOP_SET },	       { "replace", KVB_TOP_SET },   { "cas", KVB_TOP_SET },
	{ "append", KVB_TOP_SET },     { "prepend", KVB_TOP_SET },   { "delete", KVB_TOP_DELETE },
	{ "incr", KVB_TOP_OTHER },     { "decr", KVB_TOP_OTHER },
};

static int tw_op(struct field f)
{
	f = trim(f);
	for (size_t i = 0; i < sizeof(tw_ops) / sizeof(tw_ops[0]); i++)
		if (strlen(tw_ops[i].name) == f.n && !memcmp(tw_ops[i].name, f.p, f.n))
			return tw_ops[i].op;
	return 0;
}

/* The anonymized key goes out as it is when any cache takes it as a key;
 * otherwise its hash stands for it (same key, same hash, same name). */
static void tw_key(struct kvb_trace_req *r, struct field k)
{
	int plain = k.n <= KVB_TRACE_KEY_MAX;

	for (size_t i = 0; plain && i < k.n; i++)
		plain = k.p[i] > ' ' && k.p[i] < 0x7f;
	if (plain) {
		memcpy(r->key, k.p, k.n);
		r->key[k.n] = '\0';
		r->key_len = k.n;
	} else {
		r->key_len = (size_t)snprintf(r->key, sizeof(r->key), "h%016" PRIx64, r->id);
	}
}

static int next_twitter(struct kvb_trace *t, struct kvb_trace_req *r, char *err, size_t errlen)
{
	struct field f[7];
	size_t nf;
	uint64_t v;
	int rc = next_fields(t, f, 7, &nf, err, errlen);

	if (rc <= 0)
		return rc;
	if (nf != 7)
		return fail(t, err, errlen,
			    "%zu fields, expected 7 (timestamp,key,key size,value size,client id,operation,TTL)",
			    nf);
	memset(r, 0, sizeof(*r));
	if (number(t, err, errlen, "timestamp", f[0], 0, UINT64_MAX, &r->time))
		return -1;
	if (!f[1].n)
		return fail(t, err, errlen, "empty key");
	if (number(t, err, errlen, "key size", f[2], 1, TW_KEY_SIZE_MAX, &v) ||
	    number(t, err, errlen, "value size", f[3], 0, UINT32_MAX, &v))
		return -1;
	r->value_size = (uint32_t)v;
	if (number(t, err, errlen, "client id", f[4], 0, UINT64_MAX, &v))
		return -1;
	if (!(r->op = tw_op(f[5]))) {
		struct field o = trim(f[5]);

		return fail(t, err, errlen, "unknown operation \"%.*s%s\"", o.n > SHOW_MAX ? SHOW_MAX : (int)o.n,
			    o.p, o.n > SHOW_MAX ? "..." : "");
	}
	if (number(t, err, errlen, "TTL", f[6], 0, UINT32_MAX, &v))
		return -1;
	r->ttl_s = (uint32_t)v;
	r->id = XXH3_64bits(f[1].p, f[1].n);
	tw_key(r, f[1]);
	return 1;
}

int kvb_trace_next(struct kvb_trace *t, struct kvb_trace_req *r, char *err, size_t errlen)
{
	if (t->failed) {
		put_err(err, errlen, t->msg);
		return -1;
	}
	switch (t->fmt) {
	case KVB_TRACE_ORACLE_BIN:
		return next_bin(t, r, err, errlen);
	case KVB_TRACE_ORACLE_CSV:
		return next_csv(t, r, err, errlen);
	default:
		return next_twitter(t, r, err, errlen);
	}
}

/* Tells the format from what the first fill put in buf (nothing is consumed,
 * so standard input needs no seek): fmt, or 0 with err. */
static int detect(struct kvb_trace *t, char *err, size_t errlen)
{
	size_t n = t->len < DETECT_BYTES ? t->len : DETECT_BYTES, p = 0;

	if (!t->len) {
		snprintf(err, errlen, "%s is empty: cannot tell its format", t->name);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = t->buf[i];

		if (c == 0 || c > 0x7e || (c < ' ' && c != '\t' && c != '\r' && c != '\n'))
			return KVB_TRACE_ORACLE_BIN;
	}
	while (p < t->len) {
		const unsigned char *s = t->buf + p, *nl = memchr(s, '\n', t->len - p);
		size_t len = nl ? (size_t)(nl - s) : t->len - p, commas = 0;

		if (!nl && !t->eof)
			break; /* the line goes on past the buffer: over 64 KiB */
		p += len + 1;
		if (len && s[len - 1] == '\r')
			len--;
		if (is_blank((const char *)s, len))
			continue;
		for (size_t i = 0; i < len; i++)
			commas += s[i] == ',';
		if (commas == 6)
			return KVB_TRACE_TWITTER;
		if (commas == 2 || commas == 3)
			return KVB_TRACE_ORACLE_CSV;
		snprintf(err, errlen,
			 "%s: cannot tell the format: its first line has %zu comma-separated fields "
			 "(twitter has 7, oracle-csv 3 or 4)",
			 t->name, commas + 1);
		return 0;
	}
	snprintf(err, errlen, "%s: cannot tell the format: no line of text in its first %zu bytes", t->name,
		 t->len);
	return 0;
}

/* A reader of f, named name in errors; own: close f with it. */
static int open_on(FILE *f, int own, const char *name, int fmt, struct kvb_trace **out, char *err, size_t errlen)
{
	struct kvb_trace *t;

	if (fmt && !kvb_trace_fmt_parse(kvb_trace_fmt_name(fmt))) {
		snprintf(err, errlen, "unknown trace format %d", fmt);
		goto clean_f;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		goto clean_f;
	}
	t->f = f;
	t->own = own;
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->fmt = fmt;
	if (refill(t) < 0) {
		snprintf(err, errlen, "cannot read %s: %s", t->name, strerror(errno));
		goto clean_t;
	}
	if (!t->fmt && !(t->fmt = detect(t, err, errlen)))
		goto clean_t;
	*out = t;
	return 0;
clean_t:
	kvb_trace_close(t);
	return -1;
clean_f:
	if (own)
		fclose(f);
	return -1;
}

int kvb_trace_open(const char *path, int fmt, struct kvb_trace **out, char *err, size_t errlen)
{
	char dummy[1];
	FILE *f;

	*out = NULL;
	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	if (!strcmp(path, "-"))
		return open_on(stdin, 0, "stdin", fmt, out, err, errlen);
	f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	return open_on(f, 1, path, fmt, out, err, errlen);
}

int kvb_trace_open_stream(FILE *f, const char *name, int fmt, struct kvb_trace **out, char *err, size_t errlen)
{
	char dummy[1];

	*out = NULL;
	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	return open_on(f, 0, name, fmt, out, err, errlen);
}

void kvb_trace_close(struct kvb_trace *t)
{
	if (!t)
		return;
	if (t->own)
		fclose(t->f);
	free(t);
}
