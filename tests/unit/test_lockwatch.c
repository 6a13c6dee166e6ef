/* server/lockwatch.h: how the server's own writers (reclaimer, migrator)
 * decide to report a lock word they keep finding. Times are given, so the
 * rules are checked exactly: a word seen without a break for a quarter
 * deadline is reported; a wait broken by seeing the bucket free starts
 * afresh; marks, junk and our own word are never reported. */
#include <criterion/criterion.h>

#include "dpath_env.h"
#include "lockwatch.h"

static struct kvt_env env;
static struct kvi_rmem *rm;
static uint64_t quarter;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 64, 64), 0);
	cr_assert_eq(kvs_inproc_loopback(&env.srv, 4096, NULL, kvs_inproc_new_id(&env.srv), &rm), 0);
	quarter = (uint64_t)rm->max_op_ms * 1000000u / 4;
}

static void teardown(void)
{
	kvi_rmem_destroy(rm);
	kvt_env_fini(&env);
}

TestSuite(lockwatch, .init = setup, .fini = teardown, .timeout = 30);

Test(lockwatch, a_word_held_for_a_quarter_deadline_is_reported_once_per_quarter)
{
	struct kvs_lockwatch w = { 0 };
	uint64_t word = kvi_lock_held_by(4000), t = 1000000000ull;

	kvs_lockwatch_seen(&w, rm, 3, 1, word, t);
	kvs_lockwatch_seen(&w, rm, 3, 1, word, t + quarter - 1);
	cr_expect_eq(w.reports, 0, "reported before a quarter deadline");
	kvs_lockwatch_seen(&w, rm, 3, 1, word, t + quarter);
	cr_expect_eq(w.reports, 1);
	kvs_lockwatch_seen(&w, rm, 3, 1, word, t + quarter + 1);
	cr_expect_eq(w.reports, 1, "reported again at once");
	kvs_lockwatch_seen(&w, rm, 3, 1, word, t + 2 * quarter);
	cr_expect_eq(w.reports, 2);
}

/* A hot key's owner takes the same bucket again and again: seen held,
 * free, held, ... is no stuck lock, however long it goes on. */
Test(lockwatch, a_wait_broken_by_a_free_bucket_starts_afresh)
{
	struct kvs_lockwatch w = { 0 };
	uint64_t word = kvi_lock_held_by(4000), t = 1000000000ull;

	for (unsigned i = 0; i < 20; i++) {
		kvs_lockwatch_seen(&w, rm, 3, 1, word, t + i * quarter);
		kvs_lockwatch_forget(&w, 3, 1);
	}
	cr_expect_eq(w.reports, 0);
}

Test(lockwatch, marks_junk_a_free_word_and_our_own_lock_are_not_reported)
{
	struct kvs_lockwatch w = { 0 };
	uint64_t words[] = { 0, KVI_LOCK_MOVED, KVI_LOCK_UNMIGRATED, KVI_LOCK_MOVED | 0xbad,
			     kvi_lock_held_by(rm->client_id) };
	uint64_t t = 1000000000ull;

	for (unsigned k = 0; k < sizeof(words) / sizeof(words[0]); k++)
		for (unsigned i = 0; i < 4; i++)
			kvs_lockwatch_seen(&w, rm, 5 + k, 1, words[k], t + i * quarter);
	cr_expect_eq(w.reports, 0);
}

/* Buckets of two indexes (a resize) are told apart. */
Test(lockwatch, the_same_bucket_of_another_index_is_another_watch)
{
	struct kvs_lockwatch w = { 0 };
	uint64_t word = kvi_lock_held_by(4000), t = 1000000000ull;

	kvs_lockwatch_seen(&w, rm, 3, 1, word, t);
	kvs_lockwatch_forget(&w, 3, 2);
	kvs_lockwatch_seen(&w, rm, 3, 2, word, t + quarter / 2);
	kvs_lockwatch_seen(&w, rm, 3, 1, word, t + quarter);
	cr_expect_eq(w.reports, 1, "epoch 1's wait was not broken by epoch 2's bucket");
	kvs_lockwatch_seen(&w, rm, 3, 2, word, t + quarter);
	cr_expect_eq(w.reports, 1, "epoch 2's wait is younger");
}
