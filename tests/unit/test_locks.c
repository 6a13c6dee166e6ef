/* Lock hygiene: a writer's bucket locks are released on every error and
 * retry path (a timeout on a held lock, backing off from a half-taken pair,
 * a key check that never verifies, refusals), a commit in progress blocks
 * writers but not readers, and a handle whose lock was taken from it or
 * whose post failed while holding locks breaks (outcome unknown once the
 * slot WRITE went out) and rejoins. Interleavings are forced through the
 * local transport's hooks (dpath_check.h kvt_trig). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
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

TestSuite(locks, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(locks_small, .init = setup_two_buckets, .fini = teardown, .timeout = 60);

/* Scenario state shared with the fire callbacks (each test is its own process). */
static kvc_t *other;
static const char *the_key;
static int fire_rc[4];
static char fire_val[4][64];
static uint64_t fire_lock[2];

/* ========================================================================= */
/* Lock hygiene on error and retry paths                                      */
/* ========================================================================= */

/* Fires before A's CAS on its second bucket: A holds only the first. */
static void fire_impatient_put(struct kvt_trig *t, const struct kvi_rop *op)
{
	struct kvi_keyhash kh = kvt_hash_of(&env, the_key);

	(void)t;
	(void)op;
	fire_rc[0] = kvt_put_s(other, the_key, "from-b");
	fire_lock[0] = kvt_lock_word(&env, kh.b[0]);
	fire_lock[1] = kvt_lock_word(&env, kh.b[1]);
}

Test(locks, writer_timing_out_on_a_held_lock_releases_the_lock_it_did_take)
{
	struct kvt_trig t = { .armed = 1, .fire = fire_impatient_put };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	char v[64];

	other = kvt_impatient(&env);
	the_key = "contended";
	kvt_on_lock_cas(&env, &t, kvt_hash_of(&env, the_key).b[1]);
	cr_assert_eq(kvt_put_s(a, the_key, "from-a"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], KVC_ETIMEDOUT, "B got %s", kvc_err_name(fire_rc[0]));
	cr_expect_eq(fire_lock[0], kvi_lock_held_by(kvi_client_conn(a, 0)->rm->client_id), "A still holds its first bucket");
	cr_expect_eq(fire_lock[1], 0, "B released the second bucket it locked before timing out");
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	cr_expect_eq(kvt_key_slots(&env, the_key, v, sizeof(v), NULL), 1);
	cr_expect_str_eq(v, "from-a");
	kvc_destroy(other);
	kvc_destroy(a);
}

/* First firing: someone else holds the second bucket when A tries it. Second
 * firing (A's next lock attempt): A must have let go of the first bucket
 * before backing off; the other holder then leaves. */
static uint64_t fake_holder_b;
static void fire_fake_holder(struct kvt_trig *t, const struct kvi_rop *op);

static void fire_check_released(struct kvt_trig *t, const struct kvi_rop *op)
{
	struct kvi_keyhash kh = kvt_hash_of(&env, the_key);

	(void)op;
	(void)t;
	fire_lock[0] = kvt_lock_word(&env, kh.b[0]);
	__atomic_store_n(kvt_word_at(&env, kvi_home_bucket_off(kvt_geom(&env), fake_holder_b)), 0, __ATOMIC_SEQ_CST);
}

static void fire_fake_holder(struct kvt_trig *t, const struct kvi_rop *op)
{
	(void)op;
	__atomic_store_n(kvt_word_at(&env, kvi_home_bucket_off(kvt_geom(&env), fake_holder_b)), kvi_lock_held_by(999), __ATOMIC_SEQ_CST);
	/* re-arm on A's next lock attempt, on its first bucket */
	kvt_on_lock_cas(&env, t, kvt_hash_of(&env, the_key).b[0]);
	t->fire = fire_check_released;
	t->armed = 1;
}

Test(locks, partial_lock_is_released_before_backing_off)
{
	struct kvt_trig t = { .armed = 1, .fire = fire_fake_holder };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	struct kvc_stats s;
	char v[64];

	the_key = "half-locked";
	fake_holder_b = kvt_hash_of(&env, the_key).b[1];
	kvt_on_lock_cas(&env, &t, fake_holder_b);
	cr_assert_eq(kvt_put_s(a, the_key, "v"), 0);
	cr_assert_eq(t.fired, 2);
	cr_expect_eq(fire_lock[0], 0, "A backed off still holding bucket %llu",
		     (unsigned long long)kvt_hash_of(&env, the_key).b[0]);
	kvc_get_stats(a, &s);
	cr_expect_eq(s.lock_conflicts, 1);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	cr_expect_eq(kvt_key_slots(&env, the_key, v, sizeof(v), NULL), 1);
	kvc_destroy(a);
}

