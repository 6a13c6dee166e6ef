#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "lrusim.h"

/* A GET's destination is the largest value the target takes, at most this. */
#define GET_BUF_MAX (4u << 20)
/* memcached's default item limit (-I 1m) less its item header and a key. */
#define MEMCACHED_MAX_ITEM ((1u << 20) - 512u)

struct slot {
	struct kvb_req req;
	uint64_t id;     /* the trace's key identity */
	int counted;     /* after the warm-up: counted for the cache's ratios */
	uint32_t size;   /* the object's bytes: key + value */
	uint32_t value_size, ttl_ms;
	unsigned char *buf;
};

struct run {
	const struct kvb_replay_cfg *c;
	struct kvb_replay_result *r;
	void *conn;
	struct slot *slots;
	unsigned inflight;
	const unsigned char *value; /* what every PUT stores: value_size bytes of it */
	struct kvb_trace_req next; /* read, not yet started */
	int have_next;
	size_t value_cap;
	int lost;
};

static size_t max_value(const struct run *u, size_t key_len)
{
	size_t m = u->c->drv->max_value ? u->c->drv->max_value(u->conn, key_len)
					: MEMCACHED_MAX_ITEM - key_len;

	return m < u->value_cap ? m : u->value_cap;
}

static void failed(struct run *u, int status)
{
	if (!u->r->errors++)
		u->r->first_error = status;
	if (u->c->drv->lost && u->c->drv->lost(status))
		u->lost = 1;
}

static void submit(struct run *u, struct slot *s)
{
	int rc = u->c->drv->submit(u->conn, &s->req);

	if (rc) {
		failed(u, rc);
		s->req.user = NULL;
		return;
	}
	u->inflight++;
}

/* A GET that missed: fill the cache, as the application would after reading
 * its backing store. */
static void fill(struct run *u, struct slot *s)
{
	s->req.prim = KVB_PUT;
	s->req.value = u->value;
	s->req.value_len = s->value_size;
	s->req.ttl_ms = s->ttl_ms;
	u->r->fill_puts++;
	submit(u, s);
}

/* One counted GET of an object of size bytes, for the cache or the baseline. */
static void count_get(struct kvb_replay_side *side, uint64_t size, int hit)
{
	side->gets++;
	side->get_bytes += size;
	side->hits += (uint64_t)hit;
	side->hit_bytes += hit ? size : 0;
}

static void completed(struct run *u, struct kvb_req *q)
{
	struct slot *s = q->user;

	u->inflight--;
	if (q->prim == KVB_GET && (q->status == 0 || q->status == KVB_NOTFOUND)) {
		if (s->counted)
			count_get(&u->r->cache, s->size, q->status == 0);
		if (q->status == KVB_NOTFOUND) {
			fill(u, s);
			return;
		}
	} else if (q->status && !(q->prim == KVB_DEL && q->status == KVB_NOTFOUND)) {
		failed(u, q->status);
	}
	s->req.user = NULL;
}

/* The trace's next request for the cache: 1 with t, 0 at its end, -1 on a
 * malformed trace. Operations the cache does not replay and items too
 * large for the target are counted and passed over. */
static int next_request(struct run *u, struct kvb_trace *tr, struct kvb_trace_req *t, char *err, size_t errlen)
{
	for (;;) {
		int rc;

		if (u->c->max_requests && u->r->requests >= u->c->max_requests)
			return 0;
		rc = u->c->next ? u->c->next(u->c->arg, t, err, errlen) : kvb_trace_next(tr, t, err, errlen);
		if (rc <= 0)
			return rc;
		if (t->op == KVB_TOP_OTHER) {
			u->r->others++;
			continue;
		}
		if (t->op != KVB_TOP_DELETE && t->value_size > max_value(u, t->key_len)) {
			u->r->too_large++;
			continue;
		}
		return 1;
	}
}

/* The baseline sees every replayed request, in trace order. */
static void lru_request(struct kvb_lru *l, const struct kvb_trace_req *t, int counted, struct kvb_replay_side *side)
{
	uint64_t size = t->key_len + t->value_size;

	if (t->op == KVB_TOP_GET) {
		int hit = kvb_lru_get(l, t->id, size);

		if (counted)
			count_get(side, size, hit);
	} else if (t->op == KVB_TOP_SET) {
		kvb_lru_set(l, t->id, size);
	} else {
		kvb_lru_delete(l, t->id);
	}
}

static void start(struct run *u, struct slot *s, const struct kvb_trace_req *t)
{
	double scale = u->c->ttl_scale > 0 ? u->c->ttl_scale : 1.0;
	double ttl = (double)t->ttl_s * 1000.0 / scale;

	s->counted = u->r->requests++ >= u->c->warmup;
	s->id = t->id;
	s->size = (uint32_t)(t->key_len + t->value_size);
	s->value_size = t->value_size;
	s->ttl_ms = t->ttl_s == 0 ? 0 : ttl < 1 ? 1 : ttl > 4e9 ? 4000000000u : (uint32_t)ttl;
	s->req = (struct kvb_req){ .buf = s->buf, .buf_len = u->value_cap, .user = s };
	memcpy(s->req.key, t->key, t->key_len);
	s->req.key_len = t->key_len;
	if (t->op == KVB_TOP_GET) {
		s->req.prim = KVB_GET;
	} else if (t->op == KVB_TOP_SET) {
		u->r->sets++;
		s->req.prim = KVB_PUT;
		s->req.value = u->value;
		s->req.value_len = s->value_size;
		s->req.ttl_ms = s->ttl_ms;
	} else {
		u->r->deletes++;
		s->req.prim = KVB_DEL;
	}
	submit(u, s);
}

