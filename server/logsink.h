/* kvserver's log: logfmt lines (logfmt.h) on standard error or appended to
 * --log-file, which SIGHUP reopens (after logrotate moved it away).
 *
 * Threads (the reclaimer, the fencer) log concurrently: each line is built
 * in a local buffer and written with one write(2) to a file opened with
 * O_APPEND (or to stderr), so lines never interleave; a reopen swaps the
 * file under the same descriptor number with dup2, so a writer never sees a
 * closed descriptor. */
#ifndef KVS_LOGSINK_H
#define KVS_LOGSINK_H

#include "errbuf.h"

struct kvs_logsink {
	int fd;           /* stderr, or a descriptor of path */
	const char *path; /* NULL: stderr; not owned: outlives the sink */
};

/* Open path for appending (NULL: stderr). 0, or -1 with the reason in e. */
int kvs_logsink_open(struct kvs_logsink *s, const char *path, struct kvi_errbuf *e);

/* Reopen the file (a no-op for stderr): 0, or -1 with the reason in e (the
 * old file stays in use). Call from the thread that handles SIGHUP. */
int kvs_logsink_reopen(struct kvs_logsink *s, struct kvi_errbuf *e);

void kvs_logsink_close(struct kvs_logsink *s);

/* A kvi_log_ev_fn; arg is the struct kvs_logsink. */
void kvs_logsink_write(void *arg, int level, const char *event, const char *body);

#endif
