/* A connection's requests: parse, batch, answer in order (conn.h). */
#include <string.h>

#include "conn.h"

size_t kvp_conn_process(struct kvp_conn *c, struct kvp_exec *x, size_t max_value, const char *data, size_t len)
{
	size_t off = 0;
	struct kvp_req r;

	c->need = 0;
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
		rc = kvp_exec_add(x, &r);
		if (rc == KVP_RUN_FIRST) {
			kvp_exec_finish(x, &c->out);
			rc = kvp_exec_add(x, &r);
		}
		if (rc != KVP_ADDED) { /* out of memory: give up on this connection */
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
