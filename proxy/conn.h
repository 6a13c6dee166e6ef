/* One client connection: its unparsed bytes, its replies not yet written,
 * and the bytes of a refused value still to discard. An idle connection
 * holds no buffers (a worker reads into its own scratch and keeps only an
 * incomplete request's bytes), so 10 000 of them cost little.
 *
 * Who owns what: the worker whose epoll set holds the connection owns it. */
#ifndef KVP_CONN_H
#define KVP_CONN_H

#include <stddef.h>

#include "buf.h"
#include "exec.h"

#define KVP_OUT_HIGH (4u << 20) /* replies buffered before the connection stops being read */

struct kvp_conn {
	int fd;
	struct kvp_buf in;  /* an incomplete request's bytes */
	struct kvp_buf out; /* replies not yet written */
	size_t swallow;     /* bytes of a refused value still to discard */
	size_t need;        /* bytes in wants before a request can be complete (0: unknown) */
	int closing;        /* quit, or input memcached hangs up on: close once out is written */
	unsigned events;    /* epoll events registered */
	struct kvp_conn *prev, *next; /* the worker's connections, to close them at stop */
};

/* Parse and carry out every complete request in data[0..len), appending
 * the replies to c->out; returns the bytes used (the rest is an incomplete
 * request). */
size_t kvp_conn_process(struct kvp_conn *c, struct kvp_exec *x, size_t max_value, const char *data, size_t len);

#endif
