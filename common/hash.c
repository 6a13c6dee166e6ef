#include "hash.h"

#include <xxhash.h>

#include "layout.h"

void kvi_key_hash(const void *key, size_t len, uint64_t seed, uint64_t bucket_count, struct kvi_keyhash *out)
{
	XXH128_hash_t h = XXH3_128bits_withSeed(key, len, seed);

	out->lo = h.low64;
	out->hi = h.high64;
	kvi_keyhash_place(out, bucket_count);
	/* The top bits of both halves: independent of the low bits that pick buckets. */
	out->fp = (uint32_t)((h.low64 ^ h.high64) >> (64 - KVI_SLOT_FP_BITS));
}
