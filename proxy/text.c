/* memcached's text protocol: one request out of a byte buffer (req.h).
 * The replies to bad input are memcached 1.6's, found in its proto_text.c
 * and checked against memcached 1.6.18 by tests/proxy/compare.py. */
#include <string.h>

#include "meta.h"
#include "req.h"
#include "tok.h"

#define BAD_FORMAT "CLIENT_ERROR bad command line format"
#define BAD_EXPTIME "CLIENT_ERROR invalid exptime argument"

static int error(struct kvp_req *r, const char *msg)
{
	r->cmd = KVP_C_ERROR;
	r->err = msg;
	return KVP_REQUEST;
}

/* memcached's "noreply" rule: the last token says it. */
static void noreply_maybe(const struct kvp_tokens *t, struct kvp_req *r)
{
	if (t->n >= 1 && !t->rest && kvp_tok_is(t->v[t->n - 1], t->l[t->n - 1], "noreply"))
		r->noreply = 1;
}

/* The key (token 1) of a single-key command: 0, or memcached's error for
 * a key over 250 bytes. */
static int take_key(const struct kvp_tokens *t, struct kvp_req *r)
{
	if (t->l[1] > KVC_MAX_KEY)
		return error(r, BAD_FORMAT);
	r->key = t->v[1];
	r->key_len = t->l[1];
	return 0;
}

/* set/add/replace/append/prepend KEY FLAGS EXPTIME BYTES [noreply] and
 * cas KEY FLAGS EXPTIME BYTES CAS [noreply]; then the value and CRLF. */
static int storage(const char *buf, size_t len, size_t max_value, const struct kvp_tokens *t, int cmd,
		   struct kvp_req *r, size_t *used, size_t *need)
{
	size_t nt = t->n + 1, want = cmd == KVP_C_CAS ? 7 : 6;
	int32_t vlen;

	if (nt != want && nt != want + 1)
		return error(r, "ERROR");
	noreply_maybe(t, r);
	if (take_key(t, r))
		return KVP_REQUEST;
	if (!kvp_num_u32(t->v[2], t->l[2], &r->flags) || !kvp_num_i32(t->v[3], t->l[3], &r->exptime) ||
	    !kvp_num_i32(t->v[4], t->l[4], &vlen))
		return error(r, BAD_FORMAT);
	r->has_exptime = 1;
	if (cmd == KVP_C_CAS && !kvp_num_u64(t->v[5], t->l[5], &r->cas))
		return error(r, BAD_FORMAT);
	if (vlen < 0 || vlen > 0x7ffffffd)
		return error(r, BAD_FORMAT);
	r->cmd = cmd;
	return kvp_value(buf, len, max_value, (size_t)vlen, r, used, need);
}

int kvp_value(const char *buf, size_t len, size_t max_value, size_t vlen, struct kvp_req *r, size_t *used,
	      size_t *need)
{
	size_t total = *used + vlen + 2;

	if (vlen > max_value) {
		/* memcached's set, and every ms, drop the key's old value */
		r->mode = r->cmd == KVP_C_MS ? KVP_C_SET : (char)r->cmd;
		if (r->cmd == KVP_C_MS)
			r->noreply = 0;
		r->swallow = vlen + 2;
		r->err = "SERVER_ERROR object too large for cache";
		r->cmd = KVP_C_TOOLARGE;
		return KVP_REQUEST;
	}
	if (len < total) {
		*need = total;
		return KVP_NEED_MORE;
	}
	r->data = buf + *used;
	r->data_len = vlen;
	*used = total;
	if (buf[total - 2] != '\r' || buf[total - 1] != '\n') {
		if (r->cmd == KVP_C_MS) /* meta always reports it */
			r->noreply = 0;
		return error(r, "CLIENT_ERROR bad data chunk");
	}
	return KVP_REQUEST;
}

