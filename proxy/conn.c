/* A connection's requests: parse, batch, answer in order (conn.h). */
#include <string.h>

#include "conn.h"

/* Add r to the round, running the round first when it must be; 0 or -1
 * (out of memory). */
static int add(struct kvp_exec *x, struct kvp_conn *c, const struct kvp_req *r)
{
	int rc = kvp_exec_add(x, r);

	if (rc == KVP_RUN_FIRST) {
		kvp_exec_finish(x, &c->out);
		rc = kvp_exec_add(x, r);
	}
	return rc == KVP_ADDED ? 0 : -1;
}

/* The bytes of keys[0..len) that hold its first n keys. */
static size_t span(const char *keys, size_t len, unsigned n)
{
	const char *k;
	size_t kl, off = 0, end = 0;

	for (unsigned i = 0; i < n && (off = kvp_next_token(keys, len, off, &k, &kl)) != 0; i++)
		end = off;
	return end;
}

/* A multi-get goes out KVP_ROUND_VALUES keys at a time, END after the last
 * part; between parts, replies past KVP_OUT_HIGH stop it (c->get_skip says
 * where) until they are written. 0 done, 1 stopped, -1 out of memory. */
static int multiget(struct kvp_exec *x, struct kvp_conn *c, const struct kvp_req *r)
{
	for (;;) {
		struct kvp_req part = *r;
		size_t cut;

		part.keys = r->keys + c->get_skip;
		part.keys_len = r->keys_len - c->get_skip;
		cut = span(part.keys, part.keys_len, KVP_ROUND_VALUES);
		part.more = span(part.keys + cut, part.keys_len - cut, 1) != 0;
		part.keys_len = cut;
		if (add(x, c, &part))
			return -1;
		if (!part.more) {
			c->get_skip = 0;
			return 0;
		}
		c->get_skip += cut;
		kvp_exec_finish(x, &c->out);
		if (c->out.len >= KVP_OUT_HIGH)
			return 1;
	}
}

static int is_multiget(const struct kvp_req *r)
{
	return r->cmd >= KVP_C_GET && r->cmd <= KVP_C_GATS;
}

size_t kvp_conn_process(struct kvp_conn *c, struct kvp_exec *x, size_t max_value, const char *data, size_t len)
{
	size_t off = 0;
	struct kvp_req r;

	c->need = 0;
	c->stalled = 0;
	while (!c->closing) {
		size_t used, need;
		int rc;

		if (c->swallow) {
			size_t n = len - off < c->swallow ? len - off : c->swallow;

			off += n;
			c->swallow -= n;
			if (c->swallow)
				break;
		}
		if (off == len)
			break;
		rc = kvp_parse(data + off, len - off, max_value, &r, &used, &need);
		if (rc == KVP_NEED_MORE) {
			c->need = need;
			break;
		}
		if (rc == KVP_CLOSE) {
			c->closing = 1;
			off = len;
			break;
		}
		if (c->out.len >= KVP_OUT_HIGH) { /* written first, then this one */
			c->stalled = 1;
			break;
		}
		rc = is_multiget(&r) ? multiget(x, c, &r) : add(x, c, &r);
		if (rc == 1) { /* a multi-get stopped between parts */
			c->stalled = 1;
			break;
		}
		if (rc) { /* out of memory: give up on this connection */
			c->closing = 1;
			off = len;
			break;
		}
		off += used;
		c->swallow = r.swallow;
		if (r.cmd == KVP_C_QUIT)
			c->closing = 1;
	}
	if (kvp_exec_pending(x))
		kvp_exec_finish(x, &c->out);
	return off;
}
