/* Exact LRU over key numbers, offline: the baseline a cache's hit ratio is
 * judged against (same key sequence, a capacity in items or in bytes). O(1)
 * per access: a hash table of nodes on a doubly linked recency list, both
 * growing with the keys held. */
#ifndef KVB_LRUSIM_H
#define KVB_LRUSIM_H

#include <stdint.h>

struct kvb_lru;

/* capacity >= 1 items. 0, or -1 (out of memory, capacity 0). */
int kvb_lru_create(uint64_t capacity, struct kvb_lru **out);
/* Byte mode: at most capacity_bytes of objects, each counted at its size as
 * last given (item mode is the same with every size 1). 0, or -1. */
int kvb_lru_create_bytes(uint64_t capacity_bytes, struct kvb_lru **out);
void kvb_lru_destroy(struct kvb_lru *l);
/* Access key: 1 on a hit; 0 on a miss, after which the key is cached (the
 * least recently used one evicted when full), as a cache-aside PUT would. */
int kvb_lru_access(struct kvb_lru *l, uint64_t key);
/* A GET of key whose object has size bytes: 1 on a hit (most recent; its
 * size becomes size when that is nonzero and differs), 0 on a miss, after
 * which it is inserted (least recent ones evicted until it fits; an object
 * larger than the capacity is not inserted). */
int kvb_lru_get(struct kvb_lru *l, uint64_t key, uint64_t size);
/* A SET: insert or replace with size, most recent (too large: the old entry
 * goes, nothing is inserted). */
void kvb_lru_set(struct kvb_lru *l, uint64_t key, uint64_t size);
/* A DELETE: forget key if present. */
void kvb_lru_delete(struct kvb_lru *l, uint64_t key);
/* What is held now, in size units. */
uint64_t kvb_lru_bytes(const struct kvb_lru *l);
/* 1 once an insert found no memory (or 2^31 keys held): its answers are
 * wrong from then on, and a report must not use them. */
int kvb_lru_failed(const struct kvb_lru *l);

#endif
