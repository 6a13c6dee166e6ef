/* Recording item histories (recorder.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "recorder.h"

#define MSN 1000000ull


/* Record o (invoked at o->inv) with outcome rc; cas: the unique a GET read or
 * a store was told. */
void lc_rec_record(struct lc_rec *w, struct lc_op *o, int rc, uint64_t cas)
{
	o->cmp = lc_now_ns();
	if (rc == KVC_EUNKNOWN) {
		o->cmp = LC_NEVER;
		w->c.unknown++;
		if (o->kind == LC_INCR || o->kind == LC_DECR || o->kind == LC_TOUCH || o->kind == LC_GAT)
			w->c.rmw_unknown++;
		w->broken = 1;
	} else if (rc == KVC_ECORRUPT) {
		w->why = "KVC_ECORRUPT: a slot names an object that is not there";
		return;
	} else if (rc == KVC_ENONNUMERIC) {
		w->why = "KVC_ENONNUMERIC, but every value stored is a number";
		return;
	} else if (rc && rc != KVC_ENOTFOUND && rc != KVC_ENOTSTORED && rc != KVC_EEXISTS) {
		w->c.failed++; /* changed nothing: left out; the handle may be broken */
		w->broken = 1;
		return;
	}
	if (rc == 0 && o->kind != LC_DELETE && o->kind != LC_TOUCH)
		o->uniq = cas;
	switch (rc) {
	case 0:
		o->result = LC_OK;
		break;
	case KVC_ENOTFOUND:
		o->result = LC_ABSENT;
		if (o->kind == LC_PUT || o->kind == LC_ADD || o->kind == LC_REPLACE)
			w->why = "a SET, ADD or REPLACE answered KVC_ENOTFOUND";
		break;
	case KVC_ENOTSTORED:
		o->result = LC_NOTSTORED;
		if (o->kind != LC_ADD && o->kind != LC_REPLACE)
			w->why = "KVC_ENOTSTORED from neither ADD nor REPLACE";
		break;
	case KVC_EEXISTS:
		o->result = LC_EXISTS;
		if (o->kind != LC_CAS)
			w->why = "KVC_EEXISTS from no CAS";
		break;
	}
	if (o->cmp != LC_NEVER && o->kind == LC_ADD)
		w->c.add[o->result == LC_OK ? 0 : 1]++;
	if (o->cmp != LC_NEVER && o->kind == LC_REPLACE)
		w->c.repl[o->result == LC_OK ? 0 : 1]++;
	if (o->cmp != LC_NEVER && o->kind == LC_CAS)
		w->c.cas[o->result == LC_OK ? 0 : o->result == LC_EXISTS ? 1 : 2]++;
	if (o->cmp != LC_NEVER && (o->kind == LC_INCR || o->kind == LC_DECR))
		w->c.arith[o->result == LC_OK ? 0 : 1]++;
	if (o->cmp != LC_NEVER && (o->kind == LC_INCR || o->kind == LC_DECR) && o->uniq)
		w->c.arith_uniq++;
	if (o->cmp != LC_NEVER && o->kind == LC_TOUCH)
		w->c.touch[o->result == LC_OK ? 0 : 1]++;
	if (o->cmp != LC_NEVER && o->kind == LC_GAT)
		w->c.gat[o->result == LC_OK ? 0 : 1]++;
	if (w->n < w->cap)
		w->ops[w->n++] = *o;
	else /* dropping one that took effect would make the history lie */
		w->why = "more operations than the history holds";
}

/* The number a value (NUL-terminated) holds: "v<number>:<padding>", or
 * with counters decimal digits and blanks (stores pad with spaces, incr and
 * decr write digits alone). 1 if it is one of these. */
static int rec_value(const struct lc_rec *w, const char *got, uint64_t *v)
{
	int end = 0;

	if (!w->counters)
		return sscanf(got, "v%" SCNu64 ":", v) == 1;
	if (got[0] < '0' || got[0] > '9' || sscanf(got, "%" SCNu64 "%n", v, &end) != 1)
		return 0;
	return got[end + strspn(got + end, " ")] == '\0';
}

