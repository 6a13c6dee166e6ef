/* Transport-independent half of the remote-memory interface: the checks every
 * transport needs, done once, and the blocking helpers built on post/poll. */
#include "rmem.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kvclient_errors.h"

/* Is [p, p + len) inside the main local buffer or an extra one? */
static int local_ok(const struct kvi_rmem *rm, const unsigned char *p, uint64_t len)
{
	const unsigned char *lo = rm->lbuf;

	if (p >= lo && (size_t)(p - lo) <= rm->lbuf_size && rm->lbuf_size - (size_t)(p - lo) >= len)
		return 1;
	for (unsigned i = 0; i < rm->nxbuf; i++) {
		const struct kvi_xbuf *x = &rm->xbuf[i];

		if (x->p && p >= x->p && (size_t)(p - x->p) <= x->size && x->size - (size_t)(p - x->p) >= len)
			return 1;
	}
	return 0;
}

static int check_op(const struct kvi_rmem *rm, const struct kvi_rop *op)
{
	const unsigned char *p = op->local;
	uint64_t len;

	switch (op->kind) {
	case KVI_ROP_READ:
	case KVI_ROP_WRITE:
		len = op->len;
		if (len == 0)
			return KVC_EINVAL;
		break;
	case KVI_ROP_CAS:
	case KVI_ROP_FAA:
		len = 8;
		/* RDMA atomics need both words 8-byte aligned, or the NIC fails the QP. */
		if ((op->roff & 7) || ((uintptr_t)p & 7))
			return KVC_EINVAL;
		break;
	default:
		return KVC_EINVAL;
	}
	if (!p || !local_ok(rm, p, len))
		return KVC_EINVAL;
	/* Checked here so that a bad offset is a clean error, not a dead QP. */
	if (op->roff >= rm->region_size || rm->region_size - op->roff < len)
		return KVC_ERANGE;
	return 0;
}

int kvi_rmem_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie)
{
	int rc;

	if (rm->broken)
		return KVC_ESERVERGONE;
	if (!ops || n == 0 || n > KVI_RMEM_MAX_BATCH)
		return KVC_EINVAL;
	if (rm->inflight >= KVI_RMEM_MAX_INFLIGHT)
		return KVC_EAGAIN;
	for (unsigned i = 0; i < n; i++) {
		rc = check_op(rm, &ops[i]);
		if (rc)
			return rc;
	}
	rc = rm->type->post(rm, ops, n, cookie);
	if (rc == 0)
		rm->inflight++;
	return rc;
}

int kvi_rmem_poll(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max)
{
	int n;

	if (max == 0 || rm->inflight == 0)
		return 0;
	n = rm->type->poll(rm, out, max);
	if (n > 0)
		rm->inflight -= (unsigned)n;
	return n;
}

int kvi_rmem_block(struct kvi_rmem *const *rms, unsigned n, int timeout_ms)
{
	struct pollfd pf[2 * KVI_RMEM_BLOCK_MAX];
	unsigned nfd[KVI_RMEM_BLOCK_MAX], used = 0;

	if (n == 0 || n > KVI_RMEM_BLOCK_MAX)
		return 0;
	for (unsigned k = 0; k < n; k++)
		if (!rms[k]->type->sleep_fds || rms[k]->broken)
			return 0;
	/* Each is armed before it is looked at once more: a completion that
	 * came before the arming is found by that look, one after it raises
	 * the event this sleep waits for. One that found something ends it
	 * (the others stay armed: their next sleep takes the event). */
	for (unsigned k = 0; k < n; k++) {
		int f = rms[k]->type->sleep_fds(rms[k], pf + used);

		if (f <= 0)
			return 0;
		nfd[k] = (unsigned)f;
		used += (unsigned)f;
	}
	for (unsigned k = 0; k < n; k++)
		rms[k]->sleeps++;
	if (poll(pf, used, timeout_ms) > 0) {
		used = 0;
		for (unsigned k = 0; k < n; k++) {
			rms[k]->type->woke(rms[k], pf + used);
			used += nfd[k];
		}
	}
	return 1;
}

/* Waiters of this process polling now, and the CPUs they may fill. */
static atomic_uint spinners;
static atomic_uint online_cpus;

