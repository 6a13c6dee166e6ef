/* Fencing: when a client is gone, release the bucket locks it still holds.
 *
 * A client that dies between locking a bucket and unlocking it would leave the
 * bucket locked for good. The server knows every client's id (= its lock owner
 * id); when a client disconnects, its queue pair is moved to the error state
 * first (so that none of its late WRITEs can land), then every lock word naming
 * it is released. What it had written under the lock is consistent either way:
 * objects are written before the slot that publishes them (layout.h I3).
 *
 * The releases are RDMA CAS operations through a loopback connection from the
 * server to its own region, never CPU atomics (layout.h: with IBV_ATOMIC_HCA a
 * CPU atomic is not atomic against the NIC's). The loopback is connected by a
 * short-lived thread at start-up, because connecting needs the event loop (the
 * main thread) to accept it. Owned by the main thread afterwards. */
#ifndef KVS_FENCE_H
#define KVS_FENCE_H

#include <stdint.h>

#include "layout.h"

struct kvs_fence;

/* Start connecting the loopback to host:port (the server's own listening
 * address) through device. 0, or a negative code; the connection itself
 * completes while the event loop runs. */
int kvs_fence_start(struct kvs_fence **out, const char *host, const char *port, const char *device);

/* Release every lock held by client_id in the index of the region at base.
 * Returns how many were released, or a negative code (no loopback). */
int kvs_fence_client(struct kvs_fence *f, const struct kvi_geometry *sb, const void *base,
		     uint32_t client_id);

/* The client id of the fencer's own loopback connection (0 until it is
 * connected, and for NULL). */
uint32_t kvs_fence_own_id(const struct kvs_fence *f);

/* Accepts NULL. */
void kvs_fence_destroy(struct kvs_fence *f);

#endif
