/* What one flush_all walk costs (server/flush.h): an index of 1 Mi buckets
 * (256 MiB) in a local region, empty, with one bucket in 8 in use, and
 * with every bucket 90 % full (28 of 31 slots), walked by the flusher over
 * the local transport's loopback. The local transport executes a doorbell
 * at once, so the figure is the walk's own CPU and wall time; over a NIC
 * each doorbell is one loopback round trip more (printed: doorbells).
 * Slots are written with the CPU as any non-zero word: the walk clears
 * slots without reading the objects they name.
 *
 *   flushbench [BUCKETS_LOG2...]      (default: 20) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "flush.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "rmem_local.h"

#define MIB (1ull << 20)

/* Every `every`-th bucket gets `slots` slots in use. */
static uint64_t fill(struct kvi_bucket *index, uint64_t buckets, uint64_t every, unsigned slots)
{
	uint64_t n = 0;

	for (uint64_t b = 0; b < buckets; b += every)
		for (unsigned i = 0; i < slots; i++, n++)
			index[b].slot[i] = 0x1000 + n;
	return n;
}

static int walk(struct kvs_core *core, struct kvs_flusher *f, struct kvi_rmem *rm, const char *what, uint64_t buckets,
		uint64_t items)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_FLUSH, .seq = 1 }, resp;
	struct kvs_flush_stats a, b;
	struct kvs_core_stats st0, st1;
	int rc;

	kvs_flush_stats(f, &a);
	kvs_core_stats(core, &st0);
	if (kvs_core_ctrl(core, 1, &req, &resp) || resp.type != KVI_CTRL_FLUSHED)
		return 1;
	while ((rc = kvs_flush_run(f, rm, kvi_rmem_lbuf(rm, NULL), KVS_FLUSH_LBUF)) == KVS_FLUSH_BUSY)
		;
	kvs_flush_stats(f, &b);
	kvs_core_stats(core, &st1);
	if (rc != KVS_FLUSH_IDLE || st1.flushed - st0.flushed != items) {
		fprintf(stderr, "flushbench: %s: rc %d, %llu items cleared of %llu\n", what, rc,
			(unsigned long long)(st1.flushed - st0.flushed), (unsigned long long)items);
		return 1;
	}
	printf("flush bench: %llu buckets, %-22s %9llu items: wall %7.2f ms, cpu %7.2f ms, %6llu buckets locked, "
	       "%6llu doorbells\n",
	       (unsigned long long)buckets, what, (unsigned long long)items, (double)b.last_ms,
	       (b.cpu_ns - a.cpu_ns) / 1e6, (unsigned long long)(b.locked - a.locked),
	       (unsigned long long)(b.doorbells - a.doorbells));
	return 0;
}

static int bench(unsigned log2)
{
	uint64_t buckets = 1ull << log2, region = buckets * KVI_BUCKET_SIZE + 64 * MIB, sum = 0, n;
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = 1 * MIB, .in_process = 1 };
	struct kvi_errbuf e = { { 0 } };
	struct kvi_local_region *reg = kvi_local_region_create(region);
	struct kvs_core *core = NULL;
	struct kvs_flusher *f = NULL;
	struct kvi_rmem *rm = NULL;
	struct kvi_bucket *index;
	int rc = 1;

	if (!reg || kvs_core_create(kvi_local_region_base(reg), region, &o, &core, &e) || kvs_flush_create(core, &f) ||
	    kvi_rmem_local_create(reg, KVS_FLUSH_LBUF, NULL, &rm)) {
		fprintf(stderr, "flushbench: cannot create a %llu-bucket index: %s\n", (unsigned long long)buckets,
			e.msg[0] ? e.msg : "out of memory");
		goto out;
	}
	rm->client_id = 1000;
	index = (struct kvi_bucket *)((char *)kvi_local_region_base(reg) + kvs_core_geometry(core)->index_off);
	/* Touch the index once so that the walks do not pay first-touch faults. */
	for (uint64_t b = 0; b < buckets; b++)
		sum += __atomic_load_n(&index[b].lock, __ATOMIC_RELAXED);
	(void)sum;
	if (walk(core, f, rm, "empty", buckets, 0))
		goto out;
	n = fill(index, buckets, 8, 4);
	if (walk(core, f, rm, "1 bucket in 8 (4 slots)", buckets, n))
		goto out;
	n = fill(index, buckets, 1, 28);
	if (walk(core, f, rm, "every bucket 90 % full", buckets, n))
		goto out;
	rc = 0;
out:
	kvi_rmem_destroy(rm);
	kvs_flush_destroy(f);
	kvs_core_destroy(core);
	kvi_local_region_destroy(reg);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		char *end;
		unsigned long v = strtoul(argv[i], &end, 10);

		if (*end || v < 6 || v > 26) {
			fprintf(stderr, "usage: flushbench [BUCKETS_LOG2...]   (6 .. 26; default 20)\n");
			return 2;
		}
	}
	if (argc == 1)
		return bench(20);
	for (int i = 1; i < argc; i++)
		rc |= bench((unsigned)strtoul(argv[i], NULL, 10));
	return rc;
}
