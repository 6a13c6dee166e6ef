/* kvbench --micro and --raw: latency of single operations, one at a time.
 *
 * --micro times each kind of key-value operation separately through
 * libkvclient (PUT insert, GET hit without and with a cached location, GET
 * miss, a multi-get, PUT update without and with the cache, memcached's
 * add / replace / touch / gat / incr / append, DELETE) with the round trips
 * the library counted; --raw times the one-sided verbs doorbells underneath, for
 * comparison with perftest on the same device. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "clock.h"
#include "driver.h"
#include "hist.h"
#include "kvclient.h"
#include "layout.h"
#include "micro.h"
#include "rmem_verbs.h"

static void print_header(void)
{
	printf("%-18s %9s %9s %9s %9s %9s %9s %7s %8s\n", "op", "count", "p50_us", "p90_us", "p99_us", "p99.9_us",
	       "max_us", "rtt/op", "sleep/op");
}

/* sleeps: the waits for a completion that went to sleep (the waiting
 * policy, rmem.h kvi_rmem_spin_ns) during the row's operations. */
static void print_row(const char *name, const struct kvb_hist *hs, double rtt_per_op, uint64_t sleeps)
{
	printf("%-18s %9llu %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %8.2f\n", name, (unsigned long long)hs->count,
	       kvb_hist_quantile(hs, 0.5) / 1e3, kvb_hist_quantile(hs, 0.9) / 1e3,
	       kvb_hist_quantile(hs, 0.99) / 1e3, kvb_hist_quantile(hs, 0.999) / 1e3, hs->max / 1e3,
	       rtt_per_op, hs->count ? (double)sleeps / (double)hs->count : 0.0);
}

/* One doorbell of raw operations, spelled as space-separated ops: R READ, W
 * WRITE, C an 8-byte CAS; a READ's or WRITE's size follows its letter: a
 * number of bytes, s the --size, o the object a micro operation writes (a
 * "kvbench-" key of 18 bytes and a --size value, with its header), k that
 * object's header and key. */
struct raw_pattern {
	const char *name;
	const char *ops;
	/* 1: every READ of its first doorbell reads a random bucket of the
	 * server's home index (as a GET does) instead of walking our own segment */
	int index;
};

/* Shapes at --size: "R s R s" is a GET miss's, "C Rs C Rs" a PUT's lock step. */
static const struct raw_pattern raw_patterns[] = {
	{ "READ", "Rs" },
	{ "WRITE", "Ws" },
	{ "CAS", "C" },
	{ "READ+READ", "Rs Rs" },
	{ "(CAS+READ)x2", "C Rs C Rs" },
	{ "WRITE+CASx2", "Ws C C" },
};

/* The data path's own doorbells, with its sizes (client/op_get.c,
 * client/op_write.c), for the micro operations' items: what each --micro
 * operation is made of (deploy/compare adds them up). A cached GET reads
 * its bucket up to the slot, 8 x (idx + 2) bytes: 136 at the middle slot. */
static const struct raw_pattern path_patterns[] = {
	{ "buckets", "R256 R256" },             /* GET miss; a GET's first doorbell */
	{ "object", "Ro" },                     /* a GET's second */
	{ "cached_get", "R136 Ro" },            /* a GET with a cached location */
	{ "lock", "Wo C R256 C R256" },         /* a PUT: its object, both locks, both buckets */
	{ "key_check", "Rk" },                  /* an update: the matching object's key */
	{ "commit", "W8 C C" },                /* the slot, both locks released */
	{ "lock_cached", "Wo C R256 Rk" },      /* a PUT with a cached location */
	{ "commit_cached", "W8 C" },
	/* the GET miss's doorbell where a GET reads it: two random buckets of
	 * the index, not two neighbours in a segment (memory locality, at the
	 * responder, is part of a doorbell's cost on Soft-RoCE) */
	{ "index_buckets", "R256 R256", 1 },
	/* a first GET of an item since it was written marks it read (a CAS on
	 * its access word, client/post.c), on the next operation's doorbell */
	{ "index_buckets_mark", "R256 R256 C", 1 },
	/* a GET hit's two doorbells back to back ('|': the next doorbell is
	 * rung once the one before completed) */
	{ "get_chain", "R256 R256 | Ro", 1 },
	{ "put_chain", "Wo C R256 C R256 | W8 C C" },
};

