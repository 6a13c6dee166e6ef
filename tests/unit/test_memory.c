/* Memory in proportion to what a handle carries: a deep handle pins little
 * until it moves a large value, many one-item handles cost the server a
 * little carved memory each (not a segment each), and a segment request
 * whose answer is lost breaks the connection rather than letting the client
 * write on in an extent whose state it does not know. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

KVT_DPATH_SUITE(memory);

Test(memory, a_deep_handle_pins_little_until_it_carries_a_large_value)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 64), *b = kvt_client(&env, NULL, 0, 64);
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

Test(memory, sixty_four_handles_holding_one_small_item_each_cost_the_server_little)
{
	kvc_t *c[64];
	char k[16], v[16];
	struct kvs_core_stats st;

	for (int i = 0; i < 64; i++) {
		c[i] = kvt_client(&env, NULL, 0, 16);
		snprintf(k, sizeof(k), "t%d", i);
		cr_assert_eq(kvt_put_s(c[i], k, k), 0, "handle %d", i);
	}
	kvs_core_stats(env.srv.core, &st);
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

	pthread_mutex_lock(&e->srv.lock);
	rc = kvs_core_ctrl(e->srv.core, id, req, resp);
	pthread_mutex_unlock(&e->srv.lock);
	if (rc == 0 && req->type == KVI_CTRL_SEG_REQ && seg_answer_lost) {
		seg_answer_lost = 0;
		return KVC_ETIMEDOUT;
	}
	return rc;
}

Test(memory, a_segment_request_whose_answer_is_lost_breaks_the_connection)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4), *b = kvt_client(&env, NULL, 0, 4);
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
