/* Requests to kvc_ops and back to replies (exec.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "b64.h"
#include "exec.h"
#include "tok.h"

#define THIRTY_DAYS (60 * 60 * 24 * 30)
#define GET_RETRIES 3 /* re-reads of a value that outgrew its buffer */
/* Re-reads go out at most this many at a time: their values are large (or,
 * for a GET that timed out, may be), and a read's deadline runs from its
 * submission, so many large reads together could time out behind one
 * another where the same reads a few at a time take no longer in all. */
#define REREAD_INFLIGHT 8u

int kvp_ttl_ms(int32_t exptime, time_t now, uint64_t *ttl_ms)
{
	*ttl_ms = 0;
	if (exptime == 0)
		return 0;
	if (exptime < 0 || (exptime > THIRTY_DAYS && (time_t)exptime <= now)) {
		*ttl_ms = KVC_TTL_EXPIRED;
		return 1;
	}
	*ttl_ms = exptime > THIRTY_DAYS ? (uint64_t)((time_t)exptime - now) * 1000u : (uint64_t)exptime * 1000u;
	return 0;
}

int kvp_exec_init(struct kvp_exec *x, kvc_t *h, struct kvp_shared *sh)
{
	memset(x, 0, sizeof(*x));
	x->h = h;
	x->sh = sh;
	x->op_cap = KVP_ROUND_OPS;
	x->ops = calloc(x->op_cap, sizeof(*x->ops));
	x->ptrs = calloc(x->op_cap, sizeof(*x->ptrs));
	x->big = calloc(x->op_cap, sizeof(*x->big));
	x->hash = calloc(x->op_cap, sizeof(*x->hash));
	x->gbuf = malloc((size_t)x->op_cap * KVP_GETBUF);
	if (!x->ops || !x->ptrs || !x->big || !x->hash || !x->gbuf) {
		kvp_exec_fini(x);
		return KVC_ENOMEM;
	}
	return 0;
}

void kvp_exec_fini(struct kvp_exec *x)
{
	free(x->ops);
	free(x->ptrs);
	free(x->big);
	free(x->hash);
	free(x->gbuf);
	x->ops = NULL;
	x->ptrs = NULL;
	x->big = NULL;
	x->hash = NULL;
	x->gbuf = NULL;
}

unsigned kvp_exec_pending(const struct kvp_exec *x)
{
	return x->nslots;
}

/* arr resized to n elements of sz bytes, or return -1 with it unchanged. */
#define RESIZE(arr, n, sz)                                         \
	do {                                                       \
		void *q_ = realloc((arr), (size_t)(n) * (sz));     \
		if (!q_)                                           \
			return -1;                                 \
		(arr) = q_;                                        \
	} while (0)

static int grow(struct kvp_exec *x, unsigned need)
{
	unsigned cap = x->op_cap;

	while (cap < need)
		cap *= 2;
	if (cap == x->op_cap)
		return 0;
	/* Each array keeps its old size's contents on failure; op_cap grows
	 * only once all did, so a failure leaves them all usable. */
	RESIZE(x->ops, cap, sizeof(*x->ops));
	RESIZE(x->ptrs, cap, sizeof(*x->ptrs));
	RESIZE(x->big, cap, sizeof(*x->big));
	RESIZE(x->hash, cap, sizeof(*x->hash));
	RESIZE(x->gbuf, cap, KVP_GETBUF);
	x->op_cap = cap;
	return 0;
}

