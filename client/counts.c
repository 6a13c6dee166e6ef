/* memcached's statistics, counted by the client (common/item_counts.h):
 * GETs never reach a server's CPU, so only the clients can count hits and
 * commands. Each connection counts what its operations did as they finish
 * (kvi_counts_finish), and reports what grew to its server in COUNTS
 * messages: about once a second while it works (kvi_counts_tick, from the
 * calls the application makes anyway: no thread, no timer), a page at a
 * time with one report outstanding, and once more when it closes. What
 * was in a report the connection lost is not sent again (at most once: a
 * server that added it must not add it twice). */
#include <string.h>

#include "conn.h"
#include "counts.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "op.h"

#define COUNTS_PERIOD_NS (1000ull * 1000000u)
#define COUNTS_CLOSE_TIMEOUT_MS 200

/* Did st's commit land (its slot WRITE and unlocks completed as posted)? */
static int committed(const struct kvi_opst *st, int status)
{
	return st->state == KVI_ST_W_COMMIT && status != KVC_EUNKNOWN && status != KVC_ESERVERGONE &&
	       status != KVC_EFENCED && status != KVC_EIO && status != KVC_ETIMEDOUT;
}

void kvi_counts_finish(struct kvi_conn *h, const struct kvi_opst *st, int status)
{
	const struct kvc_op *op = st->op;
	uint64_t *c = h->counts;
	int hit = status == 0 || status == KVC_ETRUNC, miss = status == KVC_ENOTFOUND || status == KVC_ENOTSTORED;

	switch (op->type) {
	case KVC_OP_GAT:
		c[KVI_COUNT_CMD_TOUCH] += hit || miss;
		c[KVI_COUNT_TOUCH_HITS] += hit;
		c[KVI_COUNT_TOUCH_MISSES] += miss;
		__attribute__((fallthrough)); /* a gat is a GET too */
	case KVC_OP_GET:
		c[KVI_COUNT_CMD_GET] += hit || miss;
		c[KVI_COUNT_GET_HITS] += hit;
		c[KVI_COUNT_GET_MISSES] += miss;
		c[KVI_COUNT_GET_EXPIRED] += miss && st->saw_expired;
		break;
	case KVC_OP_TOUCH:
		c[KVI_COUNT_CMD_TOUCH] += hit || miss;
		c[KVI_COUNT_TOUCH_HITS] += hit;
		c[KVI_COUNT_TOUCH_MISSES] += miss;
		break;
	case KVC_OP_PUT:
		c[KVI_COUNT_CMD_SET] += hit || miss || status == KVC_EEXISTS;
		if (op->mode == KVC_STORE_CAS) {
			c[KVI_COUNT_CAS_HITS] += hit;
			c[KVI_COUNT_CAS_MISSES] += status == KVC_ENOTFOUND;
			c[KVI_COUNT_CAS_BADVAL] += status == KVC_EEXISTS;
		}
		break;
	case KVC_OP_DELETE:
		c[KVI_COUNT_DELETE_HITS] += hit;
		c[KVI_COUNT_DELETE_MISSES] += miss;
		break;
	case KVC_OP_INCR:
		c[KVI_COUNT_INCR_HITS] += hit;
		c[KVI_COUNT_INCR_MISSES] += miss;
		break;
	case KVC_OP_DECR:
		c[KVI_COUNT_DECR_HITS] += hit;
		c[KVI_COUNT_DECR_MISSES] += miss;
		break;
	}
	if (!committed(st, status))
		return;
	if (st->commit_slot == 0) {
		c[KVI_COUNT_ITEMS_UNLINKED]++; /* a DELETE, or an expired item's slot cleared */
		return;
	}
	c[KVI_COUNT_TOTAL_ITEMS]++;
	c[KVI_COUNT_ITEMS_LINKED] += st->took == KVI_TOOK_FREE;
	c[KVI_COUNT_INDEX_EVICTIONS] += st->took == KVI_TOOK_LIVE;
	/* An expired item's slot taken by another key: one item out, one in. */
}

static int page_grew(const struct kvi_conn *h, unsigned page)
{
	for (unsigned i = page * KVI_COUNTS_PER_PAGE; i < (page + 1) * KVI_COUNTS_PER_PAGE && i < KVI_COUNT_N; i++)
		if (h->counts[i] != h->counts_told[i])
			return 1;
	return 0;
}

/* The report of one page: what grew since the server was last told, at
 * most 2^32 - 1 a counter (the rest goes in a later report). */
static struct kvi_ctrl page_report(const struct kvi_conn *h, unsigned page, uint32_t inc[KVI_COUNTS_PER_PAGE])
{
	struct kvi_ctrl r = { .type = KVI_CTRL_COUNTS, .counts = { .page = page } };

	for (unsigned i = 0; i < KVI_COUNTS_PER_PAGE; i++) {
		unsigned id = page * KVI_COUNTS_PER_PAGE + i;
		uint64_t d = id < KVI_COUNT_N ? h->counts[id] - h->counts_told[id] : 0;

		inc[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		r.counts.inc[i / 2] |= (uint64_t)inc[i] << (32 * (i % 2));
	}
	return r;
}

static void told(struct kvi_conn *h, unsigned page, const uint32_t inc[KVI_COUNTS_PER_PAGE])
{
	for (unsigned i = 0; i < KVI_COUNTS_PER_PAGE && page * KVI_COUNTS_PER_PAGE + i < KVI_COUNT_N; i++)
		h->counts_told[page * KVI_COUNTS_PER_PAGE + i] += inc[i];
}

void kvi_counts_tick(struct kvi_conn *h, uint64_t now)
{
	uint32_t inc[KVI_COUNTS_PER_PAGE];
	struct kvi_ctrl r;

	if (h->rm->broken)
		return;
	if (h->counts_seq) {
		if (!kvi_rmem_ctrl_take(h->rm, h->counts_seq, &r) &&
		    now - h->counts_sent < (uint64_t)KVI_CTRL_TIMEOUT_MS * 1000000u)
			return; /* on its way */
		h->counts_seq = 0; /* answered, or lost: not sent again */
	}
	if (!h->counts_round) {
		if (now < h->counts_due)
			return;
		h->counts_round = 1;
		h->counts_page = 0;
	}
	while (h->counts_page < KVI_COUNTS_PAGES && !page_grew(h, h->counts_page))
		h->counts_page++;
	if (h->counts_page == KVI_COUNTS_PAGES) {
		h->counts_round = 0;
		h->counts_due = now + COUNTS_PERIOD_NS;
		return;
	}
	r = page_report(h, h->counts_page, inc);
	if (kvi_rmem_ctrl_send(h->rm, &r) == 0) {
		told(h, h->counts_page, inc);
		h->counts_seq = r.seq;
		h->counts_sent = now;
		h->counts_page++;
	}
}

void kvi_counts_flush(struct kvi_conn *h)
{
	uint32_t inc[KVI_COUNTS_PER_PAGE];
	struct kvi_ctrl req, resp;

	if (h->inflight || h->rm->broken)
		return;
	for (unsigned page = 0; page < KVI_COUNTS_PAGES; page++) {
		if (!page_grew(h, page))
			continue;
		req = page_report(h, page, inc);
		if (kvi_rmem_ctrl_call(h->rm, &req, &resp, COUNTS_CLOSE_TIMEOUT_MS))
			return;
		told(h, page, inc);
	}
}
