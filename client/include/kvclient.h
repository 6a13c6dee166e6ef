/* libkvclient: the client of a remote key-value cache whose data path is
 * one-sided RDMA (GET = RDMA READ, PUT/DELETE = RDMA CAS locks + WRITE).
 *
 * Conventions: every call returns 0 or a negative KVC_ code (kvclient_errors.h);
 * constructors hand objects back through an out-parameter; destroy functions
 * accept NULL. The library never prints, never exits, and starts no threads.
 *
 * Threads: a kvc_t holds one connection, with its own queue pair, per server
 * of its list ("Several servers" at kvc_create); like a verbs QP, use one
 * handle per thread. Nothing on the data path takes a lock.
 *
 * Membership: each of a handle's connections holds a lease from its server,
 * renewed from inside kvc_submit and kvc_poll (the library has no thread of
 * its own). A handle the application leaves alone for longer than the
 * server's lease (kvserver --lease-ms, default 1 s) with nothing in flight
 * stays connected: the server checks that it is idle (one RDMA READ of a
 * word of the handle's) and its next call renews the lease on the same
 * connection. A connection whose lease ran out while it had operations in
 * flight -- its thread stalled -- is fenced by the server; operations that
 * would post after the lease fail KVC_EFENCED. Whenever a connection is
 * broken (fenced, server restarted, path lost), the operations in flight on
 * it fail and the next call to that server with nothing in flight on it
 * rejoins the server transparently (a new connection and client id; attempts
 * back off from 10 ms to 1 s, failing fast meanwhile with KVC_ESERVERGONE, or
 * KVC_EFENCED after a fencing). */
#ifndef KVCLIENT_H
#define KVCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "kvclient_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 1
#define KVC_VERSION_PATCH 0

#define KVC_MAX_KEY 250u    /* bytes; keys are 1..250 bytes (memcached's limit) */
#define KVC_DEFAULT_PORT 7471

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
KVC_EXPORT const char *kvc_version(void);

enum kvc_log_level { KVC_LOG_ERROR = 0, KVC_LOG_WARN, KVC_LOG_INFO, KVC_LOG_DEBUG };
typedef void (*kvc_log_fn)(void *arg, int level, const char *msg);

/* Route the library's diagnostics (connection failures in detail, device
 * choices) to fn, for levels up to max_level. Call before creating handles;
 * NULL silences the library (the default). */
KVC_EXPORT void kvc_set_log(kvc_log_fn fn, void *arg, int max_level);

typedef struct kvc kvc_t;

