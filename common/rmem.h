/* The remote-memory interface: the only way the data path touches a server's region.
 *
 * A kvi_rmem is one connection to one remote region. It offers the four one-sided
 * operations RDMA gives us (READ, WRITE, 8-byte CAS, 8-byte FAA), posted in batches
 * ("several operations per doorbell") and completed asynchronously. The hash-table
 * algorithms are written against this interface only, so they run unchanged over
 * real verbs (rmem_verbs.c) and over plain memory in-process (rmem_local.c), where
 * tests can tear reads, delay operations and inject faults on purpose.
 *
 * Addresses are byte offsets into the remote region, never raw pointers: the
 * transport adds the base address. Local buffers (READ destinations, WRITE sources,
 * atomic result words) must lie inside the connection's local buffer
 * (kvi_rmem_lbuf) or one of its extra buffers (kvi_rmem_xbuf), which the verbs
 * transport has registered with the NIC. Extra buffers let a user size memory
 * by what it carries: a small main buffer, and a larger one registered only for
 * a slot that meets a large value.
 *
 * Semantics, identical for every transport (and what the upper layers may rely on):
 *  - Operations of one batch are executed in posting order as RC does: a WRITE
 *    posted after another WRITE lands after it; a later CAS is executed after an
 *    earlier WRITE has landed; READs may overtake nothing that precedes them.
 *  - An operation with `fence` set starts only after every earlier READ and
 *    atomic of the connection has completed (IBV_SEND_FENCE). RC orders
 *    execution at the responder, but a NIC may prefetch a later READ's data;
 *    where a READ must observe memory strictly after an earlier one did (a
 *    lock word, then a slot word: op_get.c "Expired"), it is fenced.
 *  - A READ of more than 8 bytes is not atomic: it may observe a concurrent
 *    WRITE partly. Only CAS and FAA are atomic, and only against each other.
 *  - A batch completes as a whole; its status is the first failing operation's.
 *  - Any failure other than a local validation error (KVC_EINVAL, KVC_ERANGE
 *    found before posting, KVC_EAGAIN) breaks the connection: every outstanding
 *    and later batch then fails with KVC_ESERVERGONE (the RC QP is in the error
 *    state; nothing more can reach the region through it).
 *
 * Threading: a kvi_rmem belongs to one thread at a time (like a verbs QP). */
#ifndef KVI_RMEM_H
#define KVI_RMEM_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

enum kvi_rop_kind {
	KVI_ROP_READ = 1,
	KVI_ROP_WRITE,
	KVI_ROP_CAS, /* if *remote == compare then *remote = swap; old value -> *local */
	KVI_ROP_FAA, /* *remote += add; old value -> *local */
};

/* One operation. For CAS and FAA, `roff` must be 8-byte aligned and `local`
 * points to an 8-byte aligned word that receives the old remote value. */
struct kvi_rop {
	uint16_t kind;  /* enum kvi_rop_kind */
	uint16_t fence; /* 1: starts only after every earlier READ and atomic completed */
	uint32_t len;   /* READ/WRITE length in bytes (1..max); ignored for atomics */
	uint64_t roff; /* offset in the remote region */
	void *local;   /* inside the local buffer */
	uint64_t compare_add; /* CAS: expected value; FAA: addend */
	uint64_t swap;        /* CAS: new value */
};

/* A finished batch. */
struct kvi_rcomp {
	uint64_t cookie; /* as given to kvi_rmem_post */
	int status;      /* 0 or a negative KVC_ code */
};

/* Limits every transport honours; upper layers size their batches by them. */
/* A join (of the verbs transport, or a client's dial) still under way: not
 * an error, no connection yet. Positive, unlike every KVC_ code. */
#define KVI_JOIN_PENDING 1
#define KVI_RMEM_MAX_BATCH 16u   /* operations per doorbell */
#define KVI_RMEM_MAX_INFLIGHT 64u /* batches outstanding per connection */
#define KVI_RMEM_MAX_XBUF 64u     /* extra local buffers per connection */

struct kvi_rmem;

/* Transport table (redis's ConnectionType shape). Validation that is the same
 * for every transport is done once in rmem.c before these are called. */
