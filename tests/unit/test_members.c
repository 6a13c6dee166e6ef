/* Membership (server/members.h): leases end, are renewed and are never
 * revived; the table stays exact through many joins and leaves; lock reports
 * are judged by what the server sees, and the watch list stays bounded. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "layout.h"
#include "members.h"

#define MS 1000000ull

static struct kvs_members *m;

static void setup(void)
{
	cr_assert_eq(kvs_members_create(&m, 100, 200), 0); /* lease 100 ms; max op 200 ms */
}

static void teardown(void)
{
	kvs_members_destroy(m);
}

TestSuite(members, .init = setup, .fini = teardown, .timeout = 30);

Test(members, a_lease_ends_once_and_only_for_leased_members)
{
	uint32_t ids[64];

	cr_assert_eq(kvs_members_join(m, 1, 1, 0), 0);
	cr_assert_eq(kvs_members_join(m, 2, 0, 0), 0); /* a server loopback */
	cr_expect_eq(kvs_members_next_due(m, 0, 10000), KVS_FIRST_LEASE_MS, "the first lease is longer");
	cr_expect_eq(kvs_members_expired(m, KVS_FIRST_LEASE_MS * MS - 1, ids, 64), 0);
	cr_expect_eq(kvs_members_renew(m, 1, 0), 100);
	cr_expect_eq(kvs_members_expired(m, 100 * MS - 1, ids, 64), 0);
	cr_assert_eq(kvs_members_expired(m, 100 * MS, ids, 64), 1);
	cr_expect_eq(ids[0], 1);
	cr_expect_eq(kvs_members_expired(m, 10000 * MS, ids, 64), 0, "reported once");
	cr_expect(kvs_members_is_member(m, 1), "a member until it leaves");
	cr_expect_eq(kvs_members_renew(m, 1, 100 * MS), 0, "an expelled member cannot renew");
	cr_expect_eq(kvs_members_renew(m, 2, 0), 0, "loopbacks hold no lease");
	kvs_members_leave(m, 1);
	cr_expect_not(kvs_members_is_member(m, 1));
	cr_expect_eq(kvs_members_count(m), 1);
}

Test(members, renewals_move_the_end_and_a_late_renewal_is_refused)
{
	uint32_t ids[64];

	kvs_members_join(m, 1, 1, 0);
	kvs_members_join(m, 2, 1, 0);
	kvs_members_renew(m, 2, 0);
	cr_expect_eq(kvs_members_renew(m, 1, 80 * MS), 100);
	cr_assert_eq(kvs_members_expired(m, 100 * MS, ids, 64), 1);
	cr_expect_eq(ids[0], 2);
	cr_expect_eq(kvs_members_next_due(m, 100 * MS, 1000), 80);
	cr_expect_eq(kvs_members_expired(m, 179 * MS, ids, 64), 0);
	/* Ended, but the expiry scan has not run yet: whichever comes first
	 * decides (the client posted nothing after its own end). */
	cr_expect_eq(kvs_members_renew(m, 1, 180 * MS), 100);
	cr_expect_eq(kvs_members_expired(m, 180 * MS, ids, 64), 0);
	cr_assert_eq(kvs_members_expired(m, 280 * MS, ids, 64), 1);
	cr_expect_eq(ids[0], 1);
}

Test(members, many_expire_in_chunks)
{
	uint32_t ids[64], seen = 0, n;

	for (uint32_t id = 1; id <= 1000; id++)
		cr_assert_eq(kvs_members_join(m, id, 1, 0), 0);
	while ((n = kvs_members_expired(m, KVS_FIRST_LEASE_MS * MS, ids, 64)) > 0)
		seen += n;
	cr_expect_eq(seen, 1000);
}

