/* libkvclient internals: one member of the handle's list and its failures
 * (cluster_member.c) -- joining, fail-fast, auto-eject and return, closing.
 * Nothing here is exported. */
#ifndef KVI_CLUSTER_MEMBER_H
#define KVI_CLUSTER_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "kvclient.h"

struct kvi_member;

/* Start m's join (it has no connection), or step the one under way
 * (cluster.h "Joining"): 0 joined, KVI_JOIN_PENDING, or the join's code with
 * one line in err; a failure backs m's next join off. */
int kvi_member_join(kvc_t *h, struct kvi_member *m, uint64_t now, char *err, size_t errlen);
/* Is a join of m under way: its own (no connection) or its connection's
 * rejoin (cluster.h "Joining")? */
int kvi_member_joining(const struct kvi_member *m);
/* Step the joins under way, the members' and their connections' rejoins,
 * when due (kvc_poll). */
void kvi_member_step_joins(kvc_t *h, uint64_t now);
/* Wait for m's join or its connection's rejoin under way to end (a call
 * that blocks anyway, kvc_flush_all): 0, or the join's failure. */
int kvi_member_join_wait(kvc_t *h, struct kvi_member *m);
/* Before an operation is submitted on m: 0 with m joined, or the code it
 * fails with at once. */
int kvi_member_ready(kvc_t *h, struct kvi_member *m, uint64_t now);
/* The outcome (a KVC_ code) of one of m's operations or joins: failures in
 * a row eject m (server_failure_limit). */
void kvi_member_account(kvc_t *h, struct kvi_member *m, int status, uint64_t now);
/* Ejected members whose retry_timeout_ms is up take their keys back. */
void kvi_member_return_ejected(kvc_t *h, uint64_t now);
/* Close m's connection (its statistics are kept in the handle's) and free m. */
void kvi_member_free(kvc_t *h, struct kvi_member *m);

#endif