void kvi_rmem_spinning(int delta)
{
	if (delta > 0)
		atomic_fetch_add_explicit(&spinners, 1, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&spinners, 1, memory_order_relaxed);
}

uint64_t kvi_rmem_spin_ns(const struct kvi_rmem *rm)
{
	uint64_t base, adapt;
	unsigned cpus = atomic_load_explicit(&online_cpus, memory_order_relaxed);

	if (rm->spin_us < 0 || !rm->type->sleep_fds)
		return UINT64_MAX;
	base = (uint64_t)rm->spin_us * 1000u;
	if (base == 0)
		return 0;
	if (cpus == 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		cpus = c > 0 && c < 65536 ? (unsigned)c : 1u;
		atomic_store_explicit(&online_cpus, cpus, memory_order_relaxed);
	}
	if (atomic_load_explicit(&spinners, memory_order_relaxed) >= cpus)
		return base;
	adapt = KVI_RMEM_SPIN_MULT * rm->wait_avg_ns;
	if (adapt > KVI_RMEM_SPIN_CAP_US * 1000ull)
		adapt = KVI_RMEM_SPIN_CAP_US * 1000ull;
	return adapt > base ? adapt : base;
}

void kvi_rmem_waited(struct kvi_rmem *rm, uint64_t ns)
{
	const uint64_t cap = KVI_RMEM_SPIN_CAP_US * 1000ull; /* one long wait must not swamp it */

	if (ns > cap)
		ns = cap;
	/* An average over about the last 8 waits: quick to follow a device
	 * that slowed down or sped up. */
	rm->wait_avg_ns = rm->wait_avg_ns - rm->wait_avg_ns / 8 + ns / 8;
}

int kvi_rmem_wait(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max, int timeout_ms)
{
	/* The clock is read only once the first KVI_RMEM_SPIN_LOOK polls found
	 * nothing: a completion that was there at once (a NIC's, or a software
	 * device's that completes inside the post) costs no clock read, which
	 * on a machine without a fast clocksource (a guest on HPET) is a
	 * system call. start is then the first read, late by those polls. */
	uint64_t start = 0, last_idle = 0, now = 0, deadline = UINT64_MAX;
	uint64_t spin_ns;
	unsigned spins = 0;
	int n = 0, polling = 1;

	if (rm->inflight == 0)
		return 0;
	kvi_rmem_spinning(1);
	spin_ns = kvi_rmem_spin_ns(rm);
	for (;;) {
		n = kvi_rmem_poll(rm, out, max);
		if (n != 0)
			break;
		/* Pure polling at first: completions arrive soon and a system
		 * call here would cost as much as the wait (spin_ns 0: sleep at
		 * once). */
		if (++spins % KVI_RMEM_SPIN_LOOK && spin_ns)
			continue;
		now = kvi_mono_ns();
		if (start == 0) {
			start = last_idle = now;
			if (timeout_ms >= 0)
				deadline = start + (uint64_t)timeout_ms * 1000000u;
		}
		if (now >= deadline)
			break;
		if (now - start >= spin_ns) {
			/* Long enough: sleep until the device signals (at most 100 ms
			 * at a time, so the peer is looked after as below). */
			if (polling) {
				kvi_rmem_spinning(-1);
				polling = 0;
			}
			kvi_rmem_block(&rm, 1, kvi_ms_until(now, deadline, 100));
			spins = 0;
			now = kvi_mono_ns();
		}
		if (now - last_idle >= 200000u) {
			rm->type->idle(rm);
			if (spin_ns == UINT64_MAX)
				sched_yield();
			last_idle = now;
		}
	}
	if (polling)
		kvi_rmem_spinning(-1);
	if (n > 0) /* as of the last clock read: within KVI_RMEM_SPIN_LOOK polls */
		kvi_rmem_waited(rm, now - start);
	return n;
}

int kvi_rmem_exec(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, int timeout_ms)
{
	struct kvi_rcomp c;
	int rc;

	if (rm->inflight != 0)
		return KVC_EINVAL;
	rc = kvi_rmem_post(rm, ops, n, 0);
	if (rc)
		return rc;
	rc = kvi_rmem_wait(rm, &c, 1, timeout_ms);
	if (rc == 0) {
		kvi_rmem_shutdown(rm, KVC_ETIMEDOUT);
		rc = kvi_rmem_poll(rm, &c, 1);
		return rc == 1 ? c.status : KVC_ETIMEDOUT;
	}
	return c.status;
}