#define MICRO_KEY_LEN 18 /* "kvbench-" and 10 digits */

/* The bytes of a pattern op's size token at --size. */
static uint32_t op_size(const char *t, size_t len, uint32_t size)
{
	uint64_t obj = kvi_obj_len(MICRO_KEY_LEN, size, 0);

	if (len == 1 && t[0] == 's')
		return size;
	if (len == 1 && t[0] == 'o')
		return (uint32_t)kvi_obj_footprint(obj);
	if (len == 1 && t[0] == 'k')
		return (uint32_t)(sizeof(struct kvi_obj_hdr) + MICRO_KEY_LEN);
	return (uint32_t)strtoul(t, NULL, 10);
}

/* Parse a pattern: kinds and sizes of at most 8 ops; their count. */
static size_t parse_pattern(const char *p, uint32_t size, char kind[8], uint32_t len[8])
{
	size_t n = 0;

	while (*p && n < 8) {
		size_t l = strcspn(p, " ");

		kind[n] = p[0];
		len[n] = p[0] == 'C' ? 8 : p[0] == '|' ? 0 : op_size(p + 1, l - 1, size);
		n++;
		p += l;
		p += strspn(p, " ");
	}
	return n;
}

/* Local buffer and segment room any pattern needs at --size. */
static uint64_t pattern_room(uint32_t size)
{
	return 8 * (320 + ((kvi_obj_len(MICRO_KEY_LEN, size, 0) + 63) & ~63ull) + ((uint64_t)size + 63));
}

/* A raw connection is a client of the server like any other: it must renew
 * its lease (server/members.h "Leases") or be expelled mid-run. */
struct raw_lease {
	uint64_t epoch;    /* the index epoch of the welcome (raw runs never see a resize) */
	uint64_t every_ns; /* a quarter of the lease; 0: no leases */
	uint64_t last_ns;
};

static int raw_renew(struct kvi_rmem *rm, struct raw_lease *l)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_LEASE_RENEW, .lease_renew = { .epoch = l->epoch } }, resp = { 0 };
	uint64_t now = kvi_mono_ns();
	int rc;

	if (!l->every_ns || now - l->last_ns < l->every_ns)
		return 0;
	rc = kvi_rmem_ctrl_call(rm, &req, &resp, 5000);
	if (rc == 0 && resp.type != KVI_CTRL_LEASE)
		rc = resp.status ? resp.status : KVC_EPROTO;
	l->last_ns = now;
	return rc;
}

