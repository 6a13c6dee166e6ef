/* Lock reports: a writer that keeps finding one bucket locked by the same
 * word asks the server to look at it (server/members.h "Lock reports"). */
#include "conn.h"
#include "engine.h"
#include "lock_report.h"
#include "op.h"

/* ---- Lock reports ----------------------------------------------------------
 *
 * A writer that keeps finding one bucket locked by the same word for a
 * quarter of its deadline tells the server, which clears a word naming no
 * live client and expels an owner that keeps one past every deadline
 * (server/members.h "Lock reports"). One report in flight per handle; the
 * answer is only collected (the writer just goes on trying). */
void kvi_lock_waited(struct kvi_conn *h, struct kvi_opst *st, uint64_t bucket, uint64_t epoch, uint64_t word)
{
	uint64_t now = kvi_now_ns();
	struct kvi_ctrl req = { .type = KVI_CTRL_LOCK_REPORT,
				.lock_report = { .bucket = bucket, .word = word, .epoch = epoch } },
			r;

	if (kvi_lock_legal(word) && kvi_lock_owner(word) == h->rm->client_id)
		return; /* another operation of ours */
	if (kvi_lock_is_mark(word))
		return; /* a resize mark, not a holder: nothing to clear (layout.h); junk is reported */
	if (st->wait_since == 0 || st->wait_bucket != bucket || st->wait_word != word) {
		st->wait_bucket = bucket;
		st->wait_word = word;
		st->wait_since = now;
		return;
	}
	if (now - st->wait_since < h->report_after_ns)
		return;
	/* A GROW outstanding holds the place a report would take (conn.h). */
	if (h->grow_seq)
		return;
	if (h->report_seq && !kvi_rmem_ctrl_take(h->rm, h->report_seq, &r) &&
	    now - h->report_sent < h->report_after_ns)
		return;
	h->report_seq = 0;
	if (kvi_rmem_ctrl_send(h->rm, &req) == 0) {
		h->report_seq = req.seq;
		h->report_sent = now;
		h->stats.lock_reports++;
		st->wait_since = now;
	}
}