struct kvc_opts {
	/* "HOST[:PORT]", or a list of servers "HOST[:PORT][=WEIGHT],..." (up to
	 * 64) whose keys are spread by consistent hashing ("Several servers"
	 * below). NULL: the environment variable KVC_SERVERS, else servers_file. */
	const char *server;
	const char *device;     /* RDMA device to use, or NULL for the one routing to HOST */
	int connect_timeout_ms; /* a whole join (resolve, route, connect); default 5000 */
	/* Every operation's deadline, counted from kvc_submit: past it the
	 * operation posts nothing more and fails KVC_ETIMEDOUT (a result read
	 * after it is never returned: the server may have reused that memory).
	 * The server states the longest deadline it allows (kvserver
	 * --max-op-ms, default 1000) and this is capped to it. A write that
	 * passes its deadline while it may hold bucket locks, or a batch
	 * unanswered for this long (server or path gone), breaks that server's
	 * connection on purpose (the server then releases its locks): every
	 * operation in flight on it fails (KVC_ETIMEDOUT; KVC_EUNKNOWN for a
	 * write whose commit was sent), and the next call rejoins (see
	 * "Membership" above). Default 2000. */
	int op_timeout_ms;
	unsigned depth;         /* asynchronous operations in flight, 1..64; default 16 */
	unsigned cache_entries; /* client-side location cache entries per server (32 B each,
				  * rounded down to a power of two; four-way, least recently
				  * used out); 0 = off; default 4096 */
	/* Tell the server which items are read (a 1-byte WRITE riding in a later
	 * doorbell, once per item until the server copies it forward), so that
	 * its reclaimer keeps them rather than evicting them. Default 1; 0 only
	 * to measure what tracking costs. */
	int track_access;
	/* File holding the shared secret of a kvserver started with
	 * --secret-file (the same file's contents; one trailing newline is not
	 * part of it). The handle proves it holds the secret when joining; the
	 * secret itself is never sent. A file that group or others may read or
	 * write is refused (KVC_EINVAL): chmod 600 it. NULL: the file named by
	 * the environment variable KVC_SECRET_FILE, if set (secure_getenv: not in
	 * a set-user-ID program), else no proof (a server that needs one refuses
	 * with KVC_ENOAUTH). */
	const char *secret_file;
	/* A file holding the server list (the form above; commas, spaces or
	 * newlines between servers, '#' starts a comment). The handle looks at
	 * it at most once a second, from kvc_submit and kvc_poll, and when it
	 * changed applies it as kvc_set_servers would (a bad list is logged and
	 * ignored). NULL: the environment variable KVC_SERVERS_FILE, if set.
	 * Used for the initial list too when server is NULL. */
	const char *servers_file;
	/* Auto-eject (as libmemcached's server_failure_limit / retry_timeout):
	 * a server whose operations or joins failed this many times in a row
	 * (server gone, unreachable, timed out) leaves the hash for
	 * retry_timeout_ms: its keys go to the others meanwhile. 0 (default):
	 * never; its keys fail fast with KVC_ESERVERGONE until it is back. */
	unsigned server_failure_limit;
	int retry_timeout_ms; /* default 2000 */
	/* A call that waits for the NIC (the blocking calls, kvc_poll with a
	 * timeout) polls its completion queue for this many microseconds, then
	 * sleeps until the device signals a completion. Polling answers fastest
	 * (a NIC's round trip takes a few microseconds); sleeping gives the core
	 * back when threads outnumber cores, and on a software device (Soft-RoCE)
	 * to the kernel work that makes the completions. -1: never sleep (one
	 * busy core per waiting thread); 0: sleep at once. Default 50. Beyond
	 * it, a wait polls on for up to 4x the connection's recent completion
	 * time (at most 500 us) while this process's polling waiters leave a
	 * CPU free: where a doorbell takes longer than busy_poll_us (a software
	 * device) it is polled for, not slept through (kvc_stats.wait_sleeps
	 * counts the sleeps). A handle with several servers polls all of them,
	 * then sleeps on all of them at once (up to 10 ms at a time). */
	int busy_poll_us;
};

/* Fill o with the defaults (server NULL). */
KVC_EXPORT void kvc_opts_init(struct kvc_opts *o);

/* Connect to the server(s) in o. On failure returns a KVC_ code and, if err
 * is not NULL, writes one line there: what failed, where, and what to do.
 * With a list, every server's join starts at once; kvc_create returns when
 * each has ended, or when at least one joined and each of the others has
 * been waiting for an answer twice as long as the slowest answer of a
 * joined server (10 ms at least). Those still joining go on, stepped by
 * later calls on the handle (no thread of the library's); a server whose
 * join failed is joined again when its keys are next used (see "Several
 * servers"). A join never holds the calling thread then (but for the
 * lookup of a host name, by the system's resolver).
 *
 * Several servers: one handle holds one connection per server, and each key
 * belongs to one server, chosen by weighted rendezvous hashing of the key
 * over the servers' names ("host:port" as listed; the order of the list does
 * not matter, and every client with the same list agrees). Adding a server
 * to N moves about 1/(N+1) of the keys, all to it; removing one moves only
 * its keys. Asynchronous operations to different servers are in flight
 * together, and depth bounds them all. A server that is down makes its keys
 * fail fast with KVC_ESERVERGONE (a cache treats that as a miss) while the
 * others are unaffected; the handle joins it again, backing off from 10 ms
 * to 1 s, so its keys are served again about a second after it is back.
 * A join attempt never holds the calling thread: it goes on in the
 * background of the handle's calls for up to connect_timeout_ms. */
KVC_EXPORT int kvc_create(const struct kvc_opts *o, kvc_t **out, char *err, size_t errlen);
/* Replace the server list (the form of kvc_opts.server) while running:
 * servers kept keep their connections and keys; new ones start joining now
 * and join in the background of later calls (a server that cannot be
 * joined is kept, down, like any other); removed ones
 * take no new operations and are closed once theirs finish. Only the keys
 * that must move do. KVC_EINVAL (one line in err) for a bad list, which
 * changes nothing; KVC_EBUSY when the new list and the servers that would
 * be draining exceed 128 (lists changed faster than operations finish):
 * poll, then set it again. */