/* get/gets KEY..., gat/gats EXPTIME KEY... */
static int retrieval(const char *line, size_t len, const struct kvp_tokens *t, int cmd, struct kvp_req *r)
{
	size_t first = 1, off;
	const char *k;
	size_t kl;

	if (t->n + 1 < 3)
		return error(r, "ERROR");
	if (cmd == KVP_C_GAT || cmd == KVP_C_GATS) {
		if (!kvp_num_i32(t->v[1], t->l[1], &r->exptime))
			return error(r, BAD_EXPTIME);
		r->has_exptime = 1;
		first = 2;
	}
	r->cmd = cmd;
	if (first >= t->n) {
		r->keys = line + len; /* gat EXPTIME with no key: just END */
		return KVP_REQUEST;
	}
	r->keys = t->v[first];
	r->keys_len = (size_t)(line + len - t->v[first]);
	for (off = 0; (off = kvp_next_token(r->keys, r->keys_len, off, &k, &kl)) != 0;)
		if (kl > KVC_MAX_KEY) /* memcached drops the values found before it */
			return error(r, BAD_FORMAT);
	return KVP_REQUEST;
}

static int arith_touch_delete(const struct kvp_tokens *t, int cmd, struct kvp_req *r)
{
	size_t nt = t->n + 1;

	if (cmd == KVP_C_DELETE) {
		if (nt < 3 || nt > 5)
			return error(r, "ERROR");
		if (nt > 3) {
			int zero = kvp_tok_is(t->v[2], t->l[2], "0");

			noreply_maybe(t, r);
			if (!((nt == 4 && (zero || r->noreply)) || (nt == 5 && zero && r->noreply)))
				return error(r, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
		}
	} else {
		if (nt != 4 && nt != 5)
			return error(r, "ERROR");
		noreply_maybe(t, r);
	}
	if (take_key(t, r))
		return KVP_REQUEST;
	if (cmd == KVP_C_TOUCH) {
		if (!kvp_num_i32(t->v[2], t->l[2], &r->exptime))
			return error(r, BAD_EXPTIME);
		r->has_exptime = 1;
	} else if (cmd != KVP_C_DELETE && !kvp_num_u64(t->v[2], t->l[2], &r->delta)) {
		return error(r, "CLIENT_ERROR invalid numeric delta argument");
	}
	r->cmd = cmd;
	return KVP_REQUEST;
}

static int flush_all(const struct kvp_tokens *t, struct kvp_req *r)
{
	size_t nt = t->n + 1;

	if (nt < 2 || nt > 4)
		return error(r, "ERROR");
	noreply_maybe(t, r);
	if (nt != (r->noreply ? 3u : 2u)) {
		if (!kvp_num_i32(t->v[1], t->l[1], &r->exptime))
			return error(r, BAD_EXPTIME);
	}
	r->cmd = KVP_C_FLUSH;
	return KVP_REQUEST;
}

static int verbosity(const struct kvp_tokens *t, struct kvp_req *r)
{
	uint32_t level;

	if (t->n + 1 != 3 && t->n + 1 != 4)
		return error(r, "ERROR");
	noreply_maybe(t, r);
	if (!kvp_num_u32(t->v[1], t->l[1], &level))
		return error(r, BAD_FORMAT);
	r->cmd = KVP_C_VERBOSITY;
	return KVP_REQUEST;
}

enum kind { RETRIEVAL, STORAGE, KEYED, FLUSH, VERBOSITY, BARE, STATS };

static const struct {
	const char *name;
	int cmd;      /* enum kvp_cmd */
	int kind;     /* enum kind: how its line is read */
} commands[] = {
	{ "get", KVP_C_GET, RETRIEVAL },      { "bget", KVP_C_GET, RETRIEVAL },
	{ "gets", KVP_C_GETS, RETRIEVAL },    { "gat", KVP_C_GAT, RETRIEVAL },
	{ "gats", KVP_C_GATS, RETRIEVAL },    { "set", KVP_C_SET, STORAGE },
	{ "add", KVP_C_ADD, STORAGE },        { "replace", KVP_C_REPLACE, STORAGE },
	{ "append", KVP_C_APPEND, STORAGE },  { "prepend", KVP_C_PREPEND, STORAGE },
	{ "cas", KVP_C_CAS, STORAGE },        { "incr", KVP_C_INCR, KEYED },
	{ "decr", KVP_C_DECR, KEYED },        { "touch", KVP_C_TOUCH, KEYED },
	{ "delete", KVP_C_DELETE, KEYED },    { "flush_all", KVP_C_FLUSH, FLUSH },
	{ "verbosity", KVP_C_VERBOSITY, VERBOSITY }, { "version", KVP_C_VERSION, BARE },
	{ "quit", KVP_C_QUIT, BARE },         { "stats", KVP_C_STATS, STATS },
};

/* The line (without its terminator) of a complete command. */
static int command(const char *buf, size_t len, const char *line, size_t line_len, size_t max_value,
		   struct kvp_req *r, size_t *used, size_t *need)
{
	struct kvp_tokens t;
	const char *c;
	size_t cl;

	kvp_tokenize(line, line_len, &t);
	if (t.n == 0 || t.l[0] < 2)
		return error(r, "ERROR");
	c = t.v[0];
	cl = t.l[0];
	if (c[0] == 'm' && cl == 2)
		return kvp_meta(buf, len, max_value, &t, r, used, need);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (!kvp_tok_is(c, cl, commands[i].name))
			continue;
		switch (commands[i].kind) {
		case RETRIEVAL:
			return retrieval(line, line_len, &t, commands[i].cmd, r);
		case STORAGE:
			return storage(buf, len, max_value, &t, commands[i].cmd, r, used, need);
		case KEYED:
			return arith_touch_delete(&t, commands[i].cmd, r);
		case FLUSH:
			return flush_all(&t, r);
		case VERBOSITY:
			return verbosity(&t, r);
		case STATS: /* the sub-command, if any, in keys */
			r->keys = t.n > 1 ? t.v[1] : line + line_len;
			r->keys_len = t.n > 1 ? (size_t)(line + line_len - t.v[1]) : 0;
			break;
		default:
			break;
		}
		r->cmd = commands[i].cmd;
		return KVP_REQUEST;
	}
	/* An HTTP request is not ours: memcached hangs up -- unless the
	 * command's first letter is one of its command families. */
	if (!strchr("gsacidt", c[0]) && !t.rest && t.l[t.n - 1] >= 5 && memcmp(t.v[t.n - 1], "HTTP/", 5) == 0)
		return KVP_CLOSE;
	return error(r, "ERROR");
}

int kvp_parse(const char *buf, size_t len, size_t max_value, struct kvp_req *r, size_t *used, size_t *need)
{
	const char *el = memchr(buf, '\n', len);
	size_t line_len;

	memset(r, 0, offsetof(struct kvp_req, keybuf));
	*need = 0;
	*used = 0;
	if (!el) {
		if (len > KVP_LINE_MAX) {
			size_t sp = 0;

			/* Only a long multi-get may go on without a newline. */
			while (sp < len && buf[sp] == ' ')
				sp++;
			if (sp > 100 || len > KVP_GET_LINE_MAX ||
			    (len - sp < 5 || (memcmp(buf + sp, "get ", 4) && memcmp(buf + sp, "gets ", 5))))
				return KVP_CLOSE;
		}
		return KVP_NEED_MORE;
	}
	line_len = (size_t)(el - buf);
	*used = line_len + 1;
	if (line_len > 1 && buf[line_len - 1] == '\r')
		line_len--;
	line_len = strnlen(buf, line_len); /* memcached reads the line as a C string */
	return command(buf, len, buf, line_len, max_value, r, used, need);
}