/* kvc_get_item into the history; 0 with *cas the unique read */
int lc_rec_get(struct lc_rec *w, kvc_t *h, unsigned key, const char *k, uint64_t *cas)
{
	struct lc_op o = { .key = key, .client = w->id, .kind = LC_GET };
	char got[3100];
	size_t len = 0;
	int rc;

	*cas = 0;
	o.inv = lc_now_ns();
	rc = kvc_get_item(h, k, strlen(k), got, sizeof(got) - 1, &len, NULL, cas);
	got[rc == 0 ? len : 0] = '\0';
	if (rc == 0 && !rec_value(w, got, &o.value))
		w->why = "a GET returned bytes no client wrote";
	lc_rec_record(w, &o, rc, *cas);
	return rc;
}

/* A store of mode (expect: CAS's unique) into the history; its value is
 * unique to this client and step. */
int lc_rec_store(struct lc_rec *w, kvc_t *h, uint64_t *rng, unsigned key, const char *k, int mode,
		      uint64_t expect)
{
	static const uint8_t kind[] = { [KVC_STORE_SET] = LC_PUT, [KVC_STORE_ADD] = LC_ADD,
					[KVC_STORE_REPLACE] = LC_REPLACE, [KVC_STORE_CAS] = LC_CAS };
	struct lc_op o = { .key = key, .client = w->id, .kind = kind[mode], .expect = expect };
	uint64_t ttl = lc_rand(rng) % 3 == 0 ? 1 + lc_rand(rng) % 8 : 0, cas = 0;
	char v[3100];
	int rc;

	o.value = ((uint64_t)w->id << 32) | ++w->stores;
	o.ttl_ns = ttl * MSN;
	if (!w->counters) {
		snprintf(v, sizeof(v), "v%" PRIu64 ":%0*u", o.value, (int)(lc_rand(rng) % 3000), 0);
	} else {
		/* small numbers too, for decr to stop at 0; blanks after the
		 * digits (memcached's padding) vary the objects' sizes */
		if (lc_rand(rng) % 3 == 0)
			o.value = lc_rand(rng) % 4;
		snprintf(v, sizeof(v), "%" PRIu64 "%*s", o.value, (int)(lc_rand(rng) % 3000), "");
	}
	o.inv = lc_now_ns();
	rc = kvc_store(h, mode, k, strlen(k), v, strlen(v), (uint32_t)o.value, ttl, expect, &cas);
	lc_rec_record(w, &o, rc, cas);
	return rc;
}


/* An incr, decr, touch or gat into the history. Half the arithmetic goes
 * through kvc_run_batch, which tells the new unique too, half through
 * kvc_incr / kvc_decr (the unique not recorded); a delta is now and then
 * near 2^64 (incr wraps, decr stops at 0). */
