/* Exact LRU over key numbers, offline: the baseline a cache's hit ratio is
 * judged against (same key sequence, a capacity in items). O(1) per access:
 * a hash table of nodes on a doubly linked recency list. */
#ifndef KVB_LRUSIM_H
#define KVB_LRUSIM_H

#include <stdint.h>

struct kvb_lru;

/* capacity >= 1 items. 0, or -1 (out of memory, capacity 0). */
int kvb_lru_create(uint64_t capacity, struct kvb_lru **out);
void kvb_lru_destroy(struct kvb_lru *l);
/* Access key: 1 on a hit; 0 on a miss, after which the key is cached (the
 * least recently used one evicted when full), as a cache-aside PUT would. */
int kvb_lru_access(struct kvb_lru *l, uint64_t key);

#endif
