/* Which server holds a key: weighted rendezvous (highest-random-weight)
 * hashing over the handle's server list.
 *
 * Every server gets a score for the key, a hash of the key's placement hash
 * and the server's name; the highest score wins. So a key's server depends
 * only on the key and the set of names (not on their order or on which
 * client asks), adding one of N+1 servers moves exactly the keys it now wins
 * (1/(N+1) of them, in expectation), and removing one moves only its own
 * keys. Weights: a server of weight w wins w/sum(w) of the keys (scores
 * -w/ln(u), u uniform in (0,1)). docs/design.md "Several servers" says why
 * this and not ketama, with the measurement.
 *
 * The placement hash is XXH3-64 of the key under a fixed seed, unlike the
 * bucket hash (seeded by each server): every client must agree on it. */
#ifndef KVI_RING_H
#define KVI_RING_H

#include <stddef.h>
#include <stdint.h>

#define KVI_RING_MAX 64 /* servers in one handle's list */

struct kvi_ring {
	unsigned n;                  /* servers that take keys now */
	int weighted;                /* some weight differs: use the weighted score */
	uint16_t who[KVI_RING_MAX];  /* the caller's index of each */
	uint64_t id[KVI_RING_MAX];   /* hash of each one's name */
	double weight[KVI_RING_MAX];
};

/* The hash of a server's name ("host:port", as listed) that its scores use. */
uint64_t kvi_ring_name_hash(const char *name);
/* The key's placement hash. */
uint64_t kvi_ring_key_hash(const void *key, size_t len);
/* Start an empty ring; add one server (who: the caller's index for it;
 * weight >= 1). Returns -1 when full. */
void kvi_ring_clear(struct kvi_ring *r);
int kvi_ring_add(struct kvi_ring *r, unsigned who, uint64_t name_hash, uint32_t weight);
/* The caller's index of the server of a key's placement hash; -1 when the
 * ring is empty. */
int kvi_ring_pick(const struct kvi_ring *r, uint64_t key_hash);

#endif
