/* libkvclient internals: the public handle, kvc_t. It holds one connection
 * (kvi_conn) per server of its list, and each key is routed to one server by
 * rendezvous hashing (ring.h).
 *
 * Ownership: the handle owns its members; a member owns its dial (where the
 * server is) and its connection, which rejoins through that dial by itself
 * (lease.c "Rejoin"). A member that left the list (kvc_set_servers, the
 * list file) takes no new operation and is closed once the operations it
 * has in flight are returned ("draining").
 *
 * With one server, no list file and no auto-eject, every call goes straight
 * to the connection ("single"): one server costs nothing for the others'
 * sake.
 *
 * Who does what with a handle: cluster.c creates and destroys it;
 * cluster_list.c parses server lists and makes a changed one the handle's;
 * cluster_member.c joins a member, fails operations fast while it cannot be
 * joined, ejects it after failures in a row and gives its keys back;
 * cluster_route.c keeps the ring of the members that take keys;
 * cluster_async.c is kvc_submit and kvc_poll over the members' connections;
 * cluster_stats.c sums the statistics and reports each server. Nothing here
 * is exported. */
#ifndef KVI_CLUSTER_H
#define KVI_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "conn.h"
#include "kvclient.h"
#include "ring.h"

struct kvi_dial;

/* ---- Joining ---------------------------------------------------------------
 *
 * With several servers, a join never holds the caller: a slow or silent
 * server must not stall the keys of the others. A join is started -- a
 * member's (kvc_create, a key routed to a member without a connection, a
 * list that gained it) or its broken connection's rejoin (lease.c "Rejoin")
 * -- and then stepped, each rdma_cm event taken as it comes, by the handle's
 * calls: kvc_submit of a key it owns (at most every KVI_JOIN_STEP_NS), and
 * kvc_poll (every KVI_JOIN_STEP_NS, all members, also while it waits).
 * Meanwhile its keys fail fast (KVC_ESERVERGONE, a miss to a cache) and do
 * not count as failures for auto-eject: a join that fails does, once, and so
 * does each operation refused during the back-off after it. kvc_create
 * waits for the joins of servers that answer as fast as the joined ones did
 * (cluster.c join_all) and returns; the others go on. A join's deadline is
 * connect_timeout_ms from its start; one that fails backs the member off
 * (10 ms to 1 s). A host name is looked up by the caller's thread when a
 * join starts (the resolver has no event to step on); addresses cost
 * nothing. A handle that is "single" (one server, no list file, no
 * auto-eject) waits for its joins, as it has nothing else to serve. */
#define KVI_JOIN_STEP_NS 1000000ull
#define KVI_JOIN_GRACE_MIN_MS 10u

struct kvi_member {
	char name[272];         /* "host:port": in the list, and hashed */
	struct kvi_dial *d;     /* where it is (verbs); NULL: joined through dial below */
	kvi_dial_fn dial;       /* tests: a given transport (kvi_client_add) */
	void *dial_arg;
	void (*dial_free)(void *arg);
	uint32_t weight;
	uint64_t name_hash;
	struct kvi_conn *c;     /* NULL: not joined (a join failed or goes on); joined again at a key's use */
	int joining;            /* c is NULL and a join is under way ("Joining") */
	uint64_t step_at;       /* ns: an operation of its keys steps its join (or c's rejoin) from then on */
	uint64_t join_at;       /* ns: the next join attempt while c is NULL */
	uint32_t backoff_ms;
	unsigned fails;         /* failures in a row */
	uint64_t ejected_until; /* ns; 0: in the hash */
	unsigned inflight;      /* this handle's operations on c not yet returned (several servers) */
};

struct kvc {
	struct kvc_opts o;  /* device and secret_file point at our copies below */
	char *device, *secret_file; /* for the dials of servers added later */
	char *list_file;    /* kvc_opts.servers_file or KVC_SERVERS_FILE; NULL: none */
	struct kvi_member *m[2 * KVI_RING_MAX]; /* [0, n): the list; [n, n + ndrain): draining */
	unsigned n, ndrain;
	int single;         /* straight to m[0]->c */
	int many;           /* built by kvi_client_new (tests): never single */
	struct kvi_ring ring;
	uint64_t next_return; /* ns: when the first ejected member comes back; UINT64_MAX: none */
	unsigned inflight;  /* submitted, not yet returned by kvc_poll (several servers) */
	uint64_t steps_at;  /* ns: when kvc_poll next steps the joins under way */
	unsigned rr;        /* the member kvc_poll looks at first */
	struct kvc_stats gone; /* statistics of closed connections */
	/* The list file as last read: when we looked, and what it was. */
	uint64_t file_checked;
	struct timespec file_mtime;
	off_t file_size;
	ino_t file_ino;
};

/* msg as the one line of a caller's err buffer (none if err is NULL). */
static inline void kvi_set_err(char *err, size_t len, const char *msg)
{
	if (err && len)
		snprintf(err, len, "%s", msg);
}

/* A handle of one server over a connected transport, without a server list:
 * for tests and local:// benchmarks (cluster.c). kvi_client_set_dial: let its
 * connection rejoin (kvi_conn_set_dial). kvi_client_conn: the connection of
 * server i (tests look inside). */
int kvi_client_open(struct kvi_rmem *rm, const struct kvc_opts *o, kvc_t **out);
void kvi_client_set_dial(kvc_t *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg));
struct kvi_conn *kvi_client_conn(kvc_t *h, unsigned i);
/* A handle of several servers over given transports (tests): an empty one,
 * then a server named name ("host:port") joined through dial (which owns
 * arg). A server whose join fails is added down, as kvc_create would. */
int kvi_client_new(const struct kvc_opts *o, kvc_t **out);
int kvi_client_add(kvc_t *h, const char *name, uint32_t weight, kvi_dial_fn dial, void *arg,
		   void (*free_arg)(void *arg));

#endif
