/* libkvclient internals: one server's connection (a kvi_conn), what the
 * operation engine works on. The public kvc_t (cluster.h) holds one per
 * server of its list and routes each key to one; with a single server, every
 * call goes straight to its connection.
 *
 * Who does what with a connection: conn.c opens it (carving the registered
 * local buffer into the operation slots' scratch) and closes it; lease.c
 * keeps it joined (lease, idle word, rejoin); index_view.c holds the
 * server's indexes as it stated them; extent.c gets the memory PUTs write
 * their objects into; engine.c admits operations, runs them (post.c posts
 * their batches) and hands them back; stats.c answers for its statistics.
 *
 * Ownership: the connection owns its kvi_rmem (and so the local buffer), its
 * operation slots and its dial argument. Nothing here is exported. */
#ifndef KVI_CONN_H
#define KVI_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "index_view.h"
#include "item_counts.h"
#include "kvclient.h"
#include "layout.h"
#include "locache.h"
#include "rmem.h"

struct kvi_opst;

/* A control request answered synchronously (a renewal at join, a segment
 * request, statistics) waits this long. */
#define KVI_CTRL_TIMEOUT_MS 5000

#define KVI_MARKS 32 /* access marks waiting for a doorbell to ride in */

/* An access mark: a GET read an object whose access byte was 0, and will set
 * it (layout.h "Access tracking") by a 1-byte WRITE posted in the next
 * doorbell this handle rings anyway. A mark rides only while the GET that
 * made it could still have posted it (its deadline): later, the object's
 * segment might have been reclaimed and reused (segtab.h), and the WRITE
 * would land in someone else's bytes. Late marks are dropped (sampling). */
struct kvi_mark {
	uint64_t off;      /* region offset of the access byte's 8-byte word (kvi_access_word_off) */
	uint64_t word;     /* that word as the GET read it (access byte 0) */
	uint64_t set;      /* ... with the read mark set */
	uint64_t deadline; /* ns */
};

/* How a handle gets a new connection to its server (rejoining after a
 * fencing, a lost path or a server restart): 0 with *rm connected, a
 * negative code, or KVI_JOIN_PENDING (rmem.h) while a join that must not hold
 * the caller goes on (the next call steps it; timeout_ms bounds it from its
 * start). NULL when the transport cannot be re-made. */
typedef int (*kvi_dial_fn)(void *arg, int timeout_ms, struct kvi_rmem **rm);

struct kvi_conn {
	struct kvi_rmem *rm;
	struct kvi_geometry sb; /* the geometry the server stated at join (rm->geo), validated at open */
	/* The index in use, and the one a migration is emptying into it (epoch 0:
	 * none) -- layout.h "Resize"; index_view.c. */
	struct kvi_cindex cur, prev;
	uint32_t chunk_cap; /* room in each: the most chunks an index of this region has */
	uint32_t index_state; /* enum kvi_index_state, as the server last stated it */
	int index_stale;      /* a LEASE named another epoch or state: fetch (index_view.c) */
	struct kvc_opts o;
	uint32_t op_timeout_ms; /* o.op_timeout_ms, at most the server's max_op_ms */
	uint32_t obj_area; /* the largest object area an op may need (max_object, rounded) */
	uint64_t max_object;

	struct kvi_opst *st; /* [depth] */
	unsigned inflight;
	struct kvc_op **done; /* finished, not yet handed out: ring of depth */
	unsigned done_head, done_count;

	/* The extent this client appends objects to (granted by the server;
	 * extent.c), and the CAS unique of an object at its start (layout.h
	 * "CAS uniques"). */
	uint64_t seg_off, seg_size, seg_used, seg_cas;

	struct kvi_locache cache;
	/* Access marks (ring) and the byte every mark WRITE sends: it never
	 * changes, so a WRITE may read it whenever the NIC gets to it. */
	struct kvi_mark marks[KVI_MARKS];
	unsigned mark_head, mark_count;
	uint64_t *mark_sink; /* where mark CASes return what they found (never read) */
	struct kvc_stats stats;
	uint64_t rng;