/* Fires before A's commit WRITE of the slot: A holds both locks. */
static void fire_during_commit(struct kvt_trig *t, const struct kvi_rop *op)
{
	(void)t;
	(void)op;
	fire_rc[0] = kvt_get_s(other, the_key, fire_val[0], sizeof(fire_val[0]));
	fire_rc[1] = kvt_del_s(other, the_key);
	fire_rc[2] = kvt_put_s(other, the_key, "from-b");
}

Test(locks, commit_in_progress_blocks_writers_cleanly_and_readers_see_the_old_value)
{
	struct kvt_trig t = { .kind = KVI_ROP_WRITE, .fire = fire_during_commit };
	struct kvi_local_hooks hk = kvt_trig_hooks(&t);
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	char v[64];

	other = kvt_impatient(&env);
	the_key = "committing";
	cr_assert_eq(kvt_put_s(a, the_key, "old"), 0);
	t.lo = kvt_geom(&env)->index_off;
	t.hi = kvt_geom(&env)->heap_off; /* the slot WRITE, not the object WRITE */
	t.armed = 1;
	cr_assert_eq(kvt_put_s(a, the_key, "new"), 0);
	cr_assert_eq(t.fired, 1);
	cr_expect_eq(fire_rc[0], 0);
	cr_expect_str_eq(fire_val[0], "old", "the slot is not written yet");
	cr_expect_eq(fire_rc[1], KVC_ETIMEDOUT, "DELETE got %s", kvc_err_name(fire_rc[1]));
	cr_expect_eq(fire_rc[2], KVC_ETIMEDOUT, "PUT got %s", kvc_err_name(fire_rc[2]));
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	cr_expect_eq(kvt_key_slots(&env, the_key, v, sizeof(v), NULL), 1);
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
 * junk (a key whose slot names no valid object must stay writable: a stray
 * WRITE can leave such a slot): it replaces it in place, so no duplicate is
 * ever inserted, and releases both locks. */
Test(locks, put_whose_key_check_reads_stay_corrupt_replaces_that_slot_and_releases_both_locks)
{
	struct kvi_local_hooks hk = { .after_read = corrupt_objects };
	kvc_t *b = kvt_client(&env, NULL, 0, 4), *a;
	struct kvc_stats s;
	char v[64];

	corrupt_from = kvt_geom(&env)->heap_off;
	a = kvt_client(&env, &hk, 0, 4);
	cr_assert_eq(kvt_put_s(b, "fragile", "intact"), 0);
	cr_expect_eq(kvt_put_s(a, "fragile", "overwrite"), 0);
	kvc_get_stats(a, &s);
	cr_expect_eq(s.verify_retries, KVI_VERIFY_TRIES);
	cr_expect_eq(s.junk_slots, 1);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	cr_expect_eq(kvt_key_slots(&env, "fragile", v, sizeof(v), NULL), 1, "no duplicate was inserted");
	cr_expect_str_eq(v, "overwrite");
	cr_assert_eq(kvt_get_s(b, "fragile", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "overwrite");
	cr_expect_eq(kvt_del_s(a, "fragile"), KVC_ENOTFOUND, "what it cannot read it clears, as an expired item");
	cr_expect_eq(kvt_key_slots(&env, "fragile", v, sizeof(v), NULL), 0);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(a);
	kvc_destroy(b);
}

Test(locks_small, refused_inserts_and_delete_misses_release_both_locks)
{
	kvc_t *c = kvt_client(&env, NULL, 0, 4);
	char k[32];
	int rc = 0, i;

	for (i = 0; i < 100 && rc == 0; i++) {
		snprintf(k, sizeof(k), "fill-%d", i);
		rc = kvt_put_s(c, k, "v");
	}
	cr_assert_eq(rc, KVC_EINDEXFULL);
	cr_expect_eq(kvt_lock_word(&env, 0), 0);
	cr_expect_eq(kvt_lock_word(&env, 1), 0);
	cr_expect_eq(kvt_put_s(c, "one-more", "v"), KVC_EINDEXFULL, "a second refusal is not a lock conflict");
	cr_expect_eq(kvt_del_s(c, "absent"), KVC_ENOTFOUND);
	cr_expect_eq(kvt_lock_word(&env, 0), 0);
	cr_expect_eq(kvt_lock_word(&env, 1), 0);
	kvc_destroy(c);
}

/* ========================================================================= */
/* Lost locks break the handle; outcomes that cannot be known are unknown     */
/* ========================================================================= */

/* Before the first unlock CAS (compare = a held word, swap 0) of the armed
 * client: overwrite that lock word, as a fencing server or a stray writer
 * would. Or fail the first slot WRITE of a commit (a WRITE into the index). */
static int steal_armed, failw_armed;
static int steal_or_fail(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	uint64_t idx_end = kvt_geom(&env)->index_off + kvt_geom(&env)->bucket_count * KVI_BUCKET_SIZE;

	(void)arg;
	(void)rm;
	if (steal_armed && op->kind == KVI_ROP_CAS && op->compare_add != 0 && op->swap == 0) {
		steal_armed = 0;
		__atomic_store_n((uint64_t *)(void *)(kvt_base(&env) + op->roff), kvi_lock_held_by(4000), __ATOMIC_SEQ_CST);
	}
	if (failw_armed && op->kind == KVI_ROP_WRITE && op->roff >= kvt_geom(&env)->index_off && op->roff < idx_end) {
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
	__atomic_store_n((uint64_t *)(void *)(kvt_base(&env) + roff), 0, __ATOMIC_SEQ_CST);
}

Test(locks, a_commit_whose_unlock_finds_a_foreign_word_is_unknown_and_breaks_the_handle)
{
	struct kvi_local_hooks hk = { .before_op = steal_or_fail };
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	struct kvi_keyhash kh = kvt_hash_of(&env, "k");

	steal_armed = 1;
	cr_expect_eq(kvt_put_s(a, "k", "v"), KVC_EUNKNOWN, "the slot WRITE went out: outcome unknown");
	expect_broke_and_rejoined(a);
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kh.b[0]));
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kh.b[1]));
	kvc_destroy(a);
}

