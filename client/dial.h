/* Where one server of a handle's list is, and how to join it (again): the
 * verbs transport, authentication, and opening a connection over it. */
#ifndef KVI_DIAL_H
#define KVI_DIAL_H

#include <stddef.h>

#include "conn.h"

/* Copies of what kvc_create was given for one server, since the caller's
 * strings need not outlive the call. The secret file is read at every dial
 * (a rotated secret is picked up; the secret itself is kept only while
 * connecting). */
struct kvi_dial {
	char host[256], port[8], device[64];
	char name[272]; /* "host:port" ("[v6]:port"): the server's name in the list and its hash */
	char secret_file[4096];
	int has_device, has_secret, secret_from_env;
	/* 0 (one server): a join holds the caller until it ends, as the caller
	 * has nothing else to serve. 1 (several): it never holds the caller:
	 * started, then stepped by the handle's calls (cluster.h "Joining"). */
	int async;
	int connect_ms;              /* kvc_opts.connect_timeout_ms: an async join's deadline */
	struct kvi_verbs_join *join; /* under way, or NULL */
	uint64_t answer_ns; /* the last join that succeeded: its longest wait for one event */
};

/* "host", "host:port", "[v6addr]:port" (the port defaults to 7471) into a
 * new kvi_dial with o's device and secret file. 0, or KVC_EINVAL/KVC_ENOMEM
 * with one line in err. */
int kvi_dial_new(const char *addr, size_t addr_len, const struct kvc_opts *o, struct kvi_dial **out, char *err,
		 size_t errlen);
/* Join the server: a connection with a lease, which rejoins by itself
 * through d when broken (d must outlive it). With d->async, one step of the
 * join (started now if none is under way): KVI_JOIN_PENDING while it goes
 * on; else it blocks for up to timeout_ms. 0, or a KVC_ code with one line
 * in err that names the server. timeout_ms bounds the whole join, from its
 * start. */
int kvi_dial_open(struct kvi_dial *d, const struct kvc_opts *o, int timeout_ms, struct kvi_conn **out,
		  char *err, size_t errlen);
/* Where a step of d's join under way may advance (readable), or -1. */
int kvi_dial_fd(const struct kvi_dial *d);
/* How long d's join under way has not advanced (0 when none), at now
 * (kvi_mono_ns). */
uint64_t kvi_dial_quiet_ns(const struct kvi_dial *d, uint64_t now);
/* Free d, abandoning its join under way. */
void kvi_dial_free(struct kvi_dial *d);

#endif
