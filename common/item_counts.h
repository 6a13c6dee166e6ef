/* What every client counts of memcached's statistics and reports to each
 * server, listed once (issue: GETs never reach a server's CPU, so the hit
 * and command counters can only come from the clients). The client counts
 * them per connection as its operations finish (client/counts.c) and sends
 * what grew since its last report in COUNTS messages (wire.h), one page of
 * KVI_COUNTS_PER_PAGE 32-bit increments each; the server adds them to its
 * totals (server/core.c), which it shows as memcached's stats
 * (common/server_stats.h). Rows are only ever appended (their place is their
 * number on the wire).
 *
 *   X(ID, what)
 *
 * curr_items is derived, not counted: items a client linked into a free
 * slot, less items it unlinked (a DELETE, or an expired item's slot a write
 * cleared), less what the server removed itself (the reclaimer's expired
 * items and evictions, flush_all). A write whose outcome is unknown
 * (KVC_EUNKNOWN) is not counted. */
#ifndef KVI_ITEM_COUNTS_H
#define KVI_ITEM_COUNTS_H

/* clang-format off */
#define KVI_ITEM_COUNTS(X) \
	X(CMD_GET, "GETs, multi-get keys and gat each one") \
	X(GET_HITS, "GETs (and gats) that found the item") \
	X(GET_MISSES, "GETs that did not") \
	X(GET_EXPIRED, "GET misses that found the item expired") \
	X(CMD_SET, "stores of every mode (set, add, replace, cas, append, prepend)") \
	X(CMD_TOUCH, "touches and gats") \
	X(TOUCH_HITS, "touches and gats that found the item") \
	X(TOUCH_MISSES, "touches and gats that did not") \
	X(DELETE_HITS, "DELETEs that removed a live item") \
	X(DELETE_MISSES, "DELETEs that found none") \
	X(INCR_HITS, "incrs that changed an item") \
	X(INCR_MISSES, "incrs that found no item") \
	X(DECR_HITS, "decrs that changed an item") \
	X(DECR_MISSES, "decrs that found no item") \
	X(CAS_HITS, "cas stores that stored") \
	X(CAS_MISSES, "cas stores that found no item") \
	X(CAS_BADVAL, "cas stores that found another unique") \
	X(ITEMS_LINKED, "items written into a free index slot") \
	X(ITEMS_UNLINKED, "index slots a client cleared (DELETE, an expired item's slot)") \
	X(TOTAL_ITEMS, "items written (every store, incr, decr, append, prepend, touch that wrote one)") \
	X(INDEX_EVICTIONS, "live items a client's insert evicted from a full bucket pair")
/* clang-format on */

enum kvi_count_id {
#define KVI_COUNT_ID(id, what) KVI_COUNT_##id,
	KVI_ITEM_COUNTS(KVI_COUNT_ID)
#undef KVI_COUNT_ID
	KVI_COUNT_N
};

#define KVI_COUNTS_PER_PAGE 8u
#define KVI_COUNTS_PAGES ((KVI_COUNT_N + KVI_COUNTS_PER_PAGE - 1) / KVI_COUNTS_PER_PAGE)

#endif
