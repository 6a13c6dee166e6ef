/* The in-process transport: the remote-memory interface over plain memory.
 *
 * A kvi_local_region stands for a server's registered region; any number of
 * kvi_rmem_local connections (one per simulated client thread) may share it.
 * Operations execute when posted (or at the next poll: deferred mode,
 * below), in order, with RDMA's granularity: READ and
 * WRITE move 8-byte words atomically (never wider, so concurrent WRITEs show up
 * in READs as torn data, as on a NIC), CAS and FAA are atomic on their word.
 *
 * Hooks let a test steer an operation deterministically: fail it, delay it, run
 * another client's step in the middle of it, or tear the bytes a READ returns. */
#ifndef KVI_RMEM_LOCAL_H
#define KVI_RMEM_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "rmem.h"

struct kvi_local_region;

/* A zeroed, page-aligned region of `size` bytes; NULL with errno on failure. */
struct kvi_local_region *kvi_local_region_create(uint64_t size);
void kvi_local_region_destroy(struct kvi_local_region *reg);
/* The bytes themselves, for the test's own inspection and for the server side. */
void *kvi_local_region_base(struct kvi_local_region *reg);
uint64_t kvi_local_region_size(const struct kvi_local_region *reg);

struct kvi_local_hooks {
	void *arg;
	/* Before each operation of a batch executes. Return 0 to let it run, or a
	 * negative KVC_ code to fail it: the batch completes with that status and the
	 * connection breaks, exactly as a completion error does on verbs. May sleep
	 * or perform other operations (on other connections) to force an interleaving. */
	int (*before_op)(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op);
	/* After a READ copied its bytes to dst (src is the region at op->roff): may
	 * rewrite dst to model a READ that raced with a WRITE. */
	void (*after_read)(void *arg, const struct kvi_rop *op, void *dst, const void *src);
};

/* A connection to reg with a local buffer of lbuf_size bytes (64-byte aligned).
 * hooks may be NULL; the struct is copied. The region must outlive the connection. */
int kvi_rmem_local_create(struct kvi_local_region *reg, size_t lbuf_size,
			  const struct kvi_local_hooks *hooks, struct kvi_rmem **out);

/* Route this connection's control requests to handler (normally the server
 * core's), as client client_id. Without one, control calls fail KVC_ESERVERGONE.
 * A handler that returns KVC_ETIMEDOUT models an answer lost on the way back:
 * the call times out (a send's answer never comes) and the connection stays;
 * any other error breaks the connection, as a server disconnecting would. */
void kvi_rmem_local_set_ctrl(struct kvi_rmem *rm, kvi_ctrl_handler handler, void *arg, uint32_t client_id);

/* The limits a server states at join (wire.h welcome), as the verbs
 * transport learns them. */
void kvi_rmem_local_set_limits(struct kvi_rmem *rm, uint32_t max_op_ms, uint32_t quarantine_ms, uint16_t flags);

/* The geometry a server states at join (wire.h welcome), normally the server
 * core's (kvs_core_geometry): what a client addresses the region by. Its
 * region_size must be the region's. */
void kvi_rmem_local_set_geometry(struct kvi_rmem *rm, const struct kvi_geometry *g);

/* Deferred mode, for kvbench's in-process target: posted batches execute at
 * the next poll instead of at once, all of them, in order, with every remote
 * line they touch requested first -- a NIC works on many requests at once
 * and its memory stalls are not the client's CPU time; executed one by one
 * in the post, each READ of remote memory would stall the client for a
 * cache miss a NIC's DMA never costs it. Only for a caller that polls
 * right after posting, as kvbench's loop does: a batch must not wait long
 * (an operation's deadline was checked when it posted). Hooks apply as
 * usual. 0, KVC_EINVAL with batches in flight, or KVC_ENOMEM. */
int kvi_rmem_local_set_deferred(struct kvi_rmem *rm, int on);
/* Deferred mode: the kvi_ticks() (clock.h) spent executing deferred batches
 * so far -- on a NIC, work the client's CPU does not do. */
uint64_t kvi_rmem_local_busy_ticks(const struct kvi_rmem *rm);

#endif