void lc_rec_rmw(struct lc_rec *w, kvc_t *h, uint64_t *rng, unsigned key, const char *k)
{
	unsigned dice = (unsigned)(lc_rand(rng) % 8);
	struct lc_op o = { .key = key, .client = w->id };
	struct kvc_op op = { .key = k, .key_len = strlen(k) };
	int rc;

	if (dice < 2) { /* touch */
		uint64_t ttl = lc_rand(rng) % 2 ? 1 + lc_rand(rng) % 8 : 0;

		o.kind = LC_TOUCH;
		o.ttl_ns = ttl * MSN;
		o.inv = lc_now_ns();
		lc_rec_record(w, &o, kvc_touch(h, k, strlen(k), ttl), 0);
		return;
	}
	if (dice < 3) { /* gat */
		uint64_t ttl = lc_rand(rng) % 2 ? 1 + lc_rand(rng) % 8 : 0, cas = 0;
		char got[3100];
		size_t len = 0;

		o.kind = LC_GAT;
		o.ttl_ns = ttl * MSN;
		o.inv = lc_now_ns();
		rc = kvc_gat(h, k, strlen(k), ttl, got, sizeof(got) - 1, &len, NULL, &cas);
		got[rc == 0 ? len : 0] = '\0';
		if (rc == 0 && !rec_value(w, got, &o.value))
			w->why = "a GAT returned bytes no client wrote";
		lc_rec_record(w, &o, rc, cas);
		return;
	}
	o.kind = dice < 6 ? LC_INCR : LC_DECR;
	o.delta = lc_rand(rng) % 10 ? 1 + lc_rand(rng) % 5 : UINT64_MAX - lc_rand(rng) % 5;
	o.inv = lc_now_ns();
	if (lc_rand(rng) % 2) {
		/* half of these with an increment of the same key in the same
		 * batch: two read-modify-writes of one key in flight at once */
		struct kvc_op op2 = { .type = KVC_OP_INCR, .key = k, .key_len = strlen(k), .delta = 1 + lc_rand(rng) % 5 };
		struct kvc_op *both[2] = { &op, &op2 };
		struct lc_op o2 = { .key = key, .client = w->id, .kind = LC_INCR, .delta = op2.delta };
		unsigned n = lc_rand(rng) % 2 ? 2 : 1;

		op.type = o.kind == LC_INCR ? KVC_OP_INCR : KVC_OP_DECR;
		op.delta = o.delta;
		/* and the modes: vivify on a miss, touch on a hit */
		op.mode = (int)(lc_rand(rng) % 4);
		op.initial = lc_rand(rng) % 10;
		op.ttl_ms = op.mode && lc_rand(rng) % 2 ? 1 + lc_rand(rng) % 8 : 0;
		o.mode = (uint32_t)op.mode;
		o.initial = op.mode & KVC_ARITH_VIVIFY ? op.initial : 0;
		o.ttl_ns = op.mode ? op.ttl_ms * MSN : 0;
		w->c.arith_modes += op.mode != 0;
		o2.inv = o.inv;
		w->c.pairs += n == 2;
		rc = kvc_run_batch(h, both, n);
		for (unsigned j = 0; j < n; j++) {
			struct kvc_op *x = both[j];
			struct lc_op *r = j ? &o2 : &o;
			int xrc = rc ? rc : x->status;

			r->value = x->result;
			lc_rec_record(w, r, xrc, xrc == 0 ? x->cas : 0);
		}
		return;
	}
	rc = o.kind == LC_INCR ? kvc_incr(h, k, strlen(k), o.delta, &o.value)
			       : kvc_decr(h, k, strlen(k), o.delta, &o.value);
	lc_rec_record(w, &o, rc, 0);
}

void lc_rec_step(struct lc_rec *w, kvc_t *h, uint64_t *rng, unsigned key, const char *k)
{
	unsigned dice = (unsigned)(lc_rand(rng) % 100);
	int rmw = w->counters && lc_rand(rng) % 100 < 35; /* else the items' mix */
	uint64_t cas;

	if (rmw) {
		lc_rec_rmw(w, h, rng, key, k);
	} else if (dice < 25) {
		lc_rec_get(w, h, key, k, &cas);
	} else if (dice < 40) {
		lc_rec_store(w, h, rng, key, k, KVC_STORE_SET, 0);
	} else if (dice < 50) {
		struct lc_op o = { .key = key, .client = w->id, .kind = LC_DELETE };

		o.inv = lc_now_ns();
		lc_rec_record(w, &o, kvc_delete(h, k, strlen(k)), 0);
	} else if (dice < 62) {
		lc_rec_store(w, h, rng, key, k, KVC_STORE_ADD, 0);
	} else if (dice < 74) {
		lc_rec_store(w, h, rng, key, k, KVC_STORE_REPLACE, 0);
	} else {
		/* read-modify-write: CAS with the unique read, again while
		 * another client's store got in between; ADD when absent */
		for (unsigned t = 0; t < LC_REC_RMW_TRIES && !w->broken; t++) {
			int rc = lc_rec_get(w, h, key, k, &cas);

			if (w->broken)
				break;
			rc = rc == KVC_ENOTFOUND ? lc_rec_store(w, h, rng, key, k, KVC_STORE_ADD, 0)
						 : lc_rec_store(w, h, rng, key, k, KVC_STORE_CAS, cas);
			if (rc != KVC_EEXISTS && rc != KVC_ENOTSTORED)
				break;
			w->c.rmw_retries++;
		}
	}
}
