/* On-wire formats of the connection handshake (rdma_cm private data).
 *
 * Defined once here; fixed-width little-endian fields, sizes pinned with
 * _Static_assert. Nothing is ever parsed from text. Every message starts with
 * magic and version and is validated by its decode function before any field is
 * used: a malformed message is a KVC_EPROTO for that one peer, never a crash.
 *
 *   client --connect(hello, <=56 B)--> server
 *   client <--accept(welcome, <=196 B)-- server   or   <--reject(reject)-- */
#ifndef KVI_WIRE_H
#define KVI_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "item_counts.h"
#include "layout.h" /* struct kvi_geometry */
#include "server_stats.h"

#define KVI_WIRE_MAGIC 0x3143564bu /* "KVC1" read as little-endian bytes */
/* 2: the welcome carries the geometry; 3: indexes come in INDEX messages;
 * 4: the join proof's MAC covers the server's address and port; 5: the
 * welcome states the execution bound, renewals name the idle word and
 * LEASE carries flags; 6: SEG_GRANT carries the extent's CAS base */
#define KVI_WIRE_VERSION 7u

/* rdma_cm limits for RC over IB/RoCE (IB CM REQ/REP/REJ private data). */
#define KVI_CM_CONNECT_PDATA_MAX 56u
#define KVI_CM_ACCEPT_PDATA_MAX 196u
#define KVI_CM_REJECT_PDATA_MAX 148u

enum kvi_role {
	KVI_ROLE_CLIENT = 1,   /* a libkvclient handle */
	KVI_ROLE_LOOPBACK = 2, /* the server's own QP to its region (locks through the NIC) */
};

/* The join proof in the hello (common/auth.h makes it, auth_admit.h checks it): who holds
 * the shared secret (or, for the server's own loopback connections, the
 * server's per-process loopback key) proves it without sending it.
 *   mac = HMAC-SHA256(key, magic | version | role | timestamp_ms | nonce |
 *                          server address | server port | 6 zero bytes)
 *         truncated to its first 16 bytes; the fields are hashed as they lie
 *         on the wire (little-endian), then the server as the client dials it
 *         (auth.h "kvi_auth_server": 16 address bytes, IPv4 as ::ffff:a.b.c.d,
 *         and the port, little-endian): 56 bytes in all. The server's part is
 *         not sent: each end knows it (the address connected to), so a proof
 *         is good for one server only.
 * All zero means "no proof" (a client without a secret). */
#define KVI_AUTH_NONCE_LEN 16u
#define KVI_AUTH_MAC_LEN 16u
struct kvi_wire_proof {
	uint64_t timestamp_ms; /* CLOCK_REALTIME, ms since the epoch */
	uint8_t nonce[KVI_AUTH_NONCE_LEN]; /* random (getrandom), never reused */
	uint8_t mac[KVI_AUTH_MAC_LEN];
};
_Static_assert(sizeof(struct kvi_wire_proof) == 40, "proof layout");

/* Connect private data. */
struct kvi_wire_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t role; /* enum kvi_role: what the peer claims; the server decides */
	uint64_t reserved;
	struct kvi_wire_proof auth;
};
_Static_assert(sizeof(struct kvi_wire_hello) == 56, "hello must fill the 56-byte REQ private data");
_Static_assert(offsetof(struct kvi_wire_hello, auth) == 16, "hello layout");
_Static_assert(offsetof(struct kvi_wire_hello, auth.mac) == 40, "hello layout");

enum kvi_welcome_flags {
	/* The server never evicts a live item (kvserver --no-evict): an insert
	 * that finds both buckets full of live items must fail, not evict one. */
	KVI_WELCOME_NO_EVICT = 1u << 0,
	KVI_WELCOME_FLAGS = KVI_WELCOME_NO_EVICT,
};

