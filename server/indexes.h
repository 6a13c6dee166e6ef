/* The server's indexes: the one in use (current) and, while a resize migrates
 * into it, the one it replaces (previous). layout.h "Resize" is the protocol;
 * this file keeps the server's own record of where each index lives, which it
 * states to clients (wire.h INDEX) and never reads back from the region.
 *
 * Epochs: the home index is epoch 1; each resize makes the current index the
 * previous one and a new, twice as large current index with the next epoch.
 * Chunks: an index's buckets live in chunks of one segment's bytes
 * (struct kvi_index); the home index's chunks are consecutive pieces of the
 * home area.
 *
 * Not thread-safe: the core's mutex serialises every call (core.h). */
#ifndef KVS_INDEXES_H
#define KVS_INDEXES_H

#include <stdint.h>

#include "layout.h"
#include "wire.h"

struct kvs_indexes {
	struct kvi_geometry geo; /* the core's */
	struct kvi_index cur;    /* chunk_off owned here */
	struct kvi_index prev;   /* epoch 0: none */
	enum kvi_index_state state;
	uint64_t resizes; /* completed */
};

/* cur = the home index of g; 0 or KVC_ENOMEM. */
int kvs_indexes_init(struct kvs_indexes *x, const struct kvi_geometry *g);
void kvs_indexes_fini(struct kvs_indexes *x);

/* Answer INDEX_REQ (wire.h): fills resp->type and args; 0, or KVC_EINVAL for
 * a request no client sends (which index, or first chunk, out of range). */
int kvs_indexes_describe(const struct kvs_indexes *x, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* Copy index `which` (0 current, 1 previous) into out, its chunk offsets into
 * chunks (room for cap entries). 0, or KVC_ENOTFOUND (no previous index) or
 * KVC_ENOMEM (cap too small). */
int kvs_indexes_copy(const struct kvs_indexes *x, int which, struct kvi_index *out, uint64_t *chunks, uint32_t cap);

/* Make cur the current index and prev (NULL: none) the previous one, in
 * state `state` (copies the chunk tables); going from MIGRATING to STABLE
 * counts a completed resize. 0 or KVC_ENOMEM (nothing changed). */
int kvs_indexes_set(struct kvs_indexes *x, const struct kvi_index *cur, const struct kvi_index *prev,
		    enum kvi_index_state state);

/* Region offset of bucket `bucket` of the index of epoch `epoch` (current or
 * previous): 0, or KVC_EINVAL when there is no such index or bucket. */
int kvs_indexes_bucket(const struct kvs_indexes *x, uint64_t epoch, uint64_t bucket, uint64_t *off);

#endif