/* Time o->ops doorbells of one pattern, each one round trip. */
static int run_pattern(struct kvi_rmem *rm, const struct kvb_micro_opts *o, const struct raw_pattern *p,
		       uint64_t seg_off, uint64_t seg_size, struct kvb_hist *hs, struct raw_lease *lease,
		       const struct kvi_geometry *geo)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	unsigned char *lbuf = kvi_rmem_lbuf(rm, NULL);
	char kind[8];
	uint32_t len[8];
	size_t n = parse_pattern(p->ops, o->size, kind, len), at[8], total = 0;
	uint64_t span, sleeps = rm->sleeps;

	for (size_t j = 0; j < n; j++) {
		at[j] = total;
		total += ((size_t)len[j] + 63) & ~(size_t)63;
	}
	/* From the extent's first 64-byte boundary: extents hold 4-byte aligned
	 * objects, so one may start off an 8-byte boundary, where a CAS is
	 * refused. */
	{
		uint64_t base = (seg_off + 63) & ~(uint64_t)63;

		if (base - seg_off + total > seg_size) {
			fprintf(stderr, "kvbench: %s: the granted extent is too small\n", p->name);
			return KVC_ERANGE;
		}
		seg_size -= base - seg_off;
		seg_off = base;
	}
	span = seg_size - total;
	for (uint64_t i = 0; i < o->ops; i++) {
		/* Walk the segment so every doorbell touches fresh cache lines at the server. */
		uint64_t off = seg_off + (((i * 4096u) % (span + 1)) & ~(uint64_t)63);
		struct kvi_rop ops[8];
		uint64_t t0;
		int rc;

		for (size_t j = 0; j < n; j++) {
			uint64_t r = off + at[j];

			if (p->index && !memchr(kind, '|', j)) { /* xorshift: a random bucket of the home index */
				rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
				r = geo->index_off + (rng % geo->bucket_count) * KVI_BUCKET_SIZE;
			}
			unsigned char *l = lbuf + at[j];

			if (kind[j] == '|')
				ops[j] = (struct kvi_rop){ 0 }; /* a doorbell ends here */
			else if (kind[j] == 'R')
				ops[j] = kvi_rop_read(r, l, len[j]);
			else if (kind[j] == 'W')
				ops[j] = kvi_rop_write(r, l, len[j]);
			else
				ops[j] = kvi_rop_cas(r, (uint64_t *)(void *)l, i, i + 1);
		}
		rc = raw_renew(rm, lease); /* between doorbells, untimed */
		if (rc == 0) {
			size_t from = 0;

			t0 = kvi_mono_ns();
			for (size_t j = 0; j <= n && rc == 0; j++) /* each doorbell after the one before */
				if (j == n || kind[j] == '|') {
					rc = kvi_rmem_exec(rm, ops + from, (unsigned)(j - from), 5000);
					from = j + 1;
				}
			kvb_hist_record(hs, kvi_mono_ns() - t0);
		}
		if (rc) {
			fprintf(stderr, "kvbench: %s failed after %" PRIu64 " doorbells: %s\n", p->name, i,
				kvc_strerror(rc));
			return rc;
		}
	}
	print_row(p->name, hs, 1.0, rm->sleeps - sleeps);
	return 0;
}

int kvb_raw(const struct kvb_micro_opts *o)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	struct kvb_hist *hs;
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seg_req = { .need = 1 } }, resp = { 0 };
	struct raw_lease lease;
	uint8_t secret[KVI_AUTH_SECRET_MAX];
	size_t secret_len = 0;
	const char *secret_file = kvb_rdma_secret_file ? kvb_rdma_secret_file : getenv("KVC_SECRET_FILE");
	int rc;

	if (secret_file && *secret_file && kvi_auth_load_secret(secret_file, secret, &secret_len, &e)) {
		fprintf(stderr, "kvbench: %s\n", e.msg);
		return 1;
	}
	rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = o->host, .port = o->port,
							      .device = o->device,
							      .lbuf_size = (size_t)pattern_room(o->size),
							      .timeout_ms = 5000,
							      .secret = secret_len ? secret : NULL,
							      .secret_len = secret_len },
				    &rm, &w, &e);
	kvi_auth_wipe(secret, sizeof(secret));
	if (rc) {
		fprintf(stderr, "kvbench: %s\n", e.msg);
		return 1;
	}
	/* Raw WRITEs and CASes go only to memory the server granted to us: a
	 * segment of our own, like the data path's objects. */
	rc = kvi_rmem_ctrl_call(rm, &req, &resp, 5000);
	if (rc == 0 && resp.type != KVI_CTRL_SEG_GRANT)
		rc = resp.status ? resp.status : KVC_EPROTO;
	hs = malloc(sizeof(*hs));
	if (rc || !hs || resp.seg_grant.len < pattern_room(o->size) ||
	    resp.seg_grant.off + resp.seg_grant.len > rm->region_size) {
		fprintf(stderr, "kvbench: %s\n", rc ? kvc_strerror(rc) : !hs ? "out of memory"
							 : "--size is larger than a segment");
		free(hs);
		kvi_rmem_destroy(rm);
		return 1;
	}
	if (kvb_rdma_busy_poll_us != INT_MIN) /* the same waiting as --micro's library calls */
		rm->spin_us = kvb_rdma_busy_poll_us;
	lease = (struct raw_lease){ .epoch = w.geo.epoch, .every_ns = (uint64_t)w.lease_ms * 250000u,
				    .last_ns = kvi_mono_ns() };
	printf("kvbench: rdma://%s:%s via %s, client id %u, region %" PRIu64 " MiB, raw %u-byte verbs operations\n",
	       o->host, o->port, kvi_rmem_verbs_device(rm), w.client_id, w.geo.region_size >> 20, o->size);
	print_header();
	for (size_t k = 0; k < sizeof(raw_patterns) / sizeof(raw_patterns[0]) && rc == 0; k++) {
		kvb_hist_init(hs);
		rc = run_pattern(rm, o, &raw_patterns[k], resp.seg_grant.off, resp.seg_grant.len, hs, &lease, &w.geo);
	}
	if (rc == 0)
		printf("data path doorbells, with its sizes for --micro's items (%u-byte values):\n", o->size);
	for (size_t k = 0; k < sizeof(path_patterns) / sizeof(path_patterns[0]) && rc == 0; k++) {
		kvb_hist_init(hs);
		rc = run_pattern(rm, o, &path_patterns[k], resp.seg_grant.off, resp.seg_grant.len, hs, &lease, &w.geo);
	}
	free(hs);
	kvi_rmem_destroy(rm);
	return rc ? 1 : 0;
}