/* The region's geometry on the wire (layout.h struct kvi_geometry). */
struct kvi_wire_geometry {
	uint32_t layout_version;
	uint32_t reserved; /* zero */
	uint64_t epoch;
	uint64_t region_size;
	uint64_t index_off;    /* home index */
	uint64_t bucket_count; /* home index */
	uint64_t heap_off;
	uint64_t heap_size;
	uint64_t segment_size;
	uint64_t hash_seed;
};
_Static_assert(sizeof(struct kvi_wire_geometry) == 72, "geometry layout");

/* Accept private data: everything a client needs to address the region. The
 * geometry comes from here, never from the region's superblock (layout.h
 * "Geometry"). */
struct kvi_wire_welcome {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;       /* enum kvi_welcome_flags; unknown bits are refused */
	uint32_t client_id;   /* lock owner id for this client; never 0 */
	uint32_t rkey;        /* of the one region MR */
	uint64_t region_addr; /* remote virtual address of region offset 0 */
	uint32_t max_op_ms;   /* longest operation deadline a client may use (>= 1) */
	uint32_t quarantine_ms; /* reclaimed memory is reused after this (> 2 x max_op_ms + exec_ms) */
	uint32_t lease_ms;    /* client lease length; 0 = no leases */
	/* The execution bound settle and quarantine assume (exec_bound.h): a
	 * client whose QP may execute a work request later refuses to run. */
	uint32_t exec_ms;
	struct kvi_wire_geometry geo;
	uint8_t reserved[24];
};
_Static_assert(offsetof(struct kvi_wire_welcome, geo) == 40, "welcome layout");
_Static_assert(sizeof(struct kvi_wire_welcome) == 136, "welcome layout");
_Static_assert(sizeof(struct kvi_wire_welcome) <= KVI_CM_ACCEPT_PDATA_MAX, "welcome fits REP");

enum kvi_reject_reason {
	KVI_REJECT_VERSION = 1, /* hello magic/version not understood */
	KVI_REJECT_AUTH = 2,    /* wrong proof (wrong secret), or a loopback claim without the key */
	KVI_REJECT_DEVICE = 3, /* request arrived on a device the server does not serve */
	KVI_REJECT_FULL = 4,   /* no client id or resources left */
	KVI_REJECT_SHUTDOWN = 5,
	KVI_REJECT_NOAUTH = 6, /* the server needs a proof and the hello carries none */
	KVI_REJECT_STALE = 7,  /* proof timestamp outside the server's window (clock skew) */
	KVI_REJECT_REPLAY = 8, /* this proof (its nonce) was already used */
};

struct kvi_wire_reject {
	uint32_t magic;
	uint16_t version;
	uint16_t reason; /* enum kvi_reject_reason */
};
_Static_assert(sizeof(struct kvi_wire_reject) == 8, "reject layout");
_Static_assert(sizeof(struct kvi_wire_reject) <= KVI_CM_REJECT_PDATA_MAX, "reject fits REJ");

/* Control messages: SEND/RECV on the client's RC QP, after the handshake.
 * Every message is exactly this size; a request gets exactly one response with
 * the same seq; the server may also send unsolicited notices (seq 0). The
 * server keeps KVI_CTRL_RECV_DEPTH receives posted per client; a client has at
 * most KVI_CTRL_MAX_OUTSTANDING requests outstanding (one call it waits for,
 * plus, sent without waiting, a lease renewal, a lock report or GROW (they
 * share one place), a segment request, and a COUNTS report). */
#define KVI_CTRL_RECV_DEPTH 8u
#define KVI_CTRL_MAX_OUTSTANDING 5u
_Static_assert(KVI_CTRL_MAX_OUTSTANDING <= KVI_CTRL_RECV_DEPTH, "the server has a receive for each");

/* What each message's five argument words mean is written once, on its view
 * in struct kvi_ctrl below (the member named after the message). */