/* Is a request for key id (or its fill) in flight? A trace's requests for
 * one key are played in its order: the next waits for the one before. */
static int key_busy(const struct run *u, uint64_t id)
{
	for (unsigned i = 0; i < u->c->depth; i++)
		if (u->slots[i].req.user && u->slots[i].id == id)
			return 1;
	return 0;
}

static int replay_loop(struct run *u, struct kvb_trace *tr, struct kvb_lru *lru, char *err, size_t errlen)
{
	const struct kvb_replay_cfg *c = u->c;
	struct kvb_trace_req t;
	double t0 = kvi_mono_s();
	int more = 1;

	while (!u->lost) {
		struct kvb_req *done[64];
		int n;

		for (unsigned i = 0; i < c->depth && more; i++) {
			if (u->slots[i].req.user)
				continue; /* in flight */
			if (c->rate && (double)u->r->requests / (double)c->rate > kvi_mono_s() - t0)
				break; /* paced: not yet */
			if (!u->have_next) {
				more = next_request(u, tr, &u->next, err, errlen);
				if (more < 0)
					return -1;
				if (!more)
					break;
				u->have_next = 1;
			}
			if (key_busy(u, u->next.id))
				break; /* after the request before it */
			t = u->next;
			u->have_next = 0;
			lru_request(lru, &t, u->r->requests >= c->warmup, &u->r->lru);
			start(u, &u->slots[i], &t);
		}
		if (u->inflight == 0 && !more && !u->have_next)
			return 0;
		n = c->drv->poll(u->conn, done, 64, c->rate || u->inflight == 0 ? 0 : 1000);
		if (n < 0) {
			snprintf(err, errlen, "connection lost: %s", c->drv->errname(n));
			return -1;
		}
		for (int i = 0; i < n; i++)
			completed(u, done[i]);
	}
	snprintf(err, errlen, "the target is gone: %s", c->drv->errname(u->r->first_error));
	return -1;
}

int kvb_replay(const struct kvb_replay_cfg *c, struct kvb_replay_result *r, char *err, size_t errlen)
{
	struct run u = { .c = c, .r = r };
	struct kvb_trace *tr = NULL;
	struct kvb_lru *lru = NULL;
	unsigned char *value = NULL;
	double t0;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	if (!c->next) {
		if (kvb_trace_open(c->path, c->fmt, &tr, err, errlen))
			return -1;
		r->fmt = kvb_trace_fmt_of(tr);
	}
	if (c->drv->connect(c->host, c->port, c->device, c->depth, &u.conn, err, errlen))
		goto out;
	r->lru_bytes = c->lru_bytes;
	if (!r->lru_bytes && (!c->drv->server_limit || c->drv->server_limit(u.conn, &r->lru_bytes) || !r->lru_bytes)) {
		snprintf(err, errlen, "%s does not say how much memory it has: give the baseline's --lru-bytes",
			 c->drv->name);
		goto out;
	}
	u.value_cap = c->drv->max_value ? c->drv->max_value(u.conn, 1) : MEMCACHED_MAX_ITEM;
	if (u.value_cap > GET_BUF_MAX)
		u.value_cap = GET_BUF_MAX;
	u.slots = calloc(c->depth, sizeof(*u.slots));
	value = malloc(u.value_cap ? u.value_cap : 1);
	if (!u.slots || !value || kvb_lru_create_bytes(r->lru_bytes, &lru)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	memset(value, 'v', u.value_cap);
	u.value = value;
	for (unsigned i = 0; i < c->depth; i++)
		if (!(u.slots[i].buf = malloc(u.value_cap ? u.value_cap : 1))) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
	t0 = kvi_mono_s();
	rc = replay_loop(&u, tr, lru, err, errlen);
	r->seconds = kvi_mono_s() - t0;
	if (rc == 0 && kvb_lru_failed(lru)) {
		snprintf(err, errlen, "out of memory simulating the LRU baseline: no ratio to trust");
		rc = -1;
	}
	if (rc == 0 && c->drv->server_mem && c->drv->server_mem(u.conn, &r->target_bytes))
		r->target_bytes = 0;
out:
	/* Nothing is left in flight when the loop ends well; otherwise the
	 * connection goes with what it holds. */
	if (u.conn)
		c->drv->close(u.conn);
	if (u.slots)
		for (unsigned i = 0; i < c->depth; i++)
			free(u.slots[i].buf);
	free(u.slots);
	free(value);
	if (lru)
		kvb_lru_destroy(lru);
	kvb_trace_close(tr);
	return rc;
}