struct kvi_rmem_type {
	const char *name;
	int (*post)(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie);
	/* Non-blocking: move up to max finished batches to out; returns the count or a
	 * negative code when the connection is broken and nothing is outstanding. */
	int (*poll)(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max);
	/* Called while waiting with nothing completed: notice a vanished peer. */
	void (*idle)(struct kvi_rmem *rm);
	/* Sleeping (kvi_rmem_block): get ready to sleep until a completion or a
	 * control message may have arrived or the peer may have left -- ask for
	 * a completion event, then look once more -- and fill pf[0..1] with
	 * what to poll(2); returns how many, or 0 when something came in
	 * meanwhile or the connection broke (do not sleep). NULL: this
	 * transport cannot sleep; waits poll. */
	int (*sleep_fds)(struct kvi_rmem *rm, struct pollfd pf[2]);
	/* After that poll(2): take the event pf reports, if any. */
	void (*woke)(struct kvi_rmem *rm, const struct pollfd pf[2]);
	/* Control RPC (two-sided): send req, wait for the response with its seq. */
	int (*ctrl_call)(struct kvi_rmem *rm, const struct kvi_ctrl *req, struct kvi_ctrl *resp, int timeout_ms);
	/* Send req without waiting (KVC_EAGAIN while the send slot is busy); its
	 * response goes to kvi_rmem_ctrl_stash when it arrives. */
	int (*ctrl_send)(struct kvi_rmem *rm, const struct kvi_ctrl *req);
	/* Replace the local buffer by a zeroed one of size bytes (nothing in flight). */
	int (*set_lbuf)(struct kvi_rmem *rm, size_t size);
	/* Register / deregister extra buffer idx (rm->xbuf[idx], allocated by rmem.c). */
	int (*xbuf_reg)(struct kvi_rmem *rm, unsigned idx);
	void (*xbuf_dereg)(struct kvi_rmem *rm, unsigned idx);
	/* Break the connection: outstanding batches fail, later posts fail. */
	void (*shutdown)(struct kvi_rmem *rm, int reason);
	void (*destroy)(struct kvi_rmem *rm);
};

/* Common state, embedded first in each transport's struct. */
struct kvi_rmem {
	const struct kvi_rmem_type *type;
	uint64_t region_size; /* bytes of the remote region */
	void *lbuf;           /* local buffer owned by the connection */
	size_t lbuf_size;
	struct kvi_xbuf {
		unsigned char *p; /* NULL: unused */
		size_t size;
	} xbuf[KVI_RMEM_MAX_XBUF];
	unsigned nxbuf; /* one past the highest extra buffer in use */
	unsigned inflight; /* batches posted and not yet returned by poll */
	int broken;        /* 0, or the code that broke the connection */
	uint32_t client_id; /* given by the server at join; the lock owner id */
	/* Given by the server at join (wire.h welcome): the longest operation
	 * deadline allowed, and how long reclaimed memory stays unused. */
	uint32_t max_op_ms, quarantine_ms;
	uint32_t lease_ms;     /* client lease length (welcome); 0 = none */
	uint16_t server_flags; /* enum kvi_welcome_flags */
	/* How long a wait polls before it sleeps (kvi_rmem_block): a NIC answers
	 * in microseconds, so polling is the fast path; sleeping after a while
	 * gives the core back to other threads (and, on a software device such
	 * as Soft-RoCE, to the kernel work that makes the completion). < 0:
	 * never sleep. Transports start at KVI_RMEM_SPIN_US. */
	int32_t spin_us;
	/* Recent waits for a completion on it that ended in one (kvi_rmem_wait,
	 * kvc_poll): a moving average, what the adaptive spin is sized from
	 * (kvi_rmem_spin_ns). */
	uint64_t wait_avg_ns;
	uint64_t sleeps; /* times a wait went to sleep on it (nothing had come): kvc_stats.wait_sleeps */
	/* Where everything is in the region and the hash seed, as the server
	 * stated it (welcome), never as read from the region (layout.h
	 * "Geometry"). geo.region_size == region_size. All zero (epoch 0) when
	 * the transport was told none: a client refuses to open over it. */
	struct kvi_geometry geo;
	/* The idle word (client/lease.c "Idle word"; server/members.h
	 * "Idleness"): where it is, and where the server's RDMA READ finds it
	 * (idle_addr, idle_rkey; idle_addr 0: the transport offers none). The
	 * local transport keeps it in idle_local. */
	uint64_t *idle_word;
	uint64_t idle_addr;
	uint32_t idle_rkey;
	uint64_t idle_local;
	uint32_t ctrl_seq;  /* last control request number */
	/* Responses to requests sent with kvi_rmem_ctrl_send, until taken. */
	struct kvi_ctrl stash[KVI_CTRL_MAX_OUTSTANDING + 1];
	uint8_t stashed[KVI_CTRL_MAX_OUTSTANDING + 1];
};

