/* Candidates read over several rounds: with every key's bucket pair {0, 1},
 * fingerprint twins past the first 16 candidates (one doorbell of object
 * READs) and large ones that overflow the object area are all found,
 * updated in place and never duplicated. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

static struct kvt_env env;

static void setup_two_buckets(void)
{
	/* Every key's candidate pair is {0, 1}: 62 slots shared by all keys. */
	cr_assert_eq(kvt_env_init(&env, 4, 2, 64), 0);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(candidates, .init = setup_two_buckets, .fini = teardown, .timeout = 120);

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
		kh = kvt_hash_of(&env, k);
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

Test(candidates, seventeen_fingerprint_twins_are_found_across_read_rounds_and_never_duplicated)
{
	enum { N = 18 }; /* 17 stored (more than one 16-READ doorbell), 1 inserted last */
	kvc_t *a = kvt_client(&env, NULL, 0, 4), *c = kvt_client(&env, NULL, 1024, 4);
	char twins[N][32], v[64], want[64];

	fingerprint_twins(N, twins);
	for (int i = 0; i < N - 1; i++)
		cr_assert_eq(kvt_put_s(a, twins[i], twins[i]), 0, "%d", i);
	/* The new key must be compared with all 17 candidates before it is inserted. */
	cr_assert_eq(kvt_put_s(a, twins[N - 1], "last"), 0);
	for (int i = 0; i < N; i++) {
		snprintf(want, sizeof(want), "%s", i == N - 1 ? "last" : twins[i]);
		cr_expect_eq(kvt_key_slots(&env, twins[i], NULL, 0, NULL), 1, "%s", twins[i]);
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
		cr_expect_eq(kvt_key_slots(&env, twins[i], v, sizeof(v), NULL), 1, "%s", twins[i]);
		cr_expect_str_eq(v, "again");
	}
	{
		struct kvc_stats st;

		kvc_get_stats(a, &st);
		cr_expect_gt(st.round_trips[KVC_STAT_GET_HIT], 2 * st.ops[KVC_STAT_GET_HIT],
			     "some candidate needed a second doorbell of object READs");
	}
	for (int i = N - 1; i >= 0; i--) {
		cr_assert_eq(kvt_del_s(a, twins[i]), 0, "%s", twins[i]);
		cr_expect_eq(kvt_get_s(c, twins[i], v, sizeof(v)), KVC_ENOTFOUND);
		cr_expect_eq(kvt_key_slots(&env, twins[i], NULL, 0, NULL), 0);
	}
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(c);
	kvc_destroy(a);
}

Test(candidates, large_fingerprint_twins_are_read_in_rounds_that_fit_the_object_area)
{
	enum { N = 7 };
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
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
		cr_expect_eq(kvt_key_slots(&env, twins[i], NULL, 0, NULL), 1);
	}
	{
		struct kvc_stats st;

		kvc_get_stats(a, &st);
		cr_expect_gt(st.round_trips[KVC_STAT_GET_HIT], 2 * st.ops[KVC_STAT_GET_HIT],
			     "the object area forced more than one round of object READs");
	}
	memset(val, 'z', vlen);
	cr_assert_eq(kvc_put(a, twins[N - 1], strlen(twins[N - 1]), val, vlen, 0), 0);
	cr_expect_eq(kvt_key_slots(&env, twins[N - 1], NULL, 0, NULL), 1, "updated, not duplicated");
	cr_assert_eq(kvc_delete(a, twins[N - 1], strlen(twins[N - 1])), 0);
	cr_expect_eq(kvt_key_slots(&env, twins[N - 1], NULL, 0, NULL), 0);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	free(val);
	free(got);
	kvc_destroy(a);
}
