/* kvbench driver: memcached through libmemcached, ASCII protocol over TCP with
 * TCP_NODELAY. libmemcached's calls are blocking, so a connection has one
 * request in flight; concurrency comes from threads (each its own connection).
 * Requests complete inside submit and wait in a small queue for poll. */
#include <errno.h>
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define QUEUE 64

struct mc_conn {
	memcached_st *mc;
	struct kvb_req *done[QUEUE];
	unsigned head, count;
};

/* Status codes: memcached_return_t values, negated and offset so that they
 * never collide with 0 and KVB_NOTFOUND. */
static int mc_status(memcached_return_t rc)
{
	if (rc == MEMCACHED_SUCCESS)
		return 0;
	if (rc == MEMCACHED_NOTFOUND)
		return KVB_NOTFOUND;
	return -1000 - (int)rc;
}

static const char *mc_errname(int status)
{
	if (status == 0)
		return "OK";
	if (status == KVB_NOTFOUND)
		return "NOT_FOUND";
	return memcached_strerror(NULL, (memcached_return_t)(-(status + 1000)));
}

static int mc_connect(const char *host, const char *port, const char *device, unsigned depth, void **out,
		      char *err, size_t len)
{
	struct mc_conn *c = calloc(1, sizeof(*c));
	memcached_return_t rc;
	char *end;
	long p = strtol(port, &end, 10);

	(void)depth;
	(void)device;
	if (!c || !(c->mc = memcached_create(NULL))) {
		snprintf(err, len, "out of memory");
		free(c);
		return -1;
	}
	memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
	memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 3000);
	memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, 5000000);
	memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, 5000000);
	if (!port[0]) {
		/* Several servers, spread as libmemcached users do: ketama. */
		memcached_server_st *list = memcached_servers_parse(host);

		rc = list ? memcached_server_push(c->mc, list) : MEMCACHED_INVALID_ARGUMENTS;
		if (list)
			memcached_server_list_free(list);
		if (rc == MEMCACHED_SUCCESS)
			rc = memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
						    MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
	} else {
		rc = *end || p <= 0 || p > 65535 ? MEMCACHED_INVALID_ARGUMENTS
						 : memcached_server_add(c->mc, host, (in_port_t)p);
	}
	if (rc == MEMCACHED_SUCCESS)
		rc = memcached_version(c->mc); /* a real round trip: is anyone there? */
	if (rc != MEMCACHED_SUCCESS) {
		memcached_return_t why = memcached_last_error(c->mc);
		int eno = memcached_last_error_errno(c->mc);

		snprintf(err, len, "memcached at %s:%s unreachable: %s%s%s%s (is memcached running there?)", host,
			 port, memcached_strerror(c->mc, why == MEMCACHED_SUCCESS ? rc : why), eno ? " (" : "",
			 eno ? strerror(eno) : "", eno ? ")" : "");
		memcached_free(c->mc);
		free(c);
		return -1;
	}
	*out = c;
	return 0;
}

static int mc_submit(void *conn, struct kvb_req *r)
{
	struct mc_conn *c = conn;
	memcached_return_t rc;

	if (c->count == QUEUE)
		return -EAGAIN;
	if (r->prim == KVB_GET) {
		size_t vlen = 0;
		uint32_t flags;
		char *v = memcached_get(c->mc, r->key, r->key_len, &vlen, &flags, &rc);

		if (v) {
			r->value_len = vlen;
			if (vlen > r->buf_len) /* as the rdma driver's KVC_ETRUNC: never a silent cut */
				rc = MEMCACHED_E2BIG;
			else
				memcpy(r->buf, v, vlen);
			free(v);
		}
	} else if (r->prim == KVB_DEL) {
		rc = memcached_delete(c->mc, r->key, r->key_len, 0);
	} else {
		/* memcached counts whole seconds: round up, never expire early. */
		rc = memcached_set(c->mc, r->key, r->key_len, r->value, r->value_len,
				   (time_t)((r->ttl_ms + 999u) / 1000u), 0);
	}
	r->status = mc_status(rc);
	c->done[(c->head + c->count++) % QUEUE] = r;
	return 0;
}