/* ---- key-value operations through libkvclient ------------------------- */

/* What a phase does to each key: a kvc_op type, or one of these. */
enum { PH_ADD = 100, PH_REPLACE, PH_APPEND, PH_MGET };

struct phase {
	const char *name;
	int op;         /* enum kvc_op_type, or PH_ */
	int use_cache;  /* 1: the handle with the location cache */
	const char *keys; /* key prefix: "kvbench-" holds values, "kvbench-ctr-" counters,
			   * others were never written */
	int expect;     /* expected status */
	int stat_kind;  /* enum kvc_stat_kind whose round trips are reported */
	int warm;       /* 1: one unmeasured GET per key first (fills the location cache);
			 * 2: one unmeasured PUT of "0" (a counter) */
};

#define MGET_BATCH 16

static const struct phase phases[] = {
	{ "put_insert", KVC_OP_PUT, 0, "kvbench-", 0, KVC_STAT_PUT_INSERT, 0 },
	/* the first read of each item since it was written: the GET marks it
	 * read (an access-word CAS on the next doorbell, client/post.c) */
	{ "get_hit", KVC_OP_GET, 0, "kvbench-", 0, KVC_STAT_GET_HIT, 0 },
	/* the same items read again: no mark */
	{ "get_hit_again", KVC_OP_GET, 0, "kvbench-", 0, KVC_STAT_GET_HIT, 0 },
	{ "get_hit_cached", KVC_OP_GET, 1, "kvbench-", 0, KVC_STAT_GET_HIT_CACHED, 1 },
	{ "get_miss", KVC_OP_GET, 0, "kvbench-absent-", KVC_ENOTFOUND, KVC_STAT_GET_MISS, 0 },
	{ "mget_16", PH_MGET, 1, "kvbench-", 0, KVC_STAT_GET_HIT_CACHED, 1 },
	{ "put_update", KVC_OP_PUT, 0, "kvbench-", 0, KVC_STAT_PUT_UPDATE, 0 },
	{ "put_update_cached", KVC_OP_PUT, 1, "kvbench-", 0, KVC_STAT_PUT_UPDATE_CACHED, 1 },
	{ "add", PH_ADD, 0, "kvbench-add-", 0, KVC_STAT_PUT_INSERT, 0 },
	{ "add_refused", PH_ADD, 0, "kvbench-", KVC_ENOTSTORED, KVC_STAT_STORE_REFUSED, 0 },
	{ "replace_cached", PH_REPLACE, 1, "kvbench-", 0, KVC_STAT_PUT_UPDATE_CACHED, 1 },
	{ "touch", KVC_OP_TOUCH, 0, "kvbench-", 0, KVC_STAT_RMW, 0 },
	{ "touch_cached", KVC_OP_TOUCH, 1, "kvbench-", 0, KVC_STAT_RMW_CACHED, 1 },
	{ "gat", KVC_OP_GAT, 0, "kvbench-", 0, KVC_STAT_RMW, 0 },
	{ "gat_cached", KVC_OP_GAT, 1, "kvbench-", 0, KVC_STAT_RMW_CACHED, 1 },
	{ "incr", KVC_OP_INCR, 0, "kvbench-ctr-", 0, KVC_STAT_RMW, 2 },
	{ "incr_cached", KVC_OP_INCR, 1, "kvbench-ctr-", 0, KVC_STAT_RMW_CACHED, 1 },
	{ "incr_miss", KVC_OP_INCR, 0, "kvbench-absent-", KVC_ENOTFOUND, KVC_STAT_RMW_MISS, 0 },
	{ "append", PH_APPEND, 0, "kvbench-", 0, KVC_STAT_RMW, 0 },
	{ "append_cached", PH_APPEND, 1, "kvbench-", 0, KVC_STAT_RMW_CACHED, 1 },
	{ "delete", KVC_OP_DELETE, 0, "kvbench-", 0, KVC_STAT_DELETE, 0 },
};

