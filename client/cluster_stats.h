/* libkvclient internals: the handle's statistics over its servers
 * (cluster_stats.c). Nothing here is exported. */
#ifndef KVI_CLUSTER_STATS_H
#define KVI_CLUSTER_STATS_H

#include "kvclient.h"

/* acc += s, counter by counter. */
void kvi_stats_fold(struct kvc_stats *acc, const struct kvc_stats *s);

#endif