Test(members, the_table_stays_exact_through_joins_and_leaves)
{
	enum { N = 5000 };
	static unsigned char in[1u << 22];
	uint64_t x = 88172645463325252ull;

	for (int round = 0; round < 4 * N; round++) {
		uint32_t id;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		id = (uint32_t)(x % 8000) + 1;
		if (in[id] && (x >> 40) % 3 == 0) {
			kvs_members_leave(m, id);
			in[id] = 0;
		} else if (!in[id]) {
			cr_assert_eq(kvs_members_join(m, id, 1, 0), 0);
			in[id] = 1;
		}
	}
	for (uint32_t id = 1; id <= 8001; id++)
		cr_assert_eq(kvs_members_is_member(m, id), in[id], "id %u", id);
}

Test(members, lock_reports_are_judged_on_what_the_server_sees)
{
	uint64_t w3 = kvi_lock_held_by(3), w9 = kvi_lock_held_by(9);
	uint32_t owner = 77;

	kvs_members_join(m, 1, 1, 0);
	kvs_members_join(m, 3, 1, 0);
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, 0, 0, &owner), KVI_REPORT_CHANGED, "released since");
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w9, 0, &owner), KVI_REPORT_CHANGED, "another word now");
	cr_expect_eq(kvs_members_report(m, 3, 5, w3, w3, 0, &owner), KVI_REPORT_CHANGED, "its own lock");
	cr_expect_eq(kvs_members_report(m, 1, 5, w9, w9, 0, &owner), KVI_REPORT_CLEARING, "9 is nobody");
	cr_expect_eq(kvs_members_report(m, 1, 6, 1ull << 63, 1ull << 63, 0, &owner), KVI_REPORT_CLEARING,
		     "garbage naming id 0");
	/* A member's word is watched for one operation deadline + margin. */
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w3, 10 * MS, &owner), KVI_REPORT_WATCHING);
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w3, (10 + 200 + KVS_WATCH_MARGIN_MS) * MS - 1, &owner),
		     KVI_REPORT_WATCHING);
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w3, (10 + 200 + KVS_WATCH_MARGIN_MS) * MS, &owner),
		     KVI_REPORT_FENCING);
	cr_expect_eq(owner, 3);
}

Test(members, a_word_that_changes_restarts_the_watch)
{
	uint64_t w3 = kvi_lock_held_by(3), w4 = kvi_lock_held_by(4);
	uint32_t owner;

	kvs_members_join(m, 1, 1, 0);
	kvs_members_join(m, 3, 1, 0);
	kvs_members_join(m, 4, 1, 0);
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w3, 0, &owner), KVI_REPORT_WATCHING);
	cr_expect_eq(kvs_members_report(m, 1, 5, w4, w4, 100 * MS, &owner), KVI_REPORT_WATCHING);
	cr_expect_eq(kvs_members_report(m, 1, 5, w4, w4, 300 * MS, &owner), KVI_REPORT_WATCHING,
		     "4 has held it for 200 ms only");
	cr_expect_eq(kvs_members_report(m, 1, 5, w4, w4, 350 * MS, &owner), KVI_REPORT_FENCING);
	cr_expect_eq(owner, 4);
}

Test(members, the_watch_list_is_bounded_and_forgets_the_oldest)
{
	uint64_t w3 = kvi_lock_held_by(3);
	uint32_t owner;

	kvs_members_join(m, 1, 1, 0);
	kvs_members_join(m, 3, 1, 0);
	cr_expect_eq(kvs_members_report(m, 1, 0, w3, w3, 0, &owner), KVI_REPORT_WATCHING);
	/* Many reporters (one alone would be rate-limited). */
	for (uint64_t b = 1; b <= KVS_WATCH_MAX; b++) {
		kvs_members_join(m, (uint32_t)(100 + b), 1, 0);
		kvs_members_report(m, (uint32_t)(100 + b), b, w3, w3, MS, &owner);
	}
	cr_expect_eq(kvs_members_report(m, 1, 0, w3, w3, 1000 * MS, &owner), KVI_REPORT_WATCHING,
		     "bucket 0 was forgotten: watched afresh");
	cr_expect_eq(kvs_members_report(m, 1, 1, w3, w3, 1000 * MS, &owner), KVI_REPORT_FENCING,
		     "bucket 1 was kept");
}

