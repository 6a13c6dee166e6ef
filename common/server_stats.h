/* The server's statistics, listed once. Everything that names them is made
 * from this list:
 *  - the wire's ids, enum kvi_stat_id (wire.h): a row's place is its number
 *    in STATS pages, so rows are only ever appended;
 *  - the memcached-style names kvc_server_stat_names() gives (kvcli stats);
 *  - the fields of the public struct kvc_server_stats (kvclient.h), whose
 *    layout is pinned to the ids by wire.c's _Static_asserts;
 *  - the Prometheus families kvserver's metrics endpoint shows them as
 *    (server/metrics_text.c).
 * The server computes the values (kvs_core_stat_values, server/core_stats.c)
 * once for both STATS replies and the metrics endpoint.
 *
 * One row per statistic:
 *   X(ID, name, field, kind, family, label, help)
 *   ID      KVI_STAT_<ID>
 *   name    the memcached-style name (memcached's own where the quantity is
 *           the same thing)
 *   field   its member of struct kvc_server_stats
 *   kind    how the metrics endpoint shows it: COUNTER, GAUGE, SECONDS (a
 *           counter of nanoseconds, shown in seconds), or NONE (not shown:
 *           derived from what is, or the process's own, which the endpoint
 *           reports as process_cpu_seconds_total)
 *   family  the Prometheus family (NULL with NONE)
 *   label   NULL: the family's one sample; else the sample's label, in a
 *           family that consecutive rows share
 *   help    what it is: the family's HELP line */
#ifndef KVI_SERVER_STATS_H
#define KVI_SERVER_STATS_H

enum kvi_stat_kind {
	KVI_STAT_KIND_NONE,
	KVI_STAT_KIND_COUNTER,
	KVI_STAT_KIND_GAUGE,
	KVI_STAT_KIND_SECONDS,
};

#define KVI_STAT_SEGMENTS_HELP \
	"Heap segments by state: free, open (a writer appends), sealed (holding items), " \
	"quarantined (reclaimed, reused after the quarantine), index (holding index chunks)."

#define KVI_STAT_COMMANDS_HELP \
	"Commands the clients reported, by command and outcome (memcached_exporter's " \
	"memcached_commands_total): GETs never reach the server's CPU, so only the clients can count them."

