/* kvbench driver: kvcache through libkvclient's asynchronous interface, so a
 * thread keeps `depth` operations in flight on its one handle. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"
#include "kvclient.h"

_Static_assert(KVB_NOTFOUND == KVC_ENOTFOUND, "one not-found code for every driver");

struct rdma_conn {
	kvc_t *h;
	unsigned depth;
	struct kvc_op *ops;     /* [depth], one per request in flight */
	struct kvc_op **free;   /* stack of unused ops */
	unsigned nfree;
	struct kvc_op *batch[64]; /* kvb_rdma_submit_many's */
	void *aux;                /* kvb_rdma_set_aux */
};

/* Location cache entries per connection: YCSB record counts up to ~20 000 keep
 * all but about 1 % of the locations cached (four-way sets, locache.c); bigger
 * ones show the uncached path in the mix. */
#define DRV_CACHE_ENTRIES (1u << 16)
#define DRV_OP_TIMEOUT_MS 10000

int kvb_rdma_track_access = 1;
int kvb_rdma_busy_poll_us = INT_MIN; /* INT_MIN: the library's default */
const char *kvb_rdma_secret_file;

/* The driver's connection around an open handle (takes it, also on failure). */
int kvb_rdma_wrap(kvc_t *h, unsigned depth, void **out, char *err, size_t len)
{
	struct rdma_conn *c = calloc(1, sizeof(*c));

	if (c) {
		c->ops = calloc(depth, sizeof(*c->ops));
		c->free = calloc(depth, sizeof(*c->free));
	}
	if (!c || !c->ops || !c->free) {
		snprintf(err, len, "out of memory");
		kvc_destroy(h);
		if (c) {
			free(c->ops);
			free(c->free);
		}
		free(c);
		return -1;
	}
	c->h = h;
	c->depth = depth;
	for (unsigned i = 0; i < depth; i++)
		c->free[c->nfree++] = &c->ops[i];
	*out = c;
	return 0;
}

static int rdma_connect(const char *host, const char *port, const char *device, unsigned depth, void **out,
			char *err, size_t len)
{
	char server[1100];
	struct kvc_opts o;
	kvc_t *h;
	int rc;

	/* A list of servers comes as the host, with no port. */
	snprintf(server, sizeof(server), "%s%s%s", host, port[0] ? ":" : "", port);
	kvc_opts_init(&o);
	o.server = server;
	o.device = device;
	o.depth = depth;
	o.cache_entries = DRV_CACHE_ENTRIES;
	o.op_timeout_ms = DRV_OP_TIMEOUT_MS;
	o.track_access = kvb_rdma_track_access;
	if (kvb_rdma_busy_poll_us != INT_MIN)
		o.busy_poll_us = kvb_rdma_busy_poll_us;
	o.secret_file = kvb_rdma_secret_file;
	rc = kvc_create(&o, &h, err, len);
	if (rc)
		return rc;
	return kvb_rdma_wrap(h, depth, out, err, len);
}

static struct kvc_op *take_op(struct rdma_conn *c, struct kvb_req *r)
{
	struct kvc_op *op = c->free[--c->nfree];

	*op = (struct kvc_op){ .type = r->prim == KVB_GET ? KVC_OP_GET : r->prim == KVB_DEL ? KVC_OP_DELETE : KVC_OP_PUT,
			       .key = r->key, .key_len = r->key_len, .value = r->value, .value_len = r->value_len,
			       .ttl_ms = r->ttl_ms, .buf = r->buf, .buf_len = r->buf_len, .user = r };
	return op;
}

int kvb_rdma_submit(void *conn, struct kvb_req *r)
{
	struct rdma_conn *c = conn;
	struct kvc_op *op;
	int rc;

	if (c->nfree == 0)
		return KVC_EAGAIN;
	op = take_op(c, r);
	rc = kvc_submit(c->h, op);
	if (rc)
		c->free[c->nfree++] = op;
	return rc;
}