KVC_EXPORT int kvc_set_servers(kvc_t *h, const char *servers, char *err, size_t errlen);

/* The servers of the list, for monitoring. */
enum kvc_server_state {
	KVC_SERVER_UP = 0, /* joined */
	KVC_SERVER_DOWN,   /* not joined, no join under way (backing off): its keys fail fast */
	KVC_SERVER_EJECTED, /* down and out of the hash (server_failure_limit) */
	KVC_SERVER_JOINING  /* a join under way (its first, or again): its keys fail fast meanwhile */
};
struct kvc_server_info {
	const char *name; /* "host:port"; valid until the list changes */
	uint32_t weight;
	int state;        /* enum kvc_server_state */
	unsigned failures; /* failures in a row */
	uint64_t ops;      /* operations finished through it */
};
KVC_EXPORT unsigned kvc_server_count(const kvc_t *h);
KVC_EXPORT int kvc_server_info(const kvc_t *h, unsigned i, struct kvc_server_info *out);
/* The index (0..kvc_server_count-1) of the server that key belongs to now,
 * or KVC_ESERVERGONE when every server is ejected. */
KVC_EXPORT int kvc_key_server(const kvc_t *h, const void *key, size_t key_len);
/* Disconnect and free. Operations still in flight are abandoned: they are not
 * returned, and their buffers are the caller's again. */
KVC_EXPORT void kvc_destroy(kvc_t *h);

/* Blocking operations (the handle must have no asynchronous ones in flight,
 * else KVC_EBUSY).
 *
 * kvc_get copies the value into buf. *value_len receives the value's length;
 * when it exceeds buf_len the call returns KVC_ETRUNC and buf holds nothing
 * useful. A missing or expired key is KVC_ENOTFOUND. */
KVC_EXPORT int kvc_get(kvc_t *h, const void *key, size_t key_len, void *buf, size_t buf_len,
		       size_t *value_len);
/* A TTL (ttl_ms of any call or op) that writes the item already expired, as
 * memcached's negative exptime does: stored, and a miss to every read from
 * then on (an add, or a vivifying call, then finds the key free). */
#define KVC_TTL_EXPIRED UINT64_MAX

/* Insert or replace. ttl_ms > 0 makes the item expire that many milliseconds
 * after the call (by the clocks of the machines involved: docs/operations.md "Expiry"
 * states the guarantee, layout.h "Expiry" the mechanism); KVC_TTL_EXPIRED at once.
 * Too long a key (KVC_EKEYSIZE) or value (KVC_EVALSIZE, see kvc_max_value)
 * changes nothing. When both of the key's buckets are full, the insert takes
 * the slot of an expired item; else it asks the server to grow its index
 * (once) and waits for the larger one; when the server cannot grow it (or
 * not in time), the insert (unless the server runs with --no-evict) evicts
 * an item that was not read since it was written, else any item of the two;
 * KVC_EINDEXFULL only with --no-evict. */
KVC_EXPORT int kvc_put(kvc_t *h, const void *key, size_t key_len, const void *value, size_t value_len,
		       uint64_t ttl_ms);
/* Outcomes of a write (PUT or DELETE). 0: it took effect. A failure code
 * (KVC_ETIMEDOUT, KVC_ESERVERGONE, KVC_EFENCED, KVC_EIO, ...): it did not, and changed
 * nothing. KVC_EUNKNOWN: its commit (the slot WRITE) was sent, and then the
 * connection broke or the answer was lost; it may or may not have taken
 * effect -- read the key to learn which, or write it again (both PUT and
 * DELETE are idempotent). Never reported as a plain failure. */

/* Remove; KVC_ENOTFOUND if absent. (Asynchronously: a DELETE whose
 * kvc_op.cas is not 0 removes only an item with that unique, else
 * KVC_EEXISTS; see also KVC_META_INVALIDATE.) */
KVC_EXPORT int kvc_delete(kvc_t *h, const void *key, size_t key_len);

/* Memcached's item semantics. Every item carries a 32-bit flags word (the
 * caller's, stored and returned as is; 0 for kvc_put) and a 64-bit CAS
 * unique, never 0, that every store of the key changes and that is never
 * given again while the server runs (reclaiming memory does not bring an old
 * one back; a server restart starts over). The conditional stores decide
 * under the key's bucket locks, so they are linearizable with kvc_put,
 * kvc_delete and each other. An expired item is absent to them, as to GET.
 *
 * kvc_get_item: kvc_get that also returns the item's flags and unique (each
 * out-parameter may be NULL). */
