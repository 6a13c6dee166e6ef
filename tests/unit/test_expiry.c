/* Expiry (layout.h "Expiry"): DELETE agrees with GET that an expired key
 * is absent (through the buckets and the cached location), a TTL counts in
 * milliseconds, and an item that expires while a READ of it is in flight is
 * read again rather than reported missing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

KVT_DPATH_SUITE(expiry);

Test(expiry, delete_of_an_expired_item_is_enotfound_through_the_buckets)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
	char v[16];

	cr_assert_eq(kvc_put(a, "gone", 4, "x", 1, 100), 0);
	usleep(200 * 1000);
	cr_assert_eq(kvt_get_s(a, "gone", v, sizeof(v)), KVC_ENOTFOUND, "GET: an expired key is absent");
	cr_expect_eq(kvt_del_s(a, "gone"), KVC_ENOTFOUND, "DELETE must agree with GET that the key is absent");
	cr_expect_eq(kvt_stat_ops(a, KVC_STAT_DELETE), 0, "counted as a successful delete");
	kvc_destroy(a);
}

/* A GET read a live item; before its completion was
 * processed a newer write (no TTL) replaced it and the old item's expiry
 * passed. The READ saw the key alive, so a miss is impossible in any order;
 * the expiry decision must be made at a point inside the READ (layout.h
 * "Expiry"): here it is ambiguous, so the GET reads again and returns the
 * newer value. Checked on the cached path (cache > 0) and the bucket path. */
static void expiry_during_read(unsigned cache, int object_read_late)
{
	kvc_t *a = kvt_client(&env, NULL, cache, 4), *b = kvt_client(&env, NULL, 0, 4);
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

Test(expiry, an_item_expiring_while_the_cached_read_is_in_flight_is_read_again)
{
	expiry_during_read(1024, 0);
}

Test(expiry, an_item_expiring_while_the_object_read_is_in_flight_is_read_again)
{
	expiry_during_read(0, 0);
}

Test(expiry, an_item_that_expired_between_its_slot_read_and_its_object_read_is_read_again)
{
	expiry_during_read(0, 1);
}

Test(expiry, a_ttl_counts_in_milliseconds)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
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

Test(expiry, delete_of_an_expired_item_is_enotfound_through_the_cached_location)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	char v[16];

	cr_assert_eq(kvc_put(a, "gone", 4, "x", 1, 100), 0); /* location cached */
	usleep(200 * 1000);
	cr_assert_eq(kvt_get_s(a, "gone", v, sizeof(v)), KVC_ENOTFOUND, "GET: an expired key is absent");
	cr_expect_eq(kvt_del_s(a, "gone"), KVC_ENOTFOUND, "DELETE must agree with GET that the key is absent");
	kvc_destroy(a);
}

/* A writer that found the item alive (here a TOUCH giving it 10 s more)
 * holds its bucket while its commit is on the way; the item's expiry passes
 * meanwhile. A GET that read the old object then must not tell a miss: the
 * TOUCH is linearized before the expiry, so every later read sees the item.
 * The GET waits for the bucket (op_get.c "Expired") and reads the touched
 * item. The writer's commit is held back by a transport hook until well
 * past the expiry; the old code told the miss at once. */
struct stall {
	int armed;
	int stalled;
	uint64_t until_ms;
};

static uint64_t real_ms(void)
{
	return kvi_real_ns() / 1000000u;
}

/* Before the writer's first WRITE (its commit) once armed: say so, then
 * sleep until until_ms. */
static int stall_commit(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	struct stall *s = arg;

	(void)rm;
	if (op->kind == KVI_ROP_WRITE && __atomic_exchange_n(&s->armed, 0, __ATOMIC_ACQ_REL)) {
		__atomic_store_n(&s->stalled, 1, __ATOMIC_RELEASE);
		while (real_ms() < s->until_ms)
			usleep(1000);
	}
	return 0;
}

struct touch_job {
	kvc_t *h;
	int rc;
};

static void *toucher(void *arg)
{
	struct touch_job *j = arg;

	j->rc = kvc_touch(j->h, "k", 1, 10000);
	return NULL;
}

#define STALL_TTL_MS 1000u

static void get_waits_for_a_writer_that_found_the_item_alive(unsigned cache)
{
	struct stall s = { 0 };
	struct kvi_local_hooks hk = { .arg = &s, .before_op = stall_commit };
	kvc_t *w = kvt_client(&env, &hk, 0, 4), *r = kvt_client(&env, NULL, cache, 4);
	struct touch_job j = { .h = w };
	struct kvc_stats st;
	uint64_t put_ms, got_ms;
	pthread_t t;
	char v[16] = "";
	int rc;

	put_ms = real_ms();
	cr_assert_eq(kvc_put(w, "k", 1, "v", 1, STALL_TTL_MS), 0);
	if (cache) /* the reader's location cache names the item */
		cr_assert_eq(kvt_get_s(r, "k", v, sizeof(v)), 0);
	s.until_ms = put_ms + STALL_TTL_MS + 300;
	__atomic_store_n(&s.armed, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_create(&t, NULL, toucher, &j), 0);
	while (!__atomic_load_n(&s.stalled, __ATOMIC_ACQUIRE))
		usleep(1000);
	while (real_ms() < put_ms + STALL_TTL_MS + 50) /* the old item has expired */
		usleep(1000);
	rc = kvt_get_s(r, "k", v, sizeof(v));
	got_ms = real_ms();
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, 0, "the TOUCH found the item alive (%s): the machine overslept a 1 s TTL?",
		     kvc_err_name(j.rc));
	cr_expect_eq(rc, 0, "GET told %s while a TOUCH that found the item alive was committing", kvc_err_name(rc));
	cr_expect_str_eq(v, "v");
	cr_expect_geq(got_ms, s.until_ms, "the GET answered before the TOUCH's commit");
	kvc_get_stats(r, &st);
	cr_expect_geq(st.expiry_waits, 1);
	cr_expect_eq(kvt_get_s(r, "k", v, sizeof(v)), 0, "touched: alive for 10 s more");
	kvc_destroy(w);
	kvc_destroy(r);
}

Test(expiry, a_get_waits_for_a_writer_that_found_the_item_alive_through_the_buckets)
{
	get_waits_for_a_writer_that_found_the_item_alive(0);
}

Test(expiry, a_get_waits_for_a_writer_that_found_the_item_alive_through_the_cached_location)
{
	get_waits_for_a_writer_that_found_the_item_alive(1024);
}
