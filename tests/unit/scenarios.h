/* Multi-threaded scenarios. Each runs real threads against the local transport
 * and returns NULL on success or a static text saying what went wrong.
 *
 * They are shared by the Criterion suites (plain and ASan builds) and by
 * tsan_runner (TSan builds), because Criterion's forking runner cannot start
 * under ThreadSanitizer (Criterion issue #274). */
#ifndef KVT_SCENARIOS_H
#define KVT_SCENARIOS_H

/* X(function, what it proves) */
#define KVT_THREAD_SCENARIOS(X)                                                           \
	X(concurrent_faa_loses_no_increment, "FAA from 4 threads on one word")            \
	X(cas_lock_gives_mutual_exclusion_across_threads, "CAS lock around READ+WRITE")

/* The data path under concurrency: needs the server core and the client. */
#define KVT_DPATH_SCENARIOS(X)                                                              \
	X(dpath_hammer_keeps_per_key_order_and_acked_values,                                \
	  "4 clients, mixed PUT/GET/DELETE on shared and owned keys")                      \
	X(reclaim_races_readers_and_writers,                                                \
	  "2 writers churn the heap 4x while a reader reads and the reclaimer runs")

#define KVT_DECLARE_(name, what) const char *name(void);
KVT_THREAD_SCENARIOS(KVT_DECLARE_)
KVT_DPATH_SCENARIOS(KVT_DECLARE_)
#undef KVT_DECLARE_

#endif