static int mc_poll(void *conn, struct kvb_req **done, unsigned max, int timeout_ms)
{
	struct mc_conn *c = conn;
	unsigned n = 0;

	(void)timeout_ms; /* everything submitted has already finished */
	while (n < max && c->count > 0) {
		done[n++] = c->done[c->head];
		c->head = (c->head + 1) % QUEUE;
		c->count--;
	}
	return (int)n;
}

/* The server is not there any more (libmemcached has marked it dead or cannot
 * reach it): every later request would fail the same way. */
static int mc_lost(int status)
{
	if (kvb_multi_target) /* one of several: its keys fail, the run goes on */
		return 0;
	switch (-(status + 1000)) {
	case MEMCACHED_CONNECTION_FAILURE:
	case MEMCACHED_SERVER_MARKED_DEAD:
	case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
		return status <= -1000;
	}
	return 0;
}

/* memcached reports rusage_user / rusage_system as "seconds.microseconds". */
static int mc_server_cpu(void *conn, double *seconds)
{
	struct mc_conn *c = conn;
	memcached_return_t rc;
	memcached_stat_st *st = memcached_stat(c->mc, NULL, &rc);
	double total = 0;

	if (!st || rc != MEMCACHED_SUCCESS) {
		if (st)
			memcached_stat_free(c->mc, st);
		return -1;
	}
	for (int i = 0; i < 2; i++) {
		char *v = memcached_stat_get_value(c->mc, st, i ? "rusage_system" : "rusage_user", &rc);

		if (v)
			total += strtod(v, NULL);
		free(v);
	}
	memcached_stat_free(c->mc, st);
	*seconds = total;
	return 0;
}

/* memcached's -m: `stats` limit_maxbytes. */
static int mc_server_limit(void *conn, uint64_t *bytes)
{
	struct mc_conn *c = conn;
	memcached_return_t rc;
	memcached_stat_st *st = memcached_stat(c->mc, NULL, &rc);
	char *v = NULL, *end = NULL;

	if (st && rc == MEMCACHED_SUCCESS)
		v = memcached_stat_get_value(c->mc, st, "limit_maxbytes", &rc);
	if (v)
		*bytes = strtoull(v, &end, 10);
	rc = v && end != v ? MEMCACHED_SUCCESS : MEMCACHED_FAILURE;
	free(v);
	if (st)
		memcached_stat_free(c->mc, st);
	return rc == MEMCACHED_SUCCESS ? 0 : -1;
}

/* memcached's memory for items: the slab pages it allocated (`stats slabs`
 * total_malloced) plus its hash table (`stats` hash_bytes). */
struct mc_mem {
	uint64_t bytes;
	int found;
};

static memcached_return_t mc_stat_cb(const memcached_instance_st *server, const char *key, size_t key_length,
				     const char *value, size_t value_length, void *context)
{
	struct mc_mem *m = context;
	char buf[32];

	(void)server;
	if ((key_length == 14 && memcmp(key, "total_malloced", 14) == 0) ||
	    (key_length == 10 && memcmp(key, "hash_bytes", 10) == 0)) {
		snprintf(buf, sizeof(buf), "%.*s", (int)value_length, value);
		m->bytes += strtoull(buf, NULL, 10);
		m->found++;
	}
	return MEMCACHED_SUCCESS;
}

static int mc_server_mem(void *conn, uint64_t *bytes)
{
	struct mc_conn *c = conn;
	struct mc_mem m = { 0 };

	if (memcached_stat_execute(c->mc, "slabs", mc_stat_cb, &m) != MEMCACHED_SUCCESS ||
	    memcached_stat_execute(c->mc, NULL, mc_stat_cb, &m) != MEMCACHED_SUCCESS || m.found < 2)
		return -1;
	*bytes = m.bytes;
	return 0;
}

static void mc_close(void *conn)
{
	struct mc_conn *c = conn;

	if (!c)
		return;
	memcached_free(c->mc);
	free(c);
}

const struct kvb_driver kvb_driver_memcached = {
	.scheme = "memcached",
	.name = "memcached",
	.connect = mc_connect,
	.submit = mc_submit,
	.poll = mc_poll,
	.errname = mc_errname,
	.server_cpu = mc_server_cpu,
	.server_mem = mc_server_mem,
	.server_limit = mc_server_limit,
	.lost = mc_lost,
	.round_trips = NULL,
	.close = mc_close,
	.max_depth = 1,
};
