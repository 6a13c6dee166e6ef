/* Read-modify-writes (kvclient.h: append, prepend, incr, decr, touch, gat,
 * invalidation, a cas that invalidates):
 * the new object, computed from the key's current one. op_write.c takes the
 * locks, reads that object whole (verified, under the locks, where it cannot
 * change: layout.h I1, I3) and calls here; the new object is then written in
 * the commit doorbell, ahead of the slot WRITE that names it (RC keeps the
 * order: I3). Objects are never modified where they lie, so a touch writes a
 * copy too: only its expiry differs, and it keeps the item's CAS unique (the
 * same item, as memcached's touch keeps it, and as a reclaimer's copy does).
 *
 * The new object is built in place in the operation's object area: the old
 * one is moved to its start and edited there (header, key and value keep
 * their order; only the value's bytes change). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "engine.h"
#include "extent.h"
#include "kvclient_errors.h"
#include "op.h"
#include "rmw.h"

int kvi_rmw_is(const struct kvc_op *op)
{
	switch (op->type) {
	case KVC_OP_INCR:
	case KVC_OP_DECR:
	case KVC_OP_TOUCH:
	case KVC_OP_GAT:
		return 1;
	case KVC_OP_PUT: /* and a cas that invalidates (kvc_meta): decided from the unique */
		return op->mode == KVC_STORE_APPEND || op->mode == KVC_STORE_PREPEND ||
		       (op->mode == KVC_STORE_CAS && (op->meta & KVC_META_INVALIDATE));
	case KVC_OP_DELETE:
		return (op->meta & KVC_META_INVALIDATE) != 0;
	default:
		return 0;
	}
}

uint64_t kvi_rmw_estimate(const struct kvc_op *op, uint64_t old_len)
{
	/* A counter has at most 20 digits; the rest at least what they add. */
	uint64_t v = op->type == KVC_OP_INCR || op->type == KVC_OP_DECR ? 20 : op->type == KVC_OP_PUT ? op->value_len : 0;

	if (op->type == KVC_OP_PUT && (op->mode == KVC_STORE_APPEND || op->mode == KVC_STORE_PREPEND))
		v += old_len;

	return kvi_obj_len((uint32_t)op->key_len, (uint32_t)(v > KVI_MAX_OBJECT ? KVI_MAX_OBJECT : v), UINT32_MAX);
}

int kvi_rmw_miss(const struct kvc_op *op)
{
	return op->type == KVC_OP_PUT && op->mode != KVC_STORE_CAS ? KVC_ENOTSTORED : KVC_ENOTFOUND;
}

static int is_c_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* memcached's reading of a counter, its safe_strtoull over the item's bytes
 * (which its memory follows with "\r\n"): leading white space, a sign,
 * 1..20 digits that fit 64 bits, then the end, a NUL or white space
 * (memcached pads a shortened counter with spaces). A '-' negates, as
 * strtoull does, and is refused only where the result would be negative as
 * a signed number ("-0" is 0, "-18446744073709551615" is 1). */
