/* The local transport implements the remote-memory contract of rmem.h exactly:
 * each operation, batches, in-flight limits, validation, fault injection, torn
 * reads, and atomicity under real threads. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvclient_errors.h"
#include "rmem_local.h"
#include "scenarios.h"

#define REGION (64 * 1024)
#define LBUF 4096

static struct kvi_local_region *reg;
static struct kvi_rmem *rm;
static unsigned char *lb;
static uint64_t *rw; /* the region as words */

static void setup(void)
{
	reg = kvi_local_region_create(REGION);
	cr_assert_not_null(reg);
	rw = kvi_local_region_base(reg);
	for (uint64_t i = 0; i < REGION / 8; i++)
		rw[i] = i;
	cr_assert_eq(kvi_rmem_local_create(reg, LBUF, NULL, &rm), 0);
	lb = kvi_rmem_lbuf(rm, NULL);
}

static void teardown(void)
{
	kvi_rmem_destroy(rm);
	kvi_local_region_destroy(reg);
}

TestSuite(rmem_local, .init = setup, .fini = teardown);

Test(rmem_local, read_returns_region_bytes)
{
	struct kvi_rop op = kvi_rop_read(800, lb, 64);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0);
	for (int i = 0; i < 8; i++)
		cr_expect_eq(((uint64_t *)(void *)lb)[i], 100u + (uint64_t)i);
}

Test(rmem_local, unaligned_read_and_write_move_exact_bytes)
{
	struct kvi_rop op;

	memcpy(lb, "hello, remote", 13);
	op = kvi_rop_write(1003, lb, 13);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0);
	cr_expect_eq(memcmp((char *)rw + 1003, "hello, remote", 13), 0);
	cr_expect_eq(((unsigned char *)rw)[1002], ((unsigned char *)&rw[125])[2], "byte before untouched");
	memset(lb + 100, 0, 13);
	op = kvi_rop_read(1003, lb + 100, 13);
	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0);
	cr_expect_eq(memcmp(lb + 100, "hello, remote", 13), 0);
}

Test(rmem_local, cas_success_swaps_and_returns_old)
{
	uint64_t *old = (uint64_t *)(void *)lb;
	struct kvi_rop op = kvi_rop_cas(80, old, 10, 999);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0);
	cr_expect_eq(*old, 10);
	cr_expect_eq(rw[10], 999);
}

Test(rmem_local, cas_failure_keeps_word_and_returns_current)
{
	uint64_t *old = (uint64_t *)(void *)lb;
	struct kvi_rop op = kvi_rop_cas(80, old, 11, 999);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0);
	cr_expect_eq(*old, 10, "CAS reports the value it found");
	cr_expect_eq(rw[10], 10, "failed CAS must not write");
}

Test(rmem_local, faa_adds_and_returns_old)
{
	uint64_t *old = (uint64_t *)(void *)lb;
	struct kvi_rop op = kvi_rop_faa(160, old, 5);

	cr_assert_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0);
	cr_expect_eq(*old, 20);
	cr_expect_eq(rw[20], 25);
}

Test(rmem_local, mixed_batch_executes_in_posting_order)
{
	uint64_t *w = (uint64_t *)(void *)lb;
	struct kvi_rop ops[5];
	struct kvi_rcomp c;

	w[0] = 0x1111;
	ops[0] = kvi_rop_write(4096, &w[0], 8);          /* word 512 := 0x1111 */
	ops[1] = kvi_rop_cas(4096, &w[1], 0x1111, 0x2222); /* sees the WRITE */
	ops[2] = kvi_rop_faa(4096, &w[2], 1);              /* sees the CAS */
	ops[3] = kvi_rop_read(4096, &w[3], 8);             /* sees the FAA */
	ops[4] = kvi_rop_read(4104, &w[4], 8);
	cr_assert_eq(kvi_rmem_post(rm, ops, 5, 42), 0);
	cr_assert_eq(kvi_rmem_wait(rm, &c, 1, 1000), 1);
	cr_expect_eq(c.cookie, 42);
	cr_expect_eq(c.status, 0);
	cr_expect_eq(w[1], 0x1111);
	cr_expect_eq(w[2], 0x2222);
	cr_expect_eq(w[3], 0x2223);
	cr_expect_eq(w[4], 513);
	cr_expect_eq(kvi_rmem_poll(rm, &c, 1), 0, "exactly one completion per batch");
}

