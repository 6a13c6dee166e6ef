/* kvbench driver: kvcache through libkvclient's asynchronous interface, so a
 * thread keeps `depth` operations in flight on its one handle. */
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
};

/* Location cache entries per connection: YCSB record counts up to ~64 Ki keep
 * every location cached; bigger ones show the uncached path in the mix. */
#define DRV_CACHE_ENTRIES (1u << 16)
#define DRV_OP_TIMEOUT_MS 10000

static int rdma_connect(const char *host, const char *port, const char *device, unsigned depth, void **out,
			char *err, size_t len)
{
	struct rdma_conn *c = calloc(1, sizeof(*c));
	char server[300];
	struct kvc_opts o;
	int rc;

	if (!c) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	snprintf(server, sizeof(server), "%s:%s", host, port);
	kvc_opts_init(&o);
	o.server = server;
	o.device = device;
	o.depth = depth;
	o.cache_entries = DRV_CACHE_ENTRIES;
	o.op_timeout_ms = DRV_OP_TIMEOUT_MS;
	rc = kvc_create(&o, &c->h, err, len);
	c->ops = calloc(depth, sizeof(*c->ops));
	c->free = calloc(depth, sizeof(*c->free));
	if (rc || !c->ops || !c->free) {
		if (!rc)
			snprintf(err, len, "out of memory");
		kvc_destroy(c->h);
		free(c->ops);
		free(c->free);
		free(c);
		return rc ? rc : -1;
	}
	c->depth = depth;
	for (unsigned i = 0; i < depth; i++)
		c->free[c->nfree++] = &c->ops[i];
	*out = c;
	return 0;
}

static int rdma_submit(void *conn, struct kvb_req *r)
{
	struct rdma_conn *c = conn;
	struct kvc_op *op;
	int rc;

	if (c->nfree == 0)
		return KVC_EAGAIN;
	op = c->free[--c->nfree];
	*op = (struct kvc_op){ .type = r->prim == KVB_GET ? KVC_OP_GET : KVC_OP_PUT, .key = r->key,
			       .key_len = r->key_len, .value = r->value, .value_len = r->value_len,
			       .buf = r->buf, .buf_len = r->buf_len, .user = r };
	rc = kvc_submit(c->h, op);
	if (rc)
		c->free[c->nfree++] = op;
	return rc;
}

static int rdma_poll(void *conn, struct kvb_req **done, unsigned max, int timeout_ms)
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

static int rdma_server_cpu(void *conn, double *seconds)
{
	struct rdma_conn *c = conn;
	struct kvc_server_stats ss;
	int rc = kvc_server_stats(c->h, &ss);

	if (rc == 0)
		*seconds = (double)ss.cpu_ns / 1e9;
	return rc;
}

static int rdma_server_mem(void *conn, uint64_t *bytes)
{
	struct rdma_conn *c = conn;
	struct kvc_server_stats ss;
	int rc = kvc_server_stats(c->h, &ss);

	if (rc == 0)
		*bytes = ss.bytes_used;
	return rc;
}

static void rdma_round_trips(void *conn, uint64_t *ops, uint64_t *rtts, const char **names, unsigned *kinds)
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

static void rdma_close(void *conn)
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
	.submit = rdma_submit,
	.poll = rdma_poll,
	.errname = kvc_err_name,
	.server_cpu = rdma_server_cpu,
	.server_mem = rdma_server_mem,
	.round_trips = rdma_round_trips,
	.close = rdma_close,
	.max_depth = 64,
};
