/* Stray WRITEs into the index: any client may write any byte of the region,
 * so junk can land in slots (a raw client writing random bytes over slot
 * words on Soft-RoCE does it). Junk must not make buckets look full for good
 * ("index full: both candidate buckets are full", with eviction on), nor a
 * key whose bucket holds a junk slot with its fingerprint fail every write
 * with KVC_ECORRUPT: writers, holding the bucket locks, take junk slots as
 * free, so every key stays writable. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "dpath_env.h"
#include "hash.h"
#include "kvclient_errors.h"

static struct kvt_env env;
static kvc_t *c;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 64, 64), 0);
	cr_assert_eq(kvt_env_client(&env, NULL, 0, 4, &c), 0); /* no location cache: every write locks both */
}

static void teardown(void)
{
	kvc_destroy(c);
	kvt_env_fini(&env);
}

TestSuite(stray, .init = setup, .fini = teardown, .timeout = 60);

static struct kvi_bucket *bucket_of(const char *key, int which)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), sb->hash_seed, sb->bucket_count, &kh);
	return (struct kvi_bucket *)(void *)(kvi_local_region_base(env.srv.reg) + kvi_home_bucket_off(sb, kh.b[which]));
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t junk(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng | 1; /* never an empty slot */
}

Test(stray, buckets_full_of_junk_slots_take_new_keys)
{
	char v[16];
	unsigned next = 0;
	char key[32];
	struct kvc_stats st;

	kvt_spread_key(&env, "fresh", &next, key, sizeof(key));
	for (int w = 0; w < 2; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			bucket_of(key, w)->slot[i] = junk();
	cr_expect_eq(kvt_put_s(c, key, "in"), 0, "an insert into buckets full of junk");
	cr_expect_eq(kvt_get_s(c, key, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "in");
	kvc_get_stats(c, &st);
	cr_expect_geq(st.junk_slots, 1);
}

Test(stray, a_junk_slot_with_the_keys_fingerprint_does_not_stop_its_writes)
{
	const struct kvi_geometry *sb = kvs_core_geometry(env.srv.core);
	struct kvi_keyhash kh;
	char v[16];
	uint64_t s;

	cr_assert_eq(kvt_put_s(c, "victim", "one"), 0);
	kvi_key_hash("victim", 6, sb->hash_seed, sb->bucket_count, &kh);
	/* A slot with the key's fingerprint naming heap bytes that are no
	 * object (the start of the heap's last segment: zeros). */
	s = kvi_slot_make(kh.fp, sb->heap_off + sb->heap_size - sb->segment_size, 256);
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
		if (bucket_of("victim", 1)->slot[i] == 0) {
			bucket_of("victim", 1)->slot[i] = s;
			break;
		}
	cr_expect_eq(kvt_put_s(c, "victim", "two"), 0, "an update");
	cr_expect_eq(kvt_get_s(c, "victim", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "two");
	/* Deleted and written again: no duplicate, no corrupt answer. */
	cr_expect_eq(kvc_delete(c, "victim", 6), 0);
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
		if (bucket_of("victim", 0)->slot[i] == 0) {
			bucket_of("victim", 0)->slot[i] = s;
			break;
		}
	cr_expect_eq(kvt_put_s(c, "victim", "three"), 0, "an insert past a junk twin");
	cr_expect_eq(kvt_get_s(c, "victim", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "three");
}
