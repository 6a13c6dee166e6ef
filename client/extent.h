/* libkvclient internals: the extent a connection appends its PUTs' objects
 * to, and the grants it comes from (extent.c). Nothing here is exported. */
#ifndef KVI_EXTENT_H
#define KVI_EXTENT_H

#include <stdint.h>

struct kvi_conn;

/* `bytes` of our extent for an object: its region offset (and in *cas the
 * CAS unique of an object there, layout.h "CAS uniques"), KVC_EAGAIN (ask
 * again later), or another code (extent.c says when it waits). *nowp, if
 * not NULL, is read again after a wait. */
int64_t kvi_reserve(struct kvi_conn *h, uint64_t bytes, uint64_t *nowp, uint64_t *cas);
/* kvi_reserve without taking anything: 0 when our extent has `bytes` free
 * (asking the server for a new one as kvi_reserve does), else its codes. A
 * read-modify-write calls it at submission with the size it expects, since
 * it reserves only under the locks, where it must not wait for the server. */
int kvi_extent_room(struct kvi_conn *h, uint64_t bytes, uint64_t *nowp);
/* Tell the server how much of our extent we used (at close). */
void kvi_return_extent(struct kvi_conn *h);

#endif