Test(rmem_local, batches_complete_in_order_and_inflight_is_bounded)
{
	struct kvi_rop op = kvi_rop_read(0, lb, 8);
	struct kvi_rcomp c[KVI_RMEM_MAX_INFLIGHT];
	unsigned got = 0;

	for (unsigned i = 0; i < KVI_RMEM_MAX_INFLIGHT; i++)
		cr_assert_eq(kvi_rmem_post(rm, &op, 1, 1000 + i), 0);
	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 7), KVC_EAGAIN);
	while (got < KVI_RMEM_MAX_INFLIGHT) {
		int n = kvi_rmem_wait(rm, c + got, KVI_RMEM_MAX_INFLIGHT - got, 1000);

		cr_assert_gt(n, 0);
		got += (unsigned)n;
	}
	for (unsigned i = 0; i < got; i++)
		cr_expect_eq(c[i].cookie, 1000 + i);
	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 7), 0, "slots are free again after polling");
}

Test(rmem_local, invalid_operations_are_refused_before_anything_runs)
{
	uint64_t *w = (uint64_t *)(void *)lb;
	uint64_t outside;
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH + 1];
	struct kvi_rop bad;

	w[0] = 0xdead;
	ops[0] = kvi_rop_write(0, &w[0], 8);
	ops[1] = kvi_rop_cas(12, &w[1], 0, 1); /* misaligned remote word */
	cr_expect_eq(kvi_rmem_post(rm, ops, 2, 0), KVC_EINVAL);
	cr_expect_eq(rw[0], 0, "the valid op before the bad one did not run");
	bad = kvi_rop_cas(16, (uint64_t *)(void *)(lb + 4), 0, 1); /* misaligned local word */
	cr_expect_eq(kvi_rmem_post(rm, &bad, 1, 0), KVC_EINVAL);
	bad = kvi_rop_read(0, &outside, 8); /* not in the local buffer */
	cr_expect_eq(kvi_rmem_post(rm, &bad, 1, 0), KVC_EINVAL);
	bad = kvi_rop_read(0, lb + LBUF - 4, 8); /* runs past the local buffer */
	cr_expect_eq(kvi_rmem_post(rm, &bad, 1, 0), KVC_EINVAL);
	bad = kvi_rop_read(0, lb, 0);
	cr_expect_eq(kvi_rmem_post(rm, &bad, 1, 0), KVC_EINVAL);
	bad.kind = 99;
	bad.len = 8;
	cr_expect_eq(kvi_rmem_post(rm, &bad, 1, 0), KVC_EINVAL);
	for (int i = 0; i <= (int)KVI_RMEM_MAX_BATCH; i++)
		ops[i] = kvi_rop_read(0, lb, 8);
	cr_expect_eq(kvi_rmem_post(rm, ops, KVI_RMEM_MAX_BATCH + 1, 0), KVC_EINVAL);
	cr_expect_eq(kvi_rmem_post(rm, ops, 0, 0), KVC_EINVAL);
	cr_expect_eq(rm->inflight, 0);
	cr_expect_eq(rm->broken, 0, "validation errors leave the connection usable");
}

Test(rmem_local, out_of_bounds_is_erange_and_changes_nothing)
{
	struct kvi_rop op = kvi_rop_write(REGION - 4, lb, 8);

	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 0), KVC_ERANGE);
	op = kvi_rop_read(UINT64_MAX - 2, lb, 8);
	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 0), KVC_ERANGE);
	op = kvi_rop_faa(REGION, (uint64_t *)(void *)lb, 1);
	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 0), KVC_ERANGE);
	cr_expect_eq(rw[REGION / 8 - 1], REGION / 8 - 1);
	op = kvi_rop_read(REGION - 8, lb, 8);
	cr_expect_eq(kvi_rmem_exec(rm, &op, 1, 1000), 0, "the last word is in bounds");
}

