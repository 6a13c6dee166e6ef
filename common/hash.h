/* Where a key lives: its two candidate buckets and its fingerprint, all from
 * one XXH3-128 of the key (SPEC: 2-choice hashing). */
#ifndef KVI_HASH_H
#define KVI_HASH_H

#include <stddef.h>
#include <stdint.h>

struct kvi_keyhash {
	uint64_t lo, hi;  /* the 128-bit hash, kept for the location cache */
	uint64_t b[2];    /* candidate buckets, b[0] != b[1] */
	uint32_t fp;      /* fingerprint stored in the slot */
};

/* bucket_count must be >= 2. */
void kvi_key_hash(const void *key, size_t len, uint64_t bucket_count, struct kvi_keyhash *out);

#endif
