/* memcached's meta protocol (mg, ms, md, ma, mn): parsing, for text.c. */
#ifndef KVP_META_H
#define KVP_META_H

#include <stddef.h>

#include "req.h"
#include "tok.h"

/* A meta command whose line is tokenized in t (t->v[0] is "m?"); the rest
 * as kvp_parse. */
int kvp_meta(const char *buf, size_t len, size_t max_value, const struct kvp_tokens *t, struct kvp_req *r,
	     size_t *used, size_t *need);

/* The value of a storage command whose line ends at buf + *used: too large,
 * incomplete (*need), or complete (r->data; *used moves past it). */
int kvp_value(const char *buf, size_t len, size_t max_value, size_t vlen, struct kvp_req *r, size_t *used,
	      size_t *need);

/* What kvproxy leaves out -- what the library does not know (mg l: the
 * seconds since the item was last read; the tier keeps one "read since
 * written" bit per item, not a time) -- is answered with this line. */
#define KVP_UNSUPPORTED_FLAG "CLIENT_ERROR flag not supported by kvproxy"

#endif