static int parse_counter(const unsigned char *p, uint32_t len, uint64_t *v)
{
	uint32_t i = 0, digits = 0;
	uint64_t x = 0;
	int neg = 0;

	while (i < len && is_c_space(p[i]))
		i++;
	if (i < len && (p[i] == '+' || p[i] == '-'))
		neg = p[i++] == '-';
	for (; i < len && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
		unsigned d = p[i] - '0';

		if (x > (UINT64_MAX - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	if (digits == 0 || (i < len && p[i] != '\0' && !is_c_space(p[i])))
		return -1;
	if (neg)
		x = 0 - x;
	if (neg && (int64_t)x < 0)
		return -1;
	*v = x;
	return 0;
}

/* Move the object cur (cur_len bytes, in st's object area) to the area's
 * start, with room for need bytes (growing the area keeps it). */
static int room_keeping(struct kvi_conn *h, struct kvi_opst *st, const unsigned char *cur, uint64_t cur_len,
			uint64_t need)
{
	unsigned char *save;
	int rc;

	if (need <= st->obj_cap) {
		memmove(st->obj, cur, cur_len);
		return 0;
	}
	save = malloc(cur_len);
	if (!save)
		return KVC_ENOMEM;
	memcpy(save, cur, cur_len);
	rc = kvi_obj_room(h, st, need);
	if (rc == 0)
		memcpy(st->obj, save, cur_len);
	free(save);
	return rc;
}

/* Take the place of an object of obj_len bytes in our extent. */
static int place(struct kvi_conn *h, struct kvi_opst *st, uint64_t obj_len)
{
	int64_t off = kvi_reserve(h, kvi_obj_footprint(obj_len), NULL, &st->obj_cas);

	if (off < 0)
		return (int)off;
	st->obj_off = (uint64_t)off;
	st->obj_len = (uint32_t)obj_len;
	return 0;
}

int kvi_rmw_build(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_obj_hdr *oh)
{
	struct kvc_op *op = st->op;
	const unsigned char *cur = (const unsigned char *)oh;
	uint32_t klen = oh->key_len, vlen = kvi_obj_value_len(oh), flags = kvi_obj_client_flags(oh);
	uint64_t expiry = kvi_obj_expiry_ms(oh), cas = oh->cas, old_len = kvi_obj_len_of(oh), was_expiry = expiry;
	/* A touch keeps the item as it is (its state, its recache token) and
	 * marks it read (memcached's touch and gat count as a fetch; not with
	 * KVC_META_NO_BUMP); an invalidation makes it stale with no token (read
	 * if it was); anything else is a new item. */
	int same = op->type == KVC_OP_TOUCH || op->type == KVC_OP_GAT;
	/* A cas that invalidates ("ms I C"): the unique asked for stores as
	 * a cas does; an older one stores too, the new item stale with the
	 * old one's expiry and recache token (memcached's: the value is
	 * replaced, the item stays what it was); a newer one is refused. */
	int recas = op->type == KVC_OP_PUT && op->mode == KVC_STORE_CAS;
	uint8_t access = same ? (uint8_t)((oh->access & (KVI_ACCESS_WIN | KVI_ACCESS_READ)) | kvi_read_mark(op))
			      : op->type == KVC_OP_DELETE ? (uint8_t)(oh->access & KVI_ACCESS_READ) : 0;
	uint8_t sflags = same ? oh->flags : op->type == KVC_OP_DELETE ? (uint8_t)(oh->flags | KVI_OBJ_F_STALE) : 0;
	uint64_t nlen = vlen, counter = 0;
	char digits[24];
	struct kvi_obj_hdr *nh;
	unsigned char *val;
	int rc;

	/* memcached: an empty value is no counter, whatever the cas says */
	if ((op->type == KVC_OP_INCR || op->type == KVC_OP_DECR) && vlen == 0)
		return KVC_ENONNUMERIC;
	if (recas) {
		if (op->cas > cas)
			return KVC_EEXISTS;
		sflags = op->cas < cas ? KVI_OBJ_F_STALE : 0;
		access = op->cas < cas ? oh->access & KVI_ACCESS_WIN : 0;
	} else if (op->cas && op->cas != cas) {
		return KVC_EEXISTS;
	}
	st->result = 0;
	switch (op->type) {
	case KVC_OP_INCR:
	case KVC_OP_DECR:
		if (parse_counter(cur + sizeof(*oh) + klen, vlen, &counter))
			return KVC_ENONNUMERIC;
		if (op->type == KVC_OP_INCR)
			counter += op->delta; /* wraps, as memcached's does */
		else
			counter = op->delta > counter ? 0 : counter - op->delta;
		nlen = (uint64_t)snprintf(digits, sizeof(digits), "%" PRIu64, counter);
		op->item = 0; /* found, not created */
		op->expiry_ms = expiry; /* the item's, before a touch (memcached's "ma t") */
		if (op->mode & KVC_ARITH_TOUCH)
			expiry = kvi_expiry_of(op->ttl_ms);
		break;
	case KVC_OP_TOUCH:
	case KVC_OP_GAT:
		expiry = kvi_expiry_of(op->ttl_ms);
		break;
	case KVC_OP_DELETE: /* invalidate */
		if (op->ttl_ms)
			expiry = kvi_expiry_of(op->ttl_ms);
		break;
	default: /* append, prepend; a cas's whole new item */
		if (recas) {
			nlen = op->value_len;
			flags = op->flags;
			if (!sflags)
				expiry = kvi_expiry_of(op->ttl_ms);
		} else {
			nlen = (uint64_t)vlen + op->value_len;
		}
		break;
	}
	if (nlen > kvi_conn_max_value(h, klen))
		return KVC_EVALSIZE;
	if (op->type == KVC_OP_GAT) {
		/* The value as the item has it (the touch does not change it). */
		op->value_len = vlen;
		op->item = kvi_item_bits(oh);
		/* The recache token ("mg R T", or a stale item), decided under
		 * the locks against the TTL before this touch: the new object
		 * carries it. */
		if (!(oh->access & KVI_ACCESS_WIN) && kvi_recache_contends(op, oh)) {
			access |= KVI_ACCESS_WIN;
			op->item |= KVC_ITEM_WON;
		}
		if (vlen > op->buf_len)
			st->result = KVC_ETRUNC; /* the touch is made all the same */
		else if (vlen)
			memcpy(op->buf, cur + sizeof(*oh) + klen, vlen);
	}
	rc = room_keeping(h, st, cur, old_len, kvi_obj_len(klen, (uint32_t)nlen, flags));
	if (rc == 0)
		rc = place(h, st, kvi_obj_len(klen, (uint32_t)nlen, flags));
	if (rc)
		return rc;
	val = st->obj + sizeof(*oh) + klen;
	switch (op->type) {
	case KVC_OP_INCR:
	case KVC_OP_DECR:
		memcpy(val, digits, nlen);
		op->result = counter;
		break;
	case KVC_OP_TOUCH:
	case KVC_OP_GAT:
		st->obj_cas = cas; /* the same item: its unique stays */
		break;
	case KVC_OP_DELETE: /* invalidate: the value stays; a new unique */
		break;
	default:
		if (op->value_len == 0) /* appending nothing: a new unique all the same */
			break;
		if (recas) {
			memcpy(val, op->value, op->value_len);
		} else if (op->mode == KVC_STORE_APPEND) {
			memcpy(val + vlen, op->value, op->value_len);
		} else {
			memmove(val + op->value_len, val, vlen);
			memcpy(val, op->value, op->value_len);
		}
		break;
	}
	nh = (struct kvi_obj_hdr *)(void *)st->obj;
	nh->access = access;
	nh->flags = (uint8_t)((sflags & ~KVI_OBJ_F_CFLAGS) | (flags ? KVI_OBJ_F_CFLAGS : 0));
	nh->len_exp = nlen | (expiry > KVI_OBJ_EXPIRY_MAX ? KVI_OBJ_EXPIRY_MAX : expiry) << KVI_OBJ_VLEN_BITS;
	if (flags) /* after the value, which may have moved (layout.h "Objects") */
		memcpy(val + nlen, &flags, sizeof(flags));
	nh->cas = st->obj_cas;
	nh->checksum = kvi_obj_checksum(nh);
	if (op->type == KVC_OP_GAT) {
		op->flags = flags;
		op->cas = cas;
		op->expiry_ms = was_expiry; /* before the touch (kvclient.h) */
	}
	st->rmw_built = 1;
	return 0;
}

int kvi_rmw_vivify(struct kvi_conn *h, struct kvi_opst *st)
{
	struct kvc_op *op = st->op;
	char digits[24];
	unsigned n = (unsigned)snprintf(digits, sizeof(digits), "%" PRIu64, op->initial);
	int rc = place(h, st, kvi_obj_len((uint32_t)op->key_len, n, op->flags));

	if (rc)
		return rc;
	kvi_obj_build(st->obj, op->key, (uint16_t)op->key_len, digits, n, kvi_expiry_of(op->ttl_ms), op->flags,
		      st->obj_cas);
	op->expiry_ms = kvi_obj_expiry_ms((const struct kvi_obj_hdr *)(const void *)st->obj);
	op->result = op->initial;
	op->item = KVC_ITEM_CREATED;
	st->result = 0;
	st->rmw_built = 1;
	return 0;
}
