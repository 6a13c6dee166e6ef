/* A whole key-value system in one process for the data-path tests: the
 * in-process server (server/inproc.h: a local region formatted by the real
 * core, control requests answered as kvserver answers them) and client
 * handles talking to it through the local transport. On top of the server,
 * what only tests need: fixed hash seeds, a server that refuses new
 * connections, fencing by hand, loopbacks that break on demand. */
#ifndef KVT_DPATH_ENV_H
#define KVT_DPATH_ENV_H

#include <pthread.h>
#include <stdint.h>

#include "cluster.h"
#include "clock.h"
#include "conn.h"
#include "engine.h"
#include "hash.h"
#include "inproc.h"
#include "op.h"

struct kvt_env {
	/* The server: region, core, membership (srv.members, NULL without
	 * leases), lock-report verdicts (srv.verdicts, srv.fenced_owner) and the
	 * lock serialising control requests (srv.lock). */
	struct kvs_inproc srv;
	int down; /* new connections are refused (a server that is down: test_cluster) */
	int slow; /* the next dials say KVI_JOIN_PENDING, one fewer each (a server slow to join) */
};

/* region_mib of region, `buckets` buckets (0 = default), segment_kib segments;
 * no eviction and no reclaimer; operations may take 20 s (a loaded 2-core
 * machine). Tests of reclamation use kvt_env_init_opts. */
int kvt_env_init(struct kvt_env *env, uint64_t region_mib, uint64_t buckets, uint64_t segment_kib);
int kvt_env_init_opts(struct kvt_env *env, uint64_t region_mib, const struct kvs_core_opts *o);
/* The hash seed both use when o->hash_seed is 0 (reproducible placement). */
#define KVT_HASH_SEED 0x6b76746573747365ull
/* The server's reclaimer over its own loopback-like local connection. */
int kvt_env_reclaimer(struct kvt_env *env, const struct kvs_reclaim_hooks *hooks, struct kvs_reclaimer **out);
/* The same over a loopback with transport hooks (NULL: none), as client id
 * (a test that breaks the loopback fences that id afterwards). */
int kvt_env_reclaimer_on(struct kvt_env *env, const struct kvi_local_hooks *loopback, uint32_t id,
			 const struct kvs_reclaim_hooks *hooks, struct kvs_reclaimer **out);
/* What fencing does for a dead client: release every bucket lock naming it
 * (current and previous index). */
void kvt_env_fence_locks(struct kvt_env *env, uint32_t dead);
/* A loopback hook (kvi_local_hooks.before_op) that breaks the connection at
 * the kvt_fail_at-th operation from when that is set (0: never), as a dead
 * peer would: kill-at-every-step tests set it to 1, 2, ... in turn. */
extern int kvt_fail_at;
int kvt_fail_nth(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op);
void kvt_env_fini(struct kvt_env *env);
/* The next key "<prefix>-<n>" (n from *next on, which is advanced past it)
 * whose two candidate buckets in env's current index differ: tests that
 * fill a tiny index count on every key having both (hash.h). */
void kvt_spread_key(struct kvt_env *env, const char *prefix, unsigned *next, char *out, size_t len);
/* A client handle; hooks may be NULL; cache_entries 0 disables the cache. */
int kvt_env_client(struct kvt_env *env, const struct kvi_local_hooks *hooks, unsigned cache_entries,
		   unsigned depth, kvc_t **out);

/* Grant leases of lease_ms (renewed every renew_ms) and judge lock reports,
 * as kvserver does (kvs_inproc_leases). */
int kvt_env_leases(struct kvt_env *env, uint32_t lease_ms, uint32_t renew_ms);
/* What kvserver does when leases end (kvs_inproc_expire). */
unsigned kvt_env_expire(struct kvt_env *env, unsigned *lapsed);
/* A client with these options (depth, cache, timeouts); it can rejoin (a new
 * local connection, a new client id) when its connection breaks. */
int kvt_env_client_opts(struct kvt_env *env, const struct kvi_local_hooks *hooks, const struct kvc_opts *o,
			kvc_t **out);

/* A dial that makes new local connections to env (for kvi_client_add and
 * kvi_client_set_dial; free *arg with free()). */
int kvt_env_dial(struct kvt_env *env, kvi_dial_fn *fn, void **arg);

/* PUT / GET with NUL-terminated keys and values, for readable tests. kvt_get_s
 * leaves the value NUL-terminated in out (empty unless found); returns the code. */
int kvt_put_s(kvc_t *c, const char *k, const char *v);
int kvt_get_s(kvc_t *c, const char *k, char *out, size_t cap);

/* Milliseconds of kvi_mono_ns's clock (the one leases are timed by), for the
 * suites' waits and bounds. */
static inline uint64_t kvt_mono_ms(void)
{
	return kvi_mono_ns() / 1000000u;
}

#endif