enum kvi_ctrl_type {
	KVI_CTRL_SEG_REQ = 1,      /* client -> server: seg_req */
	KVI_CTRL_SEG_GRANT = 2,    /* server -> client: seg_grant */
	KVI_CTRL_ERROR = 3,        /* server -> client: status = KVC_ code for request seq */
	KVI_CTRL_SHUTDOWN = 4,     /* server -> client notice: the server is going away */
	KVI_CTRL_STATS_REQ = 5,    /* client -> server: stats_req */
	KVI_CTRL_STATS = 6,        /* server -> client: arg[0..4] = statistics 5 x page .. 5 x page + 4 */
	KVI_CTRL_SEG_RETURN = 7,   /* client -> server, when leaving: seg_return */
	KVI_CTRL_SEG_RETURNED = 8, /* server -> client: the extent's unused tail is the server's again */
	KVI_CTRL_LEASE_RENEW = 9,  /* client -> server: lease_renew */
	KVI_CTRL_LEASE = 10,       /* server -> client: lease */
	KVI_CTRL_LOCK_REPORT = 11, /* client -> server: lock_report */
	KVI_CTRL_LOCK_REPORTED = 12, /* server -> client: lock_reported */
	KVI_CTRL_INDEX_REQ = 13,   /* client -> server: index_req */
	KVI_CTRL_INDEX = 14,       /* server -> client: index */
	KVI_CTRL_GROW = 15,        /* client -> server: grow */
	KVI_CTRL_GROWING = 16,     /* server -> client: growing */
	KVI_CTRL_COUNTS = 17,      /* client -> server: counts */
	KVI_CTRL_COUNTED = 18,     /* server -> client: the counts were added (no arguments) */
	KVI_CTRL_TYPE_MAX = 18,
};

#define KVI_INDEX_CHUNKS_PER_MSG 4u

/* LEASE flags. */
enum kvi_lease_flags {
	/* The lease had lapsed while the client was idle: it is a member again
	 * (same id), its extent was sealed meanwhile (members.h "Idleness"). */
	KVI_LEASE_F_READMITTED = 1,
};

/* LEASE state: where the server's resizing stands. */
enum kvi_index_state {
	KVI_INDEX_STABLE = 0,    /* one index */
	KVI_INDEX_MIGRATING = 1, /* the current index is filling from the previous one */
};

/* What the server makes of a GROW. */
enum kvi_grow_verdict {
	KVI_GROW_NO = 0,      /* the index cannot grow (memory): evict, or fail KVC_EINDEXFULL */
	KVI_GROW_STARTED = 1, /* a resize is under way: wait for the next epoch, then retry */
	KVI_GROW_STALE = 2,   /* the index you named is not the current one: fetch it and retry */
};

/* What the server makes of a lock report (server/members.h "Lock reports"). */
enum kvi_report_verdict {
	KVI_REPORT_CHANGED = 0, /* the word is no longer the one reported: retry */
	KVI_REPORT_CLEARING = 1, /* it names no live client: the server releases it */
	KVI_REPORT_WATCHING = 2, /* a live owner: fenced if the word is still there one deadline later */
	KVI_REPORT_FENCING = 3,  /* the owner kept it past every deadline: it is being fenced */
};

/* Server statistics, five to a STATS page, in the order server_stats.h
 * lists them (the list says what each is). */
enum kvi_stat_id {
#define KVI_STAT_ID(id, ...) KVI_STAT_##id,
	KVI_SERVER_STATS(KVI_STAT_ID)
#undef KVI_STAT_ID
	KVI_STAT_COUNT
};
#define KVI_STATS_PAGES ((KVI_STAT_COUNT + 4) / 5)

struct kvi_wire_ctrl {
	uint32_t magic;
	uint16_t version;
	uint16_t type;   /* enum kvi_ctrl_type */
	uint32_t length; /* sizeof(struct kvi_wire_ctrl) */
	uint32_t seq;
	int32_t status; /* 0 or a KVC_ code */
	uint32_t reserved;
	uint64_t arg[5];
};
_Static_assert(sizeof(struct kvi_wire_ctrl) == 64, "control message layout");
_Static_assert(offsetof(struct kvi_wire_ctrl, arg) == 24, "control message layout");