KVC_EXPORT int kvc_get_item(kvc_t *h, const void *key, size_t key_len, void *buf, size_t buf_len,
			    size_t *value_len, uint32_t *flags, uint64_t *cas);

enum kvc_store_mode {
	KVC_STORE_SET = 0,     /* store (kvc_put) */
	KVC_STORE_ADD = 1,     /* only if the key is absent, else KVC_ENOTSTORED */
	KVC_STORE_REPLACE = 2, /* only if the key is present, else KVC_ENOTSTORED */
	KVC_STORE_CAS = 3,     /* only if the item's unique is `cas`: else KVC_EEXISTS, or
				* KVC_ENOTFOUND when the key is absent */
	/* Add value after (APPEND) or before (PREPEND) the item's, keeping its
	 * flags and expiry (flags and ttl_ms are ignored); KVC_ENOTSTORED when
	 * the key is absent, KVC_EVALSIZE when the result would be too long.
	 * A non-zero `cas` must also equal the item's unique (else KVC_EEXISTS). */
	KVC_STORE_APPEND = 4,
	KVC_STORE_PREPEND = 5,
};
/* Store value under key with flags and ttl_ms (as kvc_put) as mode says
 * (enum kvc_store_mode); cas: for KVC_STORE_CAS the unique the item must
 * have (from kvc_get_item), else ignored. On 0, *new_cas (if not NULL)
 * receives the new item's unique. A refused store (KVC_ENOTSTORED,
 * KVC_EEXISTS, KVC_ENOTFOUND) changed nothing.
 *
 * Round trips (RDMA doorbells waited for; control-path calls for memory
 * aside, as for kvc_put). GET and kvc_get_item: 1 with a valid cached
 * location, else 2 (buckets, then the object; a miss with no fingerprint
 * match: 1). A miss on an expired item not yet reclaimed: one more (the
 * bucket's lock word, then the slot, so that no writer that found the item
 * alive is still committing: layout.h "Expiry"), more while one is. A store of any mode: 2 when the key's location is cached and
 * valid (lock + re-read the slot + read the item's header and key, one
 * doorbell; then commit or release); else 2 when no slot's fingerprint
 * matches (absent: an insert, or a refused REPLACE / CAS) and 3 when one
 * does (lock + buckets, read the matching objects under the locks, commit or
 * release). A store that is refused costs the same as one that is not: the
 * last doorbell releases the locks instead of writing the slot. Conflicts,
 * full buckets and resizes add round trips as for kvc_put. */
KVC_EXPORT int kvc_store(kvc_t *h, int mode, const void *key, size_t key_len, const void *value, size_t value_len,
			 uint32_t flags, uint64_t ttl_ms, uint64_t cas, uint64_t *new_cas);

/* Read-modify-write calls. Each decides and writes under the key's bucket
 * locks, from the whole item read under them (so, like the stores above,
 * linearizable with every other write of the key), and writes a new object:
 * objects are never modified in place (layout.h I3). Round trips: 2 when the
 * key's location is cached and valid (lock + re-read the slot + read the
 * item, one doorbell; then write the new object + the slot + unlock, one
 * doorbell); else 3 when the key is present (lock + buckets; read the
 * fingerprint-matching objects; write + commit) and 2 when it is absent.
 *
 * kvc_incr / kvc_decr: memcached's arithmetic. The value must be a decimal
 * number of at most 20 digits that fits 64 bits (trailing spaces allowed),
 * else KVC_ENONNUMERIC; incr wraps at 2^64, decr stops at 0. The result is
 * stored in decimal (its length may change), with the item's flags and
 * expiry, and a new CAS unique; *value (if not NULL) receives it.
 * KVC_ENOTFOUND when the key is absent. */
KVC_EXPORT int kvc_incr(kvc_t *h, const void *key, size_t key_len, uint64_t delta, uint64_t *value);
KVC_EXPORT int kvc_decr(kvc_t *h, const void *key, size_t key_len, uint64_t delta, uint64_t *value);
/* kvc_touch: give the item a new expiry, ttl_ms from now (0: never), keeping
 * its value, flags and CAS unique (as memcached's touch does). kvc_gat (get
 * and touch): the same, and return the item as kvc_get_item does (on
 * KVC_ETRUNC the touch was made; *value_len says the length). KVC_ENOTFOUND
 * when the key is absent. */
