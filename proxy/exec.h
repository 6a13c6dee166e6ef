/* Carrying out parsed requests (req.h) on the tier: each becomes kvc_ops
 * (a multi-get one GET per key), a round of them goes out together with
 * kvc_submit_many, and once every op is back the replies are written in
 * request order, in memcached's words.
 *
 * Order: a round never holds two ops on the same key where either writes
 * (the library does not order ops in flight), so a pipeline's "set k" then
 * "get k" see each other as memcached's do: kvp_exec_add refuses a request
 * that conflicts and the caller runs the round first. flush_all and stats
 * run alone (kvp_exec_add says so), on an idle handle.
 *
 * Who owns what: a worker owns one kvp_exec and its handle; requests added
 * point into the connection's read buffer, which must stay put until
 * kvp_exec_finish. */
#ifndef KVP_EXEC_H
#define KVP_EXEC_H

#include "buf.h"
#include "kvclient.h"
#include "req.h"
#include "stats.h"

#define KVP_ROUND_SLOTS 256u /* requests per round */
#define KVP_ROUND_OPS 256u   /* ops per round, unless one request needs more */
#define KVP_GETBUF 4096u     /* a GET's first buffer; larger values are read again */
/* Ops that return a value, per round: their values are held until the
 * round's replies are written out, so this bounds a worker's memory to
 * about KVP_ROUND_VALUES x the largest value, whatever a client asks for
 * (conn.h); it is kvproxy's library depth, so it costs no concurrency. */
#define KVP_ROUND_VALUES 64u

struct kvp_slot {
	struct kvp_req req;
	unsigned op0, nops;
};

struct kvp_exec {
	kvc_t *h;
	struct kvp_shared *sh;
	struct kvp_counters ctr;
	struct kvp_slot slots[KVP_ROUND_SLOTS];
	unsigned nslots;
	struct kvc_op *ops;
	struct kvc_op **ptrs;
	void **big;           /* per op: a buffer for a value over KVP_GETBUF, or NULL */
	uint32_t *hash;       /* per op: key hash, bit 0 = writes */
	unsigned nops, op_cap;
	unsigned nvals;       /* ops in the round that return a value (KVP_ROUND_VALUES) */
	char *gbuf;
	int quit;             /* a quit was answered: close after writing */
};

enum kvp_add_rc {
	KVP_ADDED = 0,
	KVP_RUN_FIRST = 1, /* conflicts with the round or needs it alone: run the round, add again */
	KVP_NOMEM = -1,
};

int kvp_exec_init(struct kvp_exec *x, kvc_t *h, struct kvp_shared *sh);
void kvp_exec_fini(struct kvp_exec *x);
/* Add a request (copied) to the round. */
int kvp_exec_add(struct kvp_exec *x, const struct kvp_req *r);
unsigned kvp_exec_pending(const struct kvp_exec *x);
/* Send the round's ops, wait for all, append the replies to out, start a
 * new round. */
void kvp_exec_finish(struct kvp_exec *x, struct kvp_buf *out);

/* memcached's exptime as a library TTL: 0 never; returns 1 (and
 * KVC_TTL_EXPIRED) when the item is to be expired at once (negative, or an
 * absolute time not in the future). */
int kvp_ttl_ms(int32_t exptime, time_t now, uint64_t *ttl_ms);

#endif
