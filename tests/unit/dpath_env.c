#include "dpath_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"

/* kvserver's on_ctrl for membership (server/main.c), over the local region. */
static int members_ctrl(struct kvt_env *env, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_report_action a;
	enum kvi_index_state state;
	uint64_t *word, current, epoch, off;
	uint32_t lease;

	if (req->type == KVI_CTRL_LEASE_RENEW) {
		/* As kvserver's LEASE: the index epoch and state, which the
		 * client compares with what it has (fetching on a difference). */
		int readmitted;

		kvs_members_set_probe(env->members, client_id, req->arg[1], (uint32_t)req->arg[2]);
		readmitted = kvs_members_is_lapsed(env->members, client_id);
		kvs_core_index_status(env->core, &epoch, &state);
		lease = kvs_members_renew(env->members, client_id, kvi_mono_ns());
		*resp = lease ? (struct kvi_ctrl){ .type = KVI_CTRL_LEASE, .seq = req->seq,
						   .arg = { lease, env->renew_ms, epoch, state,
							    readmitted ? KVI_LEASE_F_READMITTED : 0 } }
			      : (struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = req->seq, .status = KVC_EFENCED };
		return 0;
	}
	/* As kvserver's lock_report: the bucket of the index the report names. */
	if (kvs_core_bucket_of_epoch(env->core, req->arg[2], req->arg[0], &off)) {
		*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq,
					   .arg = { KVI_REPORT_CHANGED } };
		return 0;
	}
	word = (uint64_t *)(void *)(kvi_local_region_base(env->reg) + off);
	current = __atomic_load_n(word, __ATOMIC_SEQ_CST);
	kvs_core_index_status(env->core, &epoch, &state);
	kvs_members_judge(env->members, client_id, req->arg[0], req->arg[1], current,
			  req->arg[2] == epoch && state == KVI_INDEX_STABLE, kvi_mono_ns(), &a);
	env->verdicts[a.verdict]++;
	if (a.set)
		__atomic_compare_exchange_n(word, &a.set_from, a.set_to, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	if (a.fence_owner)
		env->fenced_owner = a.fence_owner;
	*resp = (struct kvi_ctrl){ .type = KVI_CTRL_LOCK_REPORTED, .seq = req->seq, .arg = { a.verdict } };
	return 0;
}

static int locked_ctrl(void *arg, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvt_env *env = arg;
	int rc;

	pthread_mutex_lock(&env->lock);
	if (env->members && (req->type == KVI_CTRL_LEASE_RENEW || req->type == KVI_CTRL_LOCK_REPORT))
		rc = members_ctrl(env, client_id, req, resp);
	else
		rc = kvs_core_ctrl(env->core, client_id, req, resp);
	pthread_mutex_unlock(&env->lock);
	return rc;
}

unsigned kvt_env_expire(struct kvt_env *env, unsigned *lapsed)
{
	uint32_t ids[64];
	unsigned n, expelled = 0;

	*lapsed = 0;
	pthread_mutex_lock(&env->lock);
	n = kvs_members_expired(env->members, kvi_mono_ns(), ids, 64);
	for (unsigned i = 0; i < n; i++) {
		uint64_t addr;
		uint32_t rkey;

		/* In-process the idle word is read where it lies. */
		if (kvs_members_probe(env->members, ids[i], &addr, &rkey) &&
		    kvs_members_probe_start(env->members, ids[i]) == 0 &&
		    __atomic_load_n((const uint64_t *)(uintptr_t)addr, __ATOMIC_SEQ_CST) == 0) {
			if (kvs_members_lapse(env->members, ids[i], kvi_mono_ns()) == 1)
				kvs_core_client_left(env->core, ids[i]);
			(*lapsed)++;
		} else {
			kvs_members_expel(env->members, ids[i]);
			expelled++;
		}
	}
	pthread_mutex_unlock(&env->lock);
	return expelled;
}