/* clang-format off */
#define KVI_SERVER_STATS(X) \
	X(CPU_NS, "cpu_ns", cpu_ns, NONE, NULL, NULL, \
	  "Server process CPU time, user and system, in nanoseconds.") \
	X(SEGMENTS_USED, "segments_used", segments_used, NONE, NULL, NULL, \
	  "Heap segments not free (open, sealed, quarantined).") \
	X(SEGMENTS_TOTAL, "segments_total", segments_total, GAUGE, "kvcache_limit_segments", NULL, \
	  "Heap segments in all.") \
	X(CLIENTS, "clients", clients, GAUGE, "kvcache_writing_clients", NULL, \
	  "Clients holding an open extent (writers).") \
	X(BYTES_USED, "bytes_used", bytes_used, NONE, NULL, NULL, \
	  "Bytes of the index plus bytes handed to writers and not yet reclaimed.") \
	X(BYTES, "bytes", bytes, GAUGE, "kvcache_current_bytes", NULL, \
	  "Bytes handed to writers and not yet reclaimed: items, and garbage until reclaimed.") \
	X(LIMIT_MAXBYTES, "limit_maxbytes", limit_maxbytes, GAUGE, "kvcache_limit_bytes", NULL, \
	  "Bytes of the heap: what items may use.") \
	X(EVICTIONS, "evictions", evictions, COUNTER, "kvcache_items_evicted_total", NULL, \
	  "Live items removed to free memory (the reclaimer) or index slots (a client's insert) for new items.") \
	X(RECLAIMED, "reclaimed", reclaimed, COUNTER, "kvcache_segments_reclaimed_total", NULL, \
	  "Segments reclaimed (and quarantined).") \
	X(EXPIRED_UNFETCHED, "expired_unfetched", expired_unfetched, COUNTER, \
	  "kvcache_items_expired_unfetched_total", NULL, \
	  "Expired items reclaimed that were never read.") \
	X(EVICTED_UNFETCHED, "evicted_unfetched", evicted_unfetched, COUNTER, \
	  "kvcache_items_evicted_unfetched_total", NULL, \
	  "Items evicted that were never read.") \
	X(MOVED, "moved", moved, COUNTER, "kvcache_items_moved_total", NULL, \
	  "Live items the reclaimer copied forward.") \
	X(EXPIRED, "expired", expired, COUNTER, "kvcache_items_expired_total", NULL, \
	  "Expired items whose index slot the reclaimer cleared.") \
	X(DROPPED, "dropped", dropped, COUNTER, "kvcache_items_dropped_total", NULL, \
	  "Superseded or deleted items freed with their segment.") \
	X(SEGMENTS_FREE, "segments_free", segments_free, GAUGE, "kvcache_segments", "state=\"free\"", \
	  KVI_STAT_SEGMENTS_HELP) \
	X(SEGMENTS_OPEN, "segments_open", segments_open, GAUGE, "kvcache_segments", "state=\"open\"", \
	  KVI_STAT_SEGMENTS_HELP) \
	X(SEGMENTS_SEALED, "segments_sealed", segments_sealed, GAUGE, "kvcache_segments", "state=\"sealed\"", \
	  KVI_STAT_SEGMENTS_HELP) \
	X(SEGMENTS_QUARANTINED, "segments_quarantined", segments_quarantined, GAUGE, "kvcache_segments", \
	  "state=\"quarantined\"", KVI_STAT_SEGMENTS_HELP) \
	X(RECLAIM_CPU_NS, "reclaim_cpu_ns", reclaim_cpu_ns, SECONDS, "kvcache_reclaim_cpu_seconds_total", NULL, \
	  "CPU time of the reclaimer thread.") \
	X(GRANTS, "grants", grants, COUNTER, "kvcache_segment_grants_total", NULL, \
	  "Extents granted to writers.") \
	X(GRANTS_DEFERRED, "grants_deferred", grants_deferred, COUNTER, "kvcache_segment_grants_deferred_total", \
	  NULL, "Grants answered 'again shortly' (no free segment yet, or throttled).") \
	X(GRANTS_REFUSED, "grants_refused", grants_refused, COUNTER, "kvcache_segment_grants_refused_total", \
	  NULL, "Grants refused: live data fills the heap (eviction off), or over quota.") \
	X(RECLAIM_ABORTS, "reclaim_aborts", reclaim_aborts, COUNTER, "kvcache_reclaim_aborts_total", NULL, \
	  "Segment walks given up and retried later.") \
	X(LOCK_RETRIES, "reclaim_lock_retries", reclaim_lock_retries, COUNTER, \
	  "kvcache_reclaim_lock_retries_total", NULL, \
	  "Reclaimer bucket locks found held by a client.") \
	X(FENCINGS, "fencings", fencings, COUNTER, "kvcache_fencings_total", NULL, \
	  "Clients fenced (left, died or expelled): their locks released.") \
	X(FENCE_RELEASED, "fence_released", fence_released, COUNTER, "kvcache_fence_locks_released_total", \
	  NULL, "Bucket locks released by fencing.") \
	X(FENCE_CPU_NS, "fence_cpu_ns", fence_cpu_ns, SECONDS, "kvcache_fence_cpu_seconds_total", NULL, \
	  "CPU time of the fence thread.") \
	X(RESIZES, "resizes", resizes, COUNTER, "kvcache_index_resizes_total", NULL, \
	  "Index resizes completed.") \
	X(INDEX_BUCKETS, "index_buckets", index_buckets, GAUGE, "kvcache_index_buckets", NULL, \
	  "Buckets of the current index (31 slots each).") \
	X(INDEX_EPOCH, "index_epoch", index_epoch, GAUGE, "kvcache_index_epoch", NULL, \
	  "Epoch of the current index (one more per resize).") \
	X(CMD_GET, "cmd_get", cmd_get, NONE, NULL, NULL, \
	  "GETs (multi-get keys, gats) the clients reported: get_hits + get_misses.") \
	X(GET_HITS, "get_hits", get_hits, COUNTER, "kvcache_commands_total", "command=\"get\",status=\"hit\"", \
	  KVI_STAT_COMMANDS_HELP) \
	X(GET_MISSES, "get_misses", get_misses, COUNTER, "kvcache_commands_total", \
	  "command=\"get\",status=\"miss\"", KVI_STAT_COMMANDS_HELP) \
	X(CMD_SET, "cmd_set", cmd_set, COUNTER, "kvcache_commands_total", "command=\"set\",status=\"hit\"", \
	  KVI_STAT_COMMANDS_HELP) \
	X(TOUCH_HITS, "touch_hits", touch_hits, COUNTER, "kvcache_commands_total", \
	  "command=\"touch\",status=\"hit\"", KVI_STAT_COMMANDS_HELP) \
	X(TOUCH_MISSES, "touch_misses", touch_misses, COUNTER, "kvcache_commands_total", \
	  "command=\"touch\",status=\"miss\"", KVI_STAT_COMMANDS_HELP) \
	X(DELETE_HITS, "delete_hits", delete_hits, COUNTER, "kvcache_commands_total", \
	  "command=\"delete\",status=\"hit\"", KVI_STAT_COMMANDS_HELP) \
	X(DELETE_MISSES, "delete_misses", delete_misses, COUNTER, "kvcache_commands_total", \
	  "command=\"delete\",status=\"miss\"", KVI_STAT_COMMANDS_HELP) \
	X(INCR_HITS, "incr_hits", incr_hits, COUNTER, "kvcache_commands_total", \
	  "command=\"incr\",status=\"hit\"", KVI_STAT_COMMANDS_HELP) \
	X(INCR_MISSES, "incr_misses", incr_misses, COUNTER, "kvcache_commands_total", \
	  "command=\"incr\",status=\"miss\"", KVI_STAT_COMMANDS_HELP) \
	X(DECR_HITS, "decr_hits", decr_hits, COUNTER, "kvcache_commands_total", \
	  "command=\"decr\",status=\"hit\"", KVI_STAT_COMMANDS_HELP) \
	X(DECR_MISSES, "decr_misses", decr_misses, COUNTER, "kvcache_commands_total", \
	  "command=\"decr\",status=\"miss\"", KVI_STAT_COMMANDS_HELP) \
	X(CAS_HITS, "cas_hits", cas_hits, COUNTER, "kvcache_commands_total", "command=\"cas\",status=\"hit\"", \
	  KVI_STAT_COMMANDS_HELP) \
	X(CAS_MISSES, "cas_misses", cas_misses, COUNTER, "kvcache_commands_total", \
	  "command=\"cas\",status=\"miss\"", KVI_STAT_COMMANDS_HELP) \
	X(CAS_BADVAL, "cas_badval", cas_badval, COUNTER, "kvcache_commands_total", \
	  "command=\"cas\",status=\"badval\"", KVI_STAT_COMMANDS_HELP) \
	X(CMD_TOUCH, "cmd_touch", cmd_touch, NONE, NULL, NULL, \
	  "Touches and gats the clients reported: touch_hits + touch_misses.") \
	X(GET_EXPIRED, "get_expired", get_expired, COUNTER, "kvcache_get_expired_total", NULL, \
	  "GETs that found their item expired (counted in the misses too).") \
	X(CURR_ITEMS, "curr_items", curr_items, GAUGE, "kvcache_current_items", NULL, \
	  "Items in the index (expired ones until their slot is cleared), from the clients' reports.") \
	X(TOTAL_ITEMS, "total_items", total_items, COUNTER, "kvcache_items_total", NULL, \
	  "Items written (stores, incr, decr, append, prepend, touch), from the clients' reports.")
/* clang-format on */

#endif