Test(members, acks_count_every_live_leased_member_and_when_the_last_came)
{
	uint64_t last = 99;

	cr_assert_eq(kvs_members_join(m, 1, 1, 0), 0);
	cr_assert_eq(kvs_members_join(m, 2, 1, 0), 0);
	cr_assert_eq(kvs_members_join(m, 3, 0, 0), 0); /* a loopback: never acks, never counted */
	kvs_members_ack(m, 1, 1, 1 * MS);
	kvs_members_ack(m, 2, 1, 2 * MS);
	cr_assert(kvs_members_acked(m, 1, 3 * MS, &last));
	cr_expect_eq(last, 2 * MS);
	cr_expect_not(kvs_members_acked(m, 2, 3 * MS, &last), "nobody uses epoch 2 yet");
	kvs_members_ack(m, 1, 2, 10 * MS);
	kvs_members_ack(m, 1, 2, 20 * MS); /* the same epoch again: the first time counts */
	cr_expect_not(kvs_members_acked(m, 2, 30 * MS, &last), "member 2 still uses epoch 1");
	kvs_members_ack(m, 2, 2, 40 * MS);
	cr_assert(kvs_members_acked(m, 2, 50 * MS, &last));
	cr_expect_eq(last, 40 * MS);
	kvs_members_ack(m, 2, 1, 60 * MS); /* it went back (a bug): not acked any more */
	cr_expect_not(kvs_members_acked(m, 2, 70 * MS, &last));
	kvs_members_leave(m, 2);
	cr_assert(kvs_members_acked(m, 2, 70 * MS, &last), "a member that left counts no more");
	/* The latest acknowledgement seen, also of one that left since: a later
	 * time only makes the old index wait longer. */
	cr_expect_eq(last, 40 * MS);
	/* A newcomer counts until it names the epoch; an expelled member (its
	 * lease ended) counts no more. */
	cr_assert_eq(kvs_members_join(m, 4, 1, 0), 0);
	cr_expect_not(kvs_members_acked(m, 2, 70 * MS, &last));
	{
		uint32_t ids[4];

		cr_expect_geq(kvs_members_expired(m, KVS_FIRST_LEASE_MS * MS, ids, 4), 1);
	}
	cr_expect(kvs_members_acked(m, 2, KVS_FIRST_LEASE_MS * MS, &last));
}

Test(members, a_recycled_id_is_not_condemned_for_its_last_holders_lock)
{
	uint64_t w3 = kvi_lock_held_by(3);
	uint32_t owner;

	kvs_members_join(m, 1, 1, 0);
	kvs_members_join(m, 3, 1, 0);
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w3, 0, &owner), KVI_REPORT_WATCHING);
	/* 3 leaves (fenced: its lock released); its id goes to a newcomer,
	 * which takes bucket 5 just before another report comes in. */
	kvs_members_leave(m, 3);
	kvs_members_join(m, 3, 1, 400 * MS);
	cr_expect_eq(kvs_members_report(m, 1, 5, w3, w3, 400 * MS, &owner), KVI_REPORT_WATCHING,
		     "the watch of the old holder's word must not count for the new holder");
	cr_expect_eq(owner, 0);
}

/* Reports are rate-limited per reporter. A flood from one
 * client is answered unjudged past KVS_REPORTS_PER_WINDOW in a window (the
 * watch of a forged word cannot be driven by it), while another reporter's
 * reports are still judged. */
