#include "lockwatch.h"

#include "layout.h"
#include "wire.h"

static uint64_t after_ns(const struct kvi_rmem *rm)
{
	return (uint64_t)rm->max_op_ms * 1000000u / 4; /* as a client's (client/conn.c) */
}

void kvs_lockwatch_seen(struct kvs_lockwatch *w, struct kvi_rmem *rm, uint64_t bucket, uint64_t epoch, uint64_t word,
			uint64_t now)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_LOCK_REPORT,
				.lock_report = { .bucket = bucket, .word = word, .epoch = epoch } }, r;
	unsigned i;

	if (!kvi_lock_legal(word) || kvi_lock_is_mark(word) || !(word & KVI_LOCK_LOCKED) ||
	    kvi_lock_owner(word) == rm->client_id)
		return;
	for (i = 0; i < w->n && (w->e[i].bucket != bucket || w->e[i].epoch != epoch); i++)
		;
	if (i == w->n) {
		if (w->n == KVS_LOCKWATCH_MAX) { /* forget the oldest */
			unsigned old = 0;

			for (unsigned k = 1; k < w->n; k++)
				if (w->e[k].since < w->e[old].since)
					old = k;
			i = old;
		} else {
			w->n++;
		}
		w->e[i].bucket = bucket;
		w->e[i].epoch = epoch;
		w->e[i].word = 0;
	}
	if (w->e[i].word != word) {
		w->e[i].word = word;
		w->e[i].since = now;
		return;
	}
	if (now - w->e[i].since < after_ns(rm))
		return;
	if (w->seq && !kvi_rmem_ctrl_take(rm, w->seq, &r) && now - w->sent < after_ns(rm))
		return; /* the last report is still out */
	w->seq = 0;
	if (kvi_rmem_ctrl_send(rm, &req) == 0) {
		w->seq = req.seq;
		w->sent = now;
		w->reports++;
		w->e[i].since = now; /* the next report of it a quarter deadline on */
	}
}

void kvs_lockwatch_forget(struct kvs_lockwatch *w, uint64_t bucket, uint64_t epoch)
{
	for (unsigned i = 0; i < w->n; i++)
		if (w->e[i].bucket == bucket && w->e[i].epoch == epoch) {
			w->e[i] = w->e[--w->n];
			return;
		}
}
