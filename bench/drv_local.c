/* kvbench driver local://MIB: a whole kvcache server in this process -- the
 * real server core (segments, quarantine), the real reclaimer on its own
 * thread, real client handles -- over the in-process transport instead of a
 * NIC. What it measures that does not depend on the transport (hit ratio,
 * what is evicted) is kvcache's own; latencies are not.
 *
 * MIB is the memory for items: the heap gets that many MiB of usable segment
 * bytes (the index and jemalloc's page per segment come on top, as memcached's
 * hash table comes on top of its -m). Operations here take microseconds, so
 * the server allows LOCAL_MAX_OP_MS per operation and quarantines reclaimed
 * segments for twice that plus kvserver's margin, as a server on a NIC would
 * with a deadline suited to its network: the connections are deferred
 * (rmem_local.h), so a posted batch waits for its thread's next poll as a
 * packet waits on a wire, and the memory it addresses must not be reused
 * under it meanwhile (not in_process, core.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "conn.h"
#include "engine.h"
#include "core.h"
#include "driver.h"
#include "heap.h"
#include "inproc.h"
#include "kvclient.h"

#define LOCAL_SEGMENT (64u << 10)
/* Operations take microseconds, but a thread the scheduler preempts on a busy
 * machine (a few ms per time slice) must not miss its deadline: one that does
 * breaks its handle. 2 ms did, under a load average of 4 on 2 cores. */
#define LOCAL_MAX_OP_MS 50u
#define LOCAL_CACHE_ENTRIES (1u << 16)
#define LOCAL_BYTES_PER_SLOT 144u /* a small item's footprint: index sized to the heap */

/* The server (server/inproc.h), started by the first connection and
 * stopped by the last one's close. */
static struct kvs_inproc_shared srv = KVS_INPROC_SHARED_INIT;

struct kvb_local_opts kvb_local_opts;

static int local_connect(const char *host, const char *port, const char *device, unsigned depth, void **out,
			 char *err, size_t len)
{
	char *end;
	unsigned long mib = strtoul(host, &end, 10);
	struct kvc_opts o;
	struct kvi_rmem *rm = NULL;
	kvc_t *h;
	int rc;

	(void)port, (void)device;
	if (*end || mib == 0 || mib > 65536) {
		snprintf(err, len, "local://MIB: expected MiB of item memory, 1..65536, not '%s'", host);
		return -1;
	}
	{
		uint64_t stride = kvs_heap_stride(LOCAL_SEGMENT), nsegs = ((uint64_t)mib << 20) / LOCAL_SEGMENT;
		uint64_t buckets = ((uint64_t)mib << 20) / LOCAL_BYTES_PER_SLOT / KVI_SLOTS_PER_BUCKET * 3 / 2 + 64;
		uint64_t region = ((KVI_SUPERBLOCK_SIZE + buckets * KVI_BUCKET_SIZE + 4095) & ~4095ull) + nsegs * stride;
		unsigned max_op = kvb_local_opts.max_op_ms ? kvb_local_opts.max_op_ms : LOCAL_MAX_OP_MS;
		struct kvs_core_opts co = { .buckets = buckets, .segment_size = LOCAL_SEGMENT, .max_op_ms = max_op,
					    .quarantine_ms = 2 * max_op + KVS_QUARANTINE_MARGIN_MS };

		if (kvs_inproc_share(&srv, region, &co, kvb_local_opts.prefault, &rm, err, len))
			return -1;
	}
	kvc_opts_init(&o);
	o.depth = depth;
	o.cache_entries = LOCAL_CACHE_ENTRIES;
	rc = kvi_client_open(rm, &o, &h);
	if (rc) {
		snprintf(err, len, "cannot open a handle: %s", kvc_strerror(rc));
		kvs_inproc_unshare(&srv);
		return rc;
	}
	rc = kvb_rdma_wrap(h, depth, out, err, len);
	if (rc == 0) /* the handle owns rm; it has no way to make another */
		kvb_rdma_set_aux(*out, rm);
	return rc;
}

static uint64_t local_transport_ticks(void *conn)
{
	return kvi_rmem_local_busy_ticks(kvb_rdma_aux(conn));
}

static void local_close(void *conn)
{
	kvb_rdma_close(conn);
	if (conn)
		kvs_inproc_unshare(&srv);
}

const struct kvb_driver kvb_driver_local = {
	.scheme = "local",
	.name = "kvcache-local",
	.connect = local_connect,
	.submit = kvb_rdma_submit,
	.submit_many = kvb_rdma_submit_many,
	.poll = kvb_rdma_poll,
	.errname = kvc_err_name,
	.server_cpu = kvb_rdma_server_cpu,
	.server_mem = kvb_rdma_server_mem,
	.server_limit = kvb_rdma_server_limit,
	.max_value = kvb_rdma_max_value,
	.lost = kvb_rdma_lost,
	.round_trips = kvb_rdma_round_trips,
	.close = local_close,
	.transport_ticks = local_transport_ticks,
	.max_depth = 64,
};
