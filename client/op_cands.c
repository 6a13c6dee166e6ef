/* Helpers shared by the GET and write state machines: the candidates a
 * key's buckets name (fingerprint matches), reading their objects, and
 * deciding what an object read says about the key (verification, key,
 * expiry). */
#include <string.h>

#include "conn.h"
#include "engine.h"
#include "kvclient_errors.h"
#include "op.h"
#include "post.h"

/* Bytes to READ for a slot's object: the slot's rounded length, clamped to the
 * heap's end (the rounding may reach past the last object). */
uint64_t kvi_read_len(const struct kvi_conn *h, uint64_t slot)
{
	uint64_t off = kvi_slot_obj_off(slot), len = kvi_slot_read_len(slot);
	uint64_t end = h->sb.heap_off + h->sb.heap_size;

	return len > end - off ? end - off : len;
}

/* Fingerprint matches in the op's buckets; slots pointing outside the heap
 * are garbage and ignored (they can only come from a corrupt writer). */
unsigned kvi_collect_cands(const struct kvi_conn *h, struct kvi_opst *st)
{
	_Static_assert(KVI_SLOTS_PER_BUCKET <= 32, "a bucket's matches fit one 32-bit mask");
	st->ncand = st->cand_next = st->cand_bad = 0;
	for (unsigned w = 0; w < st->nb; w++) {
		const uint64_t *slot = st->bk[w].slot;
		uint32_t match = 0;

		/* Every fingerprint compared without a branch (a match is rare),
		 * then the matches in slot order. */
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			match |= (uint32_t)(kvi_slot_fp(slot[i]) == st->kh.fp) << i;
		while (match) {
			unsigned i = (unsigned)__builtin_ctz(match);
			uint64_t s = slot[i];

			match &= match - 1;
			if (!s || !kvi_slot_in_heap(&h->sb, s))
				continue;
			st->cand[st->ncand++] = (struct kvi_cand){ .slot = s, .which = w, .idx = i,
								   .len = (uint32_t)kvi_read_len(h, s) };
		}
	}
	return st->ncand;
}

/* READ as many pending candidates as fit the object area, in one doorbell. */
int kvi_read_cands(struct kvi_conn *h, struct kvi_opst *st, int state)
{
	struct kvi_rop ops[KVI_MAX_CAND];
	uint32_t used = 0;
	unsigned n = 0;

	st->cand_round = st->cand_next;
	while (st->cand_next < st->ncand && n < KVI_RMEM_MAX_BATCH) {
		struct kvi_cand *c = &st->cand[st->cand_next];

		if (c->len > h->obj_area) { /* larger than any object: garbage, not our key */
			st->cand_next++;
			continue;
		}
		if (used == 0 && kvi_obj_room(h, st, c->len)) {
			/* No memory to read it into: give up (a writer cannot release
			 * its locks without deciding: break, and be fenced). */
			if (st->held)
				kvi_st_abandon(h, st, KVC_ENOMEM);
			else
				kvi_st_finish(h, st, KVC_ENOMEM, KVC_STAT_FAILED);
			return -1;
		}
		if (used + c->len > st->obj_cap)
			break;
		c->loff = used;
		ops[n++] = kvi_rop_read(kvi_slot_obj_off(c->slot), st->obj + used, c->len);
		used += (c->len + 63) & ~63u;
		st->cand_next++;
	}
	if (n == 0)
		return 0;
	return kvi_st_post(h, st, ops, n, state) ? -1 : (int)n;
}

/* Expiry is decided at a point where the object was the key's current one
 * (layout.h "Expiry"). A GET's object was current when the slot naming it
 * was read: between that READ's post (st->slot_posted) and now, a moment the
 * object READ also precedes. Alive if the expiry is after now; expired if it
 * was before that post; in between, unknown (read again). A writer holds the
 * bucket locks, so its object is current at every moment until its commit:
 * now is such a moment. */
enum kvi_objcheck kvi_expiry_check(const struct kvi_opst *st, uint64_t expiry_ms)
{
	uint64_t real, exp_ns, t0;

	if (expiry_ms == 0) /* no TTL: no clock to read */
		return KVI_OBJ_MATCH;
	real = kvi_real_ns();
	exp_ns = expiry_ms >= UINT64_MAX / 1000000u ? UINT64_MAX : expiry_ms * 1000000u;
	if (exp_ns > real)
		return KVI_OBJ_MATCH;
	t0 = real;
	if (st->op->type == KVC_OP_GET) {
		uint64_t since = kvi_now_ns() - st->slot_posted;

		t0 = since < real ? real - since : 0;
	}
	return exp_ns <= t0 ? KVI_OBJ_EXPIRED : KVI_OBJ_UNSURE;
}

enum kvi_objcheck kvi_obj_check(const struct kvi_opst *st, const struct kvi_cand *c)
{
	const unsigned char *buf = st->obj + c->loff;
	const struct kvi_obj_hdr *oh = (const struct kvi_obj_hdr *)(const void *)buf;
	const struct kvc_op *op = st->op;

	if (kvi_obj_verify(buf, c->len))
		return KVI_OBJ_BAD;
	if (oh->key_len != op->key_len || memcmp(buf + sizeof(*oh), op->key, op->key_len) != 0)
		return KVI_OBJ_OTHER;
	return kvi_expiry_check(st, kvi_obj_expiry_ms(oh));
}

const struct kvi_cand *kvi_check_round(const struct kvi_conn *h, struct kvi_opst *st, enum kvi_objcheck *res)
{
	for (unsigned i = st->cand_round; i < st->cand_next; i++) {
		const struct kvi_cand *c = &st->cand[i];

		if (c->len > h->obj_area) /* never read: garbage */
			continue;
		*res = kvi_obj_check(st, c);
		if (*res == KVI_OBJ_MATCH || *res == KVI_OBJ_EXPIRED || *res == KVI_OBJ_UNSURE)
			return c;
		if (*res == KVI_OBJ_BAD)
			st->cand_bad++;
	}
	return NULL;
}

uint32_t kvi_item_bits(const struct kvi_obj_hdr *oh)
{
	return ((oh->access & KVI_ACCESS_READ) || (oh->flags & KVI_OBJ_F_FETCHED) ? KVC_ITEM_FETCHED : 0) |
	       (oh->flags & KVI_OBJ_F_STALE ? KVC_ITEM_STALE : 0) | (oh->access & KVI_ACCESS_WIN ? KVC_ITEM_WIN_SENT : 0);
}