static uint32_t key_hash(const void *k, size_t n)
{
	const unsigned char *p = k;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* Would an op on key (writing or not) race one already in the round? */
static int conflicts(const struct kvp_exec *x, uint32_t h, int writes)
{
	for (unsigned i = 0; i < x->nops; i++)
		if ((x->hash[i] | 1u) == (h | 1u) && (writes || (x->hash[i] & 1u)))
			return 1;
	return 0;
}

static int is_write(int type)
{
	return type != KVC_OP_GET;
}

static int store_mode(int cmd)
{
	switch (cmd) {
	case KVP_C_ADD:
		return KVC_STORE_ADD;
	case KVP_C_REPLACE:
		return KVC_STORE_REPLACE;
	case KVP_C_APPEND:
		return KVC_STORE_APPEND;
	case KVP_C_PREPEND:
		return KVC_STORE_PREPEND;
	case KVP_C_CAS:
		return KVC_STORE_CAS;
	default:
		return KVC_STORE_SET;
	}
}

/* Does meta flag a come before flag b in r's flags (both present)? */
static int flag_before(const struct kvp_req *r, char a, char b)
{
	const char *t;
	size_t tl, off = 0;

	while ((off = kvp_next_token(r->mtokens, r->mtokens_len, off, &t, &tl)) != 0) {
		if (t[0] == a)
			return 1;
		if (t[0] == b)
			return 0;
	}
	return 0;
}

/* The one op of a single-key request, or 0 for none; *expired when the
 * request's exptime says "expired at once" (exec.h kvp_ttl_ms). */
static int single_op(const struct kvp_req *r, struct kvc_op *op, int *expired, time_t now)
{
	int cmd = r->cmd == KVP_C_MS ? r->mode : r->cmd;

	*expired = r->has_exptime ? kvp_ttl_ms(r->exptime, now, &op->ttl_ms) : 0;
	op->key = r->key;
	op->key_len = r->key_len;
	switch (r->cmd) {
	case KVP_C_SET: case KVP_C_ADD: case KVP_C_REPLACE: case KVP_C_APPEND: case KVP_C_PREPEND:
	case KVP_C_CAS: case KVP_C_MS:
		/* Expired at once: a set or replace leaves no item (memcached's
		 * stores an invisible one), so it is a delete. */
		if (*expired && (cmd == KVP_C_SET || cmd == KVP_C_REPLACE)) {
			op->type = KVC_OP_DELETE;
			return 1;
		}
		op->type = KVC_OP_PUT;
		op->mode = store_mode(cmd);
		op->value = r->data;
		op->value_len = r->data_len;
		op->flags = r->flags;
		op->cas = r->cas;
		/* ms I with C: an older unique stores too, the item stale */
		if (r->cmd == KVP_C_MS && cmd == KVP_C_CAS && (r->mflags & KVP_MF('I')))
			op->meta = KVC_META_INVALIDATE;
		return 1;
	case KVP_C_INCR: case KVP_C_DECR:
		op->type = r->cmd == KVP_C_INCR ? KVC_OP_INCR : KVC_OP_DECR;
		op->delta = r->delta;
		return 1;
	case KVP_C_MA:
		op->type = r->mode == KVP_C_INCR ? KVC_OP_INCR : KVC_OP_DECR;
		op->delta = r->delta;
		op->initial = r->initial;
		op->cas = r->cas; /* C: only if the item's unique is this (else EX) */
		if (r->mflags & KVP_MF('N')) {
			op->mode |= KVC_ARITH_VIVIFY;
			if (!(r->mflags & KVP_MF('T')))
				kvp_ttl_ms(r->vivify_exptime, now, &op->ttl_ms);
		}
		if (r->mflags & KVP_MF('T'))
			op->mode |= KVC_ARITH_TOUCH;
		*expired = 0;
		return 1;
	case KVP_C_TOUCH:
		op->type = *expired ? KVC_OP_DELETE : KVC_OP_TOUCH;
		return 1;
	case KVP_C_DELETE:
		op->type = KVC_OP_DELETE;
		return 1;
	case KVP_C_MD:
		/* C: only that version; I: mark it stale (with T, a new TTL) */
		op->type = KVC_OP_DELETE;
		op->cas = r->cas;
		op->ttl_ms = 0;
		if (r->mflags & KVP_MF('I')) {
			op->meta = KVC_META_INVALIDATE;
			if (r->has_exptime)
				(void)kvp_ttl_ms(r->exptime, now, &op->ttl_ms);
		}
		*expired = 0;
		return 1;
	case KVP_C_MG:
		op->type = r->has_exptime ? KVC_OP_GAT : KVC_OP_GET;
		/* u: no LRU bump -- the item is not marked read */
		op->meta = r->mflags & KVP_MF('u') ? KVC_META_NO_BUMP : 0;
		if ((r->mflags & KVP_MF('R')) && r->recache_ttl > 0) {
			op->meta |= KVC_META_RECACHE;
			op->recache_ms = (uint64_t)r->recache_ttl * 1000u;
			/* memcached applies the flags in order: after T, R looks
			 * at the new TTL (the library compares with the old one) */
			if (op->type == KVC_OP_GAT && flag_before(r, 'T', 'R')) {
				if (op->ttl_ms == 0 || (op->ttl_ms != KVC_TTL_EXPIRED && op->ttl_ms >= op->recache_ms))
					op->meta &= ~(uint32_t)KVC_META_RECACHE;
				else
					op->recache_ms = UINT64_MAX;
			}
		}
		*expired = 0;
		return 1;
	case KVP_C_TOOLARGE:
		/* memcached drops the old value of a set it could not take */
		if (r->mode == KVP_C_SET) {
			op->type = KVC_OP_DELETE;
			return 1;
		}
		return 0;
	default:
		return 0;
	}
}

int kvp_exec_add(struct kvp_exec *x, const struct kvp_req *r)
{
	struct kvp_slot *s;
	unsigned n = 0, first = x->nops;
	int alone = r->cmd == KVP_C_FLUSH || r->cmd == KVP_C_STATS;
	time_t now = time(NULL);

	if (x->nslots == KVP_ROUND_SLOTS)
		return KVP_RUN_FIRST;
	if (x->nslots && (alone || x->slots[x->nslots - 1].req.cmd == KVP_C_FLUSH ||
			  x->slots[x->nslots - 1].req.cmd == KVP_C_STATS))
		return KVP_RUN_FIRST;
	s = &x->slots[x->nslots];
	s->req = *r;
	if (r->key == r->keybuf) /* a decoded key lives in the request itself */
		s->req.key = s->req.keybuf;
	if (r->cmd >= KVP_C_GET && r->cmd <= KVP_C_GATS) {
		const char *k;
		size_t kl, off = 0;
		uint64_t ttl = 0;
		int gat = r->cmd == KVP_C_GAT || r->cmd == KVP_C_GATS;

		if (gat)
			kvp_ttl_ms(r->exptime, now, &ttl);
		while ((off = kvp_next_token(r->keys, r->keys_len, off, &k, &kl)) != 0)
			n++;
		if (x->nops && (x->nops + n > KVP_ROUND_OPS || x->nvals + n > KVP_ROUND_VALUES))
			return KVP_RUN_FIRST;
		if (x->nops + n > x->op_cap && grow(x, x->nops + n))
			return KVP_NOMEM;
		for (off = 0; (off = kvp_next_token(r->keys, r->keys_len, off, &k, &kl)) != 0;)
			if (conflicts(x, key_hash(k, kl), gat))
				return KVP_RUN_FIRST;
		for (off = 0; (off = kvp_next_token(r->keys, r->keys_len, off, &k, &kl)) != 0;) {
			struct kvc_op *op = &x->ops[x->nops];

			memset(op, 0, sizeof(*op));
			op->type = gat ? KVC_OP_GAT : KVC_OP_GET;
			op->key = k;
			op->key_len = kl;
			op->ttl_ms = ttl;
			x->hash[x->nops++] = (key_hash(k, kl) & ~1u) | (uint32_t)gat;
		}
		x->nvals += n;
	} else {
		struct kvc_op op;
		int expired;

		memset(&op, 0, sizeof(op));
		n = (unsigned)single_op(&s->req, &op, &expired, now);
		s->req.has_exptime = expired; /* from here on: "expired at once" */
		if (n) {
			uint32_t h = key_hash(op.key, op.key_len);

			int vals = op.type == KVC_OP_GET || op.type == KVC_OP_GAT;

			if (x->nops && (x->nops + 1 > KVP_ROUND_OPS || x->nvals + (unsigned)vals > KVP_ROUND_VALUES))
				return KVP_RUN_FIRST;
			/* A meta get may take the item's recache token (or see
			 * it taken): ordered like a write, as memcached runs a
			 * connection's commands one after another. */
			int writes = is_write(op.type) || s->req.cmd == KVP_C_MG;

			if (conflicts(x, h, writes))
				return KVP_RUN_FIRST;
			if (x->nops + 1 > x->op_cap && grow(x, x->nops + 1))
				return KVP_NOMEM;
			x->ops[x->nops] = op;
			x->hash[x->nops++] = (h & ~1u) | (uint32_t)writes;
			x->nvals += (unsigned)vals;
		}
	}
	s->op0 = first;
	s->nops = n;
	x->nslots++;
	return KVP_ADDED;
}

/* Submit ptrs[0..n) (in order, as depth allows, at most max_inflight at a
 * time) and wait for all. */
static void run_max(kvc_t *h, struct kvc_op **ptrs, unsigned n, unsigned max_inflight)
{
	struct kvc_op *done[64];
	unsigned next = 0, remaining = n;

	while (remaining) {
		while (next < n && next - (n - remaining) < max_inflight) {
			unsigned room = max_inflight - (next - (n - remaining));
			int k = kvc_submit_many(h, ptrs + next, n - next < room ? n - next : room);

			if (k < 0) { /* none started: each of the rest fails with it */
				for (; next < n; next++, remaining--)
					ptrs[next]->status = k;
				break;
			}
			next += (unsigned)k;
			if (next == n || next - (n - remaining) >= max_inflight || ptrs[next]->status == KVC_EAGAIN)
				break;
			next++; /* refused at once (bad key, value, connection): its status says why */
			remaining--;
		}
		if (!remaining)
			break;
		int m = kvc_poll(h, done, 64, -1);

		if (m < 0) { /* cannot happen with these arguments; do not spin */
			for (unsigned i = 0; i < n; i++)
				if (ptrs[i]->status == KVC_EAGAIN)
					ptrs[i]->status = m;
			return;
		}
		remaining -= (unsigned)m;
	}
}

static void run(kvc_t *h, struct kvc_op **ptrs, unsigned n)
{
	run_max(h, ptrs, n, n);
}

/* mg N (vivify on a miss), as memcached 1.6 does it: a miss adds an empty
 * item (flags 0, the N token's TTL) whose recache token this client holds,
 * and is answered as a hit with W; other clients then read the empty item
 * with Z until someone rewrites it. An add that finds the key (another
 * client vivified or stored it meanwhile) reads it again, and so on a few
 * times; each step is one linearizable library call. */
#define VIVIFY_TRIES 3

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int vivifies(const struct kvp_slot *s)
{
	return s->req.cmd == KVP_C_MG && (s->req.mflags & KVP_MF('N')) && s->nops == 1;
}

static void vivify(struct kvp_exec *x)
{
	struct kvc_op *was = NULL; /* per op: the read it was, to read again */
	time_t now = time(NULL);

	for (int attempt = 0; attempt < VIVIFY_TRIES; attempt++) {
		unsigned n = 0;

		/* misses become adds */
		for (unsigned i = 0; i < x->nslots; i++) {
			const struct kvp_slot *s = &x->slots[i];
			struct kvc_op *op = &x->ops[s->op0];

			if (!vivifies(s) || op->status != KVC_ENOTFOUND)
				continue;
			if (!was && !(was = malloc((size_t)x->nops * sizeof(*was)))) {
				op->status = KVC_ENOMEM;
				continue;
			}
			was[s->op0] = *op;
			memset(op, 0, sizeof(*op));
			op->type = KVC_OP_PUT;
			op->mode = KVC_STORE_ADD;
			op->meta = KVC_META_WON | (s->req.mflags & KVP_MF('u') ? KVC_META_NO_BUMP : 0);
			op->key = was[s->op0].key;
			op->key_len = was[s->op0].key_len;
			op->value = "";
			/* memcached applies the flags in order: a T after N touches
			 * what N vivified; a T before it found nothing to touch */
			if (was[s->op0].type == KVC_OP_GAT && flag_before(&s->req, 'N', 'T'))
				op->ttl_ms = was[s->op0].ttl_ms;
			else
				kvp_ttl_ms(s->req.vivify_exptime, now, &op->ttl_ms);
			op->status = KVC_EAGAIN;
			x->ptrs[n++] = op;
		}
		if (!n)
			break;
		run(x->h, x->ptrs, n);
		/* stored: a hit on the empty item, won; found: read it again */
		n = 0;
		for (unsigned i = 0; i < x->nslots; i++) {
			const struct kvp_slot *s = &x->slots[i];
			struct kvc_op *op = &x->ops[s->op0];
			struct kvc_op add = *op;

			if (!vivifies(s) || op->type != KVC_OP_PUT)
				continue;
			*op = was[s->op0];
			op->status = add.status;
			if (add.status == 0) {
				op->value_len = 0;
				op->flags = 0;
				op->cas = add.cas;
				op->item = KVC_ITEM_WON | KVC_ITEM_CREATED; /* meta_ttl */
				op->expiry_ms = add.ttl_ms ? now_ms() + add.ttl_ms : 0;
			} else if (add.status == KVC_ENOTSTORED) {
				op->status = KVC_EAGAIN;
				x->ptrs[n++] = op;
			}
		}
		if (!n)
			break;
		run(x->h, x->ptrs, n);
	}
	/* Still not there after the last add lost: a miss, as it was read. */
	for (unsigned i = 0; was && i < x->nslots; i++)
		if (vivifies(&x->slots[i]) && x->ops[x->slots[i].op0].status == KVC_ENOTSTORED)
			x->ops[x->slots[i].op0].status = KVC_ENOTFOUND;
	free(was);
}

/* The round's ops, with values over KVP_GETBUF read again into buffers of
 * their size, and GETs that timed out read again (a GET changes nothing),
 * REREAD_INFLIGHT at a time. */
static void run_round(struct kvp_exec *x)
{
	for (unsigned i = 0; i < x->nops; i++) {
		struct kvc_op *op = &x->ops[i];

		x->ptrs[i] = op;
		x->big[i] = NULL;
		op->status = KVC_EAGAIN;
		if (op->type == KVC_OP_GET || op->type == KVC_OP_GAT) {
			op->buf = x->gbuf + (size_t)i * KVP_GETBUF;
			op->buf_len = KVP_GETBUF;
		}
	}
	run(x->h, x->ptrs, x->nops);
	vivify(x);
	for (int attempt = 0; attempt < GET_RETRIES; attempt++) {
		unsigned n = 0;

		for (unsigned i = 0; i < x->nops; i++) {
			struct kvc_op *op = &x->ops[i];
			void *b;

			if (op->status == KVC_ETIMEDOUT && op->type == KVC_OP_GET && attempt == 0) {
				op->status = KVC_EAGAIN;
				x->ptrs[n++] = op;
				continue;
			}
			if (op->status != KVC_ETRUNC)
				continue;
			b = realloc(x->big[i], op->value_len);
			if (!b) {
				op->status = KVC_ENOMEM;
				continue;
			}
			x->big[i] = b;
			op->buf = b;
			op->buf_len = op->value_len;
			op->type = KVC_OP_GET; /* a GAT's touch is done */
			op->status = KVC_EAGAIN;
			x->ptrs[n++] = op;
		}
		if (!n)
			break;
		run_max(x->h, x->ptrs, n, REREAD_INFLIGHT);
	}
}

static void crlf(struct kvp_buf *b)
{
	kvp_buf_add(b, "\r\n", 2);
}

static void line(struct kvp_buf *b, const char *s)
{
	kvp_buf_str(b, s);
	crlf(b);
}

/* A failure of the tier, in memcached's words where it has them. */
static void server_error(struct kvp_buf *b, int rc)
{
	if (rc == KVC_EVALSIZE)
		line(b, "SERVER_ERROR object too large for cache");
	else if (rc == KVC_ENOMEM || rc == KVC_EQUOTA || rc == KVC_EINDEXFULL)
		line(b, "SERVER_ERROR out of memory storing object");
	else if (rc == KVC_ENOTSUP || rc == KVC_EINVAL) /* a call this library or tier lacks */
		line(b, "SERVER_ERROR not supported by the tier");
	else {
		kvp_buf_str(b, "SERVER_ERROR ");
		line(b, kvc_strerror(rc));
	}
}

static void reply_get(struct kvp_exec *x, const struct kvp_slot *s, struct kvp_buf *b)
{
	int cas = s->req.cmd == KVP_C_GETS || s->req.cmd == KVP_C_GATS;
	int gat = s->req.cmd == KVP_C_GAT || s->req.cmd == KVP_C_GATS;

	for (unsigned i = s->op0; i < s->op0 + s->nops; i++) {
		const struct kvc_op *op = &x->ops[i];

		if (gat)
			KVP_COUNT(&x->ctr, cmd_touch, 1);
		else
			KVP_COUNT(&x->ctr, cmd_get, 1);
		if (op->status != 0) { /* a tier failure is a miss to a cache's client */
			if (gat)
				KVP_COUNT(&x->ctr, touch_misses, 1);
			else
				KVP_COUNT(&x->ctr, get_misses, 1);
			continue;
		}
		if (gat)
			KVP_COUNT(&x->ctr, touch_hits, 1);
		else
			KVP_COUNT(&x->ctr, get_hits, 1);
		kvp_buf_str(b, "VALUE ");
		kvp_buf_add(b, op->key, op->key_len);
		kvp_buf_str(b, " ");
		kvp_buf_u64(b, op->flags);
		kvp_buf_str(b, " ");
		kvp_buf_u64(b, op->value_len);
		if (cas) {
			kvp_buf_str(b, " ");
			kvp_buf_u64(b, op->cas);
		}
		crlf(b);
		kvp_buf_add(b, op->buf, op->value_len);
		crlf(b);
	}
	if (!s->req.more)
		line(b, "END");
}

/* A storage command's outcome (cmd: set, add, ..., the text command or ms's
 * mode) from its op: one stored already expired went as a DELETE
 * (single_op), so its miss is a success (a replace's, NOT_STORED); an append
 * or prepend that would outgrow the largest item is not stored (memcached's
 * NOT_STORED, NS): the data was taken, the item is unchanged. */
static int store_status(int cmd, const struct kvc_op *op)
{
	int rc = op->status;

	if (op->type == KVC_OP_DELETE)
		return rc == KVC_ENOTFOUND ? (cmd == KVP_C_REPLACE ? KVC_ENOTSTORED : 0) : rc;
	return rc == KVC_EVALSIZE && (cmd == KVP_C_APPEND || cmd == KVP_C_PREPEND) ? KVC_ENOTSTORED : rc;
}

static void reply_store(struct kvp_exec *x, const struct kvp_slot *s, const struct kvc_op *op, struct kvp_buf *b)
{
	int cmd = s->req.cmd, rc = store_status(cmd, op);

	KVP_COUNT(&x->ctr, cmd_set, 1);
	if (rc == 0)
		KVP_COUNT(&x->ctr, total_items, 1);
	if (cmd == KVP_C_CAS) {
		if (rc == 0)
			KVP_COUNT(&x->ctr, cas_hits, 1);
		else if (rc == KVC_EEXISTS)
			KVP_COUNT(&x->ctr, cas_badval, 1);
		else if (rc == KVC_ENOTFOUND)
			KVP_COUNT(&x->ctr, cas_misses, 1);
	}
	if (s->req.noreply)
		return;
	if (rc == 0)
		line(b, "STORED");
	else if (rc == KVC_ENOTSTORED)
		line(b, "NOT_STORED");
	else if (rc == KVC_EEXISTS)
		line(b, "EXISTS");
	else if (rc == KVC_ENOTFOUND)
		line(b, "NOT_FOUND");
	else
		server_error(b, rc);
}

static void reply_arith(struct kvp_exec *x, const struct kvp_slot *s, const struct kvc_op *op, struct kvp_buf *b)
{
	int incr = s->req.cmd == KVP_C_INCR;

	if (op->status == 0) {
		if (incr)
			KVP_COUNT(&x->ctr, incr_hits, 1);
		else
			KVP_COUNT(&x->ctr, decr_hits, 1);
	} else if (op->status == KVC_ENOTFOUND) {
		if (incr)
			KVP_COUNT(&x->ctr, incr_misses, 1);
		else
			KVP_COUNT(&x->ctr, decr_misses, 1);
	}
	if (s->req.noreply)
		return;
	if (op->status == 0) {
		kvp_buf_u64(b, op->result);
		crlf(b);
	} else if (op->status == KVC_ENOTFOUND) {
		line(b, "NOT_FOUND");
	} else if (op->status == KVC_ENONNUMERIC) {
		line(b, "CLIENT_ERROR cannot increment or decrement non-numeric value");
	} else {
		server_error(b, op->status);
	}
}

static void reply_touch_delete(struct kvp_exec *x, const struct kvp_slot *s, const struct kvc_op *op,
			       struct kvp_buf *b)
{
	int touch = s->req.cmd == KVP_C_TOUCH;

	if (touch) {
		KVP_COUNT(&x->ctr, cmd_touch, 1);
		if (op->status == 0)
			KVP_COUNT(&x->ctr, touch_hits, 1);
		else if (op->status == KVC_ENOTFOUND)
			KVP_COUNT(&x->ctr, touch_misses, 1);
	} else if (op->status == 0) {
		KVP_COUNT(&x->ctr, delete_hits, 1);
	} else if (op->status == KVC_ENOTFOUND) {
		KVP_COUNT(&x->ctr, delete_misses, 1);
	}
	if (s->req.noreply)
		return;
	if (op->status == 0)
		line(b, touch ? "TOUCHED" : "DELETED");
	else if (op->status == KVC_ENOTFOUND)
		line(b, "NOT_FOUND");
	else
		server_error(b, op->status);
}

/* A meta reply's key: k<key>, or k<base64> b for a key sent in base64. */
static void meta_key(struct kvp_buf *b, const struct kvp_req *r)
{
	kvp_buf_str(b, " k");
	if (r->key_binary) {
		char *d = kvp_buf_reserve(b, 4 * ((r->key_len + 2) / 3));

		if (d)
			b->len += kvp_b64_encode((const unsigned char *)r->key, r->key_len, d);
		kvp_buf_str(b, " b");
	} else {
		kvp_buf_add(b, r->key, r->key_len);
	}
}

/* " t" and the whole seconds left (nearest, as memcached's clock counts them)
 * of left_ms, or -1 for an item that never expires. */
static void put_ttl_left(struct kvp_buf *b, int never, uint64_t left_ms)
{
	kvp_buf_str(b, " t");
	if (never)
		kvp_buf_str(b, "-1");
	else
		kvp_buf_u64(b, (left_ms + 500) / 1000);
}

/* The t of an item that expires at expiry_ms (CLOCK_REALTIME ms; 0: never). */
static void put_ttl(struct kvp_buf *b, uint64_t expiry_ms)
{
	uint64_t now = now_ms();

	put_ttl_left(b, expiry_ms == 0, expiry_ms > now ? expiry_ms - now : 0);
}

/* The t of an item just given this exptime: its TTL itself (no clock read
 * to turn it into an expiry and back); 0 for one already past. */
static void put_exptime_ttl(struct kvp_buf *b, int32_t exptime)
{
	uint64_t ttl_ms = 0;

	if (kvp_ttl_ms(exptime, time(NULL), &ttl_ms))
		put_ttl_left(b, 0, 0);
	else
		put_ttl_left(b, ttl_ms == 0, ttl_ms);
}

/* mg's and ma's t: the item's TTL where t stands among the flags, as memcached
 * applies them in order. Before a T that follows, the TTL the item had (the
 * library's expiry_ms for GAT, INCR and DECR is the one before the call);
 * after it, T's. An item this request vivified (N) has none before N, then
 * N's, and T's after a T that follows N (what it was stored with; ma stores
 * T's whatever the order: one ttl_ms serves its touch and its vivify). */
static void meta_ttl(struct kvp_buf *b, const struct kvp_req *r, const struct kvc_op *op)
{
	int touch = (r->mflags & KVP_MF('T')) != 0; /* has_exptime means "expired" by now */

	if (op->item & KVC_ITEM_CREATED) {
		if (!flag_before(r, 'N', 't'))
			put_ttl_left(b, 1, 0);
		else if (touch && flag_before(r, 'T', 't') && (r->cmd == KVP_C_MA || flag_before(r, 'N', 'T')))
			put_exptime_ttl(b, r->exptime);
		else
			put_exptime_ttl(b, r->vivify_exptime);
	} else if (touch && flag_before(r, 'T', 't')) {
		put_exptime_ttl(b, r->exptime);
	} else {
		put_ttl(b, op->expiry_ms);
	}
}

/* The return flags of a meta reply, in the order they were asked. */
static void meta_flags(struct kvp_buf *b, const struct kvp_req *r, const struct kvc_op *op, int hit)
{
	const char *t;
	size_t tl, off = 0;

	while ((off = kvp_next_token(r->mtokens, r->mtokens_len, off, &t, &tl)) != 0) {
		switch (t[0]) {
		case 'O':
			kvp_buf_str(b, " ");
			kvp_buf_add(b, t, tl);
			break;
		case 'k':
			meta_key(b, r);
			break;
		case 'c':
			if (hit) {
				kvp_buf_str(b, " c");
				kvp_buf_u64(b, op->cas);
			} else if (r->cmd == KVP_C_MS) { /* NS, NF, EX: memcached says c0 */
				kvp_buf_str(b, " c0");
			}
			break;
		case 'f':
			if (hit && r->cmd == KVP_C_MG) {
				kvp_buf_str(b, " f");
				kvp_buf_u64(b, op->flags);
			}
			break;
		case 's':
			if (hit && r->cmd == KVP_C_MG) {
				kvp_buf_str(b, " s");
				kvp_buf_u64(b, op->value_len);
			}
			break;
		case 'h':
			if (hit && r->cmd == KVP_C_MG)
				kvp_buf_str(b, op->item & KVC_ITEM_FETCHED ? " h1" : " h0");
			break;
		case 't':
			if (hit && (r->cmd == KVP_C_MG || r->cmd == KVP_C_MA))
				meta_ttl(b, r, op);
			break;
		default:
			break;
		}
	}
	/* memcached's order: after the flags asked for, Z (another client won
	 * the right to recache), X (stale), W (this one won). */
	if (hit && r->cmd == KVP_C_MG) {
		if (op->item & KVC_ITEM_WIN_SENT)
			kvp_buf_str(b, " Z");
		if (op->item & KVC_ITEM_STALE)
			kvp_buf_str(b, " X");
		if (op->item & KVC_ITEM_WON)
			kvp_buf_str(b, " W");
	}
}

static void reply_mg(struct kvp_exec *x, const struct kvp_slot *s, const struct kvc_op *op, struct kvp_buf *b)
{
	const struct kvp_req *r = &s->req;
	int touch = op->type == KVC_OP_GAT || r->has_exptime;

	if (touch)
		KVP_COUNT(&x->ctr, cmd_touch, 1);
	else
		KVP_COUNT(&x->ctr, cmd_get, 1);
	if (op->status == 0) {
		if (touch)
			KVP_COUNT(&x->ctr, touch_hits, 1);
		else
			KVP_COUNT(&x->ctr, get_hits, 1);
		if (r->mflags & KVP_MF('v')) {
			kvp_buf_str(b, "VA ");
			kvp_buf_u64(b, op->value_len);
		} else {
			kvp_buf_str(b, "HD");
		}
		meta_flags(b, r, op, 1);
		crlf(b);
		if (r->mflags & KVP_MF('v')) {
			kvp_buf_add(b, op->buf, op->value_len);
			crlf(b);
		}
		return;
	}
	if (touch)
		KVP_COUNT(&x->ctr, touch_misses, 1);
	else
		KVP_COUNT(&x->ctr, get_misses, 1);
	if (op->status != KVC_ENOTFOUND) {
		server_error(b, op->status);
		return;
	}
	if (r->noreply)
		return;
	kvp_buf_str(b, "EN");
	meta_flags(b, r, op, 0);
	crlf(b);
}

/* ms, md, ma: a status word and the flags. */
static void reply_meta_write(struct kvp_exec *x, const struct kvp_slot *s, const struct kvc_op *op,
			     struct kvp_buf *b)
{
	const struct kvp_req *r = &s->req;
	int rc = op->status, hit;
	const char *word;

	if (r->cmd == KVP_C_MS) {
		struct kvp_slot fake = *s;

		fake.req.cmd = r->mode;
		fake.req.noreply = 1;
		reply_store(x, &fake, op, b); /* counts only */
		rc = store_status(r->mode, op);
	} else if (r->cmd == KVP_C_MD) {
		struct kvp_slot fake = *s;

		fake.req.cmd = KVP_C_DELETE;
		fake.req.noreply = 1;
		reply_touch_delete(x, &fake, op, b);
	} else {
		struct kvp_slot fake = *s;

		fake.req.cmd = r->mode;
		fake.req.noreply = 1;
		reply_arith(x, &fake, op, b);
	}
	hit = rc == 0;
	switch (rc) {
	case 0:
		word = "HD";
		break;
	case KVC_ENOTSTORED:
		word = "NS";
		break;
	case KVC_EEXISTS:
		word = "EX";
		break;
	case KVC_ENOTFOUND:
		word = "NF";
		break;
	case KVC_ENONNUMERIC:
		line(b, "CLIENT_ERROR cannot increment or decrement non-numeric value");
		return;
	default:
		server_error(b, rc);
		return;
	}
	/* q hides a success, except an "ma N" that created the item (memcached's) */
	if (hit && r->noreply && !(r->cmd == KVP_C_MA && (op->item & KVC_ITEM_CREATED)))
		return;
	if (hit && r->cmd == KVP_C_MA && (r->mflags & KVP_MF('v'))) {
		char num[24];
		int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)op->result);

		kvp_buf_str(b, "VA ");
		kvp_buf_u64(b, (uint64_t)n);
		meta_flags(b, r, op, hit);
		crlf(b);
		kvp_buf_add(b, num, (size_t)n);
		crlf(b);
		return;
	}
	kvp_buf_str(b, word);
	meta_flags(b, r, op, hit && r->cmd != KVP_C_MD);
	crlf(b);
}