Test(rmem_local, region_smaller_than_advertised_fails_like_a_remote_access_error)
{
	struct kvi_rop op = kvi_rop_read(REGION + 64, lb, 8);

	rm->region_size = 2 * REGION; /* the peer lied about its size */
	cr_expect_eq(kvi_rmem_exec(rm, &op, 1, 1000), KVC_ERANGE);
	cr_expect_neq(rm->broken, 0, "a remote access error kills the connection");
	op = kvi_rop_read(0, lb, 8);
	cr_expect_eq(kvi_rmem_post(rm, &op, 1, 0), KVC_ESERVERGONE);
}

Test(rmem_local, exec_refuses_when_other_batches_are_in_flight)
{
	struct kvi_rop op = kvi_rop_read(0, lb, 8);

	cr_assert_eq(kvi_rmem_post(rm, &op, 1, 1), 0);
	cr_expect_eq(kvi_rmem_exec(rm, &op, 1, 1000), KVC_EINVAL);
}

/* --- hooks ------------------------------------------------------------ */

struct hook_state {
	int fail_on;  /* fail the n-th operation (1-based), 0 = never */
	int seen;
	struct kvi_rmem *other; /* a second client acting in the middle */
	unsigned char *other_lb;
};

static int before_op(void *arg, struct kvi_rmem *self, const struct kvi_rop *op)
{
	struct hook_state *h = arg;

	(void)self;
	h->seen++;
	if (h->fail_on && h->seen == h->fail_on)
		return KVC_ESERVERGONE;
	if (h->other && op->kind == KVI_ROP_READ) {
		/* Another client updates the word just before our READ executes. */
		struct kvi_rop w = kvi_rop_write(op->roff, h->other_lb, 8);

		cr_assert_eq(kvi_rmem_exec(h->other, &w, 1, 1000), 0);
	}
	return 0;
}

Test(rmem_local, injected_fault_fails_batch_and_breaks_connection)
{
	struct hook_state h = { .fail_on = 2 };
	struct kvi_local_hooks hooks = { .arg = &h, .before_op = before_op };
	struct kvi_rmem *f;
	unsigned char *flb;
	struct kvi_rop ops[3];
	struct kvi_rcomp c;

	cr_assert_eq(kvi_rmem_local_create(reg, LBUF, &hooks, &f), 0);
	flb = kvi_rmem_lbuf(f, NULL);
	memset(flb, 0xee, 8);
	ops[0] = kvi_rop_read(0, flb + 64, 8);
	ops[1] = kvi_rop_write(8, flb, 8); /* fails */
	ops[2] = kvi_rop_write(16, flb, 8);
	cr_assert_eq(kvi_rmem_post(f, ops, 3, 5), 0);
	cr_assert_eq(kvi_rmem_wait(f, &c, 1, 1000), 1);
	cr_expect_eq(c.cookie, 5);
	cr_expect_eq(c.status, KVC_ESERVERGONE);
	cr_expect_eq(rw[1], 1, "the failed WRITE did not land");
	cr_expect_eq(rw[2], 2, "nothing after the failure ran");
	cr_expect_eq(kvi_rmem_post(f, ops, 1, 6), KVC_ESERVERGONE);
	kvi_rmem_destroy(f);
}

/* Deferred mode (kvbench's): batches run at the poll, all of them, in
 * posting order; one that fails breaks the connection and those behind it
 * are flushed unexecuted, as a QP in error flushes its work requests. */
