/* Where a key lives: its two candidate buckets and its fingerprint, all from
 * one XXH3-128 of the key under the server's seed (two-choice hashing, as in RACE).
 *
 * The seed is random per server start and stated to clients in the welcome
 * (layout.h "Geometry"): without it, keys chosen offline to share two buckets
 * could flood them (hash flooding, as in SipHash's rationale). It is not a
 * secret from clients, who must hash with it; it keeps the placement of keys
 * unpredictable to anyone who has not joined this server. Nothing trusts the
 * hash as a key's identity: every path that acts on a slot compares key bytes. */
#ifndef KVI_HASH_H
#define KVI_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Candidate buckets are lo mod n and hi mod n in an index of n buckets, with
 * nothing done when they coincide (1 key in n has a single bucket): then the
 * choice j of a key in an index of 2n buckets is always that in n buckets or
 * n more, which is what lets a resize migrate bucket by bucket (layout.h
 * "Resize"). Every user of b[] must allow b[0] == b[1]. */
struct kvi_keyhash {
	uint64_t lo, hi;  /* the 128-bit hash, kept for the location cache */
	uint64_t b[2];    /* candidate buckets (may be equal) */
	uint32_t fp;      /* fingerprint stored in the slot */
};

/* seed: the server's (kvi_geometry.hash_seed); bucket_count must be >= 1. */
void kvi_key_hash(const void *key, size_t len, uint64_t seed, uint64_t bucket_count, struct kvi_keyhash *out);
/* Recompute kh->b for an index of bucket_count buckets (a resize). */
static inline void kvi_keyhash_place(struct kvi_keyhash *kh, uint64_t bucket_count)
{
	/* The same choice either way; a mask when it can be (the index
	 * doubles, so it usually can), as two 64-bit divisions would cost
	 * a cached GET a tenth of its time. */
	if ((bucket_count & (bucket_count - 1)) == 0) {
		kh->b[0] = kh->lo & (bucket_count - 1);
		kh->b[1] = kh->hi & (bucket_count - 1);
	} else {
		kh->b[0] = kh->lo % bucket_count;
		kh->b[1] = kh->hi % bucket_count;
	}
}

#endif