KVC_EXPORT int kvc_touch(kvc_t *h, const void *key, size_t key_len, uint64_t ttl_ms);
KVC_EXPORT int kvc_gat(kvc_t *h, const void *key, size_t key_len, uint64_t ttl_ms, void *buf, size_t buf_len,
		       size_t *value_len, uint32_t *flags, uint64_t *cas);

/* Run ops (any types) together and wait until every one finished: a
 * multi-get is kvc_run_batch of GETs. Returns 0 when all ran (each op's
 * status says how it went), or KVC_EINVAL / KVC_EBUSY (the handle has
 * asynchronous operations in flight) with none started. The ops go out
 * through kvc_submit_many, at most the handle's depth at a time. */
struct kvc_op;
KVC_EXPORT int kvc_run_batch(kvc_t *h, struct kvc_op *const *ops, unsigned n);

/* memcached's flush_all: every item written before the flush takes effect
 * is gone for every client -- at once (delay_ms 0: when the call returns,
 * no GET finds one) or delay_ms from now (the call returns once scheduled;
 * a later flush replaces a pending one, an immediate one cancels it). Sent
 * to every server of the handle (a server still joining is waited for, up
 * to its join's deadline); the server does the work off its event
 * loop (GETs go on; an item written while it runs may survive). Round
 * trips: one control message per server, then, for delay_ms 0, one per
 * server every 0.2 to 20 ms until its walk is done. 0 when every server
 * did it, else the first failure: KVC_ENOTSUP (a server without its
 * reclaimer thread), KVC_ETIMEDOUT (a walk stopped moving), or the
 * connection's code. */
KVC_EXPORT int kvc_flush_all(kvc_t *h, uint64_t delay_ms);

/* Largest value the server accepts for a key of key_len bytes (with several
 * servers: the smallest of the joined servers'; 0 while none is joined). */
KVC_EXPORT size_t kvc_max_value(const kvc_t *h, size_t key_len);

/* Asynchronous interface: submit many, poll completions. The kvc_op and every
 * buffer it names belong to the library from kvc_submit until kvc_poll returns
 * the op; then status (and for GET value_len) hold the result. */
enum kvc_op_type {
	KVC_OP_GET = 1,
	KVC_OP_PUT = 2, /* any store (mode) */
	KVC_OP_DELETE = 3,
	KVC_OP_INCR = 4, /* kvc_incr: delta in, result out */
	KVC_OP_DECR = 5, /* kvc_decr */
	KVC_OP_TOUCH = 6, /* kvc_touch: ttl_ms */
	KVC_OP_GAT = 7,   /* kvc_gat: ttl_ms; buf, buf_len as GET */
};

/* INCR / DECR: bits of kvc_op.mode. */
enum kvc_arith_mode {
	/* On a miss, store `initial` (in decimal) with `flags` and ttl_ms, and
	 * report it as the result (memcached meta's "ma N"). */
	KVC_ARITH_VIVIFY = 1,
	/* On a hit, also give the item a new expiry, ttl_ms from now (0: never). */
	KVC_ARITH_TOUCH = 2,
};

struct kvc_op {
	int type; /* enum kvc_op_type */
	const void *key;
	size_t key_len;
	const void *value; /* PUT: the value */
	size_t value_len;  /* PUT: its length; GET: set to the value's length */
	uint64_t ttl_ms;   /* PUT: expire after this many milliseconds; 0 = never */
	void *buf;         /* GET: destination */
	size_t buf_len;    /* GET: its size */
	void *user;        /* yours */
	int status;        /* 0 or a KVC_ code, set on completion */
	/* Memcached's item fields (kvc_store, kvc_get_item). PUT: mode (enum
	 * kvc_store_mode; 0 is a plain store) and the flags word to store. GET:
	 * flags is set to the item's. cas -- PUT with KVC_STORE_CAS: the unique
	 * the item must have; set on completion with status 0 to the item's
	 * unique (GET: the one read; PUT: the new item's). */
	int mode;
	uint32_t flags;
	uint64_t cas;
	/* INCR / DECR: delta (in), initial (in, with KVC_ARITH_VIVIFY), and
	 * the item's new value (out, with status 0). */
	uint64_t delta;
	uint64_t initial;
	uint64_t result;
	/* GET: set with status 0 to the item's expiry, CLOCK_REALTIME
	 * milliseconds (0: never), e.g. for memcached meta's remaining TTL.
	 * GAT, INCR, DECR: the item's expiry before the call (a GAT's new one
	 * is ttl_ms from now; a vivified item's: its own), as memcached's
	 * "mg t T" and "ma t" tell it. */
	uint64_t expiry_ms;
	/* memcached meta's item states. meta (in): enum kvc_meta bits;
	 * recache_ms (in): with KVC_META_RECACHE. item (out, GET and GAT with
	 * status 0 or KVC_ETRUNC; INCR and DECR with status 0): enum kvc_item
	 * bits. */
	uint32_t meta;
	uint32_t item;
	uint64_t recache_ms;
};

