#include "rmem_local.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hugemap.h"
#include "kvclient_errors.h"

struct kvi_local_region {
	uint64_t size;
	unsigned char *base;
	size_t mapped; /* bytes of base's mapping (hugemap.h) */
};

struct kvi_local_region *kvi_local_region_create(uint64_t size)
{
	struct kvi_local_region *reg;
	uint64_t rounded = (size + 4095) & ~(uint64_t)4095;

	if (size == 0 || rounded < size) {
		errno = EINVAL;
		return NULL;
	}
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return NULL;
	/* Mapped like kvserver's region (region.c, hugemap.h), so that reading
	 * it costs what it costs a server's NIC, not a TLB miss per item. */
	reg->base = kvi_map_huge(rounded);
	if (!reg->base) {
		free(reg);
		return NULL;
	}
	reg->size = size;
	reg->mapped = rounded;
	return reg;
}

void kvi_local_region_destroy(struct kvi_local_region *reg)
{
	if (!reg)
		return;
	kvi_unmap_huge(reg->base, reg->mapped);
	free(reg);
}

void *kvi_local_region_base(struct kvi_local_region *reg)
{
	return reg->base;
}

uint64_t kvi_local_region_size(const struct kvi_local_region *reg)
{
	return reg->size;
}

/* Finished batches wait in a ring until polled, like CQEs. */
struct local_done {
	uint64_t cookie;
	int status;
};

/* A batch posted and not yet executed (deferred mode). */
struct local_batch {
	struct kvi_rop ops[KVI_RMEM_MAX_BATCH];
	unsigned n;
	uint64_t cookie;
};

struct rmem_local {
	struct kvi_rmem rm; /* first: the generic view */
	struct kvi_local_region *reg;
	struct kvi_local_hooks hooks;
	kvi_ctrl_handler ctrl;
	void *ctrl_arg;
	struct local_done done[KVI_RMEM_MAX_INFLIGHT];
	unsigned head, count;
	/* Deferred mode (kvi_rmem_local_set_deferred): batches posted since the
	 * last poll, in order; NULL when off. */
	struct local_batch *q;
	unsigned qn;
	uint64_t busy_ticks; /* kvi_rmem_local_busy_ticks */
};

/* Copy with RDMA's atomicity: 8-byte aligned words are moved whole with relaxed
 * atomics (so concurrent writers interleave at word granularity and the race is
 * a defined one, which keeps ThreadSanitizer meaningful); other bytes singly. */
static void copy_bytes(unsigned char *dst, const unsigned char *src, size_t from, size_t to, int dst_shared)
{
	for (size_t i = from; i < to; i++) {
		if (dst_shared)
			__atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
		else
			dst[i] = __atomic_load_n(src + i, __ATOMIC_RELAXED);
	}
}

static void copy_words(unsigned char *dst, const unsigned char *src, size_t len, int dst_shared)
{
	const unsigned char *shared = dst_shared ? dst : src;
	size_t head = (8 - ((uintptr_t)shared & 7)) & 7, words;

	/* Bytes up to the shared side's first aligned word, the words, the rest. */
	if (head > len)
		head = len;
	copy_bytes(dst, src, 0, head, dst_shared);
	words = (len - head) / 8;
	if (dst_shared) {
		uint64_t *d = (uint64_t *)(void *)(dst + head);

		for (size_t k = 0; k < words; k++) {
			uint64_t w;

			memcpy(&w, src + head + 8 * k, 8);
			__atomic_store_n(&d[k], w, __ATOMIC_RELAXED);
		}
	} else {
		const uint64_t *sw = (const uint64_t *)(const void *)(src + head);

		for (size_t k = 0; k < words; k++) {
			uint64_t w = __atomic_load_n(&sw[k], __ATOMIC_RELAXED);

			memcpy(dst + head + 8 * k, &w, 8);
		}
	}
	copy_bytes(dst, src, head + 8 * words, len, dst_shared);
}

