/* libkvclient internals: a connection's view of the server's indexes
 * (index_view.c) -- the current one and, while a resize migrates, the
 * previous one, as the server stated them -- and placing a key in them.
 * The server's own indexes are server/indexes.c's. Nothing here is exported. */
#ifndef KVI_INDEX_VIEW_H
#define KVI_INDEX_VIEW_H

#include <stdint.h>

#include "layout.h"

struct kvi_conn;
struct kvi_opst;

/* An index as the server stated it (wire.h INDEX), with room for its chunks. */
struct kvi_cindex {
	struct kvi_index ix; /* epoch 0: none */
	uint64_t *chunks;    /* [chunk_cap] */
};

/* Indexes (index_view.c): room for the chunk tables (at attach: the region's
 * geometry bounds them), and their release; fetch the current and previous
 * index from the server (sync; clears the location cache when the epoch
 * changed); choose st's candidate buckets in the current index (st->b, boff,
 * bep, nb, epoch; nbk, noff, nchoice) and, while the server migrates, in the
 * previous one (obk, ooff, oepoch). */
int kvi_index_alloc(struct kvi_conn *h);
void kvi_index_free(struct kvi_conn *h);
int kvi_index_refresh(struct kvi_conn *h);
void kvi_place(const struct kvi_conn *h, struct kvi_opst *st);

#endif