Test(rmem_local, deferred_batches_run_at_the_poll_in_order_and_a_failure_flushes_the_rest)
{
	struct hook_state h = { .fail_on = 4 };
	struct kvi_local_hooks hooks = { .arg = &h, .before_op = before_op };
	struct kvi_rcomp c[4];
	struct kvi_rmem *f;
	unsigned char *flb;
	struct kvi_rop op;

	cr_assert_eq(kvi_rmem_local_create(reg, LBUF, &hooks, &f), 0);
	cr_assert_eq(kvi_rmem_local_set_deferred(f, 1), 0);
	flb = kvi_rmem_lbuf(f, NULL);
	memset(flb, 0xaa, 8);
	memset(flb + 8, 0xbb, 8);
	op = kvi_rop_write(8, flb, 8);
	cr_assert_eq(kvi_rmem_post(f, &op, 1, 1), 0);
	op = kvi_rop_write(8, flb + 8, 8); /* the same word: the later one wins */
	cr_assert_eq(kvi_rmem_post(f, &op, 1, 2), 0);
	cr_expect_eq(rw[1], 1, "nothing ran at the post");
	cr_expect_eq(kvi_rmem_local_busy_ticks(f), 0, "no work counted before it runs");
	cr_expect_eq(kvi_rmem_local_set_deferred(f, 0), KVC_EINVAL, "not while batches are in flight");
	cr_assert_eq(kvi_rmem_poll(f, c, 4), 2);
	cr_expect_gt(kvi_rmem_local_busy_ticks(f), 0, "the poll's execution is counted (a NIC's work)");
	cr_expect(c[0].cookie == 1 && c[1].cookie == 2 && c[0].status == 0 && c[1].status == 0);
	cr_expect_eq(rw[1], 0xbbbbbbbbbbbbbbbbull, "executed in posting order");
	/* The 3rd operation runs; the 4th fails; the 5th is flushed. */
	op = kvi_rop_write(16, flb, 8);
	cr_assert_eq(kvi_rmem_post(f, &op, 1, 3), 0);
	op = kvi_rop_write(24, flb, 8);
	cr_assert_eq(kvi_rmem_post(f, &op, 1, 4), 0);
	op = kvi_rop_write(32, flb, 8);
	cr_assert_eq(kvi_rmem_post(f, &op, 1, 5), 0);
	cr_assert_eq(kvi_rmem_poll(f, c, 4), 3);
	cr_expect(c[0].cookie == 3 && c[0].status == 0);
	cr_expect(c[1].cookie == 4 && c[1].status == KVC_ESERVERGONE);
	cr_expect(c[2].cookie == 5 && c[2].status == KVC_ESERVERGONE, "flushed: %d", c[2].status);
	cr_expect_eq(rw[2], 0xaaaaaaaaaaaaaaaaull);
	cr_expect_eq(rw[3], 3, "the failed WRITE did not land");
	cr_expect_eq(rw[4], 4, "the flushed WRITE did not run");
	cr_expect_eq(h.seen, 4, "the flushed batch never reached the hook");
	kvi_rmem_destroy(f);
}

Test(rmem_local, hook_interleaves_another_client_deterministically)
{
	struct kvi_rmem *other;
	struct hook_state h = { 0 };
	struct kvi_local_hooks hooks = { .arg = &h, .before_op = before_op };
	struct kvi_rmem *me;
	uint64_t *mine;

	cr_assert_eq(kvi_rmem_local_create(reg, LBUF, NULL, &other), 0);
	h.other = other;
	h.other_lb = kvi_rmem_lbuf(other, NULL);
	*(uint64_t *)(void *)h.other_lb = 0xfeedface;
	cr_assert_eq(kvi_rmem_local_create(reg, LBUF, &hooks, &me), 0);
	mine = kvi_rmem_lbuf(me, NULL);
	struct kvi_rop op = kvi_rop_read(256, mine, 8);
	cr_assert_eq(kvi_rmem_exec(me, &op, 1, 1000), 0);
	cr_expect_eq(*mine, 0xfeedface, "our READ observed the other client's WRITE");
	kvi_rmem_destroy(me);
	kvi_rmem_destroy(other);
}

/* Models a READ racing a WRITE: the second half of the bytes are stale. */
static void tear(void *arg, const struct kvi_rop *op, void *dst, const void *src)
{
	(void)src;
	++*(int *)arg;
	memset((char *)dst + op->len / 2, 0x5a, op->len - op->len / 2);
}

