/* Review of the client data path: interleavings forced through the local
 * transport's hooks (another client's whole operation runs in the middle of a
 * batch), lock hygiene on every error and retry path, the location cache against
 * concurrent writers, many operations on one key from one handle, candidate
 * reads spread over several rounds, and malicious region contents (meaningful
 * under the ASan build too).
 *
 * Region contents are inspected directly: lock words must all be 0 once every
 * operation has finished, and a key must occupy at most one slot (layout.h I2). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"

static struct kvt_env env;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 0, 64), 0);
}

static void setup_two_buckets(void)
{
	/* Every key's candidate pair is {0, 1}: 62 slots shared by all keys. */
	cr_assert_eq(kvt_env_init(&env, 4, 2, 64), 0);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(review_memory, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(review_locks, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(review_race, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(review_cache, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(review_async, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(review_expiry, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(review_rounds, .init = setup_two_buckets, .fini = teardown, .timeout = 120);
TestSuite(review_small, .init = setup_two_buckets, .fini = teardown, .timeout = 60);
TestSuite(review_malicious, .init = setup, .fini = teardown, .timeout = 60);

/* ---- region inspection -------------------------------------------------- */

static const struct kvi_geometry *sb(void)
{
	return kvs_core_geometry(env.core);
}

static unsigned char *base(void)
{
	return kvi_local_region_base(env.reg);
}

static uint64_t heap_end(void)
{
	return sb()->heap_off + sb()->heap_size;
}

static uint64_t *word_at(uint64_t off)
{
	return (uint64_t *)(void *)(base() + off);
}

static uint64_t lock_word(uint64_t b)
{
	return __atomic_load_n(word_at(kvi_home_bucket_off(sb(), b)), __ATOMIC_SEQ_CST);
}

static uint64_t *slot_ptr(uint64_t b, unsigned i)
{
	return word_at(kvi_home_bucket_off(sb(), b) + 8 + 8u * i);
}

/* Buckets whose lock word is not 0 (held, or anything else). */
static unsigned locked_buckets(void)
{
	unsigned n = 0;

	for (uint64_t b = 0; b < sb()->bucket_count; b++)
		n += lock_word(b) != 0;
	return n;
}

static struct kvi_keyhash hash_of(const char *key)
{
	struct kvi_keyhash kh;

	kvi_key_hash(key, strlen(key), sb()->hash_seed, sb()->bucket_count, &kh);
	return kh;
}

/* Slots among the key's two buckets that hold a verifying object of this key.
 * The value of the last one found goes to val (NUL-terminated), its bucket
 * (0 or 1: which candidate) to *which. */
static unsigned key_slots(const char *key, char *val, size_t cap, int *which)
{
	struct kvi_keyhash kh = hash_of(key);
	size_t klen = strlen(key);
	unsigned n = 0;

	if (val)
		val[0] = '\0';
	for (unsigned w = 0; w < (kh.b[0] == kh.b[1] ? 1u : 2u); w++) { /* hash.h: they may coincide */
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
			uint64_t s = *slot_ptr(kh.b[w], i), off, len;
			const struct kvi_obj_hdr *oh;

			if (!s || kvi_slot_fp(s) != kh.fp || !kvi_slot_in_heap(sb(), s))
				continue;
			off = kvi_slot_obj_off(s);
			len = kvi_slot_read_len(s);
			if (len > heap_end() - off)
				len = heap_end() - off;
			oh = (const struct kvi_obj_hdr *)(const void *)(base() + off);
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

/* The value of the object a slot word points at (NUL-terminated). */
static void value_of_slot(uint64_t s, char *val, size_t cap)
{
	const struct kvi_obj_hdr *oh = (const struct kvi_obj_hdr *)(const void *)(base() + kvi_slot_obj_off(s));

	cr_assert(kvi_obj_value_len(oh) < cap);
	memcpy(val, (const char *)(oh + 1) + oh->key_len, kvi_obj_value_len(oh));
	val[kvi_obj_value_len(oh)] = '\0';
}

/* ---- client helpers ------------------------------------------------------ */

static kvc_t *client(const struct kvi_local_hooks *hooks, unsigned cache, unsigned depth)
{
	kvc_t *c = NULL;

	cr_assert_eq(kvt_env_client(&env, hooks, cache, depth, &c), 0);
	return c;
}

/* A client whose operations give up quickly, so that a blocking call made
 * while another client holds a lock (inside a hook) returns. */
static kvc_t *impatient(void)
{
	kvc_t *c = client(NULL, 0, 4);

	kvi_client_conn(c, 0)->op_timeout_ms = 50;
	return c;
}


static int del_s(kvc_t *c, const char *k)
{
	return kvc_delete(c, k, strlen(k));
}

static uint64_t stat_ops(kvc_t *c, int kind)
{
	struct kvc_stats s;

	kvc_get_stats(c, &s);
	return s.ops[kind];
}

/* A key "<prefix>-N" whose first candidate bucket is `bucket`. */
static void key_with_first_bucket(const char *prefix, uint64_t bucket, char out[48])
{
	for (int i = 0; i < 1000000; i++) {
		snprintf(out, 48, "%s-%d", prefix, i);
		if (hash_of(out).b[0] == bucket)
			return;
	}
	cr_assert_fail("no key found for bucket %llu", (unsigned long long)bucket);
}

/* Make the next insert of key go to its second candidate bucket: put a filler
 * key into the first one (an insert into two equally empty buckets picks the
 * first), so the second is the emptier one. */
static void occupy_first_bucket_of(kvc_t *c, const char *key, char filler[48])
{
	key_with_first_bucket("filler", hash_of(key).b[0], filler);
	cr_assert_eq(kvt_put_s(c, filler, "f"), 0);
}

/* ---- a one-shot trigger on one client's operations ----------------------- */

struct trig {
	int armed;
	int kind;         /* KVI_ROP_* to match */
	uint64_t lo, hi;  /* roff in [lo, hi) */
	int lock_only;    /* CAS: only lock attempts (compare 0) */
	unsigned skip;    /* matching operations to let through first */
	void (*fire)(struct trig *t, const struct kvi_rop *op);
	unsigned fired;
};

static int trig_hook(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	struct trig *t = arg;

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

static struct kvi_local_hooks hooks_of(struct trig *t)
{
	return (struct kvi_local_hooks){ .arg = t, .before_op = trig_hook };
}

/* Match the lock CAS on bucket b. */
static void on_lock_cas(struct trig *t, uint64_t b)
{
	t->kind = KVI_ROP_CAS;
	t->lo = kvi_home_bucket_off(sb(), b);
	t->hi = t->lo + 8;
	t->lock_only = 1;
}

/* Scenario state shared with the fire callbacks (each test is its own process). */
static kvc_t *other;
static const char *the_key;
static char filler_key[48];
static int fire_rc[4];
static char fire_val[4][64];
static uint64_t fire_lock[2];

/* ========================================================================= */
/* Lock hygiene on error and retry paths                                      */
/* ========================================================================= */

/* Fires before A's CAS on its second bucket: A holds only the first. */
static void fire_impatient_put(struct trig *t, const struct kvi_rop *op)
{
	struct kvi_keyhash kh = hash_of(the_key);

	(void)t;
	(void)op;
	fire_rc[0] = kvt_put_s(other, the_key, "from-b");
	fire_lock[0] = lock_word(kh.b[0]);
	fire_lock[1] = lock_word(kh.b[1]);
}

Test(review_locks, writer_timing_out_on_a_held_lock_releases_the_lock_it_did_take)
{
	struct trig t = { .armed = 1, .fire = fire_impatient_put };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 0, 4);
	char v[64];

	other = impatient();
	the_key = "contended";
	on_lock_cas(&t, hash_of(the_key).b[1]);
	cr_assert_eq(kvt_put_s(a, the_key, "from-a"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], KVC_ETIMEDOUT, "B got %s", kvc_err_name(fire_rc[0]));
	cr_expect_eq(fire_lock[0], kvi_lock_held_by(kvi_client_conn(a, 0)->rm->client_id), "A still holds its first bucket");
	cr_expect_eq(fire_lock[1], 0, "B released the second bucket it locked before timing out");
	cr_expect_eq(locked_buckets(), 0);
	cr_expect_eq(key_slots(the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "from-a");
	kvc_destroy(other);
	kvc_destroy(a);
}

/* First firing: someone else holds the second bucket when A tries it. Second
 * firing (A's next lock attempt): A must have let go of the first bucket
 * before backing off; the other holder then leaves. */
static uint64_t fake_holder_b;
static void fire_fake_holder(struct trig *t, const struct kvi_rop *op);

static void fire_check_released(struct trig *t, const struct kvi_rop *op)
{
	struct kvi_keyhash kh = hash_of(the_key);

	(void)op;
	(void)t;
	fire_lock[0] = lock_word(kh.b[0]);
	__atomic_store_n(word_at(kvi_home_bucket_off(sb(), fake_holder_b)), 0, __ATOMIC_SEQ_CST);
}

static void fire_fake_holder(struct trig *t, const struct kvi_rop *op)
{
	(void)op;
	__atomic_store_n(word_at(kvi_home_bucket_off(sb(), fake_holder_b)), kvi_lock_held_by(999), __ATOMIC_SEQ_CST);
	/* re-arm on A's next lock attempt, on its first bucket */
	on_lock_cas(t, hash_of(the_key).b[0]);
	t->fire = fire_check_released;
	t->armed = 1;
}

Test(review_locks, partial_lock_is_released_before_backing_off)
{
	struct trig t = { .armed = 1, .fire = fire_fake_holder };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 0, 4);
	struct kvc_stats s;
	char v[64];

	the_key = "half-locked";
	fake_holder_b = hash_of(the_key).b[1];
	on_lock_cas(&t, fake_holder_b);
	cr_assert_eq(kvt_put_s(a, the_key, "v"), 0);
	cr_assert_eq(t.fired, 2);
	cr_expect_eq(fire_lock[0], 0, "A backed off still holding bucket %llu",
		     (unsigned long long)hash_of(the_key).b[0]);
	kvc_get_stats(a, &s);
	cr_expect_eq(s.lock_conflicts, 1);
	cr_expect_eq(locked_buckets(), 0);
	cr_expect_eq(key_slots(the_key, v, sizeof(v), NULL), 1);
	kvc_destroy(a);
}

/* Fires before A's commit WRITE of the slot: A holds both locks. */
static void fire_during_commit(struct trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_get_s(other, the_key, fire_val[0], sizeof(fire_val[0]));
	fire_rc[1] = del_s(other, the_key);
	fire_rc[2] = kvt_put_s(other, the_key, "from-b");
}

Test(review_locks, commit_in_progress_blocks_writers_cleanly_and_readers_see_the_old_value)
{
	struct trig t = { .kind = KVI_ROP_WRITE, .fire = fire_during_commit };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 0, 4);
	char v[64];

	other = impatient();
	the_key = "committing";
	cr_assert_eq(kvt_put_s(a, the_key, "old"), 0);
	t.lo = sb()->index_off;
	t.hi = sb()->heap_off; /* the slot WRITE, not the object WRITE */
	t.armed = 1;
	cr_assert_eq(kvt_put_s(a, the_key, "new"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_str_eq(fire_val[0], "old", "the slot is not written yet");
	cr_expect_eq(fire_rc[1], KVC_ETIMEDOUT, "DELETE got %s", kvc_err_name(fire_rc[1]));
	cr_expect_eq(fire_rc[2], KVC_ETIMEDOUT, "PUT got %s", kvc_err_name(fire_rc[2]));
	cr_expect_eq(locked_buckets(), 0);
	cr_expect_eq(key_slots(the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "new");
	cr_assert_eq(kvt_get_s(other, the_key, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "new");
	kvc_destroy(other);
	kvc_destroy(a);
}

/* Every object READ returns a flipped byte: key checks never verify. */
static uint64_t corrupt_from;
static void corrupt_objects(void *arg, const struct kvi_rop *op, void *dst, const void *src)
{
	(void)arg;
	(void)src;
	if (op->roff >= corrupt_from && op->len > sizeof(struct kvi_obj_hdr))
		((unsigned char *)dst)[sizeof(struct kvi_obj_hdr)] ^= 0x5a; /* the first key byte */
}

/* Under its locks a writer whose key check never verifies takes that slot as
 * junk (issue 18 defect 3: a key whose slot names no valid object must stay
 * writable): it replaces it in place, so no duplicate is ever inserted, and
 * releases both locks. */
Test(review_locks, put_whose_key_check_reads_stay_corrupt_replaces_that_slot_and_releases_both_locks)
{
	struct kvi_local_hooks hk = { .after_read = corrupt_objects };
	kvc_t *b = client(NULL, 0, 4), *a;
	struct kvc_stats s;
	char v[64];

	corrupt_from = sb()->heap_off;
	a = client(&hk, 0, 4);
	cr_assert_eq(kvt_put_s(b, "fragile", "intact"), 0);
	cr_expect_eq(kvt_put_s(a, "fragile", "overwrite"), 0);
	kvc_get_stats(a, &s);
	cr_expect_eq(s.verify_retries, KVI_VERIFY_TRIES);
	cr_expect_eq(s.junk_slots, 1);
	cr_expect_eq(locked_buckets(), 0);
	cr_expect_eq(key_slots("fragile", v, sizeof(v), NULL), 1, "no duplicate was inserted");
	cr_expect_str_eq(v, "overwrite");
	cr_assert_eq(kvt_get_s(b, "fragile", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "overwrite");
	cr_expect_eq(del_s(a, "fragile"), KVC_ENOTFOUND, "what it cannot read it clears, as an expired item");
	cr_expect_eq(key_slots("fragile", v, sizeof(v), NULL), 0);
	cr_expect_eq(locked_buckets(), 0);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(review_small, refused_inserts_and_delete_misses_release_both_locks)
{
	kvc_t *c = client(NULL, 0, 4);
	char k[32];
	int rc = 0, i;

	for (i = 0; i < 100 && rc == 0; i++) {
		snprintf(k, sizeof(k), "fill-%d", i);
		rc = kvt_put_s(c, k, "v");
	}
	cr_assert_eq(rc, KVC_EINDEXFULL);
	cr_expect_eq(lock_word(0), 0);
	cr_expect_eq(lock_word(1), 0);
	cr_expect_eq(kvt_put_s(c, "one-more", "v"), KVC_EINDEXFULL, "a second refusal is not a lock conflict");
	cr_expect_eq(del_s(c, "absent"), KVC_ENOTFOUND);
	cr_expect_eq(lock_word(0), 0);
	cr_expect_eq(lock_word(1), 0);
	kvc_destroy(c);
}

/* ========================================================================= */
/* Interleavings with another client's whole operation                        */
/* ========================================================================= */

static void fire_put_b(struct trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_put_s(other, the_key, "from-b");
}

Test(review_race, insert_racing_another_insert_before_its_locks_updates_the_one_slot)
{
	struct trig t = { .armed = 1, .fire = fire_put_b };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 0, 4);
	char v[64];

	other = client(NULL, 0, 4);
	the_key = "both-insert";
	on_lock_cas(&t, hash_of(the_key).b[0]);
	cr_assert_eq(kvt_put_s(a, the_key, "from-a"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_eq(stat_ops(a, KVC_STAT_PUT_UPDATE), 1, "A found B's insert under its locks");
	cr_expect_eq(key_slots(the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "from-a");
	cr_expect_eq(locked_buckets(), 0);
	kvc_destroy(other);
	kvc_destroy(a);
}

Test(review_race, get_never_misses_a_key_updated_in_place_between_its_two_bucket_reads)
{
	struct trig t = { .kind = KVI_ROP_READ, .fire = fire_put_b };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 0, 4);
	char v[64];
	int which = -1;

	other = client(NULL, 0, 4);
	the_key = "second-bucket";
	occupy_first_bucket_of(other, the_key, filler_key);
	cr_assert_eq(kvt_put_s(other, the_key, "before"), 0);
	cr_assert_eq(key_slots(the_key, NULL, 0, &which), 1);
	cr_assert_eq(which, 1, "the key lives in its second bucket");
	/* Fire between the READ of the first bucket and the READ of the second. */
	t.lo = kvi_home_bucket_off(sb(), hash_of(the_key).b[1]);
	t.hi = t.lo + 1;
	t.armed = 1;
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0, "an in-place update never makes the key absent");
	cr_assert_eq(t.fired, 1);
	cr_expect_str_eq(v, "from-b");
	kvc_destroy(other);
	kvc_destroy(a);
}

Test(review_race, get_updated_before_its_object_read_returns_the_old_value_and_the_next_get_the_new_one)
{
	struct trig t = { .kind = KVI_ROP_READ, .fire = fire_put_b };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 1024, 4);
	char v[64];

	other = client(NULL, 0, 4);
	the_key = "reread";
	cr_assert_eq(kvt_put_s(other, the_key, "old"), 0);
	t.lo = sb()->heap_off;
	t.hi = heap_end();
	t.armed = 1;
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_str_eq(v, "old", "the slot was read before the update: objects are immutable");
	/* A cached the superseded location; it must be rechecked, not trusted. */
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "from-b");
	cr_assert_eq(kvt_get_s(a, the_key, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "from-b");
	cr_expect_eq(stat_ops(a, KVC_STAT_GET_HIT_CACHED), 1, "the new location was cached");
	kvc_destroy(other);
	kvc_destroy(a);
}

/* ========================================================================= */
/* The location cache against other clients' writes                            */
/* ========================================================================= */

/* B deletes the key, fills its old slot with another key, and re-inserts the
 * key, which then lands in its other bucket. */
static void fire_move_to_other_bucket(struct trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = del_s(other, the_key);
	key_with_first_bucket("filler", hash_of(the_key).b[0], filler_key);
	fire_rc[1] = kvt_put_s(other, filler_key, "f");
	fire_rc[2] = kvt_put_s(other, the_key, "from-b");
}

Test(review_cache, cached_put_after_the_key_moved_to_its_other_bucket_updates_it_there_without_a_duplicate)
{
	struct trig t = { .fire = fire_move_to_other_bucket };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 1024, 4);
	char v[64];
	int which = -1;

	other = client(NULL, 0, 4);
	the_key = "mover";
	cr_assert_eq(kvt_put_s(a, the_key, "a1"), 0); /* cached: first bucket */
	cr_assert_eq(key_slots(the_key, NULL, 0, &which), 1);
	cr_assert_eq(which, 0);
	on_lock_cas(&t, hash_of(the_key).b[0]);
	t.armed = 1;
	cr_assert_eq(kvt_put_s(a, the_key, "a2"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect(fire_rc[0] == 0 && fire_rc[1] == 0 && fire_rc[2] == 0);
	cr_expect_eq(key_slots(the_key, v, sizeof(v), &which), 1, "exactly one slot holds the key");
	cr_expect_eq(which, 1, "updated in the bucket it moved to");
	cr_expect_str_eq(v, "a2");
	cr_expect_eq(stat_ops(a, KVC_STAT_PUT_UPDATE), 1, "the stale hint fell back to the general path");
	cr_expect_eq(locked_buckets(), 0);
	cr_assert_eq(kvt_get_s(other, filler_key, v, sizeof(v)), 0, "the key now in the old slot is intact");
	cr_expect_str_eq(v, "f");
	kvc_destroy(other);
	kvc_destroy(a);
}

static void fire_replace(struct trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_put_s(other, the_key, "from-b");
}

Test(review_cache, cached_delete_after_another_client_replaced_the_value_removes_the_key)
{
	struct trig t = { .fire = fire_replace };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 1024, 4);
	char v[64];

	other = client(NULL, 0, 4);
	the_key = "replaced";
	cr_assert_eq(kvt_put_s(a, the_key, "a1"), 0);
	on_lock_cas(&t, hash_of(the_key).b[0]);
	t.armed = 1;
	cr_assert_eq(del_s(a, the_key), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_eq(key_slots(the_key, NULL, 0, NULL), 0);
	cr_expect_eq(kvt_get_s(other, the_key, v, sizeof(v)), KVC_ENOTFOUND);
	cr_expect_eq(kvt_get_s(a, the_key, v, sizeof(v)), KVC_ENOTFOUND);
	cr_expect_eq(locked_buckets(), 0);
	kvc_destroy(other);
	kvc_destroy(a);
}

static void fire_delete(struct trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = del_s(other, the_key);
}

Test(review_cache, cached_put_of_a_key_deleted_meanwhile_reinserts_it_once)
{
	struct trig t = { .fire = fire_delete };
	struct kvi_local_hooks hk = hooks_of(&t);
	kvc_t *a = client(&hk, 1024, 4);
	char v[64];

	other = client(NULL, 0, 4);
	the_key = "deleted-meanwhile";
	cr_assert_eq(kvt_put_s(a, the_key, "a1"), 0);
	on_lock_cas(&t, hash_of(the_key).b[0]);
	t.armed = 1;
	cr_assert_eq(kvt_put_s(a, the_key, "a2"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_eq(stat_ops(a, KVC_STAT_PUT_INSERT), 2, "the stale hint became an insert");
	cr_expect_eq(key_slots(the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "a2");
	cr_expect_eq(locked_buckets(), 0);
	kvc_destroy(other);
	kvc_destroy(a);
}

/* Lock CASes of one client, recorded. */
static uint64_t cas_roff[64];
static unsigned ncas;
static int record_cas(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (op->kind == KVI_ROP_CAS && ncas < 64)
		cas_roff[ncas++] = op->roff;
	return 0;
}

Test(review_cache, cached_location_outside_the_key_buckets_is_never_locked)
{
	struct kvi_local_hooks hk = { .before_op = record_cas };
	kvc_t *a = client(&hk, 1024, 4);
	struct kvi_keyhash kh = hash_of("misplaced");
	uint64_t bogus = (kh.b[0] + 7) % sb()->bucket_count;
	char v[64];

	if (bogus == kh.b[1])
		bogus = (bogus + 1) % sb()->bucket_count;
	cr_assert_eq(kvt_put_s(a, "misplaced", "v1"), 0);
	/* A cache entry that names a foreign bucket (e.g. from before a resize). */
	kvi_locache_put(&kvi_client_conn(a, 0)->cache, kh.lo, kh.hi, bogus, 3, *slot_ptr(kh.b[0], 0), kvi_now_ns());
	ncas = 0;
	cr_assert_eq(kvt_put_s(a, "misplaced", "v2"), 0);
	for (unsigned i = 0; i < ncas; i++)
		cr_expect(cas_roff[i] == kvi_home_bucket_off(sb(), kh.b[0]) || cas_roff[i] == kvi_home_bucket_off(sb(), kh.b[1]),
			  "locked bucket at offset %llu", (unsigned long long)cas_roff[i]);
	cr_expect_eq(key_slots("misplaced", v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "v2");
	kvc_destroy(a);
}

/* A crafted 128-bit collision: the attacker's key hashes like the victim's,
 * so its location-cache entry is the victim's (same hash, same entry, same
 * buckets). Forged here by filing the victim's location under the attacker's
 * hash; the attacker key shares the victim's bucket, as a true collision
 * would. The cached PUT must see the key bytes differ and leave the victim
 * alone -- and an honest cached PUT must still take 2 round trips. */
Test(review_cache, a_forged_hash_collision_cannot_make_a_cached_put_replace_another_keys_value)
{
	kvc_t *a = client(NULL, 1024, 4);
	struct kvi_keyhash kv = hash_of("victim"), ka;
	char attacker[48], v[64];
	struct kvc_stats st0, st1;
	uint64_t vb = UINT64_MAX, word = 0;
	unsigned idx = 0;
	int which = -1;

	cr_assert_eq(kvt_put_s(a, "victim", "victim-value"), 0);
	cr_assert_eq(key_slots("victim", NULL, 0, &which), 1);
	vb = kv.b[which];
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
		if (*slot_ptr(vb, i) && kvi_slot_fp(*slot_ptr(vb, i)) == kv.fp) {
			idx = i;
			word = *slot_ptr(vb, i);
		}
	cr_assert_neq(word, 0);
	key_with_first_bucket("attacker", vb, attacker);
	ka = hash_of(attacker);
	kvi_locache_put(&kvi_client_conn(a, 0)->cache, ka.lo, ka.hi, vb, idx, word, kvi_now_ns());
	cr_assert_eq(kvt_put_s(a, attacker, "attacker-value"), 0);
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), 0, "the victim's key is gone");
	cr_expect_str_eq(v, "victim-value", "the victim's value was replaced");
	cr_expect_eq(kvt_get_s(a, attacker, v, sizeof(v)), 0);
	cr_expect_str_eq(v, "attacker-value");
	cr_expect_eq(key_slots("victim", NULL, 0, NULL), 1);
	cr_expect_eq(key_slots(attacker, NULL, 0, NULL), 1);
	cr_expect_eq(stat_ops(a, KVC_STAT_PUT_UPDATE_CACHED), 0, "the forged entry was used as the attacker's");
	cr_expect_eq(locked_buckets(), 0);
	/* The honest cached update: one doorbell more READ, no more round trips. */
	kvc_get_stats(a, &st0);
	cr_assert_eq(kvt_put_s(a, attacker, "attacker-2"), 0);
	kvc_get_stats(a, &st1);
	cr_expect_eq(st1.ops[KVC_STAT_PUT_UPDATE_CACHED] - st0.ops[KVC_STAT_PUT_UPDATE_CACHED], 1);
	cr_expect_eq(st1.round_trips[KVC_STAT_PUT_UPDATE_CACHED] - st0.round_trips[KVC_STAT_PUT_UPDATE_CACHED], 2);
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "victim-value");
	kvc_destroy(a);
}

/* ========================================================================= */
/* The asynchronous interface                                                 */
/* ========================================================================= */

Test(review_async, poll_with_zero_timeout_completes_finished_operations)
{
	kvc_t *a = client(NULL, 0, 4);
	struct kvc_op op = { .type = KVC_OP_PUT, .key = "nowait", .key_len = 6, .value = "v", .value_len = 1 };
	struct kvc_op *done = NULL;
	int n = 0;

	cr_assert_eq(kvc_submit(a, &op), 0);
	/* "0: do not wait": a non-blocking poll loop, as an event loop runs it. */
	for (int i = 0; i < 100000 && n == 0; i++)
		n = kvc_poll(a, &done, 1, 0);
	cr_expect_eq(n, 1, "kvc_poll(..., 0) never reaped the completion (kvc_inflight %u)", kvc_inflight(a));
	if (n == 0) /* let the op finish so the handle can be destroyed cleanly */
		cr_assert_eq(kvc_poll(a, &done, 1, -1), 1);
	cr_expect_eq(done, &op);
	cr_expect_eq(op.status, 0);
	kvc_destroy(a);
}

/* Every 8-byte WRITE into the index of one client, in execution order. */
struct slot_write {
	uint64_t roff, word;
};
static struct slot_write writes[4096];
static unsigned nwrites;
static int record_slot_writes(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	if (op->kind == KVI_ROP_WRITE && op->len == 8 && op->roff >= sb()->index_off && op->roff < sb()->heap_off &&
	    nwrites < 4096) {
		writes[nwrites].roff = op->roff;
		memcpy(&writes[nwrites].word, op->local, 8);
		nwrites++;
	}
	return 0;
}

/* Submit n ops on one key from one handle, all in flight at once; poll them
 * all. Each must come back exactly once. */
static void run_all(kvc_t *a, struct kvc_op *ops, unsigned n)
{
	struct kvc_op *done[64];
	unsigned seen[64] = { 0 }, finished = 0;

	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(kvc_submit(a, &ops[i]), 0);
	while (finished < n) {
		int got = kvc_poll(a, done, 64, 5000);

		cr_assert_gt(got, 0);
		for (int i = 0; i < got; i++) {
			unsigned idx = (unsigned)(done[i] - ops);

			cr_assert_lt(idx, n);
			cr_expect_eq(seen[idx]++, 0, "op %u completed twice", idx);
		}
		finished += (unsigned)got;
	}
	cr_expect_eq(kvc_inflight(a), 0);
	cr_expect_eq(kvc_poll(a, done, 64, 0), 0, "nothing completes twice");
}

Test(review_async, many_puts_to_one_key_from_one_handle_end_with_the_last_committed_value_in_one_slot)
{
	struct kvi_local_hooks hk = { .before_op = record_slot_writes };
	kvc_t *a = client(&hk, 1024, 16);
	struct kvc_op ops[16];
	char vals[16][16], v[64], last[64];

	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 16; i++) {
			snprintf(vals[i], sizeof(vals[i]), "r%d-v%d", round, i);
			ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = "hot", .key_len = 3, .value = vals[i],
						  .value_len = strlen(vals[i]) };
		}
		nwrites = 0;
		run_all(a, ops, 16);
		for (int i = 0; i < 16; i++)
			cr_expect_eq(ops[i].status, 0, "%s", kvc_err_name(ops[i].status));
		cr_assert_eq(nwrites, 16, "one slot WRITE per PUT");
		cr_assert_eq(*word_at(writes[nwrites - 1].roff), writes[nwrites - 1].word);
		value_of_slot(writes[nwrites - 1].word, last, sizeof(last));
		cr_expect_eq(key_slots("hot", v, sizeof(v), NULL), 1);
		cr_expect_str_eq(v, last);
		cr_assert_eq(kvt_get_s(a, "hot", v, sizeof(v)), 0);
		cr_expect_str_eq(v, last, "a GET after every acknowledgement sees the last commit");
		cr_expect_eq(locked_buckets(), 0);
	}
	kvc_destroy(a);
}

Test(review_async, mixed_puts_and_deletes_on_one_key_from_one_handle_match_the_last_commit)
{
	struct kvi_local_hooks hk = { .before_op = record_slot_writes };
	kvc_t *a = client(&hk, 1024, 16), *b = client(NULL, 0, 4);
	struct kvc_op ops[16];
	char vals[16][16], v[64], last[64];

	for (int round = 0; round < 8; round++) {
		for (int i = 0; i < 16; i++) {
			snprintf(vals[i], sizeof(vals[i]), "r%d-v%d", round, i);
			if ((i + round) % 3 == 0)
				ops[i] = (struct kvc_op){ .type = KVC_OP_DELETE, .key = "flip", .key_len = 4 };
			else
				ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = "flip", .key_len = 4,
							  .value = vals[i], .value_len = strlen(vals[i]) };
		}
		nwrites = 0;
		run_all(a, ops, 16);
		for (int i = 0; i < 16; i++)
			cr_expect(ops[i].status == 0 || (ops[i].type == KVC_OP_DELETE && ops[i].status == KVC_ENOTFOUND),
				  "%s", kvc_err_name(ops[i].status));
		cr_assert_gt(nwrites, 0);
		if (writes[nwrites - 1].word == 0) {
			cr_expect_eq(key_slots("flip", NULL, 0, NULL), 0);
			cr_expect_eq(kvt_get_s(a, "flip", v, sizeof(v)), KVC_ENOTFOUND);
			cr_expect_eq(kvt_get_s(b, "flip", v, sizeof(v)), KVC_ENOTFOUND);
		} else {
			value_of_slot(writes[nwrites - 1].word, last, sizeof(last));
			cr_expect_eq(key_slots("flip", v, sizeof(v), NULL), 1);
			cr_assert_eq(kvt_get_s(a, "flip", v, sizeof(v)), 0);
			cr_expect_str_eq(v, last);
			cr_assert_eq(kvt_get_s(b, "flip", v, sizeof(v)), 0);
			cr_expect_str_eq(v, last);
		}
		cr_expect_eq(locked_buckets(), 0);
	}
	kvc_destroy(b);
	kvc_destroy(a);
}

Test(review_async, finished_but_unpolled_operations_count_against_depth)
{
	kvc_t *a = client(NULL, 0, 4);
	struct kvc_op ops[6], *done[8];
	char key[6][8], buf[6][8];
	int n;

	for (int i = 0; i < 6; i++) {
		snprintf(key[i], sizeof(key[i]), "d%d", i);
		ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = key[i], .key_len = strlen(key[i]),
					  .buf = buf[i], .buf_len = sizeof(buf[i]) };
	}
	for (int i = 0; i < 4; i++)
		cr_assert_eq(kvc_submit(a, &ops[i]), 0);
	cr_expect_eq(kvc_submit(a, &ops[4]), KVC_EAGAIN);
	cr_expect_eq(kvc_get(a, "x", 1, buf[0], 1, NULL), KVC_EBUSY);
	n = kvc_poll(a, done, 1, -1);
	cr_assert_eq(n, 1);
	cr_expect_eq(done[0], &ops[0], "completions come back in order here");
	cr_expect_eq(kvc_inflight(a), 3, "finished but unpolled ops still count");
	cr_assert_eq(kvc_submit(a, &ops[4]), 0);
	cr_expect_eq(kvc_submit(a, &ops[5]), KVC_EAGAIN);
	for (unsigned got = 0; got < 4;) {
		n = kvc_poll(a, done, 8, -1);
		cr_assert_gt(n, 0);
		for (int i = 0; i < n; i++)
			cr_expect_eq(done[i]->status, KVC_ENOTFOUND);
		got += (unsigned)n;
	}
	cr_expect_eq(kvc_inflight(a), 0);
	cr_expect_eq(kvc_get(a, "x", 1, buf[0], 1, NULL), KVC_ENOTFOUND, "blocking calls work again");
	kvc_destroy(a);
}

/* ---- issue 8 items 6 and 7: lost locks break the handle; unknown outcomes -- */

/* Before the first unlock CAS (compare = a held word, swap 0) of the armed
 * client: overwrite that lock word, as a fencing server or a stray writer
 * would. Or fail the first slot WRITE of a commit (a WRITE into the index). */
static int steal_armed, failw_armed;
static int steal_or_fail(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	uint64_t idx_end = sb()->index_off + sb()->bucket_count * KVI_BUCKET_SIZE;

	(void)arg;
	(void)rm;
	if (steal_armed && op->kind == KVI_ROP_CAS && op->compare_add != 0 && op->swap == 0) {
		steal_armed = 0;
		__atomic_store_n((uint64_t *)(void *)(base() + op->roff), kvi_lock_held_by(4000), __ATOMIC_SEQ_CST);
	}
	if (failw_armed && op->kind == KVI_ROP_WRITE && op->roff >= sb()->index_off && op->roff < idx_end) {
		failw_armed = 0;
		return KVC_EIO;
	}
	return 0;
}

/* The connection broke (the server fences it): the next call rejoins as a
 * new client and works. */
static void expect_broke_and_rejoined(kvc_t *a)
{
	struct kvc_stats st;
	char v[8];

	cr_expect_eq(kvt_get_s(a, "never-written", v, sizeof(v)), KVC_ENOTFOUND, "the next call rejoins");
	kvc_get_stats(a, &st);
	cr_expect_eq(st.rejoins, 1, "the handle broke and rejoined once");
}

static void unlock_word(uint64_t roff)
{
	__atomic_store_n((uint64_t *)(void *)(base() + roff), 0, __ATOMIC_SEQ_CST);
}

Test(review_locks, a_commit_whose_unlock_finds_a_foreign_word_is_unknown_and_breaks_the_handle)
{
	struct kvi_local_hooks hk = { .before_op = steal_or_fail };
	kvc_t *a = client(&hk, 0, 4);
	struct kvi_keyhash kh = hash_of("k");

	steal_armed = 1;
	cr_expect_eq(kvt_put_s(a, "k", "v"), KVC_EUNKNOWN, "the slot WRITE went out: outcome unknown");
	expect_broke_and_rejoined(a);
	unlock_word(kvi_home_bucket_off(sb(), kh.b[0]));
	unlock_word(kvi_home_bucket_off(sb(), kh.b[1]));
	kvc_destroy(a);
}

Test(review_locks, a_release_that_finds_a_foreign_word_breaks_the_handle)
{
	struct kvi_local_hooks hk = { .before_op = steal_or_fail };
	kvc_t *a = client(&hk, 0, 4);
	struct kvi_keyhash kh = hash_of("absent");

	steal_armed = 1; /* DELETE of an absent key: lock, check, release */
	cr_expect_eq(del_s(a, "absent"), KVC_ESERVERGONE);
	expect_broke_and_rejoined(a);
	unlock_word(kvi_home_bucket_off(sb(), kh.b[0]));
	unlock_word(kvi_home_bucket_off(sb(), kh.b[1]));
	kvc_destroy(a);
}

Test(review_locks, a_commit_that_completes_in_error_is_unknown_not_failed)
{
	struct kvi_local_hooks hk = { .before_op = steal_or_fail };
	kvc_t *a = client(&hk, 0, 4), *b = client(NULL, 0, 4);
	char v[8];

	failw_armed = 1;
	cr_expect_eq(kvt_put_s(a, "k", "v"), KVC_EUNKNOWN);
	expect_broke_and_rejoined(a);
	/* The server would fence a; here nothing landed (the WRITE failed), and
	 * the locks it held are released by hand as fencing would. */
	unlock_word(kvi_home_bucket_off(sb(), hash_of("k").b[0]));
	unlock_word(kvi_home_bucket_off(sb(), hash_of("k").b[1]));
	cr_expect_eq(kvt_get_s(b, "k", v, sizeof(v)), KVC_ENOTFOUND);
	kvc_destroy(a);
	kvc_destroy(b);
}

/* Break the connection while the armed client's first lock CAS runs: the
 * CAS itself succeeds (its completion is good), so the writer holds the
 * locks, and its next post fails in kvi_rmem_post itself (a local post
 * error, not a completion error). */
static int break_armed;
static int break_at_lock(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	if (break_armed && op->kind == KVI_ROP_CAS && op->compare_add == 0 && op->swap != 0) {
		break_armed = 0;
		kvi_rmem_shutdown(rm, KVC_EIO);
	}
	return 0;
}

/* Issue 8 item 6, first half, as filed: a local post error in kvi_st_post
 * while the operation holds bucket locks must not leave them held by a
 * working handle. The call fails (nothing was written: not unknown), the
 * handle breaks (the server fences it and releases the locks), the locks
 * are still held in the region until then, and the next call rejoins. */
Test(review_locks, a_post_that_fails_while_holding_locks_fails_the_call_and_breaks_the_handle)
{
	struct kvi_local_hooks hk = { .before_op = break_at_lock };
	kvc_t *a = client(&hk, 0, 4), *b = client(NULL, 0, 4);
	struct kvi_keyhash kh = hash_of("k");
	uint64_t w0, w1;
	int rc;
	char v[8];

	cr_assert_eq(kvt_put_s(b, "k", "old"), 0);
	break_armed = 1;
	rc = kvt_put_s(a, "k", "new");
	cr_expect(rc == KVC_ESERVERGONE || rc == KVC_EIO, "failed, not unknown: %s", kvc_err_name(rc));
	w0 = __atomic_load_n((uint64_t *)(void *)(base() + kvi_home_bucket_off(sb(), kh.b[0])), __ATOMIC_SEQ_CST);
	w1 = __atomic_load_n((uint64_t *)(void *)(base() + kvi_home_bucket_off(sb(), kh.b[1])), __ATOMIC_SEQ_CST);
	cr_expect(w0 != 0 && w1 != 0, "still held until the server fences: %llx %llx", (unsigned long long)w0,
		  (unsigned long long)w1);
	cr_expect_eq(kvt_get_s(b, "k", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "old", "nothing was written");
	expect_broke_and_rejoined(a);
	/* What fencing does to the broken client's locks. */
	unlock_word(kvi_home_bucket_off(sb(), kh.b[0]));
	unlock_word(kvi_home_bucket_off(sb(), kh.b[1]));
	cr_expect_eq(kvt_put_s(a, "k", "new"), 0, "the rejoined handle writes");
	kvc_destroy(a);
	kvc_destroy(b);
}

/* ---- issue 8 item 4: memory in proportion to what a handle carries ------- */

Test(review_memory, a_deep_handle_pins_little_until_it_carries_a_large_value)
{
	kvc_t *a = client(NULL, 0, 64), *b = client(NULL, 0, 64);
	size_t big = kvc_max_value(a, 3), got = 0;
	char *v = malloc(big), *r = malloc(big);

	cr_assert(v && r && big > 30000, "max value %zu", big);
	/* 64 slots x (two buckets + words + a 4 KiB object area): ~312 KiB,
	 * not 64 x the largest object (64 MiB with 1 MiB segments) */
	cr_expect_lt(kvi_client_conn(a, 0)->rm->lbuf_size, 330u << 10, "main buffer %zu bytes", kvi_client_conn(a, 0)->rm->lbuf_size);
	cr_expect_eq(kvi_client_conn(a, 0)->rm->nxbuf, 0);
	for (size_t i = 0; i < big; i++)
		v[i] = (char)('a' + i % 26);
	cr_assert_eq(kvc_put(a, "big", 3, v, big, 0), 0);
	cr_expect_eq(kvi_client_conn(a, 0)->rm->nxbuf, 1, "one slot grew");
	cr_expect_leq(kvi_client_conn(a, 0)->rm->xbuf[0].size, 2 * (big + 300), "to about the object's size");
	cr_assert_eq(kvc_get(b, "big", 3, r, big, &got), 0, "a reader grows a slot to read it");
	cr_expect_eq(got, big);
	cr_expect(memcmp(v, r, big) == 0);
	cr_expect_eq(kvi_client_conn(b, 0)->rm->nxbuf, 1);
	cr_assert_eq(kvt_put_s(a, "small", "s"), 0);
	free(v);
	free(r);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(review_memory, sixty_four_handles_holding_one_small_item_each_cost_the_server_little)
{
	kvc_t *c[64];
	char k[16], v[16];
	struct kvs_core_stats st;

	for (int i = 0; i < 64; i++) {
		c[i] = client(NULL, 0, 16);
		snprintf(k, sizeof(k), "t%d", i);
		cr_assert_eq(kvt_put_s(c[i], k, k), 0, "handle %d", i);
	}
	kvs_core_stats(env.core, &st);
	/* extents start at 16 KiB, carved from shared segments: 64 handles
	 * take about a megabyte, not 64 segments */
	cr_expect_leq(st.carved_bytes, 64 * (16u << 10), "%lu bytes handed out for 64 one-item handles",
		      (unsigned long)st.carved_bytes);
	cr_expect_leq(st.segments_granted, 17, "%lu segments for 64 one-item handles",
		      (unsigned long)st.segments_granted);
	for (int i = 0; i < 64; i++) {
		snprintf(k, sizeof(k), "t%d", i);
		cr_expect_eq(kvt_get_s(c[(i + 1) % 64], k, v, sizeof(v)), 0);
	}
	for (int i = 0; i < 64; i++)
		kvc_destroy(c[i]);
}

/* A segment request whose answer is lost: the server may have sealed the
 * extent at the bytes the client said it used and carved the rest for
 * others, or never seen the request. The client can neither write on in the
 * extent nor report less of it used: it breaks the connection (the server
 * then keeps the whole extent). */
static int seg_answer_lost;
static int lose_seg_answer(void *arg, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvt_env *e = arg;
	int rc;

	pthread_mutex_lock(&e->lock);
	rc = kvs_core_ctrl(e->core, id, req, resp);
	pthread_mutex_unlock(&e->lock);
	if (rc == 0 && req->type == KVI_CTRL_SEG_REQ && seg_answer_lost) {
		seg_answer_lost = 0;
		return KVC_ETIMEDOUT;
	}
	return rc;
}

Test(review_memory, a_segment_request_whose_answer_is_lost_breaks_the_connection)
{
	kvc_t *a = client(NULL, 0, 4), *b = client(NULL, 0, 4);
	struct kvi_conn *ca = kvi_client_conn(a, 0);
	char v[16], *big;
	size_t room;
	int rc;

	cr_assert_eq(kvt_put_s(a, "first", "1"), 0);
	/* a value that does not fit what is left of a's extent */
	room = ca->seg_size - ca->seg_used;
	cr_assert(room > 64 && room < kvc_max_value(a, 6), "extent room %zu", room);
	big = malloc(room + 1);
	cr_assert(big);
	memset(big, 'x', room);
	big[room] = '\0';
	kvi_rmem_local_set_ctrl(ca->rm, lose_seg_answer, &env, ca->rm->client_id);
	seg_answer_lost = 1;
	cr_expect_eq(kvt_put_s(a, "second", big), KVC_ETIMEDOUT);
	cr_expect(kvi_conn_broken(ca), "the handle goes on with an extent whose state it does not know");
	cr_expect_eq(ca->seg_off, 0);
	/* b may be carved what the server took back; a writes nothing more */
	cr_assert_eq(kvt_put_s(b, "other", "intact"), 0);
	rc = kvt_put_s(a, "third", "small");
	cr_expect(rc == 0 || rc == KVC_ESERVERGONE, "%s", kvc_err_name(rc)); /* rejoined, or not yet */
	cr_expect_eq(kvt_get_s(b, "other", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "intact");
	free(big);
	kvc_destroy(a);
	kvc_destroy(b);
}

/* Fails the n-th operation this client executes, as a completion error would:
 * that batch completes with KVC_EIO and the connection breaks. */
static unsigned ops_seen, fail_at;
static int fail_armed;
static int fail_nth(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	(void)op;
	return fail_armed && ++ops_seen == fail_at ? KVC_EIO : 0;
}

Test(review_async, connection_break_mid_batch_completes_every_inflight_operation_exactly_once)
{
	struct kvi_local_hooks hk = { .before_op = fail_nth };

	for (fail_at = 1; fail_at < 60; fail_at += 3) {
		kvc_t *a = client(&hk, 1024, 16);
		struct kvc_op ops[16], *done[16];
		char keys[16][16], bufs[16][16];
		unsigned seen[16] = { 0 }, finished = 0, failed = 0;

		ops_seen = 0;
		fail_armed = 1; /* not during the open's superblock READ */
		for (int i = 0; i < 16; i++) {
			snprintf(keys[i], sizeof(keys[i]), "k%d", i % 5); /* shared keys: conflicts, backoffs */
			if (i % 2)
				ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = keys[i], .key_len = strlen(keys[i]),
							  .buf = bufs[i], .buf_len = sizeof(bufs[i]) };
			else
				ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[i], .key_len = strlen(keys[i]),
							  .value = "v", .value_len = 1 };
			int rc = kvc_submit(a, &ops[i]);

			if (rc == KVC_ESERVERGONE) { /* broken before this submit: nothing was taken */
				ops[i].status = rc;
				seen[i] = 1;
				finished++;
				continue;
			}
			cr_assert_eq(rc, 0, "%s", kvc_err_name(rc));
		}
		while (finished < 16) {
			int got = kvc_poll(a, done, 16, 2000);

			cr_assert_gt(got, 0, "fail_at %u: %u ops never completed", fail_at, 16 - finished);
			for (int i = 0; i < got; i++) {
				unsigned idx = (unsigned)(done[i] - ops);

				cr_assert_lt(idx, 16);
				cr_expect_eq(seen[idx]++, 0, "fail_at %u: op %u completed twice", fail_at, idx);
				cr_expect_neq(done[i]->status, 1, "returned while still in flight");
			}
			finished += (unsigned)got;
		}
		for (int i = 0; i < 16; i++)
			failed += ops[i].status != 0 && ops[i].status != KVC_ENOTFOUND;
		cr_expect_gt(failed, 0, "fail_at %u: the failure was seen", fail_at);
		cr_expect_eq(kvc_inflight(a), 0);
		fail_armed = 0;
		{
			/* Nothing in flight: the next call rejoins, as a new client. */
			struct kvc_op g = { .type = KVC_OP_GET, .key = "zz", .key_len = 2, .buf = bufs[0],
					    .buf_len = sizeof(bufs[0]) };
			struct kvc_stats st;

			cr_expect_eq(kvc_submit(a, &g), 0);
			cr_expect_eq(kvc_poll(a, done, 1, 2000), 1);
			cr_expect_eq(g.status, KVC_ENOTFOUND);
			kvc_get_stats(a, &st);
			cr_expect_eq(st.rejoins, 1);
		}
		kvc_destroy(a);
		/* Locks the dead connection held are the server's to release (fencing);
		 * clear them so the next round starts clean. */
		for (uint64_t b = 0; b < sb()->bucket_count; b++)
			*word_at(kvi_home_bucket_off(sb(), b)) = 0;
	}
}

/* ========================================================================= */
/* Expiry                                                                      */
/* ========================================================================= */

Test(review_expiry, delete_of_an_expired_item_is_enotfound_through_the_buckets)
{
	kvc_t *a = client(NULL, 0, 4);
	char v[16];

	cr_assert_eq(kvc_put(a, "gone", 4, "x", 1, 100), 0);
	usleep(200 * 1000);
	cr_assert_eq(kvt_get_s(a, "gone", v, sizeof(v)), KVC_ENOTFOUND, "GET: an expired key is absent");
	cr_expect_eq(del_s(a, "gone"), KVC_ENOTFOUND, "DELETE must agree with GET that the key is absent");
	cr_expect_eq(stat_ops(a, KVC_STAT_DELETE), 0, "counted as a successful delete");
	kvc_destroy(a);
}

/* Issue 8 item 5: a GET read a live item; before its completion was
 * processed a newer write (no TTL) replaced it and the old item's expiry
 * passed. The READ saw the key alive, so a miss is impossible in any order;
 * the expiry decision must be made at a point inside the READ (layout.h
 * "Expiry"): here it is ambiguous, so the GET reads again and returns the
 * newer value. Checked on the cached path (cache > 0) and the bucket path. */
static void expiry_during_read(unsigned cache, int object_read_late)
{
	kvc_t *a = client(NULL, cache, 4), *b = client(NULL, 0, 4);
	char v[16] = "";
	struct kvc_op op = { .type = KVC_OP_GET, .key = "k", .key_len = 1, .buf = v, .buf_len = sizeof(v) - 1 }, *d;

	cr_assert_eq(kvc_put(a, "k", 1, "old", 3, 150), 0);
	cr_assert_eq(kvt_get_s(a, "k", v, sizeof(v)), 0);
	cr_assert_str_eq(v, "old");
	memset(v, 0, sizeof(v));
	/* The local transport executes a READ when it is posted: on the cached
	 * path this reads the old object now; on the bucket path, the buckets. */
	cr_assert_eq(kvc_submit(a, &op), 0);
	if (cache == 0 && !object_read_late) /* let the object READ be posted too, while "old" is alive */
		cr_assert_eq(kvc_poll(a, &d, 1, 0), 0);
	/* (late: the buckets were read while "old" was alive; its object is
	 * read only after it expired and was replaced: the slot READ is the
	 * moment it was current, and decides) */
	cr_assert_eq(kvt_put_s(b, "k", "new"), 0);
	usleep(250 * 1000); /* past the old item's expiry */
	cr_assert_eq(kvc_poll(a, &d, 1, -1), 1);
	cr_expect_eq(op.status, 0, "got %s: the READ saw the key alive", kvc_err_name(op.status));
	cr_expect_str_eq(v, "new");
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(review_expiry, an_item_expiring_while_the_cached_read_is_in_flight_is_read_again)
{
	expiry_during_read(1024, 0);
}

Test(review_expiry, an_item_expiring_while_the_object_read_is_in_flight_is_read_again)
{
	expiry_during_read(0, 0);
}

Test(review_expiry, an_item_that_expired_between_its_slot_read_and_its_object_read_is_read_again)
{
	expiry_during_read(0, 1);
}

Test(review_expiry, a_ttl_counts_in_milliseconds)
{
	kvc_t *a = client(NULL, 0, 4);
	uint64_t put_ms, rc_alive, read_done_ms;
	char v[16];

	/* A loaded machine may oversleep: "alive" is expected only of a read
	 * that finished before the PUT's start + TTL (so it surely read before
	 * the expiry); "gone" of one that started after it. */
	put_ms = kvi_real_ns() / 1000000u;
	cr_assert_eq(kvc_put(a, "short", 5, "x", 1, 120), 0);
	rc_alive = (uint64_t)kvt_get_s(a, "short", v, sizeof(v));
	read_done_ms = kvi_real_ns() / 1000000u;
	if (read_done_ms < put_ms + 120)
		cr_expect_eq((int)rc_alive, 0, "alive right after its PUT");
	usleep(60 * 1000);
	rc_alive = (uint64_t)kvt_get_s(a, "short", v, sizeof(v));
	read_done_ms = kvi_real_ns() / 1000000u;
	if (read_done_ms < put_ms + 120)
		cr_expect_eq((int)rc_alive, 0, "alive at half its TTL");
	else
		cr_log_warn("the machine overslept: the half-TTL read ended %llu ms after the PUT began",
			    (unsigned long long)(read_done_ms - put_ms));
	usleep(80 * 1000);
	cr_expect_eq(kvt_get_s(a, "short", v, sizeof(v)), KVC_ENOTFOUND, "gone after its TTL");
	kvc_destroy(a);
}

Test(review_expiry, delete_of_an_expired_item_is_enotfound_through_the_cached_location)
{
	kvc_t *a = client(NULL, 1024, 4);
	char v[16];

	cr_assert_eq(kvc_put(a, "gone", 4, "x", 1, 100), 0); /* location cached */
	usleep(200 * 1000);
	cr_assert_eq(kvt_get_s(a, "gone", v, sizeof(v)), KVC_ENOTFOUND, "GET: an expired key is absent");
	cr_expect_eq(del_s(a, "gone"), KVC_ENOTFOUND, "DELETE must agree with GET that the key is absent");
	kvc_destroy(a);
}

/* ========================================================================= */
/* Candidates read over several rounds                                        */
/* ========================================================================= */

/* n keys "twin-N" with one fingerprint and one first candidate bucket (the
 * pair is {0,1} anyway): every twin lists the candidates in the same order,
 * inserts alternate between the two buckets, and the later twins in the
 * second bucket sit past the first 16 candidates, whatever the hash seed. */
static void fingerprint_twins(unsigned n, char (*out)[32])
{
	static uint16_t count[2u << KVI_SLOT_FP_BITS];
	static uint32_t first[2u << KVI_SLOT_FP_BITS][32];
	char k[32];

	cr_assert_leq(n, 32);
	memset(count, 0, sizeof(count));
	for (uint32_t i = 0; i < 4000000; i++) {
		struct kvi_keyhash kh;
		uint32_t c;

		snprintf(k, sizeof(k), "twin-%u", i);
		kh = hash_of(k);
		c = kh.fp << 1 | (uint32_t)kh.b[0];
		first[c][count[c]++] = i;
		if (count[c] == n) {
			for (unsigned j = 0; j < n; j++)
				snprintf(out[j], 32, "twin-%u", first[c][j]);
			return;
		}
	}
	cr_assert_fail("no fingerprint with %u keys", n);
}

Test(review_rounds, seventeen_fingerprint_twins_are_found_across_read_rounds_and_never_duplicated)
{
	enum { N = 18 }; /* 17 stored (more than one 16-READ doorbell), 1 inserted last */
	kvc_t *a = client(NULL, 0, 4), *c = client(NULL, 1024, 4);
	char twins[N][32], v[64], want[64];

	fingerprint_twins(N, twins);
	for (int i = 0; i < N - 1; i++)
		cr_assert_eq(kvt_put_s(a, twins[i], twins[i]), 0, "%d", i);
	/* The new key must be compared with all 17 candidates before it is inserted. */
	cr_assert_eq(kvt_put_s(a, twins[N - 1], "last"), 0);
	for (int i = 0; i < N; i++) {
		snprintf(want, sizeof(want), "%s", i == N - 1 ? "last" : twins[i]);
		cr_expect_eq(key_slots(twins[i], NULL, 0, NULL), 1, "%s", twins[i]);
		cr_assert_eq(kvt_get_s(a, twins[i], v, sizeof(v)), 0, "%s", twins[i]);
		cr_expect_str_eq(v, want);
	}
	/* Updates through the buckets (a) and through the cache (c, after a GET). */
	for (int i = 0; i < N; i++) {
		snprintf(want, sizeof(want), "upd-%d", i);
		cr_assert_eq(kvt_put_s(a, twins[i], want), 0);
		cr_assert_eq(kvt_get_s(c, twins[i], v, sizeof(v)), 0);
		cr_expect_str_eq(v, want);
		cr_assert_eq(kvt_put_s(c, twins[i], "again"), 0);
		cr_expect_eq(key_slots(twins[i], v, sizeof(v), NULL), 1, "%s", twins[i]);
		cr_expect_str_eq(v, "again");
	}
	{
		struct kvc_stats st;

		kvc_get_stats(a, &st);
		cr_expect_gt(st.round_trips[KVC_STAT_GET_HIT], 2 * st.ops[KVC_STAT_GET_HIT],
			     "some candidate needed a second doorbell of object READs");
	}
	for (int i = N - 1; i >= 0; i--) {
		cr_assert_eq(del_s(a, twins[i]), 0, "%s", twins[i]);
		cr_expect_eq(kvt_get_s(c, twins[i], v, sizeof(v)), KVC_ENOTFOUND);
		cr_expect_eq(key_slots(twins[i], NULL, 0, NULL), 0);
	}
	cr_expect_eq(locked_buckets(), 0);
	kvc_destroy(c);
	kvc_destroy(a);
}

Test(review_rounds, large_fingerprint_twins_are_read_in_rounds_that_fit_the_object_area)
{
	enum { N = 7 };
	kvc_t *a = client(NULL, 0, 4);
	size_t vlen = 20000; /* three objects fill most of a 64 KiB object area */
	char twins[N][32];
	char *val = malloc(vlen), *got = malloc(vlen);
	size_t len = 0;

	cr_assert(val && got);
	fingerprint_twins(N, twins);
	for (int i = 0; i < N; i++) {
		memset(val, 'a' + i, vlen);
		cr_assert_eq(kvc_put(a, twins[i], strlen(twins[i]), val, vlen, 0), 0, "%d", i);
	}
	for (int i = 0; i < N; i++) {
		memset(val, 'a' + i, vlen);
		cr_assert_eq(kvc_get(a, twins[i], strlen(twins[i]), got, vlen, &len), 0, "%s", twins[i]);
		cr_expect_eq(len, vlen);
		cr_expect_eq(memcmp(got, val, vlen), 0, "%s", twins[i]);
		cr_expect_eq(key_slots(twins[i], NULL, 0, NULL), 1);
	}
	{
		struct kvc_stats st;

		kvc_get_stats(a, &st);
		cr_expect_gt(st.round_trips[KVC_STAT_GET_HIT], 2 * st.ops[KVC_STAT_GET_HIT],
			     "the object area forced more than one round of object READs");
	}
	memset(val, 'z', vlen);
	cr_assert_eq(kvc_put(a, twins[N - 1], strlen(twins[N - 1]), val, vlen, 0), 0);
	cr_expect_eq(key_slots(twins[N - 1], NULL, 0, NULL), 1, "updated, not duplicated");
	cr_assert_eq(kvc_delete(a, twins[N - 1], strlen(twins[N - 1])), 0);
	cr_expect_eq(key_slots(twins[N - 1], NULL, 0, NULL), 0);
	cr_expect_eq(locked_buckets(), 0);
	free(val);
	free(got);
	kvc_destroy(a);
}

/* ========================================================================= */
/* Malicious region contents                                                  */
/* ========================================================================= */

static void write_hdr(uint64_t off, uint16_t key_len, uint32_t value_len, const char *key)
{
	struct kvi_obj_hdr h = { .len_exp = value_len, .key_len = (uint8_t)key_len, .version = KVI_LAYOUT_VERSION };

	memcpy(base() + off, &h, sizeof(h));
	if (key && off + sizeof(h) + strlen(key) <= heap_end())
		memcpy(base() + off + sizeof(h), key, strlen(key));
}

static uint64_t raw_slot(uint32_t fp, uint64_t off, uint64_t units)
{
	return ((uint64_t)fp << KVI_SLOT_FP_SHIFT) | (units << KVI_SLOT_SIZE_SHIFT) | (off / KVI_OBJ_ALIGN);
}

Test(review_malicious, garbage_headers_and_slots_matching_the_key_never_crash_or_return_values)
{
	kvc_t *a = client(NULL, 0, 4), *c = client(NULL, 1024, 4);
	const char *key = "target";
	struct kvi_keyhash kh = hash_of(key);
	uint64_t end = heap_end(), g[KVI_SLOTS_PER_BUCKET];
	unsigned ng = 0;
	char v[64];
	int rc;

	/* Headers in the heap's last, never granted, bytes. */
	write_hdr(end - 32, 6, 0xffffffffu, NULL);                 /* read clamped to 32 bytes */
	write_hdr(end - 4096, 0xffff, 0xfffffff0u, key);           /* huge key and value */
	write_hdr(end - 8192, 6, 0xffffffffu, key);                /* our key, huge value */
	write_hdr(end - 12288, 6, 1u << 20, key);                  /* value past the READ */
	write_hdr(end - 16384, 0, 5, NULL);                        /* empty key */
	g[ng++] = raw_slot(kh.fp, end - 32, 1);
	g[ng++] = raw_slot(kh.fp, end - 4096, 3);
	g[ng++] = raw_slot(kh.fp, end - 8192, KVI_SLOT_MAX_UNITS);  /* READ longer than any object */
	g[ng++] = raw_slot(kh.fp, end - 12288, 2);
	g[ng++] = raw_slot(kh.fp, end - 16384, 1);
	g[ng++] = raw_slot(kh.fp, end - 16, 1);                     /* header past the heap end */
	g[ng++] = raw_slot(kh.fp, sb()->heap_off - 16, 1);           /* below the heap */
	g[ng++] = raw_slot(kh.fp, sb()->region_size - 16, 5);        /* at the region's end */
	g[ng++] = raw_slot(kh.fp, 0, 2);                             /* the superblock */
	for (unsigned i = 0; i < ng; i++)
		*slot_ptr(kh.b[i & 1], i / 2) = g[i];

	rc = kvt_get_s(a, key, v, sizeof(v));
	cr_expect(rc == KVC_ENOTFOUND || rc == KVC_ECORRUPT, "GET got %s", kvc_err_name(rc));
	rc = del_s(a, key);
	cr_expect(rc == KVC_ENOTFOUND || rc == KVC_ECORRUPT, "DELETE got %s", kvc_err_name(rc));
	rc = kvt_put_s(a, key, "real");
	cr_expect(rc == 0 || rc == KVC_ECORRUPT, "PUT got %s", kvc_err_name(rc));
	if (rc == 0) {
		cr_assert_eq(kvt_get_s(c, key, v, sizeof(v)), 0);
		cr_expect_str_eq(v, "real");
		cr_assert_eq(kvt_get_s(c, key, v, sizeof(v)), 0, "through the cache");
		cr_expect_str_eq(v, "real");
	}
	cr_expect_eq(locked_buckets(), 0);
	kvc_destroy(c);
	kvc_destroy(a);
}

Test(review_malicious, object_corrupted_under_a_still_valid_cached_location_is_never_returned)
{
	kvc_t *a = client(NULL, 1024, 4);
	struct kvi_keyhash kh = hash_of("victim");
	struct kvi_obj_hdr *oh;
	uint64_t s = 0;
	char v[64];

	cr_assert_eq(kvt_put_s(a, "victim", "value"), 0);
	for (unsigned w = 0; w < 2 && !s; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET && !s; i++)
			if (*slot_ptr(kh.b[w], i))
				s = *slot_ptr(kh.b[w], i);
	cr_assert_neq(s, 0);
	oh = (struct kvi_obj_hdr *)(void *)(base() + kvi_slot_obj_off(s));
	oh->len_exp = (1u << KVI_OBJ_VLEN_BITS) - 1; /* the slot word is unchanged: the cache check passes */
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), KVC_ECORRUPT);
	oh->len_exp = 5;
	oh->key_len = 0xff; /* beyond KVI_MAX_KEY */
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), KVC_ECORRUPT);
	/* The failed GETs dropped the cached location. A PUT, holding both
	 * locks, replaces the unreadable slot in place (junk: issue 18 defect
	 * 3), never inserting a second one. */
	cr_expect_eq(kvt_put_s(a, "victim", "new"), 0);
	cr_expect_eq(locked_buckets(), 0);
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "new");
	kvc_destroy(a);
}