Test(members, a_report_flood_is_answered_unjudged_and_others_still_count)
{
	uint64_t w3 = kvi_lock_held_by(3);
	struct kvs_members_stats st;
	uint32_t owner;
	unsigned judged = 0;

	kvs_members_join(m, 1, 1, 0);
	kvs_members_join(m, 2, 1, 0);
	kvs_members_join(m, 3, 1, 0);
	for (unsigned i = 0; i < 1000; i++)
		judged += kvs_members_report(m, 1, 100 + i, w3, w3, 1000 + i, &owner) == KVI_REPORT_WATCHING;
	cr_expect_eq(judged, KVS_REPORTS_PER_WINDOW, "judged %u of 1000", judged);
	kvs_members_stats(m, &st);
	cr_expect_eq(st.reports_limited, 1000 - KVS_REPORTS_PER_WINDOW);
	cr_expect_eq(kvs_members_report(m, 2, 5, w3, w3, 2000, &owner), KVI_REPORT_WATCHING, "another reporter counts");
	/* A window later reporter 1 is judged again. */
	cr_expect_eq(kvs_members_report(m, 1, 7, w3, w3, 260 * MS, &owner), KVI_REPORT_WATCHING);
}

/* Idleness (members.h): a member whose lease ended is probed; a renewal
 * during the probe renews it and makes the probe's answer moot; an idle one
 * lapses, keeps its lapsed mark through its later re-checks (its extent was
 * sealed: its renewal must say so), and a busy one is expelled. */
Test(members, a_probe_is_overtaken_by_a_renewal_and_a_lapse_lasts_until_the_member_renews)
{
	uint32_t ids[4];
	uint64_t addr;
	uint32_t rkey;

	kvs_members_join(m, 1, 1, 0);
	kvs_members_set_probe(m, 1, 0x1000, 7);
	cr_assert(kvs_members_probe(m, 1, &addr, &rkey));
	cr_expect_eq(addr, 0x1000);
	cr_expect_eq(rkey, 7);
	cr_assert_eq(kvs_members_renew(m, 1, 0), 100);
	/* Lease over: probed; it renews before the answer. */
	cr_assert_eq(kvs_members_expired(m, 150 * MS, ids, 4), 1);
	cr_assert_eq(kvs_members_probe_start(m, 1), 0);
	cr_expect(kvs_members_is_probing(m, 1));
	cr_expect_eq(kvs_members_expired(m, 160 * MS, ids, 4), 0, "not returned twice while probed");
	cr_expect_eq(kvs_members_renew(m, 1, 170 * MS), 100, "a renewal during the probe renews");
	cr_expect(!kvs_members_is_probing(m, 1), "the probe's answer is ignored now");
	cr_expect(!kvs_members_is_lapsed(m, 1));
	/* Lease over again: idle this time. */
	cr_assert_eq(kvs_members_expired(m, 300 * MS, ids, 4), 1);
	cr_assert_eq(kvs_members_probe_start(m, 1), 0);
	cr_expect_eq(kvs_members_lapse(m, 1, 300 * MS), 1, "lapsed");
	cr_expect(kvs_members_is_lapsed(m, 1));
	/* Re-checked ten leases later: still idle, still lapsed. */
	cr_expect_eq(kvs_members_expired(m, 1200 * MS, ids, 4), 0);
	cr_assert_eq(kvs_members_expired(m, 1301 * MS, ids, 4), 1);
	cr_assert_eq(kvs_members_probe_start(m, 1), 0);
	cr_expect(kvs_members_is_lapsed(m, 1), "a re-check keeps the lapse");
	cr_expect_eq(kvs_members_lapse(m, 1, 1301 * MS), 0, "confirmed, not lapsed anew");
	cr_expect_eq(kvs_members_renew(m, 1, 1400 * MS), 100, "readmitted");
	cr_expect(!kvs_members_is_lapsed(m, 1));
	/* Busy when its lease ends: expelled, renewals refused. */
	cr_assert_eq(kvs_members_expired(m, 1600 * MS, ids, 4), 1);
	cr_assert_eq(kvs_members_probe_start(m, 1), 0);
	cr_assert_eq(kvs_members_expel(m, 1), 0);
	cr_expect_eq(kvs_members_renew(m, 1, 1610 * MS), 0);
}
