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
