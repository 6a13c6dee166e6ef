/* Threaded scenarios for the local transport: its atomics really are atomic. */
#include <pthread.h>
#include <stdint.h>

#include "rmem_local.h"
#include "scenarios.h"

#define THREADS 4
#define ROUNDS 20000

struct worker {
	pthread_t t;
	struct kvi_rmem *rm;
	uint32_t id;
};

/* FAA on one word from every thread: no increment is lost. */
static void *faa_worker(void *arg)
{
	struct worker *w = arg;
	uint64_t *old = kvi_rmem_lbuf(w->rm, NULL);
	struct kvi_rop op = kvi_rop_faa(4096, old, 1);

	for (int i = 0; i < ROUNDS; i++)
		if (kvi_rmem_exec(w->rm, &op, 1, 1000))
			return (void *)1;
	return NULL;
}

/* A CAS lock (0 = free, else owner id) guarding a plain READ-modify-WRITE of
 * another word: if CAS were not atomic, increments would be lost. */
static void *lock_worker(void *arg)
{
	struct worker *w = arg;
	uint64_t *lw = kvi_rmem_lbuf(w->rm, NULL);
	struct kvi_rop op;

	for (int i = 0; i < ROUNDS / 4; i++) {
		do {
			op = kvi_rop_cas(8192, &lw[0], 0, w->id);
			if (kvi_rmem_exec(w->rm, &op, 1, 1000))
				return (void *)1;
		} while (lw[0] != 0);
		op = kvi_rop_read(8200, &lw[1], 8);
		if (kvi_rmem_exec(w->rm, &op, 1, 1000))
			return (void *)1;
		lw[1]++;
		struct kvi_rop rel[2] = { kvi_rop_write(8200, &lw[1], 8), kvi_rop_cas(8192, &lw[2], w->id, 0) };
		if (kvi_rmem_exec(w->rm, rel, 2, 1000) || lw[2] != w->id)
			return (void *)1;
	}
	return NULL;
}

/* Runs fn on THREADS threads, each with its own connection to reg. */
static const char *run_threads(struct kvi_local_region *reg, void *(*fn)(void *))
{
	struct worker w[THREADS];
	const char *why = NULL;

	for (uint32_t i = 0; i < THREADS; i++) {
		w[i].id = i + 1;
		if (kvi_rmem_local_create(reg, 4096, NULL, &w[i].rm) ||
		    pthread_create(&w[i].t, NULL, fn, &w[i]))
			return "cannot start worker";
	}
	for (int i = 0; i < THREADS; i++) {
		void *ret;

		pthread_join(w[i].t, &ret);
		if (ret)
			why = "a worker's operation failed";
		kvi_rmem_destroy(w[i].rm);
	}
	return why;
}

const char *concurrent_faa_loses_no_increment(void)
{
	struct kvi_local_region *reg = kvi_local_region_create(64 * 1024);
	uint64_t *rw;
	const char *why;

	if (!reg)
		return "no memory";
	rw = kvi_local_region_base(reg);
	why = run_threads(reg, faa_worker);
	if (!why && rw[512] != (uint64_t)THREADS * ROUNDS)
		why = "increments were lost";
	kvi_local_region_destroy(reg);
	return why;
}

const char *cas_lock_gives_mutual_exclusion_across_threads(void)
{
	struct kvi_local_region *reg = kvi_local_region_create(64 * 1024);
	uint64_t *rw;
	const char *why;

	if (!reg)
		return "no memory";
	rw = kvi_local_region_base(reg);
	why = run_threads(reg, lock_worker);
	if (!why && rw[1025] != (uint64_t)THREADS * (ROUNDS / 4))
		why = "the lock let two writers in: updates were lost";
	if (!why && rw[1024] != 0)
		why = "the lock was left held";
	kvi_local_region_destroy(reg);
	return why;
}