/* kvc_op.meta. */
enum kvc_meta {
	/* GET, GAT: when the item's remaining TTL is below recache_ms, try to
	 * win the right to recache it (memcached meta "mg R"; a GAT decides it
	 * under the bucket locks, against the TTL before its touch, and its
	 * new object carries the token: no extra round trip). */
	KVC_META_RECACHE = 1,
	/* DELETE: mark the item stale instead of removing it ("md I"): a new
	 * CAS unique, served as stale (KVC_ITEM_STALE) until rewritten, with a
	 * new expiry ttl_ms from now when ttl_ms is not 0. A read-modify-write:
	 * round trips as kvc_touch.
	 * PUT with KVC_STORE_CAS ("ms I C"): a cas unique older (smaller) than
	 * the item's stores all the same, the new item stale (keeping the
	 * old one's expiry and recache token, as memcached does); the item's own
	 * unique stores as a cas does; a newer one: KVC_EEXISTS. Round trips
	 * as kvc_touch. */
	KVC_META_INVALIDATE = 2,
	/* PUT (set, add, replace, cas): the new item starts with its recache
	 * token taken, by this client: GETs see KVC_ITEM_WIN_SENT until it is
	 * rewritten (memcached meta "mg N", which vivifies a missing item as an
	 * empty one whose creator is told it won), and it counts as read
	 * (KVC_ITEM_FETCHED). No extra round trip. */
	KVC_META_WON = 4,
	/* GET, GAT, and PUT with KVC_META_WON: leave the item's "read since
	 * written" mark as it was (memcached meta "mg u": no LRU bump). A GET
	 * posts no access mark, a GAT's new object and a vivified item are not
	 * marked read, and a recache token won is taken without the mark. The
	 * next GET without it reports KVC_ITEM_FETCHED as before. */
	KVC_META_NO_BUMP = 8,
};

/* kvc_op.item: what a GET (or GAT) learnt of the item. A GET of a stale
 * item, or (KVC_META_RECACHE) of one whose TTL runs low, tries to win the
 * right to recache it: one RDMA CAS, one more round trip, only then. At most
 * one client at a time wins (best effort: a reclaimer's copy, or a racing
 * access mark, may let a second one win; layout.h "Recache tokens"). */
enum kvc_item {
	KVC_ITEM_FETCHED = 1,  /* read before this GET ("mg h") */
	KVC_ITEM_STALE = 2,    /* invalidated (KVC_META_INVALIDATE): "X" */
	KVC_ITEM_WON = 4,      /* this GET won the right to recache: "W" */
	KVC_ITEM_WIN_SENT = 8, /* another client won it: "Z" */
	KVC_ITEM_CREATED = 16, /* INCR, DECR with KVC_ARITH_VIVIFY: the key was absent and this call stored it */
};

/* Start op. KVC_EAGAIN when `depth` operations are in flight or finished but
 * not yet returned by kvc_poll; a bad key or value fails at once (nothing was
 * sent). A PUT that needs memory asks the server for it here (one control-path
 * round trip, rarely: an extent holds many objects) and may fail at once with
 * KVC_ENOMEM (eviction off and live data fills the server), KVC_EQUOTA (this
 * client holds its share of the server's memory), KVC_ETIMEDOUT or
 * KVC_ESERVERGONE. When other operations of the handle may hold bucket locks
 * it does not wait for the answer; then, as while the server has no memory
 * free yet (its reclaimer is making room), the PUT waits without blocking,
 * asking again from kvc_poll, for up to op_timeout_ms, and then fails
 * KVC_ENOMEM (a refusal above arrives as its status). */
