/* kvbench --cpu-per-op (see cpuop.h). One thread, one connection, `depth`
 * requests in flight. Key names and the key sequence are made before the
 * clock starts, so a phase's CPU time is the library's (and the in-process
 * transport's) plus a loop that copies a key and hands a request over. */
#include "cpuop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "hugemap.h"
#include "ycsb_gen.h"

#define PREFETCH 16

struct ctx {
	const struct kvb_cpuop_cfg *c;
	void *conn;
	/* records x KVB_KEY_NAME_CAP: the name, its length in the last byte (one
	 * cache line holds both; names are at most KVB_KEY_NAME_MAX bytes) */
	char *keys;
	size_t keys_len; /* its mapping (hugemap.h) */
	uint32_t *seq; /* operations key indices, uniform over the records */
	int lost_status;
	char *value, *bufs;
	struct kvb_req *reqs, **free;
	unsigned nfree;
};

static void rt_snapshot(struct ctx *x, uint64_t *ops, struct kvb_cpuop_result *r)
{
	uint64_t rtts[KVB_CPUOP_KINDS];
	unsigned kinds = 0;

	memset(ops, 0, KVB_CPUOP_KINDS * sizeof(*ops));
	if (x->c->drv->round_trips)
		x->c->drv->round_trips(x->conn, ops, rtts, r->rt_names, &kinds);
	r->rt_kinds = kinds < KVB_CPUOP_KINDS ? kinds : KVB_CPUOP_KINDS;
}

/* Count finished requests and free them; 1 when one says the connection is gone. */
static int account(struct ctx *x, struct kvb_cpuop_phase *ph, struct kvb_req **done, int n, uint64_t *finished)
{
	const struct kvb_driver *d = x->c->drv;
	int lost = 0;

	for (int i = 0; i < n; i++) {
		int st = done[i]->status;

		if (st) {
			ph->failed++;
			if (!ph->first_error)
				ph->first_error = st;
			if (d->lost && d->lost(st)) {
				lost = 1;
				x->lost_status = st;
			}
		}
		x->free[x->nfree++] = done[i];
		(*finished)++;
	}
	return lost;
}

/* n requests of prim over keys seq[0..n) (keys 0..n-1 when seq is NULL),
 * depth in flight. -1 with err when the connection is lost. prim 0: the same
 * loop with every request finished at once, without the library, to show
 * what the loop itself costs. */
static int phase(struct ctx *x, int prim, uint64_t n, const uint32_t *seq, struct kvb_cpuop_phase *ph,
		 struct kvb_cpuop_result *r, char *err, size_t errlen)
{
	const struct kvb_driver *d = x->c->drv;
	uint64_t issued = 0, finished = 0, before[KVB_CPUOP_KINDS], cpu0, wall0, ticks0, nic0;
	struct kvb_req *done[64];
	int got, lost = 0;

	memset(ph, 0, sizeof(*ph));
	rt_snapshot(x, before, r);
	nic0 = d->transport_ticks ? d->transport_ticks(x->conn) : 0;
	ticks0 = kvi_ticks();
	wall0 = kvi_clock_ns(CLOCK_MONOTONIC);
	cpu0 = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	while (finished < n && !lost) {
		/* Hand over as many as there is room for, together (the
		 * library hashes them and fetches their cached locations
		 * before it starts them: kvc_submit_many). */
		while (issued < n && x->nfree && !lost) {
			struct kvb_req *batch[64];
			unsigned k = 0;
			int started;

			while (issued + k < n && x->nfree && k < 64) {
				struct kvb_req *q = x->free[--x->nfree];
				uint64_t i = issued + k;
				const char *key = x->keys + (seq ? seq[i] : i) * KVB_KEY_NAME_CAP;

				/* The key table is larger than the caches: fetch the
				 * name of a request further on now, so the loop does
				 * not wait on it. */
				if (seq && i + PREFETCH < n)
					__builtin_prefetch(x->keys + (uint64_t)seq[i + PREFETCH] * KVB_KEY_NAME_CAP);
				q->prim = prim;
				q->key_len = (unsigned char)key[KVB_KEY_NAME_CAP - 1];
				memcpy(q->key, key, q->key_len);
				q->value_len = prim == KVB_PUT ? x->c->value_size : 0;
				q->status = 0;
				batch[k++] = q;
			}
			issued += k;
			if (!prim) { /* the loop alone: each finished at once */
				account(x, ph, batch, (int)k, &finished);
				continue;
			}
			started = kvb_submit_many(d, x->conn, batch, k);
			/* The first one refused is a finished failure; the rest
			 * were never handed over: they go back. */
			if ((unsigned)started < k) {
				lost = account(x, ph, batch + started, 1, &finished);
				for (unsigned j = (unsigned)started + 1; j < k; j++)
					x->free[x->nfree++] = batch[j];
				issued -= k - (unsigned)started - 1;
			}
		}
		got = lost || !prim ? 0 : d->poll(x->conn, done, 64, 100);
		if (got < 0) {
			x->lost_status = got;
			lost = 1;
		} else {
			lost |= account(x, ph, done, got, &finished);
		}
	}
	ph->cpu_ns = kvi_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	ph->wall_ns = kvi_clock_ns(CLOCK_MONOTONIC) - wall0;
	ph->ops = finished;
	if (d->transport_ticks) {
		/* Ticks to ns by the phase's own ratio of the two clocks. */
		uint64_t ticks = kvi_ticks() - ticks0, nic = d->transport_ticks(x->conn) - nic0;

		ph->transport_ns = ticks ? (uint64_t)((double)nic * (double)ph->wall_ns / (double)ticks) : 0;
		/* A wall-clock share: the thread preempted inside the
		 * transport counts there, not in cpu_ns. Never more than all. */
		if (ph->transport_ns > ph->cpu_ns)
			ph->transport_ns = ph->cpu_ns;
	}
	if (lost) {
		snprintf(err, errlen, "connection to %s://%s lost: %s", d->scheme, x->c->host, d->errname(x->lost_status));
		return -1;
	}
	rt_snapshot(x, ph->rt_ops, r);
	for (unsigned k = 0; k < r->rt_kinds; k++)
		ph->rt_ops[k] -= before[k];
	return 0;
}

