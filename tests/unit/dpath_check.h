/* What the data-path suites read straight out of a kvt_env's region, and the
 * small asserting conveniences they share (Criterion suites only: these
 * assert, so the TSan runner, which cannot start Criterion, does not link
 * them). Region contents are the truth the suites check the client against:
 * every lock word is 0 once every operation has finished, and a key occupies
 * at most one slot (layout.h I2). */
#ifndef KVT_DPATH_CHECK_H
#define KVT_DPATH_CHECK_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>

#include "dpath_env.h"

/* ---- the region as the core formatted it --------------------------------- */

const struct kvi_geometry *kvt_geom(struct kvt_env *env);
unsigned char *kvt_base(struct kvt_env *env);
/* The offset one past the heap's last byte. */
uint64_t kvt_heap_end(struct kvt_env *env);
uint64_t *kvt_word_at(struct kvt_env *env, uint64_t off);
/* The lock word of home bucket b (an atomic load). */
uint64_t kvt_lock_word(struct kvt_env *env, uint64_t b);
uint64_t *kvt_slot_ptr(struct kvt_env *env, uint64_t b, unsigned i);
/* Home buckets whose lock word is not 0 (held, or anything else). */
unsigned kvt_locked_buckets(struct kvt_env *env);
struct kvi_keyhash kvt_hash_of(struct kvt_env *env, const char *key);
/* Slots among the key's two buckets that hold a verifying object of this
 * key. The value of the last one found goes to val (NUL-terminated; val may
 * be NULL), its bucket (0 or 1: which candidate) to *which (may be NULL). */
unsigned kvt_key_slots(struct kvt_env *env, const char *key, char *val, size_t cap, int *which);
/* The value of the object a slot word points at (NUL-terminated). */
void kvt_value_of_slot(struct kvt_env *env, uint64_t s, char *val, size_t cap);

/* ---- clients and keys ---------------------------------------------------- */

/* A client handle (asserts it opened); hooks may be NULL, cache 0 disables
 * the location cache. */
kvc_t *kvt_client(struct kvt_env *env, const struct kvi_local_hooks *hooks, unsigned cache, unsigned depth);
/* A client whose operations give up after 50 ms, so that a blocking call
 * made while another client holds a lock (inside a hook) returns. */
kvc_t *kvt_impatient(struct kvt_env *env);
int kvt_del_s(kvc_t *c, const char *k);
/* The client's count of operations of one kind (KVC_STAT_*), and of
 * their round trips. */
uint64_t kvt_stat_ops(kvc_t *c, int kind);
uint64_t kvt_stat_rtt(kvc_t *c, int kind);
/* memcached's items with NUL-terminated keys and values: kvc_store, and
 * kvc_get_item with the value NUL-terminated in out (cap bytes). */
int kvt_store_s(kvc_t *c, int mode, const char *k, const char *v, uint32_t flags, uint64_t ttl_ms, uint64_t cas,
		uint64_t *new_cas);
int kvt_get_item_s(kvc_t *c, const char *k, char *out, size_t cap, uint32_t *flags, uint64_t *cas);
/* A key "<prefix>-N" whose first candidate bucket is `bucket`. */
void kvt_key_with_first_bucket(struct kvt_env *env, const char *prefix, uint64_t bucket, char out[48]);
/* Make the next insert of key go to its second candidate bucket: put a
 * filler key into the first one (an insert into two equally empty buckets
 * picks the first), so the second is the emptier one. */
void kvt_occupy_first_bucket_of(struct kvt_env *env, kvc_t *c, const char *key, char filler[48]);

/* ---- a one-shot trigger on one client's operations ----------------------- */

/* Runs fire once, before the first matching operation the client executes
 * (after `skip` matching ones): another client's whole operation can run in
 * the middle of this one's batch. fire may re-arm it. */
struct kvt_trig {
	int armed;
	int kind;         /* KVI_ROP_* to match */
	uint64_t lo, hi;  /* roff in [lo, hi) */
	int lock_only;    /* CAS: only lock attempts (compare 0) */
	unsigned skip;    /* matching operations to let through first */
	void (*fire)(struct kvt_trig *t, const struct kvi_rop *op);
	unsigned fired;
};

/* The transport hooks that run t (before_op). */
struct kvi_local_hooks kvt_trig_hooks(struct kvt_trig *t);
/* Match the lock CAS on home bucket b. */
void kvt_on_lock_cas(struct kvt_env *env, struct kvt_trig *t, uint64_t b);

/* A data-path suite over a fresh in-process server for each test (16 MiB,
 * the default index, 64 KiB segments): defines `env` and the suite. */
#define KVT_DPATH_SUITE(name)                                                 \
	static struct kvt_env env;                                            \
	static void kvt_suite_setup(void)                                     \
	{                                                                     \
		cr_assert_eq(kvt_env_init(&env, 16, 0, 64), 0);               \
	}                                                                     \
	static void kvt_suite_teardown(void)                                  \
	{                                                                     \
		kvt_env_fini(&env);                                           \
	}                                                                     \
	TestSuite(name, .init = kvt_suite_setup, .fini = kvt_suite_teardown, .timeout = 60)

#endif
