#include "cacheaside.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ca_seq.h"
#include "clock.h"
#include "lrusim.h"

struct slot {
	struct kvb_req req;
	uint64_t seqno; /* position in the sequence */
	char buf[2048];
};

static int lru_baseline(const struct kvb_ca_cfg *c, struct kvb_ca_result *r)
{
	struct kvb_ca_seq seq;
	struct kvb_lru *l;

	if (kvb_lru_create(c->lru_items, &l) || kvb_ca_seq_init(&seq, c->kind, c->records, c->seed))
		return -1;
	for (uint64_t i = 0; i < c->requests; i++) {
		int hit = kvb_lru_access(l, kvb_ca_seq_next(&seq));

		if (i >= c->warmup) {
			r->lru_hits += (uint64_t)hit;
			r->lru_counted++;
		}
	}
	kvb_lru_destroy(l);
	return 0;
}

int kvb_cache_aside(const struct kvb_ca_cfg *c, struct kvb_ca_result *r, char *err, size_t errlen)
{
	struct kvb_ca_seq seq;
	struct slot *slots;
	char *value;
	void *conn = NULL;
	uint64_t issued = 0;
	unsigned inflight = 0;
	double t0;
	int rc;

	memset(r, 0, sizeof(*r));
	if (c->lru_items && lru_baseline(c, r)) {
		snprintf(err, errlen, "cannot simulate an LRU of %llu items", (unsigned long long)c->lru_items);
		return -1;
	}
	if (kvb_ca_seq_init(&seq, c->kind, c->records, c->seed)) {
		snprintf(err, errlen, "bad cache-aside workload");
		return -1;
	}
	slots = calloc(c->depth, sizeof(*slots));
	value = malloc(c->value_size + 1);
	if (!slots || !value) {
		free(slots);
		free(value);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memset(value, 'v', c->value_size);
	rc = c->drv->connect(c->host, c->port, c->device, c->depth, &conn, err, errlen);
	if (rc) {
		free(slots);
		free(value);
		return -1;
	}
	t0 = kvi_mono_s();
	for (;;) {
		struct kvb_req *done[64];
		int n;

		for (unsigned i = 0; i < c->depth && issued < c->requests; i++) {
			struct slot *s = &slots[i];

			if (s->req.user)
				continue; /* in flight */
			if (c->rate && (double)issued / (double)c->rate > kvi_mono_s() - t0)
				break; /* paced: not yet */
			s->seqno = issued++;
			s->req = (struct kvb_req){ .prim = KVB_GET, .buf = s->buf, .buf_len = sizeof(s->buf),
						   .user = s };
			s->req.key_len = kvb_key_name(kvb_ca_seq_next(&seq), 0, 0, s->req.key, sizeof(s->req.key));
			if (c->drv->submit(conn, &s->req)) {
				s->req.user = NULL;
				r->errors++;
				continue;
			}
			inflight++;
		}
		if (inflight == 0 && issued >= c->requests)
			break;
		n = c->drv->poll(conn, done, 64, c->rate ? 0 : 1000);
		if (n < 0) {
			snprintf(err, errlen, "connection lost: %s", c->drv->errname(n));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct kvb_req *q = done[i];
			struct slot *s = q->user;
			int counted = s->seqno >= c->warmup;

			inflight--;
			if (q->prim == KVB_GET && q->status == 0) {
				r->hits += (uint64_t)counted;
				r->counted += (uint64_t)counted;
				s->req.user = NULL;
			} else if (q->prim == KVB_GET && q->status == KVB_NOTFOUND) {
				/* Miss: fetch from "the store" and fill the cache. */
				r->counted += (uint64_t)counted;
				s->req.prim = KVB_PUT;
				s->req.value = value;
				s->req.value_len = c->value_size;
				if (c->drv->submit(conn, &s->req)) {
					r->errors++;
					s->req.user = NULL;
				} else {
					inflight++;
					r->puts++;
				}
			} else {
				if (q->status && !r->errors++)
					r->first_error = q->status;
				r->counted += (uint64_t)(counted && q->prim == KVB_GET);
				s->req.user = NULL;
			}
		}
	}
	r->seconds = kvi_mono_s() - t0;
	c->drv->close(conn);
	free(slots);
	free(value);
	return 0;
}