KVC_EXPORT int kvc_submit(kvc_t *h, struct kvc_op *op);
/* kvc_submit of ops[0], ops[1], ... in order, stopping at the first that is
 * not started: returns how many were (0..n), and when fewer than n,
 * ops[returned]->status says why that one was not (KVC_EAGAIN: depth
 * reached; a bad key or value, a broken connection: as kvc_submit says); it
 * and those after it are still the caller's. KVC_EINVAL (< 0), nothing
 * started, when h or ops is NULL or an entry of ops is. With one server it
 * costs less per operation than as many kvc_submit calls: the keys are
 * hashed and their cached locations fetched from memory together, and the
 * clock is read once (again only after a memory grant, a larger object
 * area, or more than 64 KiB of values); with several, it is kvc_submit of
 * each. */
KVC_EXPORT int kvc_submit_many(kvc_t *h, struct kvc_op *const *ops, unsigned n);
/* Wait up to timeout_ms (0: do not wait; negative: until one completes) and
 * return up to max finished ops in done[]; returns their number, or KVC_EINVAL
 * for bad arguments. Failures, a lost connection included, arrive as each
 * op's status. */
KVC_EXPORT int kvc_poll(kvc_t *h, struct kvc_op **done, unsigned max, int timeout_ms);
KVC_EXPORT unsigned kvc_inflight(const kvc_t *h);

/* Round trips per operation, counted by the library itself: every wait for a
 * completion of one of an operation's doorbells is one round trip. */
enum kvc_stat_kind {
	KVC_STAT_GET_HIT,        /* found, through the buckets */
	KVC_STAT_GET_HIT_CACHED, /* found through a valid cached location */
	KVC_STAT_GET_MISS,
	KVC_STAT_PUT_INSERT,
	KVC_STAT_PUT_UPDATE,
	KVC_STAT_PUT_UPDATE_CACHED,
	KVC_STAT_DELETE,
	KVC_STAT_DELETE_MISS,
	KVC_STAT_FAILED, /* any operation that ended with an error */
	/* A conditional store refused by the item it found under the locks
	 * (KVC_ENOTSTORED, KVC_EEXISTS, KVC_ENOTFOUND): not a failure. */
	KVC_STAT_STORE_REFUSED,
	/* Read-modify-writes (append, prepend, incr, decr, touch, gat) done:
	 * through the buckets, through a cached location; and those that found
	 * the key absent (KVC_ENOTFOUND / KVC_ENOTSTORED; a vivifying incr that
	 * stored its initial value counts as PUT_INSERT). */
	KVC_STAT_RMW,
	KVC_STAT_RMW_CACHED,
	KVC_STAT_RMW_MISS,
	KVC_STAT_KINDS
};

struct kvc_stats {
	uint64_t ops[KVC_STAT_KINDS];
	uint64_t round_trips[KVC_STAT_KINDS];
	uint64_t lock_conflicts;   /* lock attempts that found a bucket held */
	uint64_t verify_retries;   /* object or bucket reads that failed verification */
	uint64_t segments_granted; /* extents granted by the server (control-path calls for memory) */
	uint64_t grants_deferred;  /* requests the server answered "not yet" (reclamation running) */
	uint64_t access_marks;     /* access-word WRITEs posted (layout.h "Access tracking") */
	uint64_t expired_reused;   /* inserts that took the slot of another key's expired item */
	uint64_t index_evictions;  /* inserts that evicted a live item because both buckets were full */
	uint64_t lock_reports;     /* lock words reported to the server after a long wait */
	uint64_t rejoins;          /* new connections after the old one broke (new client id, new lease) */
	uint64_t resize_follows;   /* old-index buckets read or locked while the server resized its index */
	uint64_t index_stale;      /* operations that met a resize this handle had not heard of, and waited */
	uint64_t grow_requests;    /* requests to grow the index (an insert found both buckets full) */
	uint64_t lease_renewals;   /* leases the server renewed (client/lease.c "Lease") */
	uint64_t junk_slots;       /* slots naming no valid object that a write replaced or cleared */
	uint64_t readmissions;     /* renewals after the lease lapsed while idle (same connection, no rejoin) */
	uint64_t expiry_waits;     /* GETs that found their item expired in a bucket a writer held, and read again */
	uint64_t lease_revivals;   /* leases renewed in the middle of an operation that had waited past it holding nothing */
	uint64_t wait_sleeps;      /* waits for a completion that went to sleep on the device (busy_poll_us) */
};

