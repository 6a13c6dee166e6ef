/* libkvclient internals: memcached's counters, counted per connection and
 * reported to its server (counts.c). Nothing here is exported. */
#ifndef KVI_COUNTS_H
#define KVI_COUNTS_H

#include <stdint.h>

struct kvi_conn;
struct kvi_opst;

/* st is finishing with status: count it (before it is freed). */
void kvi_counts_finish(struct kvi_conn *h, const struct kvi_opst *st, int status);
/* Take a report's answer; send the next page when due (kvc_submit, kvc_poll). */
void kvi_counts_tick(struct kvi_conn *h, uint64_t now);
/* At close, nothing in flight: report what grew, waiting for each answer. */
void kvi_counts_flush(struct kvi_conn *h);

#endif
