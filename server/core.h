/* The server core: formats the region and answers control requests.
 * Transport-independent: kvserver feeds it requests received over verbs, the
 * local in-process transport calls kvs_core_ctrl directly.
 *
 * What the core owns and trusts:
 *  - A private copy of the layout (kvs_core_superblock). The region's own
 *    superblock is written once at create and never read back: clients can
 *    RDMA-WRITE anywhere in the region, so nothing in it is trusted by the
 *    server, and no server decision depends on region contents.
 *  - The segment table (heap-private memory): which segment is free, granted
 *    to which client and still open for appends, or sealed.
 *  - The heap allocator (heap.h), whose metadata is outside the region too.
 * The region memory itself belongs to the caller (kvserver's kvs_region) and
 * must outlive the core.
 *
 * Segment life cycle (SPEC "Memory management"):
 *   FREE --SEG_REQ--> OPEN (granted to one client, which appends objects)
 *   OPEN --client asks for more than KVS_MAX_OPEN_SEGMENTS, or leaves--> SEALED
 *   SEALED --kvs_core_free_segment (eviction, later issue)--> FREE
 * Objects in a sealed segment stay valid and readable; it only receives no
 * more appends. A segment is granted to one client at a time: no two clients
 * ever append to the same segment.
 *
 * Threading: one thread (kvserver's control loop) at a time. */
#ifndef KVS_CORE_H
#define KVS_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "heap.h"
#include "layout.h"
#include "verbs_util.h" /* struct kvi_errbuf */
#include "wire.h"

#define KVS_DEFAULT_SEGMENT_SIZE (1u << 20)
#define KVS_MIN_SEGMENT_SIZE (64u << 10)
#define KVS_MAX_SEGMENT_SIZE (1u << 20)
#define KVS_MIN_BUCKETS 64u /* floor of the default; an explicit count may go down to 2 */
/* Default index size: one bucket (15 slots) per KVS_BYTES_PER_BUCKET bytes of
 * region, i.e. the index takes 1/16 of the region and there is one slot per
 * ~137 bytes: about one per object for small items (16 B keys, 100 B values
 * take 160 bytes), so the index fills up around when the heap does. */
#define KVS_BYTES_PER_BUCKET 2048u
/* Unsealed segments a client may hold; granting one more seals its oldest. */
#define KVS_MAX_OPEN_SEGMENTS 4u

struct kvs_core_opts {
	uint64_t buckets;      /* 0 = default: region_size / 2048, at least 64; else >= 2 */
	uint64_t segment_size; /* bytes, 0 = default 1 MiB; power of two, 64 KiB .. 1 MiB */
};

struct kvs_core;

/* Compute the layout for a region of region_size bytes at address base
 * without touching memory: fills sb as kvs_core_create would write it. Any
 * page-aligned base gives the same layout, so kvserver validates its flags
 * with base 0 before mapping anything. 0, or KVC_EINVAL with the reason in e. */
int kvs_core_plan(uintptr_t base, uint64_t region_size, const struct kvs_core_opts *o,
		  struct kvi_superblock *sb, struct kvi_errbuf *e);

/* Format [region_base, +region_size) (superblock, zeroed index) and set up the
 * heap allocator over its heap area. region_base must be page-aligned; o may be
 * NULL for defaults. 0, or a negative KVC_ code with the reason in e. */
int kvs_core_create(void *region_base, uint64_t region_size, const struct kvs_core_opts *o,
		    struct kvs_core **out, struct kvi_errbuf *e);

/* Free everything the core owns (not the region); accepts NULL. */
void kvs_core_destroy(struct kvs_core *c);

/* Handle one control request from client_id (a kvi_ctrl_handler; core is a
 * struct kvs_core *). Fills resp (its seq echoes req->seq) and returns 0 --
 * including for refusals the client should hear about, such as
 * KVI_CTRL_ERROR/KVC_ENOMEM when the heap is exhausted -- or returns a
 * negative code for a request no well-behaved client sends (a server-to-client
 * type, an unknown type, client id 0): the transport then disconnects that
 * client, never the server.
 *
 *   SEG_REQ -> SEG_GRANT arg[0] = segment offset in the region (page-aligned,
 *                                 not segment-aligned: heap.h "Segment grid"),
 *                        arg[1] = segment size in bytes,
 *                        arg[2] = offset of the client's segment this grant
 *                                 sealed, 0 if none (it stays readable but
 *                                 must receive no more appends)
 *           -> ERROR status = KVC_ENOMEM (heap exhausted)
 *   STATS_REQ -> STATS arg[0] = this process's CPU time (user + system, ns),
 *                      arg[1] = segments in use, arg[2] = segments in all,
 *                      arg[3] = clients holding segments,
 *                      arg[4] = bytes holding items (index + granted segments)
 * Request arguments are reserved and ignored. */
int kvs_core_ctrl(void *core, uint32_t client_id, const struct kvi_ctrl *req, struct kvi_ctrl *resp);

/* client_id is gone: seal every segment it holds open. The segments and the
 * objects in them stay (readable until reclaimed). */
void kvs_core_client_left(struct kvs_core *c, uint32_t client_id);

/* Return a sealed segment to the heap (eviction's job, a later issue; the
 * caller is responsible for the quarantine SPEC requires before reuse).
 * 0, or KVC_EINVAL if seg_off is not the start of a sealed segment. */
int kvs_core_free_segment(struct kvs_core *c, uint64_t seg_off);

/* The layout as the core formatted it (its private copy, never the region's). */
const struct kvi_superblock *kvs_core_superblock(const struct kvs_core *c);

struct kvs_core_stats {
	uint64_t segments_total;   /* heap_bytes / stride (segment size + one page, heap.h) */
	uint64_t segments_granted; /* open + sealed */
	uint64_t segments_free;
	uint64_t heap_bytes;
	uint64_t index_bytes;
	uint64_t grants_refused; /* SEG_REQs answered with KVC_ENOMEM */
	uint64_t segments_sealed;
	uint64_t clients; /* clients holding open segments */
};
void kvs_core_stats(const struct kvs_core *c, struct kvs_core_stats *out);

/* One line for the log: "segments 3 open, 1 sealed, 60 free of 64 x 1024 KiB; 0 refused". */
void kvs_core_summary(const struct kvs_core *c, char *buf, size_t len);

/* The heap allocator, for its statistics (tests prove with them where
 * jemalloc's memory came from). */
const struct kvs_heap *kvs_core_heap(const struct kvs_core *c);

#endif