static void reply_local(struct kvp_exec *x, const struct kvp_slot *s, const struct kvc_op *op, struct kvp_buf *b)
{
	const struct kvp_req *r = &s->req;

	switch (r->cmd) {
	case KVP_C_ERROR:
	case KVP_C_TOOLARGE:
		if (!r->noreply)
			line(b, r->err);
		break;
	case KVP_C_VERSION:
		line(b, "VERSION " KVP_VERSION);
		break;
	case KVP_C_VERBOSITY:
		if (!r->noreply)
			line(b, "OK");
		break;
	case KVP_C_MN:
		line(b, "MN");
		break;
	case KVP_C_QUIT:
		x->quit = 1;
		break;
	case KVP_C_FLUSH: {
		uint64_t delay = 0;
		time_t now = time(NULL);
		int rc;

		KVP_COUNT(&x->ctr, cmd_flush, 1);
		/* memcached flushes what was written up to a second before the
		 * time asked for: flush_all 1 is at once, flush_all 2 in a second. */
		if (r->exptime > 1) {
			time_t at = r->exptime > THIRTY_DAYS ? (time_t)r->exptime : now + r->exptime;

			delay = at - 1 > now ? (uint64_t)(at - 1 - now) * 1000u : 0;
		}
		rc = kvc_flush_all(x->h, delay);
		if (r->noreply)
			break;
		if (rc == 0)
			line(b, "OK");
		else
			server_error(b, rc);
		break;
	}
	case KVP_C_STATS: {
		struct kvp_stats st;
		const char *sub;
		size_t sl;

		kvp_next_token(r->keys, r->keys_len, 0, &sub, &sl);
		if (sl == 0) {
			kvp_stats_fill(&st, x->sh, x->h);
			kvp_stats_render(b, &st);
		} else if (kvp_tok_is(sub, sl, "reset")) {
			kvp_stats_reset(x->sh, x->h);
			line(b, "RESET");
		} else if (kvp_tok_is(sub, sl, "settings") || kvp_tok_is(sub, sl, "items") ||
			   kvp_tok_is(sub, sl, "slabs") || kvp_tok_is(sub, sl, "sizes") || kvp_tok_is(sub, sl, "conns")) {
			line(b, "END"); /* memcached's slab and item classes: none here (monitors expect a list) */
		} else {
			line(b, "ERROR");
		}
		break;
	}
	default:
		(void)op;
		break;
	}
}