/* MGET_BATCH GETs of the keys from index i on, in one kvc_run_batch, into
 * MGET_BATCH buffers of vlen bytes at val: the first failure, or 0. */
static int mget(kvc_t *h, const char *prefix, uint64_t i, char *val, size_t vlen)
{
	char key[MGET_BATCH][48];
	struct kvc_op op[MGET_BATCH], *ops[MGET_BATCH];
	int rc;

	for (unsigned k = 0; k < MGET_BATCH; k++) {
		snprintf(key[k], sizeof(key[k]), "%s%010" PRIu64, prefix, i + k);
		op[k] = (struct kvc_op){ .type = KVC_OP_GET, .key = key[k], .key_len = strlen(key[k]),
					 .buf = val + k * vlen, .buf_len = vlen };
		ops[k] = &op[k];
	}
	rc = kvc_run_batch(h, ops, MGET_BATCH);
	for (unsigned k = 0; k < MGET_BATCH && rc == 0; k++)
		if (op[k].status && op[k].status != KVC_ETRUNC)
			rc = op[k].status;
	return rc;
}

static int kv_op(kvc_t *h, const struct phase *p, const char *key, char *val, size_t vlen)
{
	size_t got;
	uint64_t v;

	switch (p->op) {
	case KVC_OP_PUT:
		return kvc_put(h, key, strlen(key), val, vlen, 0);
	case KVC_OP_GET:
		return kvc_get(h, key, strlen(key), val, vlen, &got);
	case KVC_OP_TOUCH:
		return kvc_touch(h, key, strlen(key), 0);
	case KVC_OP_GAT:
		return kvc_gat(h, key, strlen(key), 0, val, vlen, &got, NULL, NULL);
	case KVC_OP_INCR:
		return kvc_incr(h, key, strlen(key), 1, &v);
	case PH_ADD:
		return kvc_store(h, KVC_STORE_ADD, key, strlen(key), val, vlen, 0, 0, 0, NULL);
	case PH_REPLACE:
		return kvc_store(h, KVC_STORE_REPLACE, key, strlen(key), val, vlen, 0, 0, 0, NULL);
	case PH_APPEND: /* one byte: the values stay about o->size */
		return kvc_store(h, KVC_STORE_APPEND, key, strlen(key), val, 1, 0, 0, 0, NULL);
	default:
		return kvc_delete(h, key, strlen(key));
	}
}

