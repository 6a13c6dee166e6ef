/* memcached's statistics summed from the clients' reports (client/counts.c,
 * common/item_counts.h): every handle counts what its operations did and
 * tells its server, which adds it up; kvc_server_stats shows the sums. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

static struct kvt_env env;

static void setup(void)
{
	cr_assert_eq(kvt_env_init(&env, 16, 0, 64), 0);
}

static void teardown(void)
{
	kvt_env_fini(&env);
}

TestSuite(counts, .init = setup, .fini = teardown, .timeout = 60);

static int set(kvc_t *c, const char *k, const char *v, uint64_t ttl_ms)
{
	return kvc_store(c, KVC_STORE_SET, k, strlen(k), v, strlen(v), 0, ttl_ms, 0, NULL);
}

/* Every kind of operation, by two handles (one with a location cache); the
 * sums are exact once both reported (at destroy). */
static void workload(kvc_t *a, kvc_t *b)
{
	char v[64];
	uint64_t cas = 0, n;
	size_t len;

	cr_assert_eq(set(a, "x", "1", 0), 0);
	cr_assert_eq(set(b, "y", "2", 0), 0);
	cr_assert_eq(set(a, "ttl", "t", 1), 0);
	cr_assert_eq(set(a, "x", "3", 0), 0); /* an update: no new item */
	usleep(5000);
	cr_assert_eq(kvt_get_s(b, "x", v, sizeof(v)), 0);
	cr_assert_eq(kvc_get_item(a, "y", 1, v, sizeof(v), &len, NULL, &cas), 0);
	cr_assert_eq(kvt_get_s(b, "absent", v, sizeof(v)), KVC_ENOTFOUND);
	cr_assert_eq(kvt_get_s(b, "ttl", v, sizeof(v)), KVC_ENOTFOUND, "expired");
	cr_assert_eq(kvc_store(b, KVC_STORE_ADD, "x", 1, "v", 1, 0, 0, 0, NULL), KVC_ENOTSTORED);
	cr_assert_eq(kvc_store(a, KVC_STORE_CAS, "y", 1, "4", 1, 0, 0, cas + 1000, NULL), KVC_EEXISTS);
	cr_assert_eq(kvc_store(a, KVC_STORE_CAS, "y", 1, "4", 1, 0, 0, cas, NULL), 0);
	cr_assert_eq(kvc_store(a, KVC_STORE_CAS, "nope", 4, "4", 1, 0, 0, cas, NULL), KVC_ENOTFOUND);
	cr_assert_eq(kvc_incr(b, "y", 1, 5, &n), 0);
	cr_assert_eq(kvc_incr(b, "nope", 4, 5, &n), KVC_ENOTFOUND);
	cr_assert_eq(kvc_decr(a, "y", 1, 1, &n), 0);
	cr_assert_eq(kvc_touch(a, "x", 1, 0), 0);
	cr_assert_eq(kvc_touch(a, "nope", 4, 0), KVC_ENOTFOUND);
	cr_assert_eq(kvc_gat(b, "x", 1, 0, v, sizeof(v), &len, NULL, NULL), 0);
	cr_assert_eq(kvc_delete(b, "x", 1), 0);
	cr_assert_eq(kvc_delete(b, "x", 1), KVC_ENOTFOUND);
}

static void check(const struct kvc_server_stats *s)
{
	cr_expect_eq(s->get_hits, 3, "2 GETs + 1 gat");
	cr_expect_eq(s->get_misses, 2);
	cr_expect_eq(s->get_expired, 1);
	cr_expect_eq(s->cmd_get, 5);
	cr_expect_eq(s->cmd_set, 8, "4 sets, 1 add, 3 cas");
	cr_expect_eq(s->cas_hits, 1);
	cr_expect_eq(s->cas_badval, 1);
	cr_expect_eq(s->cas_misses, 1);
	cr_expect_eq(s->incr_hits, 1);
	cr_expect_eq(s->incr_misses, 1);
	cr_expect_eq(s->decr_hits, 1);
	cr_expect_eq(s->decr_misses, 0);
	cr_expect_eq(s->touch_hits, 2, "1 touch + 1 gat");
	cr_expect_eq(s->touch_misses, 1);
	cr_expect_eq(s->cmd_touch, 3);
	cr_expect_eq(s->delete_hits, 1);
	cr_expect_eq(s->delete_misses, 1);
	/* x, y and ttl were linked; x deleted; ttl expired but still in its slot */
	cr_expect_eq(s->curr_items, 2);
	cr_expect_eq(s->total_items, 9, "4 sets, 1 cas, incr, decr, touch, gat");
}

Test(counts, every_kind_is_summed_at_the_server_when_handles_close)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4), *c;
	struct kvc_server_stats s;

	workload(a, b);
	kvc_destroy(a);
	kvc_destroy(b);
	c = kvt_client(&env, NULL, 0, 4);
	cr_assert_eq(kvc_server_stats(c, &s), 0);
	check(&s);
	kvc_destroy(c);
}

/* A handle that stays reports about once a second from the calls it makes. */
Test(counts, a_working_handle_reports_within_seconds)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4), *b = kvt_client(&env, NULL, 0, 4), *c = kvt_client(&env, NULL, 0, 4);
	struct kvc_server_stats s = { 0 };
	struct kvc_op *done;
	char v[8];

	workload(a, b);
	for (int i = 0; i < 400 && (s.cmd_get != 5 || s.delete_misses != 1 || s.total_items != 9); i++) {
		usleep(10000);
		(void)kvc_poll(a, &done, 1, 0); /* the application's calls carry the reports */
		(void)kvc_poll(b, &done, 1, 0);
		cr_assert_eq(kvc_server_stats(c, &s), 0);
	}
	check(&s);
	(void)kvt_get_s(c, "y", v, sizeof(v));
	kvc_destroy(a);
	kvc_destroy(b);
	kvc_destroy(c);
}

/* A report names a page the server does not have: refused, nothing added. */
Test(counts, a_bad_page_is_refused)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_COUNTS, .seq = 1, .counts = { .page = KVI_COUNTS_PAGES, .inc = { 5 } } },
			resp;
	struct kvs_core_stats st;

	cr_assert_eq(kvs_core_ctrl(env.srv.core, 1, &req, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_EINVAL);
	req.counts.page = 0;
	req.counts.inc[0] = 7ull | 9ull << 32;
	cr_assert_eq(kvs_core_ctrl(env.srv.core, 1, &req, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_COUNTED);
	kvs_core_stats(env.srv.core, &st);
	cr_expect_eq(st.counts[0], 7);
	cr_expect_eq(st.counts[1], 9);
}