/* The server side of the control path as a function: kvserver calls it for
 * each request it receives; the local transport calls it in-process. Fill resp
 * and return 0, or return a negative code for a request so malformed that the
 * client must be disconnected. */
typedef int (*kvi_ctrl_handler)(void *arg, uint32_t client_id, const struct kvi_ctrl *req,
				struct kvi_ctrl *resp);

/* Post ops[0..n) as one batch (one doorbell). Returns 0, or KVC_EINVAL for a
 * malformed operation (bad kind, misaligned atomic, local pointer outside the
 * local buffer, n out of 1..KVI_RMEM_MAX_BATCH), KVC_ERANGE for an access past
 * region_size, KVC_EAGAIN when KVI_RMEM_MAX_INFLIGHT batches are outstanding,
 * KVC_ESERVERGONE (or the breaking code) when the connection is broken. On error
 * nothing was posted. The ops array may be reused once this returns; the local
 * buffers they name must stay untouched until the batch completes. */
int kvi_rmem_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie);

/* Non-blocking poll; returns the number of batches moved to out (0..max). */
int kvi_rmem_poll(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max);

#define KVI_RMEM_SPIN_US 50

/* The waiting policy, for kvi_rmem_wait and kvc_poll over several servers.
 * A wait polls for spin_us and, beyond that, for up to KVI_RMEM_SPIN_MULT
 * times the connection's recent completion wait (wait_avg_ns; at most
 * KVI_RMEM_SPIN_CAP_US): a completion due that soon costs less to poll for
 * than a sleep and a wake-up. On a NIC the average is microseconds and
 * spin_us governs; on a software device whose doorbells take longer than
 * spin_us (Soft-RoCE: tens of microseconds) the wait polls through them
 * instead of sleeping in every one. The extension is dropped while the
 * process's polling waiters (kvi_rmem_spinning) fill every online CPU: a
 * poller then keeps another thread, or the kernel work that makes the
 * completion on a software device, from running. spin_us 0 or < 0 is taken
 * as it is (sleep at once; never sleep). Returns how long to poll before
 * sleeping, UINT64_MAX: never sleep. */
#define KVI_RMEM_SPIN_MULT 4u
#define KVI_RMEM_SPIN_LOOK 64u /* polls between two clock reads of a wait */
#define KVI_RMEM_SPIN_CAP_US 500u
uint64_t kvi_rmem_spin_ns(const struct kvi_rmem *rm);
/* A wait on rm ended with a completion after ns: into rm->wait_avg_ns. */
void kvi_rmem_waited(struct kvi_rmem *rm, uint64_t ns);
/* A waiter of this process starts (+1) or stops (-1) polling. */
void kvi_rmem_spinning(int delta);

/* Poll until at least one batch finished or timeout_ms passed (then 0).
 * A negative timeout waits without a deadline. Polls for kvi_rmem_spin_ns,
 * then sleeps in kvi_rmem_block between polls. */
int kvi_rmem_wait(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max, int timeout_ms);

/* Sleep until something may have come in on any of the n connections (a
 * completion, a control message, a peer leaving) or timeout_ms passed;
 * spurious wake-ups allowed. Returns 1 if it slept, 0 if it did not: a
 * connection cannot sleep (its transport polls only, or it is broken), more
 * than KVI_RMEM_BLOCK_MAX were given, or something had already come in. A
 * handle with several servers waits on all of its connections so. */
