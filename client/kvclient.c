/* The public entry points of libkvclient that are not the engine's: library
 * information, options and the blocking calls (connecting is cluster.c's). */
#include "kvclient.h"

#include "log.h"
#include "rmem.h"

#define KVC_STR_(x) #x
#define KVC_STR(x) KVC_STR_(x)

const char *kvc_version(void)
{
	return KVC_STR(KVC_VERSION_MAJOR) "." KVC_STR(KVC_VERSION_MINOR) "." KVC_STR(KVC_VERSION_PATCH);
}

void kvc_set_log(kvc_log_fn fn, void *arg, int max_level)
{
	kvi_log_set(fn, arg, max_level);
}

void kvc_opts_init(struct kvc_opts *o)
{
	*o = (struct kvc_opts){ .connect_timeout_ms = 5000, .op_timeout_ms = 2000, .depth = 16,
				.cache_entries = 4096, .track_access = 1, .retry_timeout_ms = 2000,
				.busy_poll_us = KVI_RMEM_SPIN_US };
}

/* Submit one op and wait for it: the blocking calls all come here. */
static int run_one(kvc_t *h, struct kvc_op *op)
{
	struct kvc_op *done;
	int rc;

	if (!h)
		return KVC_EINVAL;
	if (kvc_inflight(h))
		return KVC_EBUSY;
	rc = kvc_submit(h, op);
	if (rc)
		return rc;
	do
		rc = kvc_poll(h, &done, 1, -1);
	while (rc == 0);
	return rc < 0 ? rc : op->status;
}

int kvc_get(kvc_t *h, const void *key, size_t key_len, void *buf, size_t buf_len, size_t *value_len)
{
	struct kvc_op op = { .type = KVC_OP_GET, .key = key, .key_len = key_len, .buf = buf, .buf_len = buf_len };
	int rc = run_one(h, &op);

	if (value_len && (rc == 0 || rc == KVC_ETRUNC))
		*value_len = op.value_len;
	return rc;
}

int kvc_get_item(kvc_t *h, const void *key, size_t key_len, void *buf, size_t buf_len, size_t *value_len,
		 uint32_t *flags, uint64_t *cas)
{
	struct kvc_op op = { .type = KVC_OP_GET, .key = key, .key_len = key_len, .buf = buf, .buf_len = buf_len };
	int rc = run_one(h, &op);

	if (value_len && (rc == 0 || rc == KVC_ETRUNC))
		*value_len = op.value_len;
	if (rc == 0 && flags)
		*flags = op.flags;
	if (rc == 0 && cas)
		*cas = op.cas;
	return rc;
}

int kvc_store(kvc_t *h, int mode, const void *key, size_t key_len, const void *value, size_t value_len,
	      uint32_t flags, uint64_t ttl_ms, uint64_t cas, uint64_t *new_cas)
{
	struct kvc_op op = { .type = KVC_OP_PUT, .key = key, .key_len = key_len, .value = value,
			     .value_len = value_len, .ttl_ms = ttl_ms, .mode = mode, .flags = flags, .cas = cas };
	int rc = run_one(h, &op);

	if (rc == 0 && new_cas)
		*new_cas = op.cas;
	return rc;
}

int kvc_put(kvc_t *h, const void *key, size_t key_len, const void *value, size_t value_len, uint64_t ttl_ms)
{
	struct kvc_op op = { .type = KVC_OP_PUT, .key = key, .key_len = key_len, .value = value,
			     .value_len = value_len, .ttl_ms = ttl_ms };

	return run_one(h, &op);
}

int kvc_delete(kvc_t *h, const void *key, size_t key_len)
{
	struct kvc_op op = { .type = KVC_OP_DELETE, .key = key, .key_len = key_len };

	return run_one(h, &op);
}

static int arith(kvc_t *h, int type, const void *key, size_t key_len, uint64_t delta, uint64_t *value)
{
	struct kvc_op op = { .type = type, .key = key, .key_len = key_len, .delta = delta };
	int rc = run_one(h, &op);

	if (rc == 0 && value)
		*value = op.result;
	return rc;
}

int kvc_incr(kvc_t *h, const void *key, size_t key_len, uint64_t delta, uint64_t *value)
{
	return arith(h, KVC_OP_INCR, key, key_len, delta, value);
}

int kvc_decr(kvc_t *h, const void *key, size_t key_len, uint64_t delta, uint64_t *value)
{
	return arith(h, KVC_OP_DECR, key, key_len, delta, value);
}

int kvc_touch(kvc_t *h, const void *key, size_t key_len, uint64_t ttl_ms)
{
	struct kvc_op op = { .type = KVC_OP_TOUCH, .key = key, .key_len = key_len, .ttl_ms = ttl_ms };

	return run_one(h, &op);
}

int kvc_gat(kvc_t *h, const void *key, size_t key_len, uint64_t ttl_ms, void *buf, size_t buf_len,
	    size_t *value_len, uint32_t *flags, uint64_t *cas)
{
	struct kvc_op op = { .type = KVC_OP_GAT, .key = key, .key_len = key_len, .ttl_ms = ttl_ms,
			     .buf = buf, .buf_len = buf_len };
	int rc = run_one(h, &op);

	if (value_len && (rc == 0 || rc == KVC_ETRUNC))
		*value_len = op.value_len;
	if (rc == 0 && flags)
		*flags = op.flags;
	if (rc == 0 && cas)
		*cas = op.cas;
	return rc;
}

int kvc_run_batch(kvc_t *h, struct kvc_op *const *ops, unsigned n)
{
	struct kvc_op *done[64];
	unsigned next = 0, finished = 0;
	int rc;

	if (!h || (n && !ops))
		return KVC_EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!ops[i])
			return KVC_EINVAL;
	if (kvc_inflight(h))
		return KVC_EBUSY;
	while (finished < n) {
		/* Start what the depth allows; an op refused for a reason of its
		 * own (a bad key, a broken connection) finishes with it. */
		while (next < n) {
			int started = kvc_submit_many(h, ops + next, n - next);

			if (started < 0)
				return started;
			next += (unsigned)started;
			if (next == n || ops[next]->status == KVC_EAGAIN)
				break;
			next++; /* ops[next]->status says why it did not start */
			finished++;
		}
		rc = kvc_poll(h, done, sizeof(done) / sizeof(done[0]), -1);
		if (rc < 0)
			return rc;
		finished += (unsigned)rc;
	}
	return 0;
}
