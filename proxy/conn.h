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
	/* Replies reached KVP_OUT_HIGH: the requests in `in` wait until they
	 * are written (kvp_conn_process stopped before them); get_skip: the
	 * bytes of the first one's key list already answered, when it is a
	 * multi-get that stopped between parts. */
	int stalled;
	int eof;            /* the client is done sending: close once all it sent is answered */
	size_t get_skip;
	unsigned events;    /* epoll events registered */
	struct kvp_conn *prev, *next; /* the worker's connections, to close them at stop */
};

/* Parse and carry out the complete requests in data[0..len), appending
 * the replies to c->out; returns the bytes used (the rest is an incomplete
 * request, or requests that wait, c->stalled, because the replies already
 * reached KVP_OUT_HIGH: so a few bytes of input -- "get big" pipelined, or
 * one multi-get of many keys -- never make replies pile up without bound;
 * a round adds at most KVP_ROUND_VALUES values past the mark). */
size_t kvp_conn_process(struct kvp_conn *c, struct kvp_exec *x, size_t max_value, const char *data, size_t len);

#endif
