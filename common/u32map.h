/* A map from a nonzero 32-bit key to a pointer: open addressing with linear
 * probing and backward-shift deletion, grown by doubling at half load. Find,
 * insert and remove cost O(1) on average whatever the number of entries: the
 * listener finds a completion's peer (by QP number) and a client's peer (by
 * id) with it, so no control event walks every peer. Not thread-safe. */
#ifndef KVI_U32MAP_H
#define KVI_U32MAP_H

#include <stdint.h>

struct kvi_u32map_slot {
	uint32_t key; /* 0: empty */
	void *val;
};

struct kvi_u32map {
	struct kvi_u32map_slot *t;
	uint32_t cap; /* a power of two, or 0 before the first insert */
	uint32_t n;
};

/* The value stored under key, or NULL. */
void *kvi_u32map_get(const struct kvi_u32map *m, uint32_t key);
/* Store val under key (replacing what was there). 0, KVC_EINVAL (key 0 or
 * val NULL) or KVC_ENOMEM (nothing changes). */
int kvi_u32map_put(struct kvi_u32map *m, uint32_t key, void *val);
/* Remove key if present. */
void kvi_u32map_del(struct kvi_u32map *m, uint32_t key);
void kvi_u32map_free(struct kvi_u32map *m);

#endif
