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
#include <pthread.h>
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
static struct {
	pthread_mutex_t mu;
	unsigned users;
	struct kvs_inproc s;
} srv = { .mu = PTHREAD_MUTEX_INITIALIZER };

struct kvb_local_opts kvb_local_opts;

/* The server, on first use. Caller holds srv.mu. */
static int start_server(uint64_t mib, char *err, size_t len)
{
	uint64_t stride = kvs_heap_stride(LOCAL_SEGMENT), nsegs = (mib << 20) / LOCAL_SEGMENT;
	uint64_t buckets = (mib << 20) / LOCAL_BYTES_PER_SLOT / KVI_SLOTS_PER_BUCKET * 3 / 2 + 64;
	uint64_t region = ((KVI_SUPERBLOCK_SIZE + buckets * KVI_BUCKET_SIZE + 4095) & ~4095ull) + nsegs * stride;
	unsigned max_op = kvb_local_opts.max_op_ms ? kvb_local_opts.max_op_ms : LOCAL_MAX_OP_MS;
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = LOCAL_SEGMENT, .max_op_ms = max_op,
				   .quarantine_ms = 2 * max_op + KVS_QUARANTINE_MARGIN_MS };
	struct kvi_errbuf e = { { 0 } };

	if (kvs_inproc_init(&srv.s, region, &o, &e)) {
		snprintf(err, len, "cannot create the in-process server: %s", e.msg[0] ? e.msg : "out of memory");
		return -1;
	}
	if (kvb_local_opts.prefault) {
		volatile unsigned char *b = kvi_local_region_base(srv.s.reg);

		/* A write of what is there (the core has formatted it; nothing else
		 * runs yet): a read alone would map the shared zero page. */
		for (uint64_t off = 0; off < region; off += 4096)
			b[off] = b[off];
	}
	if (kvs_inproc_run_reclaimer(&srv.s)) {
		snprintf(err, len, "cannot start the in-process reclaimer");
		kvs_inproc_fini(&srv.s);
		return -1;
	}
	return 0;
}

static int local_connect(const char *host, const char *port, const char *device, unsigned depth, void **out,
			 char *err, size_t len)
{
	char *end;
	unsigned long mib = strtoul(host, &end, 10);
	struct kvc_opts o;
	struct kvi_rmem *rm = NULL;
	kvc_t *h;
	int rc = 0;

	(void)port, (void)device;
	if (*end || mib == 0 || mib > 65536) {
		snprintf(err, len, "local://MIB: expected MiB of item memory, 1..65536, not '%s'", host);
		return -1;
	}
	pthread_mutex_lock(&srv.mu);
	if (!srv.users && start_server(mib, err, len))
		rc = -1;
	/* Deferred (rmem_local.h): the loops poll right after they post. */
	if (!rc && (kvs_inproc_connect(&srv.s, 4096, NULL, &rm) || kvi_rmem_local_set_deferred(rm, 1))) {
		kvi_rmem_destroy(rm); /* accepts NULL */
		rm = NULL;
		snprintf(err, len, "out of memory");
		rc = -1;
	}
	if (!rc)
		srv.users++;
	pthread_mutex_unlock(&srv.mu);
	if (rc)
		return rc;
	kvc_opts_init(&o);
	o.depth = depth;
	o.cache_entries = LOCAL_CACHE_ENTRIES;
	rc = kvi_client_open(rm, &o, &h);
	if (rc) {
		snprintf(err, len, "cannot open a handle: %s", kvc_strerror(rc));
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
	pthread_mutex_lock(&srv.mu);
	if (conn && --srv.users == 0)
		kvs_inproc_fini(&srv.s);
	pthread_mutex_unlock(&srv.mu);
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
	.max_value = kvb_rdma_max_value,
	.lost = kvb_rdma_lost,
	.round_trips = kvb_rdma_round_trips,
	.close = local_close,
	.transport_ticks = local_transport_ticks,
	.max_depth = 64,
};