int kvt_env_leases(struct kvt_env *env, uint32_t lease_ms, uint32_t renew_ms)
{
	uint32_t max_op, quarantine;
	uint16_t flags;

	kvs_core_limits(env->core, &max_op, &quarantine, &flags);
	env->renew_ms = renew_ms;
	return kvs_members_create(&env->members, lease_ms, max_op);
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
	env->next_client = 1;
	pthread_mutex_init(&env->lock, NULL);
	env->reg = kvi_local_region_create(region_mib << 20);
	if (!env->reg)
		return KVC_ENOMEM;
	rc = kvs_core_create(kvi_local_region_base(env->reg), region_mib << 20, &o, &env->core, &e);
	if (rc) {
		fprintf(stderr, "kvt_env_init: %s\n", e.msg);
		kvi_local_region_destroy(env->reg);
		env->reg = NULL;
	}
	return rc;
}

void kvt_env_fini(struct kvt_env *env)
{
	kvs_members_destroy(env->members);
	kvs_core_destroy(env->core);
	kvi_local_region_destroy(env->reg);
	pthread_mutex_destroy(&env->lock);
	memset(env, 0, sizeof(*env));
}

static void set_limits(struct kvt_env *env, struct kvi_rmem *rm)
{
	uint32_t max_op, quarantine;
	uint16_t flags;

	kvs_core_limits(env->core, &max_op, &quarantine, &flags);
	kvi_rmem_local_set_limits(rm, max_op, quarantine, flags);
	/* As kvserver's welcome does: the core's geometry, never the region's. */
	kvi_rmem_local_set_geometry(rm, kvs_core_geometry(env->core));
}

int kvt_env_reclaimer(struct kvt_env *env, const struct kvs_reclaim_hooks *hooks, struct kvs_reclaimer **out)
{
	return kvt_env_reclaimer_on(env, NULL, __atomic_fetch_add(&env->next_client, 1, __ATOMIC_RELAXED), hooks, out);
}

int kvt_env_reclaimer_on(struct kvt_env *env, const struct kvi_local_hooks *loopback, uint32_t id,
			 const struct kvs_reclaim_hooks *hooks, struct kvs_reclaimer **out)
{
	struct kvi_rmem *rm;
	int rc;

	rc = kvi_rmem_local_create(env->reg, 4096, loopback, &rm);
	if (rc)
		return rc;
	kvi_rmem_local_set_ctrl(rm, locked_ctrl, env, id);
	set_limits(env, rm);
	return kvs_reclaimer_create(env->core, rm, hooks, out);
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
		if (kvs_core_index(env->core, which, &x, chunks, 64))
			continue;
		for (uint64_t i = 0; i < x.bucket_count; i++) {
			uint64_t *w = (uint64_t *)(void *)(kvs_core_region(env->core) + kvi_index_bucket_off(&x, i));

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
	uint32_t id = __atomic_fetch_add(&env->next_client, 1, __ATOMIC_RELAXED);
	int rc = kvi_rmem_local_create(env->reg, 4096, hooks, rm);

	if (rc)
		return rc;
	set_limits(env, *rm);
	/* Handles may be created from several threads. */
	kvi_rmem_local_set_ctrl(*rm, locked_ctrl, env, id);
	if (env->members) {
		pthread_mutex_lock(&env->lock);
		rc = kvs_members_join(env->members, id, 1, kvi_mono_ns());
		pthread_mutex_unlock(&env->lock);
	}
	return rc;
}

static int dial_local(void *arg, int timeout_ms, struct kvi_rmem **rm)
{
	struct dial *d = arg;

	(void)timeout_ms;
	if (__atomic_load_n(&d->env->down, __ATOMIC_ACQUIRE))
		return KVC_EUNREACHABLE;
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
	const struct kvi_geometry *g = kvs_core_geometry(env->core);
	struct kvi_index ix;
	uint64_t chunks[1];
	struct kvi_keyhash kh;

	ix.bucket_count = g->bucket_count;
	if (kvs_core_index(env->core, 0, &ix, chunks, 1) != 0)
		ix.bucket_count = g->bucket_count; /* a larger index: placement is rarely single */
	do {
		snprintf(out, len, "%s-%u", prefix, (*next)++);
		kvi_key_hash(out, strlen(out), g->hash_seed, ix.bucket_count, &kh);
	} while (kh.b[0] == kh.b[1]);
}
