/* The public entry points of libkvclient that are not the engine's: library
 * information, options, connecting, and the blocking calls. */
#include "kvclient.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "log.h"
#include "rmem_verbs.h"

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
				.cache_entries = 4096, .track_access = 1 };
}

static void set_err(char *err, size_t len, const char *msg)
{
	if (err && len)
		snprintf(err, len, "%s", msg);
}

/* "host", "host:port", "[v6addr]:port" -> host and port strings. */
static int split_server(const char *s, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon, *h = s, *end;

	if (!s || !*s)
		return -1;
	if (*s == '[') {
		end = strchr(s, ']');
		if (!end)
			return -1;
		h = s + 1;
		colon = end[1] == ':' ? end + 1 : NULL;
		if (end[1] && !colon)
			return -1;
	} else {
		colon = strrchr(s, ':');
		end = colon ? colon : s + strlen(s);
		if (colon && strchr(s, ':') != colon)
			return -1; /* bare IPv6 needs brackets */
	}
	if (end == h || (size_t)(end - h) >= hl)
		return -1;
	memcpy(host, h, (size_t)(end - h));
	host[end - h] = '\0';
	if (colon) {
		unsigned long p;
		char *e;

		if (!colon[1] || strlen(colon + 1) >= pl)
			return -1;
		p = strtoul(colon + 1, &e, 10);
		if (*e || p == 0 || p > 65535 || colon[1] == '-' || colon[1] == '+')
			return -1;
		snprintf(port, pl, "%lu", p);
	} else {
		snprintf(port, pl, "%d", KVC_DEFAULT_PORT);
	}
	return 0;
}

/* The handle's buffers (depth x the largest item) are registered with the
 * NIC, i.e. pinned: under a small locked-memory limit that fails with ENOMEM
 * although the machine has memory to spare, and "out of memory" alone sends
 * the user looking in the wrong place. Root is exempt (CAP_IPC_LOCK). */
static int memlock_limited(char *msg, size_t len, const char *host, const char *port)
{
	struct rlimit rl;

	if (geteuid() == 0 || getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	snprintf(msg, len, "server %s:%s: cannot register this client's buffers with the RDMA device: the "
		 "locked-memory limit (ulimit -l) is %llu KiB; raise it (ulimit -l unlimited, or memlock in "
		 "/etc/security/limits.conf) or use a smaller depth", host, port,
		 (unsigned long long)rl.rlim_cur >> 10);
	return 1;
}

/* Where a handle dials (again): copies of what kvc_create was given, since
 * the caller's strings need not outlive the call. The secret file is read
 * at every dial (a rotated secret is picked up; the secret itself is kept
 * only while connecting). */
struct dial {
	char host[256], port[8], device[64];
	char secret_file[4096];
	int has_device, has_secret, secret_from_env;
};

static int connect_once(const struct dial *d, int timeout_ms, struct kvi_rmem **rm, struct kvi_errbuf *e)
{
	uint8_t secret[KVI_AUTH_SECRET_MAX];
	size_t secret_len = 0;
	struct kvi_welcome w;
	int rc;

	if (d->has_secret) {
		int loose;

		rc = kvi_auth_load_secret(d->secret_file, secret, &secret_len, &loose, e);
		if (rc) {
			if (d->secret_from_env)
				kvi_errbuf_set(e, "%s (named by KVC_SECRET_FILE)", e->msg);
			return rc;
		}
		if (loose)
			kvi_warn("secret file %s can be read by group or others: chmod 600 %s", d->secret_file,
				 d->secret_file);
	}
	rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = d->host, .port = d->port,
							      .device = d->has_device ? d->device : NULL,
							      .lbuf_size = 4096, .timeout_ms = timeout_ms,
							      .secret = d->has_secret ? secret : NULL,
							      .secret_len = secret_len },
				    rm, &w, e);
	kvi_auth_wipe(secret, sizeof(secret));
	return rc;
}

static int dial_verbs(void *arg, int timeout_ms, struct kvi_rmem **rm)
{
	const struct dial *d = arg;
	struct kvi_errbuf e = { { 0 } };
	int rc = connect_once(d, timeout_ms, rm, &e);

	if (rc)
		kvi_info("rejoining %s:%s: %s", d->host, d->port, e.msg);
	return rc;
}

int kvc_create(const struct kvc_opts *o, kvc_t **out, char *err, size_t errlen)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *rm;
	char msg[640];
	const char *secret_file;
	struct dial *d;
	int rc;

	if (!out)
		return KVC_EINVAL;
	*out = NULL;
	if (!o || o->depth == 0 || o->depth > KVI_RMEM_MAX_INFLIGHT || o->connect_timeout_ms <= 0 ||
	    o->op_timeout_ms <= 0) {
		set_err(err, errlen, "invalid options: depth must be 1..64 and timeouts positive");
		return KVC_EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		set_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	if (split_server(o->server, d->host, sizeof(d->host), d->port, sizeof(d->port))) {
		snprintf(msg, sizeof(msg), "invalid server address '%s': expected HOST[:PORT]",
			 o->server ? o->server : "(none)");
		set_err(err, errlen, msg);
		free(d);
		return KVC_EINVAL;
	}
	secret_file = o->secret_file ? o->secret_file : getenv("KVC_SECRET_FILE");
	if ((o->device && strlen(o->device) >= sizeof(d->device)) ||
	    (secret_file && strlen(secret_file) >= sizeof(d->secret_file))) {
		set_err(err, errlen, "invalid options: device name or secret file path too long");
		free(d);
		return KVC_EINVAL;
	}
	if (o->device) {
		snprintf(d->device, sizeof(d->device), "%s", o->device);
		d->has_device = 1;
	}
	if (secret_file && *secret_file) {
		snprintf(d->secret_file, sizeof(d->secret_file), "%s", secret_file);
		d->has_secret = 1;
		d->secret_from_env = o->secret_file == NULL;
	}
	rc = connect_once(d, o->connect_timeout_ms, &rm, &e);
	if (rc) {
		set_err(err, errlen, e.msg);
		free(d);
		return rc;
	}
	rc = kvi_client_open(rm, o, out);
	if (rc == KVC_ENOMEM && memlock_limited(msg, sizeof(msg), d->host, d->port))
		set_err(err, errlen, msg);
	else if (rc) {
		snprintf(msg, sizeof(msg), "server %s:%s: %s", d->host, d->port, kvc_strerror(rc));
		set_err(err, errlen, msg);
	}
	if (rc) {
		free(d);
		return rc;
	}
	kvi_client_set_dial(*out, dial_verbs, d, free);
	return 0;
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