static int run_phase(kvc_t *h, const struct kvb_micro_opts *o, const struct phase *p, char *val, struct kvb_hist *hs)
{
	struct kvc_stats before, after;
	char key[48];
	uint64_t ops;

	for (uint64_t i = 0; p->warm && i < o->ops; i++) {
		size_t got;

		snprintf(key, sizeof(key), "%s%010" PRIu64, p->keys, i);
		if (p->warm == 2 && kvc_put(h, key, strlen(key), "0", 1, 0)) {
			fprintf(stderr, "kvbench: %s: cannot store counter %s\n", p->name, key);
			return 1;
		}
		kvc_get(h, key, strlen(key), val, o->size, &got);
	}
	kvc_get_stats(h, &before);
	for (uint64_t i = 0; p->op == PH_MGET ? i + MGET_BATCH <= o->ops : i < o->ops;
	     i += p->op == PH_MGET ? MGET_BATCH : 1) {
		uint64_t t0;
		int rc;

		snprintf(key, sizeof(key), "%s%010" PRIu64, p->keys, i);
		t0 = kvi_mono_ns();
		rc = p->op == PH_MGET ? mget(h, p->keys, i, val, o->size) : kv_op(h, p, key, val, o->size);
		kvb_hist_record(hs, kvi_mono_ns() - t0);
		if (rc != p->expect) {
			fprintf(stderr, "kvbench: %s of %s failed: %s\n", p->name, key, kvc_strerror(rc));
			return 1;
		}
	}
	kvc_get_stats(h, &after);
	ops = after.ops[p->stat_kind] - before.ops[p->stat_kind];
	print_row(p->name, hs,
		  ops ? (double)(after.round_trips[p->stat_kind] - before.round_trips[p->stat_kind]) / (double)ops
		      : 0.0,
		  after.wait_sleeps - before.wait_sleeps);
	return 0;
}

int kvb_micro(const struct kvb_micro_opts *o)
{
	char server[300], err[400];
	struct kvc_opts ko;
	kvc_t *h[2] = { NULL, NULL };
	struct kvb_hist *hs = malloc(sizeof(*hs));
	char *val = malloc((size_t)o->size * MGET_BATCH); /* MGET_BATCH values at once */
	int rc = 0;

	if (!hs || !val) {
		fprintf(stderr, "kvbench: out of memory\n");
		rc = 1;
		goto clean_handles;
	}
	memset(val, 'v', o->size);
	snprintf(server, sizeof(server), "%s:%s", o->host, o->port);
	kvc_opts_init(&ko);
	ko.server = server;
	ko.device = o->device;
	ko.secret_file = kvb_rdma_secret_file;
	ko.depth = 1;
	if (kvb_rdma_busy_poll_us != INT_MIN)
		ko.busy_poll_us = kvb_rdma_busy_poll_us;
	for (int i = 0; i < 2; i++) {
		ko.cache_entries = i ? 65536 : 0; /* h[0]: no location cache; h[1]: with */
		rc = kvc_create(&ko, &h[i], err, sizeof(err));
		if (rc) {
			fprintf(stderr, "kvbench: %s\n", err);
			rc = 1;
			goto clean_handles;
		}
	}
	if (o->size > kvc_max_value(h[0], 24)) {
		fprintf(stderr, "kvbench: --size %u is larger than the server accepts (%zu)\n", o->size,
			kvc_max_value(h[0], 24));
		rc = 1;
		goto clean_handles;
	}
	printf("kvbench: rdma://%s:%s, %" PRIu64 " operations per kind, %u-byte values, one at a time\n",
	       o->host, o->port, o->ops, o->size);
	print_header();
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]) && rc == 0; i++) {
		kvb_hist_init(hs);
		rc = run_phase(h[phases[i].use_cache], o, &phases[i], val, hs);
	}
clean_handles:
	kvc_destroy(h[0]);
	kvc_destroy(h[1]);
	free(hs);
	free(val);
	return rc;
}

