/* A worker thread: an epoll loop over its connections, with its own tier
 * handle (handles are not thread-safe) and its own exec round. The
 * listener hands it new connections through kvp_worker_give. */
#ifndef KVP_WORKER_H
#define KVP_WORKER_H

#include <pthread.h>

#include "exec.h"
#include "stats.h"
#include "tier.h"

#define KVP_SCRATCH (64u << 10) /* bytes read at once */

struct kvp_worker {
	pthread_t thread;
	int ep;       /* epoll set */
	int wake_fd;  /* eventfd: new connections queued, or stop */
	pthread_mutex_t mu;
	int *queue;   /* fds handed over, not yet taken */
	unsigned qlen, qcap;
	int stop;
	kvc_t *h;
	struct kvp_exec x;
	struct kvp_shared *sh;
	char *scratch;
	struct kvp_conn *conns; /* open connections (conn.h) */
};

/* Open the worker's handle and start its thread. 0, or -1 with err. */
int kvp_worker_start(struct kvp_worker *w, const struct kvp_tier_opts *to, struct kvp_shared *sh, char *err,
		     size_t errlen);
/* Hand fd (non-blocking, counted in curr_connections) to w; it closes it. */
int kvp_worker_give(struct kvp_worker *w, int fd);
/* Stop the thread, close its connections and handle. */
void kvp_worker_stop(struct kvp_worker *w);

#endif
