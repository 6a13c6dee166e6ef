/* libkvclient internals: the public handle's constructors for tests and
 * benchmarks (cluster.c), which bypass kvc_create's dialing. Nothing here is
 * exported. */
#ifndef KVI_CLUSTER_H
#define KVI_CLUSTER_H

#include <stdint.h>

#include "conn.h"
#include "kvclient.h"

/* A handle of one server over a connected transport, without a server list:
 * for tests and local:// benchmarks (cluster.c). kvi_client_set_dial: let its
 * connection rejoin (kvi_conn_set_dial). kvi_client_conn: the connection of
 * server i (tests look inside). */
int kvi_client_open(struct kvi_rmem *rm, const struct kvc_opts *o, kvc_t **out);
void kvi_client_set_dial(kvc_t *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg));
struct kvi_conn *kvi_client_conn(kvc_t *h, unsigned i);
/* A handle of several servers over given transports (tests): an empty one,
 * then a server named name ("host:port") joined through dial (which owns
 * arg). A server whose join fails is added down, as kvc_create would. */
int kvi_client_new(const struct kvc_opts *o, kvc_t **out);
int kvi_client_add(kvc_t *h, const char *name, uint32_t weight, kvi_dial_fn dial, void *arg,
		   void (*free_arg)(void *arg));

#endif
