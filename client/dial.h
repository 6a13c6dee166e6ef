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
	int redial_ms; /* 0: a rejoin may take the operation timeout; else at most this */
};

/* "host", "host:port", "[v6addr]:port" (the port defaults to 7471) into a
 * new kvi_dial with o's device and secret file. 0, or KVC_EINVAL/KVC_ENOMEM
 * with one line in err. */
int kvi_dial_new(const char *addr, size_t addr_len, const struct kvc_opts *o, struct kvi_dial **out, char *err,
		 size_t errlen);
/* Join the server: a connection with a lease, which rejoins by itself
 * through d when broken (d must outlive it). 0, or a KVC_ code with one line
 * in err that names the server. */
int kvi_dial_open(struct kvi_dial *d, const struct kvc_opts *o, int timeout_ms, struct kvi_conn **out,
		  char *err, size_t errlen);

#endif
