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

#include "layout.h" /* struct kvi_geometry */
#include "server_stats.h"

#define KVI_WIRE_MAGIC 0x3143564bu /* "KVC1" read as little-endian bytes */
/* 2: the welcome carries the geometry; 3: indexes come in INDEX messages;
 * 4: the join proof's MAC covers the server's address and port; 5: the
 * welcome states the execution bound, renewals name the idle word and
 * LEASE carries flags */
#define KVI_WIRE_VERSION 5u

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
 * share one place), and a segment request). */
#define KVI_CTRL_RECV_DEPTH 8u
#define KVI_CTRL_MAX_OUTSTANDING 4u

enum kvi_ctrl_type {
	KVI_CTRL_SEG_REQ = 1,   /* client -> server: arg0 = bytes needed, arg1 = bytes of my extent used */
	KVI_CTRL_SEG_GRANT = 2, /* server -> client: arg0 = extent offset, arg1 = extent length */
	KVI_CTRL_ERROR = 3,     /* server -> client: status = KVC_ code for request seq */
	KVI_CTRL_SHUTDOWN = 4,  /* server -> client notice: the server is going away */
	KVI_CTRL_STATS_REQ = 5, /* client -> server: arg0 = page (0 .. KVI_STATS_PAGES - 1) */
	KVI_CTRL_STATS = 6,     /* server -> client: arg0..4 = statistics 5 x page .. 5 x page + 4 */
	KVI_CTRL_SEG_RETURN = 7,   /* client -> server, when leaving: arg0 = bytes of my extent used */
	KVI_CTRL_SEG_RETURNED = 8, /* server -> client: the extent's unused tail is the server's again */
	/* client -> server: extend my lease (server/members.h "Leases"); arg0 = the
	 * index epoch I use (my acknowledgement of it, layout.h "Resize"), arg1 =
	 * address and arg2 = rkey of my idle word (members.h "Idleness"; 0, 0:
	 * none) */
	KVI_CTRL_LEASE_RENEW = 9,
	/* server -> client: arg0 = lease ms, counted from when the server got the
	 * renewal, arg1 = renewal interval ms, arg2 = the current index epoch,
	 * arg3 = enum kvi_index_state: fetch the index (INDEX_REQ) when either
	 * differs from what I have, arg4 = enum kvi_lease_flags */
	KVI_CTRL_LEASE = 10,
	/* client -> server: arg0 = bucket, arg1 = lock word I keep finding there,
	 * arg2 = epoch of the index of that bucket */
	KVI_CTRL_LOCK_REPORT = 11,
	KVI_CTRL_LOCK_REPORTED = 12, /* server -> client: arg0 = enum kvi_report_verdict */
	/* client -> server: arg0 = which index (0 current, 1 previous: the one a
	 * migration is emptying), arg1 = first chunk wanted */
	KVI_CTRL_INDEX_REQ = 13,
	/* server -> client: arg0 = epoch (0: no such index), arg1 = bucket count,
	 * arg2 = first chunk (bits 0..31) | number of chunks (bits 32..63),
	 * arg3, arg4 = chunks first .. first + 3 as page numbers (region offset /
	 * KVI_INDEX_CHUNK_ALIGN), two per word, low half first; 0 past the end */
	KVI_CTRL_INDEX = 14,
	/* client -> server: an insert found both its buckets full of live items;
	 * arg0 = epoch of that index; arg1 = 0, or (during a migration, arg0 the
	 * previous epoch) a full old bucket + 1 that the migrator should split next;
	 * arg2, arg3 = with arg1 0, the full pair's buckets + 1 in that index
	 * (the server checks them: core.h "GROW") */
	KVI_CTRL_GROW = 15,
	KVI_CTRL_GROWING = 16, /* server -> client: arg0 = enum kvi_grow_verdict */
	KVI_CTRL_TYPE_MAX = 16,
};

#define KVI_INDEX_CHUNKS_PER_MSG 4u

/* LEASE arg3: where the server's resizing stands. */
enum kvi_lease_flags {
	/* The lease had lapsed while the client was idle: it is a member again
	 * (same id), its extent was sealed meanwhile (members.h "Idleness"). */
	KVI_LEASE_F_READMITTED = 1,
};

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

/* Host-order views, filled by the decoders after validation. */
struct kvi_ctrl {
	uint16_t type;
	uint32_t seq;
	int32_t status;
	uint64_t arg[5];
};

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
