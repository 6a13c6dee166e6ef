/* libkvclient internals: reporting a lock word a writer keeps finding
 * (lock_report.c). Nothing here is exported. */
#ifndef KVI_LOCK_REPORT_H
#define KVI_LOCK_REPORT_H

#include <stdint.h>

struct kvi_conn;
struct kvi_opst;

/* A writer found bucket locked by word (not its own): report it to the
 * server if it keeps finding it (lock_report.c). */
void kvi_lock_waited(struct kvi_conn *h, struct kvi_opst *st, uint64_t bucket, uint64_t epoch, uint64_t word);

#endif