/* The arguments of each control message, one view per message type, in
 * host order. Every field is a whole argument word, in wire order; every view
 * is all five words (unused ones are named `unused` and sent as zero), so that
 * initializing a message through its view zeroes the words it does not name --
 * a union initialized through a shorter member would leave them unspecified,
 * and they go on the wire. */

/* SEG_REQ: the client wants room to append an object. */
struct kvi_ctrl_seg_req {
	uint64_t need; /* bytes needed (the object to append) */
	uint64_t used; /* bytes of my current extent used */
	uint64_t unused[3];
};
/* SEG_GRANT: the answer to SEG_REQ, the client's new extent. */
struct kvi_ctrl_seg_grant {
	uint64_t off; /* extent offset in the region (KVI_OBJ_ALIGN aligned) */
	uint64_t len; /* extent length (>= need, <= a segment) */
	/* The CAS unique of an object at the extent's start; one at offset o
	 * has cas_base + o / 16 (layout.h "CAS uniques"). >= 1. */
	uint64_t cas_base;
	uint64_t unused[2];
};
/* STATS_REQ: one page of the server statistics (STATS answers in arg). */
struct kvi_ctrl_stats_req {
	uint64_t page; /* 0 .. KVI_STATS_PAGES - 1 */
	uint64_t unused[4];
};
/* SEG_RETURN: the client leaves and gives its extent's unused tail back. */
struct kvi_ctrl_seg_return {
	uint64_t used; /* bytes of my extent used */
	uint64_t unused[4];
};
/* LEASE_RENEW: extend my lease (server/members.h "Leases"). */
struct kvi_ctrl_lease_renew {
	uint64_t epoch;     /* the index epoch I use: my acknowledgement of it (layout.h "Resize") */
	uint64_t idle_addr; /* address of my idle word (members.h "Idleness"; 0 with idle_rkey 0: none) */
	uint64_t idle_rkey; /* its rkey */
	uint64_t unused[2];
};
/* LEASE: the answer to LEASE_RENEW. The client fetches the index
 * (INDEX_REQ) when epoch or state differs from what it has. */
struct kvi_ctrl_lease {
	uint64_t lease_ms; /* lease, counted from when the server got the renewal */
	uint64_t renew_ms; /* renewal interval */
	uint64_t epoch;    /* the current index epoch */
	uint64_t state;    /* enum kvi_index_state */
	uint64_t flags;    /* enum kvi_lease_flags */
};
/* LOCK_REPORT: a writer keeps finding the same lock word in a bucket
 * (server/members.h "Lock reports"). */
struct kvi_ctrl_lock_report {
	uint64_t bucket; /* the bucket, in the index of epoch `epoch` */
	uint64_t word;   /* the lock word I keep finding there */
	uint64_t epoch;  /* epoch of the index of that bucket */
	uint64_t unused[2];
};
/* LOCK_REPORTED: the answer to LOCK_REPORT. */
struct kvi_ctrl_lock_reported {
	uint64_t verdict; /* enum kvi_report_verdict */
	uint64_t unused[4];
};
/* INDEX_REQ: where the chunks of an index lie, KVI_INDEX_CHUNKS_PER_MSG at a
 * time. */
struct kvi_ctrl_index_req {
	uint64_t which;       /* 0 current, 1 previous: the one a migration is emptying */
	uint64_t first_chunk; /* first chunk wanted */
	uint64_t unused[3];
};
/* INDEX: the answer to INDEX_REQ. */
struct kvi_ctrl_index {
	uint64_t epoch;        /* 0: no such index */
	uint64_t bucket_count;
	uint64_t chunks;       /* first chunk (bits 0..31) | number of chunks (bits 32..63) */
	/* chunks first .. first + 3 as page numbers (region offset /
	 * KVI_INDEX_CHUNK_ALIGN), two per word, low half first; 0 past the end */
	uint64_t pages[2];
};
/* GROW: an insert found both its buckets full of live items (server/core.h
 * "GROW": the server checks what it claims). */