Test(locks, a_release_that_finds_a_foreign_word_breaks_the_handle)
{
	struct kvi_local_hooks hk = { .before_op = steal_or_fail };
	kvc_t *a = kvt_client(&env, &hk, 0, 4);
	struct kvi_keyhash kh = kvt_hash_of(&env, "absent");

	steal_armed = 1; /* DELETE of an absent key: lock, check, release */
	cr_expect_eq(kvt_del_s(a, "absent"), KVC_ESERVERGONE);
	expect_broke_and_rejoined(a);
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kh.b[0]));
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kh.b[1]));
	kvc_destroy(a);
}

Test(locks, a_commit_that_completes_in_error_is_unknown_not_failed)
{
	struct kvi_local_hooks hk = { .before_op = steal_or_fail };
	kvc_t *a = kvt_client(&env, &hk, 0, 4), *b = kvt_client(&env, NULL, 0, 4);
	char v[8];

	failw_armed = 1;
	cr_expect_eq(kvt_put_s(a, "k", "v"), KVC_EUNKNOWN);
	expect_broke_and_rejoined(a);
	/* The server would fence a; here nothing landed (the WRITE failed), and
	 * the locks it held are released by hand as fencing would. */
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kvt_hash_of(&env, "k").b[0]));
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kvt_hash_of(&env, "k").b[1]));
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

/* A local post error in kvi_st_post while the operation holds bucket locks
 * must not leave them held by a working handle. The call fails (nothing was written: not unknown), the
 * handle breaks (the server fences it and releases the locks), the locks
 * are still held in the region until then, and the next call rejoins. */
Test(locks, a_post_that_fails_while_holding_locks_fails_the_call_and_breaks_the_handle)
{
	struct kvi_local_hooks hk = { .before_op = break_at_lock };
	kvc_t *a = kvt_client(&env, &hk, 0, 4), *b = kvt_client(&env, NULL, 0, 4);
	struct kvi_keyhash kh = kvt_hash_of(&env, "k");
	uint64_t w0, w1;
	int rc;
	char v[8];

	cr_assert_eq(kvt_put_s(b, "k", "old"), 0);
	break_armed = 1;
	rc = kvt_put_s(a, "k", "new");
	cr_expect(rc == KVC_ESERVERGONE || rc == KVC_EIO, "failed, not unknown: %s", kvc_err_name(rc));
	w0 = __atomic_load_n((uint64_t *)(void *)(kvt_base(&env) + kvi_home_bucket_off(kvt_geom(&env), kh.b[0])), __ATOMIC_SEQ_CST);
	w1 = __atomic_load_n((uint64_t *)(void *)(kvt_base(&env) + kvi_home_bucket_off(kvt_geom(&env), kh.b[1])), __ATOMIC_SEQ_CST);
	cr_expect(w0 != 0 && w1 != 0, "still held until the server fences: %llx %llx", (unsigned long long)w0,
		  (unsigned long long)w1);
	cr_expect_eq(kvt_get_s(b, "k", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "old", "nothing was written");
	expect_broke_and_rejoined(a);
	/* What fencing does to the broken client's locks. */
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kh.b[0]));
	unlock_word(kvi_home_bucket_off(kvt_geom(&env), kh.b[1]));
	cr_expect_eq(kvt_put_s(a, "k", "new"), 0, "the rejoined handle writes");
	kvc_destroy(a);
	kvc_destroy(b);
}