static int exec_op(struct rmem_local *l, const struct kvi_rop *op)
{
	unsigned char *r = l->reg->base + op->roff;
	uint64_t *word = (uint64_t *)(void *)r;
	uint64_t *old = op->local;
	int rc;

	if (l->hooks.before_op) {
		rc = l->hooks.before_op(l->hooks.arg, &l->rm, op);
		if (rc)
			return rc;
	}
	/* region_size was checked against the connection's view; the region itself
	 * is authoritative (a test may give the connection a larger, lying size). */
	if (op->roff >= l->reg->size || l->reg->size - op->roff < (op->kind <= KVI_ROP_WRITE ? op->len : 8))
		return KVC_ERANGE;
	/* An atomic on an unaligned word is a NIC's remote invalid request. */
	if (op->kind > KVI_ROP_WRITE && (op->roff & 7))
		return KVC_ERANGE;
	switch (op->kind) {
	case KVI_ROP_READ:
		copy_words(op->local, r, op->len, 0);
		if (l->hooks.after_read)
			l->hooks.after_read(l->hooks.arg, op, op->local, r);
		break;
	case KVI_ROP_WRITE:
		copy_words(r, op->local, op->len, 1);
		break;
	case KVI_ROP_CAS: {
		uint64_t expected = op->compare_add;

		__atomic_compare_exchange_n(word, &expected, op->swap, 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
		*old = expected; /* the value found, whether or not it was swapped */
		break;
	}
	case KVI_ROP_FAA:
		*old = __atomic_fetch_add(word, op->compare_add, __ATOMIC_SEQ_CST);
		break;
	}
	return 0;
}

static void push_done(struct rmem_local *l, uint64_t cookie, int status)
{
	struct local_done *d = &l->done[(l->head + l->count) % KVI_RMEM_MAX_INFLIGHT];

	d->cookie = cookie;
	d->status = status;
	l->count++;
}

static void local_shutdown(struct kvi_rmem *rm, int reason)
{
	struct rmem_local *l = (struct rmem_local *)rm;

	rm->broken = reason;
	/* Batches already executed keep their status: their completions were generated. */
	(void)l;
}

static void exec_batch(struct rmem_local *l, const struct kvi_rop *ops, unsigned n, uint64_t cookie)
{
	int status = 0;

	/* After a failed batch the connection is broken: what was posted
	 * behind it is flushed unexecuted, as a QP in error flushes its WRs. */
	if (l->rm.broken)
		status = l->rm.broken;
	for (unsigned i = 0; i < n && status == 0; i++)
		status = exec_op(l, &ops[i]);
	push_done(l, cookie, status);
	if (status && !l->rm.broken)
		local_shutdown(&l->rm, status);
}

static int local_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie)
{
	struct rmem_local *l = (struct rmem_local *)rm;

	if (l->q) {
		struct local_batch *b = &l->q[l->qn++];

		memcpy(b->ops, ops, n * sizeof(*ops));
		b->n = n;
		b->cookie = cookie;
		return 0;
	}
	exec_batch(l, ops, n, cookie);
	return 0;
}

/* Deferred mode: what a NIC does with many requests at once -- ask for
 * every remote line first, then move the bytes, in posting order. */
static void run_queue(struct rmem_local *l)
{
	uint64_t t0 = kvi_ticks();

	for (unsigned k = 0; k < l->qn; k++)
		for (unsigned i = 0; i < l->q[k].n; i++) {
			const struct kvi_rop *op = &l->q[k].ops[i];
			const unsigned char *r;

			if (op->roff >= l->reg->size)
				continue;
			r = l->reg->base + op->roff;
			if (op->kind != KVI_ROP_READ) {
				__builtin_prefetch(r, 1);
				continue;
			}
			/* Every line, non-temporal: a NIC's reads do not evict
			 * the client's own data from its caches. */
			for (uint64_t o = 0; o < op->len && op->roff + o < l->reg->size; o += 64)
				__builtin_prefetch(r + o, 0, 0);
		}
	for (unsigned k = 0; k < l->qn; k++)
		exec_batch(l, l->q[k].ops, l->q[k].n, l->q[k].cookie);
	l->qn = 0;
	l->busy_ticks += kvi_ticks() - t0;
}

uint64_t kvi_rmem_local_busy_ticks(const struct kvi_rmem *rm)
{
	return ((const struct rmem_local *)rm)->busy_ticks;
}

static int local_poll(struct kvi_rmem *rm, struct kvi_rcomp *out, unsigned max)
{
	struct rmem_local *l = (struct rmem_local *)rm;
	unsigned n = 0;

	if (l->qn)
		run_queue(l);

	while (n < max && l->count > 0) {
		struct local_done *d = &l->done[l->head];

		out[n].cookie = d->cookie;
		out[n].status = d->status;
		n++;
		l->head = (l->head + 1) % KVI_RMEM_MAX_INFLIGHT;
		l->count--;
	}
	return (int)n;
}

static void local_idle(struct kvi_rmem *rm)
{
	(void)rm;
}

