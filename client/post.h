/* libkvclient internals: what a state machine calls to post its batch and to
 * finish (post.c). Every post checks the lease and the operation's deadline
 * first, and carries the access marks waiting for a doorbell. Nothing here
 * is exported. */
#ifndef KVI_POST_H
#define KVI_POST_H

#include <stdint.h>

#include "rmem.h"

struct kvi_conn;
struct kvi_opst;

/* Post ops[0..n) for st, which then waits in `state`: 0, or a code, and st
 * finished with it (abandoned if it may hold locks). */
int kvi_st_post(struct kvi_conn *h, struct kvi_opst *st, const struct kvi_rop *ops, unsigned n, int state);
/* Hand st's operation back with status, counted under kind (enum
 * kvc_stat_kind; any error counts as KVC_STAT_FAILED). */
void kvi_st_finish(struct kvi_conn *h, struct kvi_opst *st, int status, int kind);
/* Finish st, which cannot go on while it may hold bucket locks: nothing else
 * can release them, so the connection is broken first and the server fences
 * us (releasing them). Every other operation in flight then fails. */
void kvi_st_abandon(struct kvi_conn *h, struct kvi_opst *st, int status);
/* Could st hold bucket locks (a lock doorbell posted, its release not yet
 * completed)? */
int kvi_may_hold_locks(const struct kvi_opst *st);
/* Does any operation of h hold (or take) bucket locks? */
int kvi_locks_in_flight(const struct kvi_conn *h);
/* Queue an access mark for the object at obj_off (op_get.c, on a first read). */
void kvi_mark_access(struct kvi_conn *h, uint64_t obj_off, uint64_t word, uint64_t deadline);

#endif