struct kvi_ctrl_grow {
	uint64_t epoch; /* epoch of that index */
	/* 0, or (during a migration, epoch the previous one) a full old
	 * bucket + 1 that the migrator should split next */
	uint64_t split_next;
	/* with split_next 0, the full pair's buckets + 1 in that index (0: none) */
	uint64_t full_pair[2];
	uint64_t unused[1];
};
/* GROWING: the answer to GROW. */
struct kvi_ctrl_growing {
	uint64_t verdict; /* enum kvi_grow_verdict */
	uint64_t unused[4];
};

/* COUNTS: what grew of one page of my memcached counters since my last
 * report (common/item_counts.h): KVI_COUNTS_PER_PAGE 32-bit increments, two
 * to a word, low half first (a counter that grew more waits for the next
 * report for the rest). */
struct kvi_ctrl_counts {
	uint64_t page; /* 0 .. KVI_COUNTS_PAGES - 1 */
	uint64_t inc[4];
};

/* Host-order views, filled by the decoders after validation. The encoder,
 * the decoder and the STATS pages use the raw words (arg); everything else
 * uses the view of its message type. */
struct kvi_ctrl {
	uint16_t type;
	uint32_t seq;
	int32_t status;
	union {
		uint64_t arg[5];
		struct kvi_ctrl_seg_req seg_req;
		struct kvi_ctrl_seg_grant seg_grant;
		struct kvi_ctrl_stats_req stats_req;
		struct kvi_ctrl_seg_return seg_return;
		struct kvi_ctrl_lease_renew lease_renew;
		struct kvi_ctrl_lease lease;
		struct kvi_ctrl_lock_report lock_report;
		struct kvi_ctrl_lock_reported lock_reported;
		struct kvi_ctrl_index_req index_req;
		struct kvi_ctrl_index index;
		struct kvi_ctrl_grow grow;
		struct kvi_ctrl_growing growing;
		struct kvi_ctrl_counts counts;
	};
};