static int local_ctrl_call(struct kvi_rmem *rm, const struct kvi_ctrl *req, struct kvi_ctrl *resp,
			   int timeout_ms)
{
	struct rmem_local *l = (struct rmem_local *)rm;
	int rc;

	(void)timeout_ms;
	if (!l->ctrl)
		return KVC_ESERVERGONE;
	*resp = (struct kvi_ctrl){ .seq = req->seq };
	rc = l->ctrl(l->ctrl_arg, rm->client_id, req, resp);
	if (rc == KVC_ETIMEDOUT)
		return rc; /* the handler's model of a lost answer: the connection stays */
	if (rc) {
		/* The server would disconnect a client that sent this. */
		local_shutdown(rm, KVC_ESERVERGONE);
		return KVC_ESERVERGONE;
	}
	resp->seq = req->seq;
	return 0;
}

static int local_ctrl_send(struct kvi_rmem *rm, const struct kvi_ctrl *req)
{
	struct kvi_ctrl resp;
	int rc = local_ctrl_call(rm, req, &resp, 0);

	if (rc == 0)
		kvi_rmem_ctrl_stash(rm, &resp);
	return rc == KVC_ETIMEDOUT ? 0 : rc; /* sent; its answer never comes */
}

void kvi_rmem_local_set_ctrl(struct kvi_rmem *rm, kvi_ctrl_handler handler, void *arg, uint32_t client_id)
{
	struct rmem_local *l = (struct rmem_local *)rm;

	l->ctrl = handler;
	l->ctrl_arg = arg;
	rm->client_id = client_id;
}

void kvi_rmem_local_set_limits(struct kvi_rmem *rm, uint32_t max_op_ms, uint32_t quarantine_ms, uint16_t flags)
{
	rm->max_op_ms = max_op_ms;
	rm->quarantine_ms = quarantine_ms;
	rm->server_flags = flags;
}

void kvi_rmem_local_set_geometry(struct kvi_rmem *rm, const struct kvi_geometry *g)
{
	rm->geo = *g;
}

static int local_set_lbuf(struct kvi_rmem *rm, size_t size)
{
	size_t rounded = (size + 63) & ~(size_t)63;
	void *p = rounded >= size ? aligned_alloc(64, rounded) : NULL;

	if (!p)
		return KVC_ENOMEM;
	memset(p, 0, rounded);
	free(rm->lbuf);
	rm->lbuf = p;
	rm->lbuf_size = size;
	return 0;
}

/* Plain memory needs no registration. */
static int local_xbuf_reg(struct kvi_rmem *rm, unsigned idx)
{
	(void)rm;
	(void)idx;
	return 0;
}

static void local_xbuf_dereg(struct kvi_rmem *rm, unsigned idx)
{
	(void)rm;
	(void)idx;
}

int kvi_rmem_local_set_deferred(struct kvi_rmem *rm, int on)
{
	struct rmem_local *l = (struct rmem_local *)rm;

	if (l->qn || rm->inflight)
		return KVC_EINVAL;
	if (!on) {
		free(l->q);
		l->q = NULL;
		return 0;
	}
	if (!l->q && !(l->q = malloc(KVI_RMEM_MAX_INFLIGHT * sizeof(*l->q))))
		return KVC_ENOMEM;
	return 0;
}

static void local_destroy(struct kvi_rmem *rm)
{
	struct rmem_local *l = (struct rmem_local *)rm;

	free(l->q);
	free(rm->lbuf);
	free(l);
}

static const struct kvi_rmem_type local_type = {
	.name = "local",
	.post = local_post,
	.poll = local_poll,
	.idle = local_idle,
	.ctrl_call = local_ctrl_call,
	.ctrl_send = local_ctrl_send,
	.set_lbuf = local_set_lbuf,
	.xbuf_reg = local_xbuf_reg,
	.xbuf_dereg = local_xbuf_dereg,
	.shutdown = local_shutdown,
	.destroy = local_destroy,
};

int kvi_rmem_local_create(struct kvi_local_region *reg, size_t lbuf_size,
			  const struct kvi_local_hooks *hooks, struct kvi_rmem **out)
{
	struct rmem_local *l;
	*out = NULL;
	if (!reg || lbuf_size == 0)
		return KVC_EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return KVC_ENOMEM;
	if (local_set_lbuf(&l->rm, lbuf_size)) {
		free(l);
		return KVC_ENOMEM;
	}
	l->rm.type = &local_type;
	l->rm.region_size = reg->size;
	/* In-process, the server reads the idle word where it lies. */
	l->rm.idle_word = &l->rm.idle_local;
	l->rm.idle_addr = (uintptr_t)&l->rm.idle_local;
	l->reg = reg;
	if (hooks)
		l->hooks = *hooks;
	*out = &l->rm;
	return 0;
}
