#include "dpath_check.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kvclient_errors.h"

const struct kvi_geometry *kvt_geom(struct kvt_env *env)
{
	return kvs_core_geometry(env->srv.core);
}

unsigned char *kvt_base(struct kvt_env *env)
{
	return kvi_local_region_base(env->srv.reg);
}

uint64_t kvt_heap_end(struct kvt_env *env)
{
	return kvt_geom(env)->heap_off + kvt_geom(env)->heap_size;
}

uint64_t *kvt_word_at(struct kvt_env *env, uint64_t off)
{
	return (uint64_t *)(void *)(kvt_base(env) + off);
}

uint64_t kvt_lock_word(struct kvt_env *env, uint64_t b)
{
	return __atomic_load_n(kvt_word_at(env, kvi_home_bucket_off(kvt_geom(env), b)), __ATOMIC_SEQ_CST);
}

uint64_t *kvt_slot_ptr(struct kvt_env *env, uint64_t b, unsigned i)
{
	return kvt_word_at(env, kvi_home_bucket_off(kvt_geom(env), b) + 8 + 8u * i);
}

unsigned kvt_locked_buckets(struct kvt_env *env)
{
	unsigned n = 0;

	for (uint64_t b = 0; b < kvt_geom(env)->bucket_count; b++)
		n += kvt_lock_word(env, b) != 0;
	return n;
}

struct kvi_keyhash kvt_hash_of(struct kvt_env *env, const char *key)
{
	const struct kvi_geometry *g = kvt_geom(env);
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), g->hash_seed, g->bucket_count, &kh);
	return kh;
}

unsigned kvt_key_slots(struct kvt_env *env, const char *key, char *val, size_t cap, int *which)
{
	const struct kvi_geometry *g = kvt_geom(env);
	struct kvi_keyhash kh = kvt_hash_of(env, key);
	uint64_t end = kvt_heap_end(env);
	size_t klen = strlen(key);
	unsigned n = 0;

	if (val)
		val[0] = '\0';
	for (unsigned w = 0; w < (kh.b[0] == kh.b[1] ? 1u : 2u); w++) { /* hash.h: they may coincide */
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t s = *kvt_slot_ptr(env, kh.b[w], i), off, len;
			const struct kvi_obj_hdr *oh;

			if (!s || kvi_slot_fp(s) != kh.fp || !kvi_slot_in_heap(g, s))
				continue;
			off = kvi_slot_obj_off(s);
			len = kvi_slot_read_len(s);
			if (len > end - off)
				len = end - off;
			oh = (const struct kvi_obj_hdr *)(const void *)(kvt_base(env) + off);
			if (kvi_obj_verify(oh, len) || oh->key_len != klen || memcmp(oh + 1, key, klen))
				continue;
			n++;
			if (which)
				*which = (int)w;
			if (val && kvi_obj_value_len(oh) < cap) {
				memcpy(val, (const char *)(oh + 1) + klen, kvi_obj_value_len(oh));
				val[kvi_obj_value_len(oh)] = '\0';
			}
		}
	}
	return n;
}

void kvt_value_of_slot(struct kvt_env *env, uint64_t s, char *val, size_t cap)
{
	const struct kvi_obj_hdr *oh = (const struct kvi_obj_hdr *)(const void *)(kvt_base(env) + kvi_slot_obj_off(s));

	cr_assert(kvi_obj_value_len(oh) < cap);
	memcpy(val, (const char *)(oh + 1) + oh->key_len, kvi_obj_value_len(oh));
	val[kvi_obj_value_len(oh)] = '\0';
}

kvc_t *kvt_client(struct kvt_env *env, const struct kvi_local_hooks *hooks, unsigned cache, unsigned depth)
{
	kvc_t *c = NULL;

	cr_assert_eq(kvt_env_client(env, hooks, cache, depth, &c), 0);
	return c;
}

kvc_t *kvt_impatient(struct kvt_env *env)
{
	kvc_t *c = kvt_client(env, NULL, 0, 4);

	kvi_client_conn(c, 0)->op_timeout_ms = 50;
	return c;
}

int kvt_del_s(kvc_t *c, const char *k)
{
	return kvc_delete(c, k, strlen(k));
}

uint64_t kvt_stat_ops(kvc_t *c, int kind)
{
	struct kvc_stats s;

	kvc_get_stats(c, &s);
	return s.ops[kind];
}

uint64_t kvt_stat_rtt(kvc_t *c, int kind)
{
	struct kvc_stats s;

	kvc_get_stats(c, &s);
	return s.round_trips[kind];
}

int kvt_store_s(kvc_t *c, int mode, const char *k, const char *v, uint32_t flags, uint64_t ttl_ms, uint64_t cas,
		uint64_t *new_cas)
{
	return kvc_store(c, mode, k, strlen(k), v, strlen(v), flags, ttl_ms, cas, new_cas);
}

int kvt_get_item_s(kvc_t *c, const char *k, char *out, size_t cap, uint32_t *flags, uint64_t *cas)
{
	size_t n = 0;
	int rc = kvc_get_item(c, k, strlen(k), out, cap - 1, &n, flags, cas);

	out[rc == 0 ? n : 0] = 0;
	return rc;
}

void kvt_key_with_first_bucket(struct kvt_env *env, const char *prefix, uint64_t bucket, char out[48])
{
	for (int i = 0; i < 1000000; i++) {
		snprintf(out, 48, "%s-%d", prefix, i);
		if (kvt_hash_of(env, out).b[0] == bucket)
			return;
	}
	cr_assert_fail("no key found for bucket %llu", (unsigned long long)bucket);
}

void kvt_occupy_first_bucket_of(struct kvt_env *env, kvc_t *c, const char *key, char filler[48])
{
	kvt_key_with_first_bucket(env, "filler", kvt_hash_of(env, key).b[0], filler);
	cr_assert_eq(kvt_put_s(c, filler, "f"), 0);
}

static int trig_hook(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	struct kvt_trig *t = arg;

	(void)rm;
	if (!t->armed || (int)op->kind != t->kind || op->roff < t->lo || op->roff >= t->hi)
		return 0;
	if (t->lock_only && op->compare_add != 0)
		return 0;
	if (t->skip) {
		t->skip--;
		return 0;
	}
	t->armed = 0;
	t->fired++;
	t->fire(t, op);
	return 0;
}

struct kvi_local_hooks kvt_trig_hooks(struct kvt_trig *t)
{
	return (struct kvi_local_hooks){ .arg = t, .before_op = trig_hook };
}

void kvt_on_lock_cas(struct kvt_env *env, struct kvt_trig *t, uint64_t b)
{
	t->kind = KVI_ROP_CAS;
	t->lo = kvi_home_bucket_off(kvt_geom(env), b);
	t->hi = t->lo + 8;
	t->lock_only = 1;
}
