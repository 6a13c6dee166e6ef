/* libkvclient internals: read-modify-writes (op_rmw.c), run by the write
 * state machine (op_write.c). Nothing here is exported. */
#ifndef KVI_RMW_H
#define KVI_RMW_H

#include "kvclient.h"
#include "layout.h"

struct kvi_conn;
struct kvi_opst;

/* Is op a read-modify-write (append, prepend, incr, decr, touch, gat)? */
int kvi_rmw_is(const struct kvc_op *op);
/* The bytes of the object it likely writes (at least), given what the key's
 * current object is known to take (old_len; 0: unknown): an append's or a
 * prepend's item holds the old value too. */
uint64_t kvi_rmw_estimate(const struct kvc_op *op, uint64_t old_len);
/* The code it ends with when the key is absent. */
int kvi_rmw_miss(const struct kvc_op *op);
/* Under the locks: build st's new object from the key's current one, oh
 * (whole and verified, alive, in st's object area), at the start of the
 * area, and take its place in our extent (st->obj_off, obj_len, obj_cas;
 * st->rmw_built). 0; or what the item says (KVC_EEXISTS, KVC_ENONNUMERIC,
 * KVC_EVALSIZE); or KVC_EAGAIN (a new extent is on its way: let go and try
 * again); or a failure (KVC_ENOMEM, KVC_EQUOTA, ...). st->result is set to
 * the operation's outcome when built (0, or KVC_ETRUNC for a GAT whose
 * buffer was short). */
int kvi_rmw_build(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_obj_hdr *oh);
/* Under the locks, the key absent: an INCR / DECR with KVC_ARITH_VIVIFY
 * builds its initial item instead (codes as above). */
int kvi_rmw_vivify(struct kvi_conn *h, struct kvi_opst *st);

#endif