	/* Lease (lease.c "Lease"); lease_ns 0: the server grants none. */
	uint64_t lease_ns, renew_ns;
	uint64_t lease_end;  /* ns, our clock: nothing is posted at or after it */
	uint32_t renew_seq;  /* renewal sent, response not yet taken (0: none) */
	uint64_t renew_sent;
	uint64_t renew_epoch; /* the epoch the last renewal sent named (the server's ack of it) */
	uint32_t report_seq; /* lock report sent, response not yet taken */
	uint64_t report_sent;
	uint64_t report_after_ns; /* a lock word seen this long is reported */
	/* GROW (op_resize.c): the one request outstanding (shares the report's
	 * place among KVI_CTRL_MAX_OUTSTANDING: never both at once), and the
	 * epoch the server last said it cannot grow, until when we believe it. */
	uint32_t grow_seq;
	uint64_t grow_sent, grow_sent_epoch;
	uint64_t grow_no_epoch, grow_no_until;
	/* A segment request sent without waiting (extent.c kvi_reserve: while other
	 * operations may hold locks), its answer not yet taken (0: none). */
	uint32_t grant_seq;
	uint64_t grant_sent;

	/* memcached's counters (counts.c; common/item_counts.h): what this
	 * connection's operations did, what of it the server was told, and the
	 * COUNTS report outstanding (0: none; it has its own place among
	 * KVI_CTRL_MAX_OUTSTANDING). */
	uint64_t counts[KVI_COUNT_N], counts_told[KVI_COUNT_N];
	uint32_t counts_seq;
	uint64_t counts_sent, counts_due;
	unsigned counts_page;
	int counts_round; /* a round of reports (a page at a time) is under way */

	/* Rejoining (lease.c "Rejoin"). */
	kvi_dial_fn dial;
	void *dial_arg;
	void (*dial_free)(void *arg);
	uint64_t rejoin_not_before; /* ns: backoff */
	int rejoining;              /* a rejoin's join goes on (its dial said KVI_JOIN_PENDING) */
	/* The clock of the step under way, 0 between steps: read by
	 * kvi_conn_submit_many before the operations it starts (their
	 * deadlines count from it), or by kvi_conn_poll after the completions
	 * it then handles arrived; posts made in that step check their
	 * deadline and the lease against it, as a clock read costs as much as
	 * a tenth of a cached GET (40 ns in a VM). So a post is
	 * later than its check by the step's own work, which must stay short
	 * against the margin the server adds to an operation's deadline before
	 * it reuses memory (segtab.h settle: 10 ms): whatever may take longer
	 * -- registering a larger object area, verifying or copying an object
	 * over KVI_STEP_HEAVY_BYTES -- calls kvi_step_clock_refresh, and a
	 * commit (the one post that must never land late) always does. */
	uint64_t step_now;
	uint32_t rejoin_backoff_ms;
};

/* Open a connection over a connected transport (takes ownership of rm, also
 * on failure): validates the geometry the server stated (rm->geo; the
 * region's superblock is never read), sizes the local buffer, takes a lease. */
int kvi_conn_open(struct kvi_rmem *rm, const struct kvc_opts *o, struct kvi_conn **out);
/* Let h rejoin through dial when its connection breaks (owns arg: free_arg
 * is called on it at kvi_conn_destroy; either may be NULL). */
void kvi_conn_set_dial(struct kvi_conn *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg));
/* Tell the server how much of the extent was used (extent.c), and close.
 * NULL is ignored. */
void kvi_conn_destroy(struct kvi_conn *h);
/* The largest value a key of key_len bytes may have on this server; 0 when
 * the key is too long. */
size_t kvi_conn_max_value(const struct kvi_conn *h, size_t key_len);
/* Give h the connection rm (h->rm = rm, whatever happens): learn the layout,
 * size and carve the local buffer, take a lease, fetch the indexes. At open
 * and when rejoining (lease.c), with nothing in flight. */
int kvi_conn_attach(struct kvi_conn *h, struct kvi_rmem *rm);
/* Make st's object area at least `need` bytes (<= h->obj_area); 0, KVC_EINVAL
 * when need is larger, or KVC_ENOMEM. */
int kvi_obj_room(struct kvi_conn *h, struct kvi_opst *st, uint64_t need);

#endif
