/* libkvclient internals: a connection's statistics, and the server's
 * (stats.c). Nothing here is exported. */
#ifndef KVI_STATS_H
#define KVI_STATS_H

#include "kvclient.h"

struct kvi_conn;

/* What this connection counted (kvc_get_stats sums them), and clearing it. */
void kvi_conn_get_stats(const struct kvi_conn *h, struct kvc_stats *out);
void kvi_conn_reset_stats(struct kvi_conn *h);
/* Ask the server for its statistics (a few control round trips; a handle
 * idle past its lease renews or rejoins first). 0 or a code. */
int kvi_conn_server_stats(struct kvi_conn *h, struct kvc_server_stats *out);

#endif
