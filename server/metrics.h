/* Prometheus metrics: kvserver --metrics ADDR:PORT serves the text exposition
 * format (0.0.4) at /metrics over HTTP (libmicrohttpd), off by default.
 *
 * Two halves:
 *  - metrics_text.c renders a snapshot (struct kvs_metrics_snapshot) as
 *    exposition text. Pure: no threads, no I/O, so that tests check the text
 *    for any snapshot they make up.
 *  - metrics.c owns the HTTP server (MHD's own single thread) and takes the
 *    snapshots. Nothing of it is on the data path (clients never talk to the
 *    server there) nor in the event loop's way:
 *     - the core's counters are read with kvs_core_stats, under the core's
 *       lock, exactly as a STATS request reads them;
 *     - what only the event loop may touch (the membership table, the
 *       connection count, the control messages it answers) is published by
 *       the event loop itself: kvs_metrics_start wraps the listener's
 *       callbacks, and after each event the wrapper adds to counters kept
 *       under a mutex of the metrics' own. The HTTP thread holds that mutex
 *       only to copy them out (a memcpy: no allocation, no I/O), so the
 *       event loop never waits for a scrape.
 *    Membership counters (lease expiries, renewals, lock reports) are thus
 *    as of the last control event: a lease that ran out shows once its
 *    client's disconnect is seen, i.e. at once in practice.
 *
 * Items: the server does not know how many items it holds (clients insert
 * them with one-sided RDMA), so there is no kvcache_current_items. */
#ifndef KVS_METRICS_H
#define KVS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "errbuf.h"
#include "listener.h"
#include "members.h"
#include "wire.h"

/* Control message types counted: KVI_CTRL_* 1..KVI_CTRL_TYPE_MAX; 0 is any
 * type out of that range. Error codes: -status 1..KVS_METRICS_CODES - 1
 * (the KVC_ codes); 0 is any other status. */
#define KVS_METRICS_TYPES (KVI_CTRL_TYPE_MAX + 1)
#define KVS_METRICS_CODES 27

/* Connection roles: clients, and the server's own loopbacks (fencing,
 * reclamation, migration). */
enum kvs_metrics_role {
	KVS_METRICS_CLIENT = 0,
	KVS_METRICS_LOOPBACK = 1,
	KVS_METRICS_ROLES
};

/* What the event loop publishes (see above). */
struct kvs_metrics_events {
	struct kvs_members_stats members;
	uint64_t conn_current[KVS_METRICS_ROLES]; /* established, not yet gone */
	uint64_t conn_total[KVS_METRICS_ROLES];   /* established since start */
	uint64_t conn_refused;                    /* joins the server refused (ids used up, memory) */
	uint64_t ctrl[KVS_METRICS_TYPES];          /* requests received, by type */
	uint64_t ctrl_rejected[KVS_METRICS_TYPES]; /* ... no client should send: it was disconnected */
	uint64_t ctrl_errors[KVS_METRICS_TYPES][KVS_METRICS_CODES]; /* answered ERROR, by code */
};

struct kvs_metrics_snapshot {
	struct kvs_core_stats core;
	struct kvs_metrics_events ev;
	int index_migrating;       /* the current index is filling from the previous one */
	uint64_t segment_size;     /* bytes */
	double cpu_seconds;        /* process CPU time, user + system */
	double start_time_seconds; /* Unix time the server started */
};

/* Render s as exposition text into buf (cap bytes, NUL-terminated when cap
 * > 0); returns the length of the whole text (like snprintf: a return >= cap
 * means it was cut; call again with more room). Every family has its HELP
 * and TYPE lines; counters end in _total; the text ends with a newline. */
size_t kvs_metrics_render(const struct kvs_metrics_snapshot *s, char *buf, size_t cap);

/* The name a control type's label carries ("seg_req"; "unknown" for 0). */
const char *kvs_metrics_type_name(unsigned type);

struct kvs_metrics;

/* Check a --metrics spec ("ADDR:PORT", "[V6ADDR]:PORT") without binding it,
 * so that a typo is found before anything is set up: 0, or KVC_EINVAL with
 * one line in e. */
int kvs_metrics_parse(const char *spec, struct kvi_errbuf *e);

/* Start serving on spec ("ADDR:PORT", "[V6ADDR]:PORT"; NULL: metrics are off,
 * *out = NULL and 0). Binds ADDR only. Wraps *cb (its owner's callbacks
 * count and publish, then call the originals): from now on the owner
 * dispatches with cb as before; kvs_metrics_stop puts the originals back.
 * core and members must outlive the metrics. 0, or KVC_EINVAL (a bad spec)
 * or KVC_ESYS (the address is busy or not ours, or MHD failed) with one line
 * in e naming the problem: a usage error. Call with SIGPIPE ignored and the
 * signals the owner waits for blocked (the HTTP thread inherits the mask). */
int kvs_metrics_start(struct kvs_metrics **out, const char *spec, struct kvs_core *core,
		      struct kvs_members *members, struct kvi_listen_cb *cb, struct kvi_errbuf *e);

/* Stop the HTTP thread, put cb's callbacks back, free all. Call from the
 * thread that dispatches cb, before core and members go. Accepts NULL. */
void kvs_metrics_stop(struct kvs_metrics *m);

/* A snapshot as a scrape takes it (tests). */
void kvs_metrics_snapshot(struct kvs_metrics *m, struct kvs_metrics_snapshot *out);

#endif
