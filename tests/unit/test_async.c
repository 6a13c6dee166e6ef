/* The asynchronous interface (kvc_submit / kvc_poll) on one handle: a
 * zero-timeout poll reaps what finished, many operations on one key in
 * flight at once end with the last commit in one slot, finished but
 * unpolled operations count against the depth, and a connection that breaks
 * mid-batch completes every operation in flight exactly once. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

KVT_DPATH_SUITE(async);

Test(async, poll_with_zero_timeout_completes_finished_operations)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
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
	if (op->kind == KVI_ROP_WRITE && op->len == 8 && op->roff >= kvt_geom(&env)->index_off && op->roff < kvt_geom(&env)->heap_off &&
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

Test(async, many_puts_to_one_key_from_one_handle_end_with_the_last_committed_value_in_one_slot)
{
	struct kvi_local_hooks hk = { .before_op = record_slot_writes };
	kvc_t *a = kvt_client(&env, &hk, 1024, 16);
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
		cr_assert_eq(*kvt_word_at(&env, writes[nwrites - 1].roff), writes[nwrites - 1].word);
		kvt_value_of_slot(&env, writes[nwrites - 1].word, last, sizeof(last));
		cr_expect_eq(kvt_key_slots(&env, "hot", v, sizeof(v), NULL), 1);
		cr_expect_str_eq(v, last);
		cr_assert_eq(kvt_get_s(a, "hot", v, sizeof(v)), 0);
		cr_expect_str_eq(v, last, "a GET after every acknowledgement sees the last commit");
		cr_expect_eq(kvt_locked_buckets(&env), 0);
	}
	kvc_destroy(a);
}

Test(async, mixed_puts_and_deletes_on_one_key_from_one_handle_match_the_last_commit)
{
	struct kvi_local_hooks hk = { .before_op = record_slot_writes };
	kvc_t *a = kvt_client(&env, &hk, 1024, 16), *b = kvt_client(&env, NULL, 0, 4);
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
			cr_expect_eq(kvt_key_slots(&env, "flip", NULL, 0, NULL), 0);
			cr_expect_eq(kvt_get_s(a, "flip", v, sizeof(v)), KVC_ENOTFOUND);
			cr_expect_eq(kvt_get_s(b, "flip", v, sizeof(v)), KVC_ENOTFOUND);
		} else {
			kvt_value_of_slot(&env, writes[nwrites - 1].word, last, sizeof(last));
			cr_expect_eq(kvt_key_slots(&env, "flip", v, sizeof(v), NULL), 1);
			cr_assert_eq(kvt_get_s(a, "flip", v, sizeof(v)), 0);
			cr_expect_str_eq(v, last);
			cr_assert_eq(kvt_get_s(b, "flip", v, sizeof(v)), 0);
			cr_expect_str_eq(v, last);
		}
		cr_expect_eq(kvt_locked_buckets(&env), 0);
	}
	kvc_destroy(b);
	kvc_destroy(a);
}

Test(async, finished_but_unpolled_operations_count_against_depth)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4);
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

static unsigned ops_seen, fail_at;
static int fail_armed;
static int fail_nth(void *arg, struct kvi_rmem *rm, const struct kvi_rop *op)
{
	(void)arg;
	(void)rm;
	(void)op;
	return fail_armed && ++ops_seen == fail_at ? KVC_EIO : 0;
}

Test(async, connection_break_mid_batch_completes_every_inflight_operation_exactly_once)
{
	struct kvi_local_hooks hk = { .before_op = fail_nth };

	for (fail_at = 1; fail_at < 60; fail_at += 3) {
		kvc_t *a = kvt_client(&env, &hk, 1024, 16);
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
		for (uint64_t b = 0; b < kvt_geom(&env)->bucket_count; b++)
			*kvt_word_at(&env, kvi_home_bucket_off(kvt_geom(&env), b)) = 0;
	}
}
