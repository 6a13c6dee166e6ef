/* libkvclient internals: which member takes a key (cluster_route.c).
 * Nothing here is exported. */
#ifndef KVI_CLUSTER_ROUTE_H
#define KVI_CLUSTER_ROUTE_H

#include "kvclient.h"

/* After the list or an ejection changed: the ring of the members not
 * ejected, when the first ejected one comes back, and whether the handle is
 * "single" (cluster.h). */
void kvi_route_rebuild(kvc_t *h);

#endif
