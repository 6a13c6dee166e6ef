/* libkvclient internals: the operation engine (engine.c) -- the calls that
 * admit operations on one connection, wait for and hand back finished ones,
 * and the clocks every step reads. Nothing here is exported. */
#ifndef KVI_ENGINE_H
#define KVI_ENGINE_H

#include <stdint.h>

#include "kvclient.h"

struct kvi_conn;

/* The public calls, on one connection (cluster_async.c routes kvc_submit,
 * kvc_submit_many, kvc_poll and kvc_inflight here). */
int kvi_conn_submit(struct kvi_conn *h, struct kvc_op *op);
/* Start ops[0..n) in order: how many started; *why says why the next did not. */
unsigned kvi_conn_submit_many(struct kvi_conn *h, struct kvc_op *const *ops, unsigned n, int *why);
int kvi_conn_poll(struct kvi_conn *h, struct kvc_op **done, unsigned max, int timeout_ms);
/* Operations submitted and not yet handed back by kvi_conn_poll. */
unsigned kvi_conn_inflight(const struct kvi_conn *h);
/* While waiting on several connections: let h notice a vanished peer (what
 * kvi_rmem_wait does for one). */
void kvi_conn_idle(struct kvi_conn *h);
/* Several servers (cluster_async.c kvc_poll): sleep on the connections of
 * cs that have operations in flight (NULL entries and idle ones are skipped)
 * until one of them may have progressed, or timeout_ms. 1 if it slept, 0
 * if not (kvi_rmem_block). An operation waiting on a timer rather than the
 * transport (a backoff) is looked at again when the sleep ends. */
int kvi_conns_block(struct kvi_conn *const *cs, unsigned n, int timeout_ms);
/* The waiting policy (rmem.h kvi_rmem_spin_ns) over several connections: how
 * long to poll before sleeping (the longest of those with operations in
 * flight), and a wait that ended after ns with completions from c. */
uint64_t kvi_conns_spin_ns(struct kvi_conn *const *cs, unsigned n);
void kvi_conn_waited(struct kvi_conn *c, uint64_t ns);
/* Its connection is broken now (it rejoins at the next submit). */
int kvi_conn_broken(const struct kvi_conn *h);

/* The clock of deadlines and leases, in ns (clock.h KVI_CLOCK_DEADLINE). */
uint64_t kvi_now_ns(void);
/* After work that may have taken long, within a step: the step's clock
 * (kvi_conn.step_now) is read again. */
#define KVI_STEP_HEAVY_BYTES (64u << 10)
void kvi_step_clock_refresh(struct kvi_conn *h);
/* The writer's clock now + ttl_ms, rounded up to the next millisecond
 * (layout.h "Expiry"): an object's expiry; 0 = never. */
uint64_t kvi_expiry_of(uint64_t ttl_ms);
/* CLOCK_REALTIME in ns: the clock of expiries (layout.h "Expiry"). */
uint64_t kvi_real_ns(void);
/* Backoff jitter (not for security). */
uint64_t kvi_rand(struct kvi_conn *h);

#endif
