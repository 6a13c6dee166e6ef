#include "dpath_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"

unsigned kvt_env_expire(struct kvt_env *env, unsigned *lapsed)
{
	return kvs_inproc_expire(&env->srv, lapsed);
}

int kvt_env_leases(struct kvt_env *env, uint32_t lease_ms, uint32_t renew_ms)
{
	return kvs_inproc_leases(&env->srv, lease_ms, renew_ms);
}

int kvt_env_init(struct kvt_env *env, uint64_t region_mib, uint64_t buckets, uint64_t segment_kib)
{
	/* No eviction and no reclaimer: the behaviour these tests were written
	 * for (a full heap is KVC_ENOMEM, a full bucket pair KVC_EINDEXFULL). */
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = segment_kib << 10, .max_op_ms = 20000,
				   .quarantine_ms = 40100, .no_evict = 1 };

	return kvt_env_init_opts(env, region_mib, &o);
}

int kvt_env_init_opts(struct kvt_env *env, uint64_t region_mib, const struct kvs_core_opts *in)
{
	struct kvs_core_opts o = *in;
	struct kvi_errbuf e = { { 0 } };
	int rc;

	/* A fixed hash seed unless the test picks one: where keys land is the
	 * same in every run, so a failure replays (test_server_core checks that
	 * a server draws a random one). */
	if (!o.hash_seed)
		o.hash_seed = KVT_HASH_SEED;

	memset(env, 0, sizeof(*env));
	rc = kvs_inproc_init(&env->srv, region_mib << 20, &o, &e);
	if (rc)
		fprintf(stderr, "kvt_env_init: %s\n", e.msg);
	return rc;
}

void kvt_env_fini(struct kvt_env *env)
{
	kvs_inproc_fini(&env->srv);
	memset(env, 0, sizeof(*env));
}

int kvt_env_reclaimer(struct kvt_env *env, const struct kvs_reclaim_hooks *hooks, struct kvs_reclaimer **out)
{
	return kvt_env_reclaimer_on(env, NULL, kvs_inproc_new_id(&env->srv), hooks, out);
}

int kvt_env_reclaimer_on(struct kvt_env *env, const struct kvi_local_hooks *loopback, uint32_t id,
			 const struct kvs_reclaim_hooks *hooks, struct kvs_reclaimer **out)
{
	struct kvi_rmem *rm;
	int rc;

	rc = kvs_inproc_loopback(&env->srv, 4096, loopback, id, &rm);
	if (rc)
		return rc;
	return kvs_reclaim_create(env->srv.core, rm, hooks, out);
}

int kvt_fail_at;

int kvt_fail_nth(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg, (void)rm, (void)op;
	return kvt_fail_at && --kvt_fail_at == 0 ? KVC_ESERVERGONE : 0;
}

void kvt_env_fence_locks(struct kvt_env *env, uint32_t dead)
{
	uint64_t chunks[64];
	struct kvi_index x;

	/* The current index and a previous one still in use, as a fencing
	 * pass looks at both. */
	for (int which = 0; which < 2; which++) {
		if (kvs_core_index(env->srv.core, which, &x, chunks, 64))
			continue;
		for (uint64_t i = 0; i < x.bucket_count; i++) {
			uint64_t *w = (uint64_t *)(void *)(kvs_core_region(env->srv.core) + kvi_index_bucket_off(&x, i));

			__atomic_compare_exchange_n(w, &(uint64_t){ kvi_lock_held_by(dead) }, 0, 0, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
		}
	}
}

struct dial {
	struct kvt_env *env;
	struct kvi_local_hooks hooks;
	int has_hooks;
};

/* A new local connection with a new client id; a member from now. */
static int connect_local(struct kvt_env *env, const struct kvi_local_hooks *hooks, struct kvi_rmem **rm)
{
	return kvs_inproc_connect(&env->srv, 4096, hooks, rm);
}

static int dial_local(void *arg, int timeout_ms, struct kvi_rmem **rm)
{
	struct dial *d = arg;

	(void)timeout_ms;
	if (__atomic_load_n(&d->env->down, __ATOMIC_ACQUIRE))
		return KVC_EUNREACHABLE;
	if (d->env->slow > 0) {
		d->env->slow--;
		return KVI_JOIN_PENDING;
	}
	return connect_local(d->env, d->has_hooks ? &d->hooks : NULL, rm);
}

int kvt_env_dial(struct kvt_env *env, kvi_dial_fn *fn, void **arg)
{
	struct dial *d = calloc(1, sizeof(*d));

	if (!d)
		return KVC_ENOMEM;
	d->env = env;
	*fn = dial_local;
	*arg = d;
	return 0;
}

int kvt_env_client_opts(struct kvt_env *env, const struct kvi_local_hooks *hooks, const struct kvc_opts *o,
			kvc_t **out)
{
	struct kvi_rmem *rm;
	struct dial *d;
	int rc = connect_local(env, hooks, &rm);

	if (rc)
		return rc;
	rc = kvi_client_open(rm, o, out);
	if (rc)
		return rc;
	d = calloc(1, sizeof(*d));
	if (!d) {
		kvc_destroy(*out);
		return KVC_ENOMEM;
	}
	d->env = env;
	if (hooks) {
		d->hooks = *hooks;
		d->has_hooks = 1;
	}
	kvi_client_set_dial(*out, dial_local, d, free);
	return 0;
}

int kvt_env_client(struct kvt_env *env, const struct kvi_local_hooks *hooks, unsigned cache_entries,
		   unsigned depth, kvc_t **out)
{
	struct kvc_opts o;

	kvc_opts_init(&o);
	o.cache_entries = cache_entries;
	o.depth = depth;
	o.op_timeout_ms = 20000; /* threads on a loaded 2-core machine; the server may cap it */
	return kvt_env_client_opts(env, hooks, &o, out);
}

int kvt_put_s(kvc_t *c, const char *k, const char *v)
{
	return kvc_put(c, k, strlen(k), v, strlen(v), 0);
}

int kvt_get_s(kvc_t *c, const char *k, char *out, size_t cap)
{
	size_t len = 0;
	int rc = kvc_get(c, k, strlen(k), out, cap - 1, &len);

	out[rc == 0 ? len : 0] = '\0';
	return rc;
}

void kvt_spread_key(struct kvt_env *env, const char *prefix, unsigned *next, char *out, size_t len)
{
	const struct kvi_geometry *g = kvs_core_geometry(env->srv.core);
	struct kvi_index ix;
	uint64_t chunks[1];
	struct kvi_keyhash kh;

	ix.bucket_count = g->bucket_count;
	if (kvs_core_index(env->srv.core, 0, &ix, chunks, 1) != 0)
		ix.bucket_count = g->bucket_count; /* a larger index: placement is rarely single */
	do {
		snprintf(out, len, "%s-%u", prefix, (*next)++);
		kvi_key_hash(out, strlen(out), g->hash_seed, ix.bucket_count, &kh);
	} while (kh.b[0] == kh.b[1]);
}