void kvp_exec_finish(struct kvp_exec *x, struct kvp_buf *out)
{
	run_round(x);
	for (unsigned i = 0; i < x->nslots; i++) {
		const struct kvp_slot *s = &x->slots[i];
		const struct kvc_op *op = s->nops ? &x->ops[s->op0] : NULL;

		switch (s->req.cmd) {
		case KVP_C_GET: case KVP_C_GETS: case KVP_C_GAT: case KVP_C_GATS:
			reply_get(x, s, out);
			break;
		case KVP_C_SET: case KVP_C_ADD: case KVP_C_REPLACE: case KVP_C_APPEND: case KVP_C_PREPEND:
		case KVP_C_CAS:
			reply_store(x, s, op, out);
			break;
		case KVP_C_INCR: case KVP_C_DECR:
			reply_arith(x, s, op, out);
			break;
		case KVP_C_TOUCH: case KVP_C_DELETE:
			reply_touch_delete(x, s, op, out);
			break;
		case KVP_C_MG:
			reply_mg(x, s, op, out);
			break;
		case KVP_C_MS: case KVP_C_MD: case KVP_C_MA:
			reply_meta_write(x, s, op, out);
			break;
		default:
			reply_local(x, s, op, out);
			break;
		}
	}
	for (unsigned i = 0; i < x->nops; i++)
		free(x->big[i]);
	x->nops = 0;
	x->nvals = 0;
	x->nslots = 0;
}