static uint32_t next_seq(struct kvi_rmem *rm)
{
	if (++rm->ctrl_seq == 0) /* 0 marks unsolicited notices */
		++rm->ctrl_seq;
	return rm->ctrl_seq;
}

int kvi_rmem_ctrl_call(struct kvi_rmem *rm, struct kvi_ctrl *req, struct kvi_ctrl *resp, int timeout_ms)
{
	int rc;

	if (rm->broken)
		return KVC_ESERVERGONE;
	req->seq = next_seq(rm);
	rc = rm->type->ctrl_call(rm, req, resp, timeout_ms);
	if (rc == 0 && resp->seq != req->seq)
		rc = KVC_EPROTO;
	return rc;
}

int kvi_rmem_ctrl_send(struct kvi_rmem *rm, struct kvi_ctrl *req)
{
	if (rm->broken)
		return rm->broken;
	req->seq = next_seq(rm);
	return rm->type->ctrl_send(rm, req);
}

void kvi_rmem_ctrl_stash(struct kvi_rmem *rm, const struct kvi_ctrl *c)
{
	const unsigned n = sizeof(rm->stash) / sizeof(rm->stash[0]);
	unsigned pick = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!rm->stashed[i]) {
			pick = i;
			break;
		}
		if (rm->stash[i].seq - rm->stash[pick].seq > UINT32_MAX / 2) /* older */
			pick = i;
	}
	rm->stash[pick] = *c;
	rm->stashed[pick] = 1;
}

int kvi_rmem_ctrl_take(struct kvi_rmem *rm, uint32_t seq, struct kvi_ctrl *resp)
{
	const unsigned n = sizeof(rm->stash) / sizeof(rm->stash[0]);

	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < n; i++) {
			if (rm->stashed[i] && rm->stash[i].seq == seq) {
				*resp = rm->stash[i];
				rm->stashed[i] = 0;
				return 1;
			}
		}
		if (pass == 0 && !rm->broken)
			rm->type->poll(rm, NULL, 0); /* takes in what has arrived */
	}
	return 0;
}

int kvi_rmem_set_lbuf(struct kvi_rmem *rm, size_t size)
{
	if (rm->inflight != 0 || size < 64)
		return KVC_EINVAL;
	return rm->type->set_lbuf(rm, size);
}

static void xbuf_free(struct kvi_rmem *rm, unsigned idx)
{
	struct kvi_xbuf *x = &rm->xbuf[idx];

	if (!x->p)
		return;
	rm->type->xbuf_dereg(rm, idx);
	free(x->p);
	*x = (struct kvi_xbuf){ 0 };
	while (rm->nxbuf && !rm->xbuf[rm->nxbuf - 1].p)
		rm->nxbuf--;
}

int kvi_rmem_xbuf(struct kvi_rmem *rm, unsigned idx, size_t size, void **out)
{
	size_t rounded = (size + 63) & ~(size_t)63;
	unsigned char *p;

	if (idx >= KVI_RMEM_MAX_XBUF || rounded < size)
		return KVC_EINVAL;
	xbuf_free(rm, idx);
	if (size == 0)
		return 0;
	p = aligned_alloc(64, rounded);
	if (!p)
		return KVC_ENOMEM;
	memset(p, 0, rounded);
	rm->xbuf[idx] = (struct kvi_xbuf){ .p = p, .size = size };
	if (idx >= rm->nxbuf)
		rm->nxbuf = idx + 1;
	if (rm->type->xbuf_reg(rm, idx)) {
		rm->xbuf[idx] = (struct kvi_xbuf){ 0 };
		free(p);
		while (rm->nxbuf && !rm->xbuf[rm->nxbuf - 1].p)
			rm->nxbuf--;
		return KVC_ENOMEM;
	}
	*out = p;
	return 0;
}

void kvi_rmem_shutdown(struct kvi_rmem *rm, int reason)
{
	if (!rm->broken)
		rm->type->shutdown(rm, reason);
}

void kvi_rmem_destroy(struct kvi_rmem *rm)
{
	if (!rm)
		return;
	for (unsigned i = 0; i < rm->nxbuf; i++)
		xbuf_free(rm, i);
	rm->type->destroy(rm);
}
