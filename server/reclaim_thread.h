/* kvserver's reclaimer thread. It owns a loopback connection to the server's
 * own region (the bucket locks of reclamation are RDMA CAS through the NIC,
 * layout.h I1) and runs reclaim.h whenever the core asks for memory, or when a
 * quarantine or a settling segment comes due. It also owns the migrator
 * (migrate.h), which outlives reconnections of the loopback and runs first:
 * resizes, and the load sampler every KVS_MIGRATE_SAMPLE_MS -- and the
 * flusher (flush.h), which runs before both: flush_all's walks. Blocking RDMA calls happen here,
 * never on the control loop. The connection is made by this thread (the
 * control loop must be running to accept it) and remade if it breaks.
 *
 * Life cycle: create (before the core, whose wake callback it provides),
 * start (once the listener runs), destroy. */
#ifndef KVS_RECLAIM_THREAD_H
#define KVS_RECLAIM_THREAD_H

#include "core.h"

struct kvs_reclaim_thread;

int kvs_reclaim_thread_create(struct kvs_reclaim_thread **out);
/* The core's wake callback (struct kvs_core_opts.wake; arg = the reclaim thread). */
void kvs_reclaim_thread_wake(void *arg);
/* Resizing (migrate.h): the thread runs a migrator with these options
 * (before start; copied). Without this call it runs one with defaults. */
struct kvs_migrate_opts;
void kvs_reclaim_thread_set_migrate(struct kvs_reclaim_thread *rt, const struct kvs_migrate_opts *o);
/* Start the thread: loopback to host:port through device. 0 or a code. */
int kvs_reclaim_thread_start(struct kvs_reclaim_thread *rt, struct kvs_core *core, const char *host,
			     const char *port, const char *device);
/* Stop and join the thread, close the loopback; accepts NULL. */
void kvs_reclaim_thread_destroy(struct kvs_reclaim_thread *rt);

#endif
