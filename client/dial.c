#define _GNU_SOURCE /* secure_getenv */
#include "dial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "rmem_verbs.h"

static void set_err(char *err, size_t len, const char *msg)
{
	if (err && len)
		snprintf(err, len, "%s", msg);
}

/* "host", "host:port", "[v6addr]:port" (s[0..slen)) -> host and port strings. */
static int split_server(const char *s, size_t slen, char *host, size_t hl, char *port, size_t pl)
{
	char buf[300];
	const char *colon, *h, *end;

	if (slen == 0 || slen >= sizeof(buf))
		return -1;
	memcpy(buf, s, slen);
	buf[slen] = '\0';
	s = h = buf;
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

int kvi_dial_new(const char *addr, size_t addr_len, const struct kvc_opts *o, struct kvi_dial **out, char *err,
		 size_t errlen)
{
	const char *secret_file = o->secret_file ? o->secret_file : secure_getenv("KVC_SECRET_FILE");
	struct kvi_dial *d;
	char msg[400];

	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d) {
		set_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	if (split_server(addr, addr_len, d->host, sizeof(d->host), d->port, sizeof(d->port))) {
		snprintf(msg, sizeof(msg), "invalid server address '%.*s': expected HOST[:PORT]",
			 (int)(addr_len > 256 ? 256 : addr_len), addr);
		set_err(err, errlen, msg);
		free(d);
		return KVC_EINVAL;
	}
	if ((o->device && strlen(o->device) >= sizeof(d->device)) ||
	    (secret_file && strlen(secret_file) >= sizeof(d->secret_file))) {
		set_err(err, errlen, "invalid options: device name or secret file path too long");
		free(d);
		return KVC_EINVAL;
	}
	snprintf(d->name, sizeof(d->name), strchr(d->host, ':') ? "[%s]:%s" : "%s:%s", d->host, d->port);
	d->connect_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
	if (o->device) {
		snprintf(d->device, sizeof(d->device), "%s", o->device);
		d->has_device = 1;
	}
	if (secret_file && *secret_file) {
		snprintf(d->secret_file, sizeof(d->secret_file), "%s", secret_file);
		d->has_secret = 1;
		d->secret_from_env = o->secret_file == NULL;
	}
	*out = d;
	return 0;
}

/* The handle's buffers are registered with the NIC, i.e. pinned: under a
 * small locked-memory limit that fails with ENOMEM although the machine has
 * memory to spare, and "out of memory" alone sends the user looking in the
 * wrong place. Root is exempt (CAP_IPC_LOCK). */
static int memlock_limited(char *msg, size_t len, const struct kvi_dial *d)
{
	struct rlimit rl;

	if (geteuid() == 0 || getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	snprintf(msg, len, "server %s: cannot register this client's buffers with the RDMA device: the "
		 "locked-memory limit (ulimit -l) is %llu KiB; raise it (ulimit -l unlimited, or memlock in "
		 "/etc/security/limits.conf) or use a smaller depth", d->name,
		 (unsigned long long)rl.rlim_cur >> 10);
	return 1;
}

/* Start d's join: the secret is read now (a rotated one is picked up at
 * every join) and kept by the join only until its hello is made. */
static int join_start(struct kvi_dial *d, int timeout_ms, struct kvi_errbuf *e)
{
	uint8_t secret[KVI_AUTH_SECRET_MAX];
	size_t secret_len = 0;
	int rc;

	if (d->has_secret) {
		rc = kvi_auth_load_secret(d->secret_file, secret, &secret_len, e);
		if (rc) {
			if (d->secret_from_env)
				kvi_errbuf_set(e, "%s (named by KVC_SECRET_FILE)", e->msg);
			return rc;
		}
	}
	rc = kvi_verbs_join_start(&(struct kvi_verbs_opts){ .host = d->host, .port = d->port,
							    .device = d->has_device ? d->device : NULL,
							    .lbuf_size = 4096, .timeout_ms = timeout_ms,
							    .secret = d->has_secret ? secret : NULL,
							    .secret_len = secret_len },
				  &d->join, e);
	kvi_auth_wipe(secret, sizeof(secret));
	return rc;
}

/* d's join, started if none is under way: stepped once (d->async) or until
 * it ends. KVI_JOIN_PENDING, 0 with *rm, or a code with e set. */
static int join(struct kvi_dial *d, int timeout_ms, struct kvi_rmem **rm, struct kvi_errbuf *e)
{
	struct kvi_welcome w;
	int rc;

	if (!d->join) {
		rc = join_start(d, timeout_ms, e);
		if (rc)
			return rc;
	}
	rc = d->async ? kvi_verbs_join_step(d->join, rm, &w, e) : kvi_verbs_join_wait(d->join, rm, &w, e);
	if (rc != KVI_JOIN_PENDING) {
		if (rc == 0)
			d->answer_ns = kvi_verbs_join_max_gap_ns(d->join);
		kvi_verbs_join_free(d->join);
		d->join = NULL;
	}
	return rc;
}

static int dial_verbs(void *arg, int timeout_ms, struct kvi_rmem **rm)
{
	struct kvi_dial *d = arg;
	struct kvi_errbuf e = { { 0 } };
	int rc = join(d, d->async ? d->connect_ms : timeout_ms, rm, &e);

	if (rc < 0)
		kvi_info("rejoining %s: %s", d->name, e.msg);
	return rc;
}

int kvi_dial_fd(const struct kvi_dial *d)
{
	return d->join ? kvi_verbs_join_fd(d->join) : -1;
}

uint64_t kvi_dial_quiet_ns(const struct kvi_dial *d, uint64_t now)
{
	return d->join ? kvi_verbs_join_quiet_ns(d->join, now) : 0;
}

void kvi_dial_free(struct kvi_dial *d)
{
	if (d)
		kvi_verbs_join_free(d->join);
	free(d);
}

int kvi_dial_open(struct kvi_dial *d, const struct kvc_opts *o, int timeout_ms, struct kvi_conn **out, char *err,
		  size_t errlen)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_rmem *rm;
	char msg[640];
	int rc;

	*out = NULL;
	rc = join(d, timeout_ms, &rm, &e);
	if (rc) {
		if (rc != KVI_JOIN_PENDING)
			set_err(err, errlen, e.msg);
		return rc;
	}
	rc = kvi_conn_open(rm, o, out);
	if (rc) {
		if (rc == KVC_ENOMEM && memlock_limited(msg, sizeof(msg), d))
			set_err(err, errlen, msg);
		else {
			snprintf(msg, sizeof(msg), "server %s: %s", d->name, kvc_strerror(rc));
			set_err(err, errlen, msg);
		}
		return rc;
	}
	kvi_conn_set_dial(*out, dial_verbs, d, NULL);
	return 0;
}