static int setup(struct ctx *x, char *err, size_t errlen)
{
	const struct kvb_cpuop_cfg *c = x->c;
	struct kvb_uniform u;
	struct kvb_rng rng;

	/* Read at random: on hugepages where the system allows, so that the
	 * loop's reads of key names are not TLB misses charged to the
	 * library's operations. */
	x->keys_len = (c->records * KVB_KEY_NAME_CAP + 4095) & ~(size_t)4095;
	x->keys = kvi_map_huge(x->keys_len);
	x->seq = malloc(c->operations * sizeof(*x->seq));
	x->value = malloc(c->value_size);
	x->bufs = malloc((size_t)c->depth * c->value_size);
	x->reqs = calloc(c->depth, sizeof(*x->reqs));
	x->free = calloc(c->depth, sizeof(*x->free));
	if (!x->keys || !x->seq || !x->value || !x->bufs || !x->reqs || !x->free) {
		snprintf(err, errlen, "out of memory for %llu keys and %llu operations",
			 (unsigned long long)c->records, (unsigned long long)c->operations);
		return -1;
	}
	for (uint64_t k = 0; k < c->records; k++) {
		char *name = x->keys + k * KVB_KEY_NAME_CAP;

		name[KVB_KEY_NAME_CAP - 1] = (char)kvb_key_name(k, 0, 1, name, KVB_KEY_NAME_MAX + 1);
	}
	kvb_rng_seed(&rng, c->seed);
	kvb_uniform_init(&u, 0, c->records - 1);
	for (uint64_t i = 0; i < c->operations; i++)
		x->seq[i] = (uint32_t)kvb_uniform_next(&u, &rng);
	for (uint32_t i = 0; i < c->value_size; i++)
		x->value[i] = (char)('a' + i % 26);
	for (unsigned i = 0; i < c->depth; i++) {
		x->reqs[i].value = x->value;
		x->reqs[i].buf = x->bufs + (size_t)i * c->value_size;
		x->reqs[i].buf_len = c->value_size;
		x->free[x->nfree++] = &x->reqs[i];
	}
	return 0;
}

int kvb_cpu_per_op(const struct kvb_cpuop_cfg *c, struct kvb_cpuop_result *r, char *err, size_t errlen)
{
	struct ctx x = { .c = c };
	struct kvb_cpuop_phase warm;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	if (c->drv->connect(c->host, c->port, NULL, c->depth, &x.conn, err, errlen))
		return -1;
	if (c->drv->max_value && c->value_size > c->drv->max_value(x.conn, KVB_KEY_NAME_MAX)) {
		snprintf(err, errlen, "--value-size %u is more than the target %s://%s takes: give at most %zu",
			 c->value_size, c->drv->scheme, c->host, c->drv->max_value(x.conn, KVB_KEY_NAME_MAX));
		rc = -2;
		goto out;
	}
	if (setup(&x, err, errlen))
		goto out;
	/* Load every key, then read each once untimed (first touches of the
	 * client's location cache and of the memory), then the timed phases. */
	if (phase(&x, KVB_PUT, c->records, NULL, &r->load, r, err, errlen) ||
	    phase(&x, KVB_GET, c->records, NULL, &warm, r, err, errlen) ||
	    phase(&x, 0, c->operations, x.seq, &r->harness, r, err, errlen) ||
	    ((c->phases & KVB_CPUOP_GET) && phase(&x, KVB_GET, c->operations, x.seq, &r->get, r, err, errlen)) ||
	    ((c->phases & KVB_CPUOP_PUT) && phase(&x, KVB_PUT, c->operations, x.seq, &r->put, r, err, errlen)))
		goto out;
	rc = 0;
out:
	c->drv->close(x.conn);
	kvi_unmap_huge(x.keys, x.keys_len);
	free(x.seq);
	free(x.value);
	free(x.bufs);
	free(x.reqs);
	free(x.free);
	return rc;
}