KVC_EXPORT void kvc_get_stats(const kvc_t *h, struct kvc_stats *out);

/* What the server says about itself (a few control-path round trips; the data
 * path is not involved). cpu_ns grows only with the server's own work: sample
 * it twice to see what a load cost the server. Names in memcached's style
 * where the quantity is the same as memcached's "stats". */
struct kvc_server_stats {
	uint64_t cpu_ns;         /* server process CPU time, user + system */
	uint64_t segments_used;  /* heap segments not free (open, sealed, quarantined) */
	uint64_t segments_total;
	uint64_t clients;        /* clients holding an open extent */
	uint64_t bytes_used;     /* index + bytes handed to writers and not yet reclaimed */
	uint64_t bytes;          /* bytes handed to writers, not yet reclaimed: items and garbage */
	uint64_t limit_maxbytes; /* heap size */
	uint64_t evictions;      /* live items dropped to make room: by the reclaimer (cold first), and by clients' inserts into a full bucket pair */
	uint64_t reclaimed;      /* segments reclaimed */
	uint64_t expired_unfetched; /* expired items reclaimed that were never read */
	uint64_t evicted_unfetched; /* evicted items that were never read */
	uint64_t moved;          /* live, read items copied forward by the reclaimer */
	uint64_t expired;        /* expired items whose slot the reclaimer cleared */
	uint64_t dropped;        /* replaced or deleted objects freed with their segment */
	uint64_t segments_free, segments_open, segments_sealed, segments_quarantined;
	uint64_t reclaim_cpu_ns; /* CPU time of the server's reclaimer thread */
	uint64_t grants;         /* memory extents handed to writers */
	uint64_t grants_deferred; /* ... answered "not yet" while reclamation made room */
	uint64_t grants_refused;  /* ... answered KVC_ENOMEM (eviction off, live data fills the heap) */
	uint64_t reclaim_aborts;  /* segment reclaims given up and retried later */
	uint64_t reclaim_lock_retries; /* reclaimer lock attempts that found a bucket held */
	uint64_t fencings;        /* clients fenced (gone): their bucket locks released */
	uint64_t fence_released;  /* bucket locks released by fencing */
	uint64_t fence_cpu_ns;    /* CPU time of the server's fence thread */
	uint64_t resizes;         /* index resizes completed (each doubles the buckets) */
	uint64_t index_buckets;   /* buckets of the current index */
	uint64_t index_epoch;     /* epoch of the current index (1 + resizes begun) */
	/* memcached's, summed from what every client reported (each handle
	 * reports about once a second, and when destroyed): GETs never reach
	 * the server's CPU. evictions above includes the clients' evictions
	 * from full bucket pairs. */
	uint64_t cmd_get, get_hits, get_misses, cmd_set;
	uint64_t touch_hits, touch_misses, delete_hits, delete_misses;
	uint64_t incr_hits, incr_misses, decr_hits, decr_misses;
	uint64_t cas_hits, cas_misses, cas_badval;
	uint64_t cmd_touch;
	uint64_t get_expired;  /* GET misses that found the item expired */
	uint64_t curr_items;   /* items in the index (expired ones until cleared) */
	uint64_t total_items;  /* items written */
	uint64_t cmd_flush;       /* flush_all requests accepted (immediate and delayed) */
	uint64_t flushes;         /* flushes done (walks that cleared the index) */
	uint64_t flushed;         /* items (index slots) cleared by them */
};
/* With several servers: the sum over the servers that answered (the
 * largest index_epoch and index_buckets); it fails only when none answered.
 * kvc_server_stats_at: server i alone. */
KVC_EXPORT int kvc_server_stats(kvc_t *h, struct kvc_server_stats *out);
KVC_EXPORT int kvc_server_stats_at(kvc_t *h, unsigned i, struct kvc_server_stats *out);
/* The names of the statistics above, in struct order (a struct
 * kvc_server_stats read as an array of uint64_t gives their values): for
 * printing (kvcli stats). n receives the count; the names are static strings. */
KVC_EXPORT const char *const *kvc_server_stat_names(size_t *n);
KVC_EXPORT void kvc_reset_stats(kvc_t *h);
/* "get_hit", "put_insert", ... for a kind; "unknown" otherwise. */
KVC_EXPORT const char *kvc_stat_name(int kind);

#ifdef __cplusplus
}
#endif
#endif