Test(rmem_local, after_read_hook_tears_a_read)
{
	int torn = 0;
	struct kvi_local_hooks hooks = { .arg = &torn, .after_read = tear };
	struct kvi_rmem *t;
	unsigned char *tlb;
	struct kvi_rop op;

	cr_assert_eq(kvi_rmem_local_create(reg, LBUF, &hooks, &t), 0);
	tlb = kvi_rmem_lbuf(t, NULL);
	op = kvi_rop_read(0, tlb, 32);
	cr_assert_eq(kvi_rmem_exec(t, &op, 1, 1000), 0);
	cr_expect_eq(torn, 1);
	cr_expect_eq(((uint64_t *)(void *)tlb)[1], 1, "first half is the real data");
	cr_expect_eq(tlb[16], 0x5a, "second half was torn");
	cr_expect_eq(rw[2], 2, "tearing a read never touches the region");
	kvi_rmem_destroy(t);
}

/* --- atomicity with real threads (scenarios shared with the TSan runner) --- */

#define X(name, what) \
	Test(rmem_local_threads, name) { const char *why = name(); cr_expect_null(why, "%s: %s", what, why); }
KVT_THREAD_SCENARIOS(X)
#undef X

/* The waiting policy (rmem.h kvi_rmem_spin_ns): a transport that cannot
 * sleep always polls; one that can polls for spin_us, and for up to
 * KVI_RMEM_SPIN_MULT times its recent completion wait (capped) while the
 * process's polling waiters leave a CPU free. */
static int fake_sleep_fds(struct kvi_rmem *r, struct pollfd pf[2])
{
	(void)r;
	(void)pf;
	return 0;
}

Test(rmem_local, waiting_policy_follows_the_device)
{
	struct kvi_rmem_type t = *rm->type;
	struct kvi_rmem *f = malloc(sizeof(*f));
	const uint64_t cap = KVI_RMEM_SPIN_CAP_US * 1000ull;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	cr_assert_not_null(f);
	cr_expect_eq(kvi_rmem_spin_ns(rm), UINT64_MAX, "the local transport cannot sleep: it polls");
	*f = *rm;
	t.sleep_fds = fake_sleep_fds;
	f->type = &t;
	f->spin_us = 50;
	f->wait_avg_ns = 0;
	cr_expect_eq(kvi_rmem_spin_ns(f), 50000u, "a fast device: spin_us governs");
	f->wait_avg_ns = 100000;
	cr_expect_eq(kvi_rmem_spin_ns(f), KVI_RMEM_SPIN_MULT * 100000u, "doorbells of 100 us: polled through");
	f->wait_avg_ns = 10 * cap;
	cr_expect_eq(kvi_rmem_spin_ns(f), cap, "never beyond the cap");
	/* Every CPU polling already: spin_us alone. */
	for (long i = 0; i < cpus; i++)
		kvi_rmem_spinning(1);
	cr_expect_eq(kvi_rmem_spin_ns(f), 50000u);
	for (long i = 0; i < cpus; i++)
		kvi_rmem_spinning(-1);
	cr_expect_eq(kvi_rmem_spin_ns(f), cap);
	f->spin_us = 0;
	cr_expect_eq(kvi_rmem_spin_ns(f), 0u, "0: sleep at once, as told");
	f->spin_us = -1;
	cr_expect_eq(kvi_rmem_spin_ns(f), UINT64_MAX, "-1: never sleep, as told");

	/* The average follows the waits, and one very long wait moves it by
	 * at most an eighth of the cap. */
	f->wait_avg_ns = 0;
	for (int i = 0; i < 64; i++)
		kvi_rmem_waited(f, 80000);
	cr_expect(f->wait_avg_ns > 79000 && f->wait_avg_ns <= 80000, "average %llu",
		  (unsigned long long)f->wait_avg_ns);
	kvi_rmem_waited(f, 10000000000ull);
	cr_expect(f->wait_avg_ns <= 80000 + cap / 8, "average %llu", (unsigned long long)f->wait_avg_ns);
	free(f);
}
