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

#define KVT_DECLARE_(name, what) const char *name(void);
KVT_THREAD_SCENARIOS(KVT_DECLARE_)
#undef KVT_DECLARE_

#endif
