/* Client ids (server/ids.h): recycled, never before their holder's locks are
 * released and a hold time has passed; never run out while fewer clients
 * than ids are connected, however many join and leave. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "ids.h"
#include "kvclient_errors.h"

#define MS 1000000ull

Test(ids, a_joining_and_leaving_client_never_runs_out_of_ids)
{
	struct kvs_ids *ids;
	struct kvs_ids_stats st;
	uint64_t now = 1000 * MS, done = 0;

	/* Eight ids, held 10 ms: a million joins, one every 2 ms, each fenced
	 * (a new fencer pass each time). With ids never reused, the ninth
	 * join would be refused. */
	cr_assert_eq(kvs_ids_create(&ids, 8, 10 * MS), 0);
	for (unsigned i = 0; i < 1000000; i++, now += 2 * MS) {
		uint32_t id = kvs_ids_take(ids, now, done);

		cr_assert(id >= 1 && id <= 8, "join %u got id %u", i, id);
		cr_assert_eq(kvs_ids_put(ids, id, now + MS, done + 1), 0);
		done++; /* the pass that released its locks finished */
	}
	kvs_ids_stats(ids, &st);
	cr_expect_eq(st.refused, 0);
	cr_expect_leq(st.fresh, 8, "ids first used: %llu", (unsigned long long)st.fresh);
	cr_expect_eq(st.in_use, 0);
	printf("ids: %llu joins on 8 ids, %llu fresh, %llu reused\n", (unsigned long long)st.taken,
	       (unsigned long long)st.fresh, (unsigned long long)st.reused);
	kvs_ids_destroy(ids);
}

Test(ids, an_id_waits_for_its_fence_pass_and_its_hold)
{
	struct kvs_ids *ids;

	cr_assert_eq(kvs_ids_create(&ids, 2, 100 * MS), 0);
	cr_assert_eq(kvs_ids_take(ids, 0, 0), 1);
	cr_assert_eq(kvs_ids_take(ids, 0, 0), 2);
	cr_assert_eq(kvs_ids_take(ids, 0, 0), 0, "both in use");
	cr_assert_eq(kvs_ids_put(ids, 1, 10 * MS, 5), 0); /* released by pass 5 */
	cr_expect_eq(kvs_ids_take(ids, 200 * MS, 4), 0, "its locks may still be held: pass 5 has not finished");
	cr_expect_eq(kvs_ids_take(ids, 50 * MS, 5), 0, "within its hold");
	cr_expect_eq(kvs_ids_take(ids, 110 * MS, 5), 1, "fenced and held long enough");
	kvs_ids_destroy(ids);
}

Test(ids, released_ids_come_back_in_order_and_before_fresh_ones)
{
	struct kvs_ids *ids;
	uint32_t a, b, c;

	cr_assert_eq(kvs_ids_create(&ids, 100, 1 * MS), 0);
	a = kvs_ids_take(ids, 0, 0);
	b = kvs_ids_take(ids, 0, 0);
	c = kvs_ids_take(ids, 0, 0);
	cr_assert_eq(kvs_ids_put(ids, b, 0, 0), 0);
	cr_assert_eq(kvs_ids_put(ids, a, 0, 0), 0);
	cr_expect_eq(kvs_ids_take(ids, 0, 0), 4, "still held: a fresh one");
	cr_expect_eq(kvs_ids_take(ids, 2 * MS, 0), b);
	cr_expect_eq(kvs_ids_take(ids, 2 * MS, 0), a);
	cr_expect_eq(kvs_ids_take(ids, 2 * MS, 0), 5);
	(void)c;
	kvs_ids_destroy(ids);
}

Test(ids, putting_back_an_id_not_in_use_changes_nothing)
{
	struct kvs_ids *ids;
	struct kvs_ids_stats st;

	cr_assert_eq(kvs_ids_create(&ids, 4, 0), 0);
	cr_expect_eq(kvs_ids_put(ids, 1, 0, 0), KVC_EINVAL, "never handed out");
	cr_assert_eq(kvs_ids_take(ids, 0, 0), 1);
	cr_expect_eq(kvs_ids_put(ids, 1, 0, 0), 0);
	cr_expect_eq(kvs_ids_put(ids, 1, 0, 0), KVC_EINVAL, "twice");
	cr_expect_eq(kvs_ids_put(ids, 0, 0, 0), KVC_EINVAL);
	cr_expect_eq(kvs_ids_put(ids, 5, 0, 0), KVC_EINVAL);
	kvs_ids_stats(ids, &st);
	cr_expect_eq(st.waiting, 1);
	cr_expect_eq(st.in_use, 0);
	cr_expect_eq(kvs_ids_take(ids, 0, 0), 1, "the one released, once");
	cr_expect_eq(kvs_ids_take(ids, 0, 0), 2);
	kvs_ids_destroy(ids);
}

Test(ids, many_departing_clients_grow_the_table_and_keep_their_order)
{
	struct kvs_ids *ids;
	enum { N = 5000 };

	cr_assert_eq(kvs_ids_create(&ids, N, 1 * MS), 0);
	for (uint32_t i = 1; i <= N; i++)
		cr_assert_eq(kvs_ids_take(ids, 0, 0), i);
	cr_expect_eq(kvs_ids_take(ids, 0, 0), 0);
	for (uint32_t i = N; i >= 1; i--)
		cr_assert_eq(kvs_ids_put(ids, i, 0, N - i), 0);
	for (uint32_t i = N; i >= 1; i--)
		cr_assert_eq(kvs_ids_take(ids, 5 * MS, N), i);
	kvs_ids_destroy(ids);
}
