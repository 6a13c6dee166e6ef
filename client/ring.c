#include "ring.h"

#include <math.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Fixed: clients of one tier must place keys alike. */
#define RING_SEED 0x6b7663616368650full /* "kvcache" */

/* splitmix64's finalizer: a full-avalanche mix of a key and a server. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

uint64_t kvi_ring_name_hash(const char *name)
{
	return XXH3_64bits_withSeed(name, strlen(name), RING_SEED ^ 1);
}

uint64_t kvi_ring_key_hash(const void *key, size_t len)
{
	return XXH3_64bits_withSeed(key, len, RING_SEED);
}

void kvi_ring_clear(struct kvi_ring *r)
{
	r->n = 0;
	r->weighted = 0;
}

int kvi_ring_add(struct kvi_ring *r, unsigned who, uint64_t name_hash, uint32_t weight)
{
	if (r->n >= KVI_RING_MAX)
		return -1;
	r->who[r->n] = (uint16_t)who;
	r->id[r->n] = name_hash;
	r->weight[r->n] = weight ? weight : 1;
	if (r->n && r->weight[r->n] != r->weight[0])
		r->weighted = 1;
	r->n++;
	return 0;
}

int kvi_ring_pick(const struct kvi_ring *r, uint64_t key_hash)
{
	unsigned best = 0;

	if (r->n == 0)
		return -1;
	if (!r->weighted) {
		uint64_t top = mix(key_hash ^ r->id[0]);

		for (unsigned i = 1; i < r->n; i++) {
			uint64_t s = mix(key_hash ^ r->id[i]);

			/* Ties (1 in 2^64) go to the larger name hash: still the
			 * same answer for every client and every list order. */
			if (s > top || (s == top && r->id[i] > r->id[best])) {
				top = s;
				best = i;
			}
		}
	} else {
		double top = -INFINITY;

		for (unsigned i = 0; i < r->n; i++) {
			/* u in (0,1): 53 random bits, never 0 or 1. */
			double u = ((double)(mix(key_hash ^ r->id[i]) >> 11) + 0.5) / 9007199254740992.0;
			double s = -r->weight[i] / log(u);

			if (s > top) {
				top = s;
				best = i;
			}
		}
	}
	return r->who[best];
}