/* Each named field lies on the argument word its comment gives it. */
#define KVI_CTRL_ARG_IS(field, i)                                                                    \
	_Static_assert(offsetof(struct kvi_ctrl, field) == offsetof(struct kvi_ctrl, arg) + 8 * (i), \
		       "control message view: " #field " is arg " #i)
#define KVI_CTRL_VIEW_IS_5_WORDS(view)                                                               \
	_Static_assert(sizeof(((struct kvi_ctrl *)0)->view) == sizeof(((struct kvi_ctrl *)0)->arg), \
		       "control message view: " #view " is five words")
KVI_CTRL_ARG_IS(seg_req.need, 0);
KVI_CTRL_ARG_IS(seg_req.used, 1);
KVI_CTRL_ARG_IS(seg_grant.off, 0);
KVI_CTRL_ARG_IS(seg_grant.len, 1);
KVI_CTRL_ARG_IS(seg_grant.cas_base, 2);
KVI_CTRL_ARG_IS(stats_req.page, 0);
KVI_CTRL_ARG_IS(seg_return.used, 0);
KVI_CTRL_ARG_IS(lease_renew.epoch, 0);
KVI_CTRL_ARG_IS(lease_renew.idle_addr, 1);
KVI_CTRL_ARG_IS(lease_renew.idle_rkey, 2);
KVI_CTRL_ARG_IS(lease.lease_ms, 0);
KVI_CTRL_ARG_IS(lease.renew_ms, 1);
KVI_CTRL_ARG_IS(lease.epoch, 2);
KVI_CTRL_ARG_IS(lease.state, 3);
KVI_CTRL_ARG_IS(lease.flags, 4);
KVI_CTRL_ARG_IS(lock_report.bucket, 0);
KVI_CTRL_ARG_IS(lock_report.word, 1);
KVI_CTRL_ARG_IS(lock_report.epoch, 2);
KVI_CTRL_ARG_IS(lock_reported.verdict, 0);
KVI_CTRL_ARG_IS(index_req.which, 0);
KVI_CTRL_ARG_IS(index_req.first_chunk, 1);
KVI_CTRL_ARG_IS(index.epoch, 0);
KVI_CTRL_ARG_IS(index.bucket_count, 1);
KVI_CTRL_ARG_IS(index.chunks, 2);
KVI_CTRL_ARG_IS(index.pages[0], 3);
KVI_CTRL_ARG_IS(index.pages[1], 4);
KVI_CTRL_ARG_IS(grow.epoch, 0);
KVI_CTRL_ARG_IS(grow.split_next, 1);
KVI_CTRL_ARG_IS(grow.full_pair[0], 2);
KVI_CTRL_ARG_IS(grow.full_pair[1], 3);
KVI_CTRL_ARG_IS(counts.page, 0);
KVI_CTRL_ARG_IS(counts.inc[0], 1);
KVI_CTRL_ARG_IS(growing.verdict, 0);
KVI_CTRL_VIEW_IS_5_WORDS(seg_req);
KVI_CTRL_VIEW_IS_5_WORDS(seg_grant);
KVI_CTRL_VIEW_IS_5_WORDS(stats_req);
KVI_CTRL_VIEW_IS_5_WORDS(seg_return);
KVI_CTRL_VIEW_IS_5_WORDS(lease_renew);
KVI_CTRL_VIEW_IS_5_WORDS(lease);
KVI_CTRL_VIEW_IS_5_WORDS(lock_report);
KVI_CTRL_VIEW_IS_5_WORDS(lock_reported);
KVI_CTRL_VIEW_IS_5_WORDS(index_req);
KVI_CTRL_VIEW_IS_5_WORDS(index);
KVI_CTRL_VIEW_IS_5_WORDS(grow);
KVI_CTRL_VIEW_IS_5_WORDS(growing);
KVI_CTRL_VIEW_IS_5_WORDS(counts);
#undef KVI_CTRL_ARG_IS
#undef KVI_CTRL_VIEW_IS_5_WORDS

struct kvi_proof {
	uint64_t timestamp_ms;
	uint8_t nonce[KVI_AUTH_NONCE_LEN];
	uint8_t mac[KVI_AUTH_MAC_LEN];
};
struct kvi_hello {
	uint16_t role;
	int has_proof; /* decode: the auth area is not all zero (encode ignores it) */
	struct kvi_proof proof; /* encoded as is; all zero = no proof */
};
struct kvi_welcome {
	uint32_t client_id;
	uint32_t rkey;
	uint64_t region_addr;
	uint32_t max_op_ms;
	uint32_t quarantine_ms;
	uint32_t lease_ms;
	uint32_t exec_ms;
	uint16_t flags; /* enum kvi_welcome_flags */
	struct kvi_geometry geo;
};

void kvi_wire_hello_encode(struct kvi_wire_hello *w, const struct kvi_hello *h);
int kvi_wire_hello_decode(const void *buf, size_t len, struct kvi_hello *out);

void kvi_wire_welcome_encode(struct kvi_wire_welcome *w, const struct kvi_welcome *h);
/* 0, or KVC_EPROTO for a wrong size, magic, version or flags, impossible
 * limits, or a geometry kvi_geometry_check refuses; *why (when why is not
 * NULL) then names the problem in a phrase. */
int kvi_wire_welcome_decode(const void *buf, size_t len, struct kvi_welcome *out, const char **why);

void kvi_wire_reject_encode(struct kvi_wire_reject *w, uint16_t reason);
/* Returns the reason, or 0 when buf is not one of our rejects. */
uint16_t kvi_wire_reject_decode(const void *buf, size_t len);

void kvi_wire_ctrl_encode(struct kvi_wire_ctrl *w, const struct kvi_ctrl *c);
/* 0, or KVC_EPROTO for a wrong size, magic, version, length or type. */
int kvi_wire_ctrl_decode(const void *buf, size_t len, struct kvi_ctrl *out);

/* What a reject reason means to the connecting side: a KVC_ code and a hint. */
int kvi_reject_reason_code(uint16_t reason);
const char *kvi_reject_reason_text(uint16_t reason);

#endif
