/* What one fencing pass costs (server/fence.h): a gone client's lock words
 * released over the loopback in an index of 64 MiB and of 1 GiB, every 8th
 * bucket held by the gone client (every 5th of those also MOVED). The index
 * lives in a local region, the loopback is the local transport: the figure
 * is the pass's own CPU and wall time (docs/design.md quotes it).
 *
 *   fencebench [MIB...]      (default: 64 1024) */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core.h"
#include "fence.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "rmem_local.h"

#define MIB (1ull << 20)
#define IDLE_MS 20000
#define GONE 7u

static struct kvi_local_region *reg;
static atomic_uint connects;

static int local_connect(void *arg, struct kvi_rmem **out)
{
	int rc;

	(void)arg;
	rc = kvi_rmem_local_create(reg, 4096, NULL, out);
	if (rc == 0)
		(*out)->client_id = 1000 + atomic_fetch_add(&connects, 1);
	return rc;
}

/* Client `id` holds every `step`-th bucket from `first`, every 5th of them
 * also MOVED. Returns how many. */
static unsigned lock_as(struct kvi_bucket *index, uint64_t buckets, uint32_t id, uint64_t first, uint64_t step)
{
	unsigned n = 0;

	for (uint64_t b = first; b < buckets; b += step, n++)
		__atomic_store_n(&index[b].lock, kvi_lock_held_by(id) | (n % 5 == 0 ? KVI_LOCK_MOVED : 0),
				 __ATOMIC_RELAXED);
	return n;
}

static int bench(uint64_t index_bytes)
{
	uint64_t buckets = index_bytes / KVI_BUCKET_SIZE, region = index_bytes + 64 * MIB, sum = 0;
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = 1 * MIB, .in_process = 1 };
	struct kvi_errbuf e = { { 0 } };
	struct kvs_fence_stats st;
	struct kvs_core *core = NULL;
	struct kvs_fence *fence = NULL;
	struct kvi_bucket *index;
	unsigned held = 0;
	int rc = 1;

	reg = kvi_local_region_create(region);
	if (!reg || kvs_core_create(kvi_local_region_base(reg), region, &o, &core, &e)) {
		fprintf(stderr, "fencebench: cannot create a %llu MiB index: %s\n",
			(unsigned long long)(index_bytes >> 20), e.msg[0] ? e.msg : "out of memory");
		goto out;
	}
	index = (struct kvi_bucket *)((char *)kvi_local_region_base(reg) + kvs_core_geometry(core)->index_off);
	lock_as(index, buckets, GONE, 3, buckets / 8);
	if (kvs_fence_create(&(struct kvs_fence_opts){ .core = core, .connect = local_connect, .op_timeout_ms = 1000 },
			     &fence) ||
	    kvs_fence_wait_idle(fence, IDLE_MS)) {
		fprintf(stderr, "fencebench: the fencer did not start\n");
		goto out;
	}
	/* Touch the index once so that the pass does not pay first-touch faults. */
	for (uint64_t b = 0; b < buckets; b++)
		sum += __atomic_load_n(&index[b].lock, __ATOMIC_RELAXED);
	(void)sum;
	for (int i = 0; i < 3; i++) {
		held += lock_as(index, buckets, GONE, 3, buckets / 8);
		if (kvs_fence_client(fence, GONE) || kvs_fence_wait_idle(fence, 60000)) {
			fprintf(stderr, "fencebench: pass %d did not finish\n", i);
			goto out;
		}
	}
	kvs_fence_stats(fence, &st);
	printf("fence bench: index %llu MiB (%llu buckets): %llu passes, per pass cpu %.2f ms, wall %.2f ms\n",
	       (unsigned long long)(index_bytes >> 20), (unsigned long long)buckets, (unsigned long long)st.passes,
	       st.cpu_ns / 1e6 / st.passes, st.wall_ns / 1e6 / st.passes);
	if (st.released != held) {
		fprintf(stderr, "fencebench: %llu lock words released, %u held\n", (unsigned long long)st.released, held);
		goto out;
	}
	rc = 0;
out:
	kvs_fence_destroy(fence);
	kvs_core_destroy(core);
	kvi_local_region_destroy(reg);
	reg = NULL;
	return rc;
}

int main(int argc, char **argv)
{
	static const unsigned long dflt[] = { 64, 1024 };
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		char *end;
		unsigned long mib = strtoul(argv[i], &end, 10);

		if (*end || mib == 0 || mib > 65536) {
			fprintf(stderr, "usage: fencebench [MIB...]   (index sizes; default 64 1024)\n");
			return 2;
		}
	}
	if (argc == 1)
		for (unsigned i = 0; i < 2; i++)
			rc |= bench(dflt[i] * MIB);
	for (int i = 1; i < argc; i++)
		rc |= bench(strtoull(argv[i], NULL, 10) * MIB);
	return rc;
}