#define KVI_RMEM_BLOCK_MAX 128u
int kvi_rmem_block(struct kvi_rmem *const *rms, unsigned n, int timeout_ms);

/* Post one batch and wait for it: one round trip. Only for callers with nothing
 * else in flight (KVC_EINVAL otherwise). A batch that misses timeout_ms breaks the
 * connection (its buffers could otherwise still be written later) and returns
 * KVC_ETIMEDOUT. */
int kvi_rmem_exec(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, int timeout_ms);

/* One control request and its response (both kvi_ctrl; req->seq is assigned
 * here). Returns 0 with resp filled (resp->status may still carry a KVC_ code
 * from the server), KVC_ETIMEDOUT, or the connection's breaking code. Data-path
 * batches may stay in flight meanwhile; their completions are kept for poll. */
int kvi_rmem_ctrl_call(struct kvi_rmem *rm, struct kvi_ctrl *req, struct kvi_ctrl *resp, int timeout_ms);

/* Send a control request without waiting for its response (req->seq is
 * assigned here; keep it to take the response). 0, KVC_EAGAIN (the one send
 * slot is busy: try again later), or the connection's breaking code. At most
 * KVI_CTRL_MAX_OUTSTANDING - 1 such requests may be outstanding at once. */
int kvi_rmem_ctrl_send(struct kvi_rmem *rm, struct kvi_ctrl *req);
/* Non-blocking: 1 with *resp when the response to seq has arrived, else 0. */
int kvi_rmem_ctrl_take(struct kvi_rmem *rm, uint32_t seq, struct kvi_ctrl *resp);
/* Transports: keep a response nobody waits for synchronously (the oldest is
 * overwritten when full: late answers to abandoned requests end there too). */
void kvi_rmem_ctrl_stash(struct kvi_rmem *rm, const struct kvi_ctrl *c);

/* Give the connection a new local buffer of size bytes (zeroed, 64-byte
 * aligned, registered). Only with nothing in flight (KVC_EINVAL otherwise);
 * pointers into the old buffer become invalid. */
int kvi_rmem_set_lbuf(struct kvi_rmem *rm, size_t size);

/* Replace extra buffer idx (0..KVI_RMEM_MAX_XBUF-1) by a zeroed, registered
 * one of size bytes (64-byte aligned), returned in *out; size 0 only frees it.
 * The caller guarantees that no batch in flight uses the old one. Returns 0,
 * KVC_EINVAL or KVC_ENOMEM (allocation or registration: memlock limit). */
int kvi_rmem_xbuf(struct kvi_rmem *rm, unsigned idx, size_t size, void **out);

/* Break the connection on purpose (e.g. after a timeout decided above). */
void kvi_rmem_shutdown(struct kvi_rmem *rm, int reason);

/* Destroy; accepts NULL. Outstanding batches are abandoned. */
void kvi_rmem_destroy(struct kvi_rmem *rm);

static inline void *kvi_rmem_lbuf(const struct kvi_rmem *rm, size_t *size)
{
	if (size)
		*size = rm->lbuf_size;
	return rm->lbuf;
}

/* Builders, so call sites read like the operation they post. */
static inline struct kvi_rop kvi_rop_read(uint64_t roff, void *dst, uint32_t len)
{
	return (struct kvi_rop){ .kind = KVI_ROP_READ, .len = len, .roff = roff, .local = dst };
}
static inline struct kvi_rop kvi_rop_write(uint64_t roff, void *src, uint32_t len)
{
	return (struct kvi_rop){ .kind = KVI_ROP_WRITE, .len = len, .roff = roff, .local = src };
}
static inline struct kvi_rop kvi_rop_cas(uint64_t roff, uint64_t *old, uint64_t cmp, uint64_t swp)
{
	return (struct kvi_rop){ .kind = KVI_ROP_CAS, .len = 8, .roff = roff, .local = old,
				 .compare_add = cmp, .swap = swp };
}
static inline struct kvi_rop kvi_rop_faa(uint64_t roff, uint64_t *old, uint64_t add)
{
	return (struct kvi_rop){ .kind = KVI_ROP_FAA, .len = 8, .roff = roff, .local = old,
				 .compare_add = add };
}

#endif
