/* A growable byte buffer: a connection's pending replies, a worker's
 * scratch. Appends never fail silently: an allocation failure marks the
 * buffer (oom) and the connection is closed by its owner. */
#ifndef KVP_BUF_H
#define KVP_BUF_H

#include <stddef.h>
#include <stdint.h>

struct kvp_buf {
	char *p;
	size_t len, cap;
	int oom;
};

/* Room for n more bytes; returns where they go, or NULL (oom set). */
char *kvp_buf_reserve(struct kvp_buf *b, size_t n);
void kvp_buf_add(struct kvp_buf *b, const void *p, size_t n);
void kvp_buf_str(struct kvp_buf *b, const char *s);
void kvp_buf_u64(struct kvp_buf *b, uint64_t v);
void kvp_buf_i64(struct kvp_buf *b, int64_t v);
/* Drop the first n bytes. */
void kvp_buf_consume(struct kvp_buf *b, size_t n);
void kvp_buf_free(struct kvp_buf *b);

#endif