int kvb_rdma_submit_many(void *conn, struct kvb_req **r, unsigned n)
{
	struct rdma_conn *c = conn;
	struct kvc_op **ops = c->batch;
	unsigned m = 0;
	int started;

	while (m < n && m < 64 && c->nfree) {
		ops[m] = take_op(c, r[m]);
		m++;
	}
	started = kvc_submit_many(c->h, ops, m);
	if (started < 0) { /* bad arguments: none of ours can be */
		r[0]->status = started;
		started = 0;
	} else if ((unsigned)started < m) {
		r[started]->status = ops[started]->status; /* why kvc_submit_many stopped */
	} else if (m < n) {
		r[m]->status = KVC_EAGAIN; /* no op free for more */
	}
	for (unsigned i = (unsigned)started; i < m; i++)
		c->free[c->nfree++] = ops[i];
	return started;
}

int kvb_rdma_poll(void *conn, struct kvb_req **done, unsigned max, int timeout_ms)
{
	struct rdma_conn *c = conn;
	struct kvc_op *ops[64];
	int n;

	if (max > 64)
		max = 64;
	n = kvc_poll(c->h, ops, max, timeout_ms);
	for (int i = 0; i < n; i++) {
		struct kvb_req *r = ops[i]->user;

		r->status = ops[i]->status;
		r->value_len = ops[i]->type == KVC_OP_GET ? ops[i]->value_len : r->value_len;
		done[i] = r;
		c->free[c->nfree++] = ops[i];
	}
	return n;
}

int kvb_rdma_server_cpu(void *conn, double *seconds)
{
	struct rdma_conn *c = conn;
	struct kvc_server_stats ss;
	int rc = kvc_server_stats(c->h, &ss);

	if (rc == 0)
		*seconds = (double)ss.cpu_ns / 1e9;
	return rc;
}

int kvb_rdma_server_mem(void *conn, uint64_t *bytes)
{
	struct rdma_conn *c = conn;
	struct kvc_server_stats ss;
	int rc = kvc_server_stats(c->h, &ss);

	if (rc == 0)
		*bytes = ss.bytes_used;
	return rc;
}

int kvb_rdma_server_limit(void *conn, uint64_t *bytes)
{
	struct rdma_conn *c = conn;
	struct kvc_server_stats ss;
	int rc = kvc_server_stats(c->h, &ss);

	if (rc == 0)
		*bytes = ss.limit_maxbytes;
	return rc;
}

size_t kvb_rdma_max_value(void *conn, size_t key_len)
{
	struct rdma_conn *c = conn;

	return kvc_max_value(c->h, key_len);
}

/* A lost connection fails every later call with KVC_ESERVERGONE (an
 * operation caught in flight may first fail KVC_ETIMEDOUT: the next one
 * then says gone). */
int kvb_rdma_lost(int status)
{
	/* With several servers one lost server fails only its keys (fast):
	 * the run goes on, counting them, as an application's misses. */
	return status == KVC_ESERVERGONE && !kvb_multi_target;
}

void kvb_rdma_round_trips(void *conn, uint64_t *ops, uint64_t *rtts, const char **names, unsigned *kinds)
{
	struct rdma_conn *c = conn;
	struct kvc_stats s;

	kvc_get_stats(c->h, &s);
	for (int k = 0; k < KVC_STAT_KINDS; k++) {
		ops[k] = s.ops[k];
		rtts[k] = s.round_trips[k];
		names[k] = kvc_stat_name(k);
	}
	*kinds = KVC_STAT_KINDS;
}

void kvb_rdma_set_aux(void *conn, void *aux)
{
	((struct rdma_conn *)conn)->aux = aux;
}

void *kvb_rdma_aux(void *conn)
{
	return ((struct rdma_conn *)conn)->aux;
}

void kvb_rdma_close(void *conn)
{
	struct rdma_conn *c = conn;

	if (!c)
		return;
	kvc_destroy(c->h);
	free(c->ops);
	free(c->free);
	free(c);
}

const struct kvb_driver kvb_driver_rdma = {
	.scheme = "rdma",
	.name = "kvcache",
	.connect = rdma_connect,
	.submit = kvb_rdma_submit,
	.submit_many = kvb_rdma_submit_many,
	.poll = kvb_rdma_poll,
	.errname = kvc_err_name,
	.server_cpu = kvb_rdma_server_cpu,
	.server_mem = kvb_rdma_server_mem,
	.server_limit = kvb_rdma_server_limit,
	.max_value = kvb_rdma_max_value,
	.lost = kvb_rdma_lost,
	.round_trips = kvb_rdma_round_trips,
	.close = kvb_rdma_close,
	.max_depth = 64,
};
