/* The server core: region format, option checks, segment grants and their
 * life cycle, refusal of invalid control messages, and the guarantee that
 * jemalloc keeps its metadata out of the client-writable region. */
#include <criterion/criterion.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "dpath_env.h"
#include "kvclient_errors.h"

#define MIB (1ull << 20)
#define SEG (64u << 10)
#define REGION (4 * MIB)

static uint8_t *region;
static struct kvs_core *core;
static unsigned quota_pct; /* make_core's client quota; 0 = the default */

static uint8_t *region_alloc(uint64_t size)
{
	/* 2 MiB-aligned like kvserver's region; filled with garbage so that
	 * "zeroed" has to be done by the core. */
	uint8_t *r = aligned_alloc(2 * MIB, size);

	cr_assert_not_null(r);
	memset(r, 0xee, size);
	return r;
}

/* Operations of at most 1 ms: segments settle in 101 ms and stay in
 * quarantine for 102 ms, so that the life cycle runs in test time. */
#define MAX_OP_MS 1u
#define QUARANTINE_MS 102u
#define SETTLE_US ((MAX_OP_MS + KVS_QUARANTINE_MARGIN_MS) * 1000u + 2000u)

static void make_core(uint64_t size, uint64_t buckets, uint64_t seg)
{
	struct kvs_core_opts o = { .buckets = buckets, .segment_size = seg, .max_op_ms = MAX_OP_MS,
				   .quarantine_ms = QUARANTINE_MS, .client_quota_pct = quota_pct };
	struct kvi_errbuf e = { { 0 } };

	region = region_alloc(size);
	cr_assert_eq(kvs_core_create(region, size, &o, &core, &e), 0, "%s", e.msg);
	kvs_core_attach_reclaimer(core); /* as kvserver's reclaimer thread does */
}

static void teardown(void)
{
	kvs_core_destroy(core);
	core = NULL;
	free(region);
	region = NULL;
	quota_pct = 0;
}

TestSuite(server_core, .fini = teardown);

static int seg_req_need(uint32_t client, uint32_t seq, uint64_t need, uint64_t used, struct kvi_ctrl *resp)
{
	struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seq = seq, .seg_req = { .need = need, .used = used } };

	return kvs_core_ctrl(core, client, &req, resp);
}

/* A request for a whole segment. */
static int seg_req(uint32_t client, uint32_t seq, struct kvi_ctrl *resp)
{
	return seg_req_need(client, seq, SEG, 0, resp);
}

/* A grant that must succeed: returns the segment offset. */
static uint64_t grant(uint32_t client)
{
	static uint32_t seq = 100;
	struct kvi_ctrl resp;

	seq++;
	cr_assert_eq(seg_req(client, seq, &resp), 0);
	cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT, "type %u status %s", resp.type, kvc_err_name(resp.status));
	cr_assert_eq(resp.seq, seq);
	cr_assert_eq(resp.status, 0);
	cr_assert_eq(resp.seg_grant.len, SEG);
	return resp.seg_grant.off;
}

/* Whole segments to one client until the server says "not yet" (the
 * reserve is left to the reclaimer); returns how many, offsets in out. */
static uint64_t grant_all(uint32_t client, uint64_t *out, uint64_t max)
{
	struct kvi_ctrl resp;
	uint64_t n = 0;

	for (;;) {
		cr_assert_eq(seg_req(client, 7, &resp), 0);
		if (resp.type == KVI_CTRL_ERROR)
			break;
		cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT);
		cr_assert_lt(n, max, "more grants than segments");
		out[n++] = resp.seg_grant.off;
	}
	cr_expect_eq(resp.status, KVC_EAGAIN, "got %s", kvc_err_name(resp.status));
	cr_expect_eq(resp.seq, 7);
	return n;
}

/* grant_all, then the reserve through the reclaimer's privileged grants. */
static uint64_t take_all(uint32_t client, uint64_t *out, uint64_t max)
{
	uint64_t n = grant_all(client, out, max);
	struct kvs_extent x = { 0 };

	while (kvs_core_server_extent(core, &x, SEG) == 0) {
		cr_assert_lt(n, max);
		out[n++] = x.off;
	}
	return n;
}

/* Let every sealed segment settle, reclaim it (as if no slot pointed into
 * it), and wait out the quarantine. Returns how many were reclaimed. */
static unsigned reclaim_all_sealed(void)
{
	uint64_t off, len;
	unsigned n = 0;

	usleep(SETTLE_US);
	while (kvs_core_reclaim_begin(core, &off, &len) == 0) {
		kvs_core_reclaim_end(core, off, 1, 0, NULL);
		n++;
	}
	usleep(QUARANTINE_MS * 1000u + 2000u);
	kvs_core_tick(core, 0);
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Every offset a segment start on the heap's grid (heap.h), page-aligned,
 * inside the heap, past the index, and no two overlapping. */
static void expect_disjoint_segments_in_heap(uint64_t *off, uint64_t n)
{
	const struct kvi_geometry *sb = kvs_core_geometry(core);
	uint64_t stride = kvs_heap_stride(sb->segment_size);

	qsort(off, n, sizeof(*off), cmp_u64);
	for (uint64_t i = 0; i < n; i++) {
		cr_expect_geq(off[i], sb->heap_off, "segment %#lx before the heap", (unsigned long)off[i]);
		cr_expect_geq(off[i], sb->index_off + sb->bucket_count * KVI_BUCKET_SIZE, "segment on the index");
		cr_expect_leq(off[i] + sb->segment_size, sb->heap_off + sb->heap_size, "segment past the heap");
		cr_expect_eq((off[i] - sb->heap_off) % stride, 0, "segment %#lx off the grid", (unsigned long)off[i]);
		cr_expect_eq(off[i] % 4096, 0, "segment %#lx not page-aligned", (unsigned long)off[i]);
		if (i)
			cr_expect_geq(off[i], off[i - 1] + sb->segment_size, "segments %#lx and %#lx overlap",
				      (unsigned long)off[i - 1], (unsigned long)off[i]);
	}
}

Test(server_core, formats_a_superblock_that_readers_accept_and_a_zeroed_index)
{
	const struct kvi_superblock *rsb;
	const struct kvi_geometry *sb;
	struct kvi_superblock want;
	const struct kvi_bucket *b;

	make_core(REGION, 0, SEG);
	rsb = (const struct kvi_superblock *)region;
	sb = kvs_core_geometry(core);
	cr_expect_null(kvi_geometry_check(sb), "%s", kvi_geometry_check(sb));
	kvi_superblock_from_geometry(&want, sb);
	cr_assert_eq(memcmp(region, &want, sizeof(want)), 0, "region superblock is the core's layout");
	cr_expect_eq(kvi_superblock_check(rsb, REGION), 0);
	cr_expect_eq(rsb->magic, KVI_REGION_MAGIC);
	cr_expect_eq(rsb->state, KVI_STATE_SERVING);
	cr_expect_eq(sb->layout_version, KVI_LAYOUT_VERSION);
	cr_expect_eq(sb->epoch, 1);
	cr_expect_eq(sb->region_size, REGION);
	cr_expect_eq(sb->index_off, 4096);
	cr_expect_eq(sb->segment_size, SEG);
	for (unsigned i = sizeof(want); i < KVI_SUPERBLOCK_SIZE; i++)
		cr_assert_eq(region[i], 0, "superblock page byte %u not zero", i);
	b = (const struct kvi_bucket *)(region + sb->index_off);
	for (uint64_t i = 0; i < sb->bucket_count; i++) {
		cr_assert_eq(b[i].lock, 0, "bucket %lu locked", (unsigned long)i);
		for (unsigned j = 0; j < KVI_SLOTS_PER_BUCKET; j++)
			cr_assert_eq(b[i].slot[j], 0, "bucket %lu slot %u", (unsigned long)i, j);
	}
	cr_expect_geq(sb->heap_off, sb->index_off + sb->bucket_count * KVI_BUCKET_SIZE);
	cr_expect_eq(sb->heap_off, 4096 + sb->bucket_count * KVI_BUCKET_SIZE, "first page after the index");
	cr_expect_leq(sb->heap_off + sb->heap_size, REGION);
	cr_expect_eq(sb->heap_size % kvs_heap_stride(SEG), 0);
	/* Only the tail too short for one more segment is lost. */
	cr_expect_lt(REGION - sb->heap_off - sb->heap_size, kvs_heap_stride(SEG));
}

Test(server_core, a_segment_costs_at_most_one_page_of_padding)
{
	uint64_t pad = kvs_heap_stride(SEG) - SEG;

	cr_expect(pad == 0 || pad == 4096, "jemalloc pads a segment with %lu bytes", (unsigned long)pad);
	cr_expect_eq(kvs_heap_stride(MIB) - MIB, pad);
}

Test(server_core, default_buckets_are_one_per_kib_and_segments_one_mib)
{
	make_core(16 * MIB, 0, 0);
	cr_expect_eq(kvs_core_geometry(core)->bucket_count, 16 * MIB / KVS_BYTES_PER_BUCKET);
	cr_expect_eq(kvs_core_geometry(core)->segment_size, MIB);
	cr_expect_eq(kvs_core_geometry(core)->heap_off, MIB + 4096, "first page after a 1 MiB index");
}

Test(server_core, explicit_buckets_and_segment_size_are_used)
{
	make_core(REGION, 1000, 128u << 10);
	cr_expect_eq(kvs_core_geometry(core)->bucket_count, 1000);
	cr_expect_eq(kvs_core_geometry(core)->segment_size, 128u << 10);
}

Test(server_core, a_two_bucket_index_is_allowed)
{
	make_core(REGION, 2, SEG);
	cr_expect_eq(kvs_core_geometry(core)->bucket_count, 2);
	cr_expect_eq(kvi_superblock_check((const struct kvi_superblock *)region, REGION), 0);
}

/* A seed per start, from getrandom (hash.h): two servers place keys
 * differently; a test may fix it; the region's superblock never holds it. */
Test(server_core, the_hash_seed_is_random_per_core_unless_fixed)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvs_core *c2, *c3;
	uint8_t *r2 = region_alloc(REGION), *r3 = region_alloc(REGION);

	make_core(REGION, 0, SEG);
	cr_assert_eq(kvs_core_create(r2, REGION, NULL, &c2, &e), 0, "%s", e.msg);
	cr_assert_eq(kvs_core_create(r3, REGION, &(struct kvs_core_opts){ .hash_seed = 0x1234 }, &c3, &e), 0,
		     "%s", e.msg);
	cr_expect_neq(kvs_core_geometry(core)->hash_seed, kvs_core_geometry(c2)->hash_seed,
		      "two cores drew the same seed");
	cr_expect_eq(kvs_core_geometry(c3)->hash_seed, 0x1234, "a fixed seed is kept");
	for (size_t i = 0; i + 8 <= KVI_SUPERBLOCK_SIZE; i++) {
		uint64_t w;

		memcpy(&w, r2 + i, 8);
		cr_assert_neq(w, kvs_core_geometry(c2)->hash_seed, "the seed is in the superblock page");
	}
	kvs_core_destroy(c2);
	kvs_core_destroy(c3);
	free(r2);
	free(r3);
}

Test(server_core, bad_options_are_refused_with_einval_and_leave_the_region_alone)
{
	static const struct {
		uint64_t size, buckets, seg;
		const char *why;
	} bad[] = {
		{ REGION, 0, 3 * SEG, "power of two" },     { REGION, 0, 32u << 10, "power of two" },
		{ REGION, 0, 2 * MIB, "power of two" },     { REGION, 1, SEG, "too few" },
		{ REGION, REGION / KVI_BUCKET_SIZE, SEG, "do not fit" },
		{ MIB, 0, MIB, "no room for one" },
		{ REGION, REGION / KVI_BUCKET_SIZE - 64, SEG, "no room for one" },
		{ 4096, 0, SEG, "larger than" },
	};

	region = region_alloc(REGION);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvs_core_opts o = { .buckets = bad[i].buckets, .segment_size = bad[i].seg };
		struct kvi_errbuf e = { { 0 } };
		struct kvs_core *c = (void *)1;

		cr_expect_eq(kvs_core_create(region, bad[i].size, &o, &c, &e), KVC_EINVAL, "case %zu", i);
		cr_expect_null(c, "case %zu", i);
		cr_expect(strstr(e.msg, bad[i].why) != NULL, "case %zu: message '%s' lacks '%s'", i, e.msg,
			  bad[i].why);
	}
	for (uint64_t i = 0; i < REGION; i++) {
		if (region[i] != 0xee)
			cr_assert_fail("byte %lu written by a refused create", (unsigned long)i);
	}
}

Test(server_core, an_unaligned_region_is_refused)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvs_core *c;

	region = region_alloc(REGION);
	cr_expect_eq(kvs_core_create(region + 16, REGION - 4096, NULL, &c, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "page-aligned") != NULL, "%s", e.msg);
}

Test(server_core, a_page_aligned_region_that_is_not_2mib_aligned_works_the_same)
{
	struct kvi_errbuf e = { { 0 } };
	const struct kvi_geometry *sb;
	uint64_t off[64], n;
	uint8_t *base;

	region = region_alloc(REGION + 2 * MIB);
	base = region + 4096;
	cr_assert_eq(kvs_core_create(base, REGION, &(struct kvs_core_opts){ .segment_size = SEG }, &core, &e), 0,
		     "%s", e.msg);
	kvs_core_attach_reclaimer(core);
	sb = kvs_core_geometry(core);
	cr_expect_eq(kvi_superblock_check((const struct kvi_superblock *)base, REGION), 0);
	n = take_all(1, off, 64);
	cr_expect_eq(n, sb->heap_size / kvs_heap_stride(SEG));
	expect_disjoint_segments_in_heap(off, n);
}

Test(server_core, grants_are_distinct_aligned_inside_the_heap_and_off_the_index)
{
	struct kvs_core_stats st;
	uint64_t off[64], n = 0;

	quota_pct = 100; /* each takes a third of the heap: no quota here */
	make_core(REGION, 0, SEG);
	kvs_core_stats(core, &st);
	cr_assert_gt(st.segments_total, 8);
	cr_assert_leq(st.segments_total, 64);
	cr_expect_eq(st.segments_free, st.segments_total);
	/* Three clients interleaved, whole segments, all but the reserve. */
	for (uint64_t i = 0; i < st.segments_total - KVS_RESERVE_SEGMENTS; i++)
		off[n++] = grant((uint32_t)(i % 3) + 1);
	expect_disjoint_segments_in_heap(off, n);
	kvs_core_stats(core, &st);
	cr_expect_eq(st.segments_granted, n);
	cr_expect_eq(st.segments_free, KVS_RESERVE_SEGMENTS);
	cr_expect_eq(st.segments_open, 3, "one open extent per client");
	cr_expect_eq(st.segments_sealed, n - 3, "asking for the next extent sealed the previous one");
}

Test(server_core, extents_start_small_and_double_up_to_a_segment)
{
	struct kvi_ctrl resp;
	uint64_t want = KVS_MIN_EXTENT;

	make_core(REGION, 0, SEG);
	cr_assert_eq(seg_req_need(5, 0xabcdef, 100, 0, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_SEG_GRANT);
	cr_expect_eq(resp.seq, 0xabcdef);
	cr_expect_eq(resp.seg_grant.len, KVS_MIN_EXTENT, "a first extent is small");
	for (int i = 0; i < 6; i++) {
		uint64_t prev = resp.seg_grant.len;

		cr_assert_eq(seg_req_need(5, 1, 100, prev, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT);
		want = want * 2 > SEG ? SEG : want * 2;
		cr_expect_eq(resp.seg_grant.len, want, "grant %d: %lu bytes", i, (unsigned long)resp.seg_grant.len);
	}
	/* An object larger than the next extent gets room for itself. */
	teardown();
	make_core(REGION, 0, SEG);
	cr_assert_eq(seg_req_need(6, 1, 40000, 0, &resp), 0);
	cr_expect_geq(resp.seg_grant.len, 40000);
	cr_assert_eq(seg_req_need(6, 1, SEG + 1, 0, &resp), 0, "an answer, not a disconnect");
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_EINVAL, "larger than a segment");
}

Test(server_core, a_thousand_small_clients_share_segments_without_overlap)
{
	static uint64_t off[1000], len[1000];
	struct kvs_core_stats st;
	struct kvi_ctrl resp;

	make_core(8 * MIB, 0, SEG);
	for (uint32_t c = 0; c < 1000; c++) {
		struct kvi_ctrl ret = { .type = KVI_CTRL_SEG_RETURN, .seg_return = { .used = 160 } };

		cr_assert_eq(seg_req_need(c + 1, 1, 160, 0, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT, "client %u: %s", c, kvc_err_name(resp.status));
		off[c] = resp.seg_grant.off;
		len[c] = 160; /* what it used and returned */
		cr_assert_eq(kvs_core_ctrl(core, c + 1, &ret, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_SEG_RETURNED);
		kvs_core_client_left(core, c + 1);
	}
	for (unsigned i = 1; i < 1000; i++)
		cr_assert_geq(off[i], off[i - 1] + len[i - 1], "extents %u and %u overlap", i - 1, i);
	kvs_core_stats(core, &st);
	cr_expect_leq(st.segments_total - st.segments_free, 3, "160 KB of items took %lu segments",
		      (unsigned long)(st.segments_total - st.segments_free));
	cr_expect_eq(st.carved_bytes, 1000 * 160, "carved %lu", (unsigned long)st.carved_bytes);
	cr_expect_eq(st.clients, 0);
}

Test(server_core, exhausted_heap_answers_eagain_and_never_overlaps)
{
	struct kvs_core_stats st;
	uint64_t off[64], n;
	struct kvi_ctrl resp;

	make_core(REGION, 0, SEG);
	n = grant_all(1, off, 64);
	kvs_core_stats(core, &st);
	/* Client 1 went over its quota on the way: the last segment before the
	 * reserve is left to clients within theirs. */
	cr_expect_eq(n, st.segments_total - KVS_RESERVE_SEGMENTS - 1, "the heap but the reserve and one is grantable");
	expect_disjoint_segments_in_heap(off, n);
	cr_expect_eq(st.grants_deferred, 1);
	off[n++] = grant(2);
	expect_disjoint_segments_in_heap(off, n);
	cr_assert_eq(seg_req(2, 99, &resp), 0, "a refusal is an answer, not a disconnect");
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_EAGAIN, "eviction is on: reclamation will make room");
	cr_expect_eq(resp.seq, 99);
}

/* Denial of service by asking: a client that takes segments in a loop gets
 * no more than its quota while another client needs memory, and that client
 * gets its grants (core.h "Quota"). */
Test(server_core, a_flooding_client_gets_equota_while_another_client_still_gets_grants)
{
	struct kvs_core_stats st;
	struct kvi_ctrl resp;
	uint64_t n = 0, quota_segs;

	make_core(REGION, 0, SEG);
	kvs_core_stats(core, &st);
	cr_assert_lt(st.quota_bytes, st.heap_bytes / 3, "default quota: a quarter of the heap");
	cr_assert_geq(st.quota_bytes, 2 * SEG);
	quota_segs = st.quota_bytes / SEG;
	/* Nobody else wants memory yet: the flooder (1) may go past its quota,
	 * and so may a heavy writer (3), which takes all the rest but the
	 * reserve and one segment. */
	for (uint64_t i = 0; i < quota_segs + 3; i++)
		cr_assert_eq(seg_req_need(1, 1, SEG, 0, &resp) || resp.type != KVI_CTRL_SEG_GRANT, 0);
	cr_expect_eq(kvs_core_client_held(core, 1), (quota_segs + 3) * SEG);
	do
		cr_assert_eq(seg_req_need(3, 1, SEG, SEG, &resp), 0);
	while (resp.type == KVI_CTRL_SEG_GRANT && ++n < 64);
	cr_expect_eq(resp.status, KVC_EAGAIN, "got %s", kvc_err_name(resp.status));
	cr_expect_eq(n + quota_segs + 3, st.segments_total - KVS_RESERVE_SEGMENTS - 1);
	/* A newcomer's first PUT finds room... */
	cr_assert_eq(seg_req_need(2, 2, 160, 0, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_SEG_GRANT, "newcomer refused: %s", kvc_err_name(resp.status));
	/* ... and when it needs more than there is, it waits: it is starving. */
	cr_assert_eq(seg_req_need(2, 3, SEG, 160, &resp), 0);
	cr_expect_eq(resp.status, KVC_EAGAIN, "got %s", kvc_err_name(resp.status));
	/* The flooder, asking for more with its extent unused, is refused
	 * outright, and keeps that extent. */
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(seg_req_need(1, 4, SEG, 0, &resp), 0, "an answer, not a disconnect");
		cr_expect_eq(resp.type, KVI_CTRL_ERROR);
		cr_expect_eq(resp.status, KVC_EQUOTA, "got %s", kvc_err_name(resp.status));
		cr_expect_eq(resp.seq, 4);
	}
	kvs_core_stats(core, &st);
	cr_expect_eq(st.grants_over_quota, 3);
	cr_expect_eq(st.segments_open, 2, "the flooder's extent and the newcomer's carving segment");
	/* Claiming to have filled it only makes it wait, like the heavy writer. */
	cr_assert_eq(seg_req_need(1, 5, SEG, SEG, &resp), 0);
	cr_expect_eq(resp.status, KVC_EAGAIN, "got %s", kvc_err_name(resp.status));
	cr_assert_eq(seg_req_need(3, 5, SEG, 0, &resp), 0);
	cr_expect_eq(resp.status, KVC_EAGAIN, "got %s", kvc_err_name(resp.status));
	kvs_core_stats(core, &st);
	cr_expect_eq(st.grants_throttled, 2);
	cr_expect_eq(st.grants_over_quota, 3);
	/* What reclamation frees goes to the starving client, and the others'
	 * bytes stop counting once their segments are reclaimed. */
	cr_expect_eq(reclaim_all_sealed(), n + quota_segs + 3);
	cr_expect_eq(kvs_core_client_held(core, 1), 0);
	cr_expect_eq(kvs_core_client_held(core, 3), 0);
	cr_assert_eq(seg_req_need(2, 6, SEG, 0, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_SEG_GRANT, "starving client refused: %s", kvc_err_name(resp.status));
	cr_assert_eq(seg_req_need(1, 7, SEG, 0, &resp), 0);
	cr_expect_eq(resp.type, KVI_CTRL_SEG_GRANT, "within its quota again: %s", kvc_err_name(resp.status));
}

/* One writer alone may fill the heap (a cache with one writer is full of its
 * items): the quota never refuses it, however much it holds. */
Test(server_core, a_lone_heavy_writer_is_never_refused)
{
	struct kvs_core_stats st;
	struct kvi_ctrl resp;
	uint64_t used = 0;

	make_core(REGION, 0, SEG);
	for (int round = 0; round < 3; round++) {
		unsigned grants = 0;

		for (;;) {
			cr_assert_eq(seg_req_need(1, 1, 4000, used, &resp), 0);
			if (resp.type != KVI_CTRL_SEG_GRANT)
				break;
			used = resp.seg_grant.len; /* fills every extent */
			grants++;
		}
		cr_expect_eq(resp.status, KVC_EAGAIN, "round %d: %s", round, kvc_err_name(resp.status));
		cr_expect_gt(grants, 0);
		used = 0;
		cr_expect_gt(reclaim_all_sealed(), 0);
	}
	kvs_core_stats(core, &st);
	cr_expect_eq(st.grants_over_quota, 0);
	cr_expect_eq(st.grants_refused, 0);
}

/* "Segments it does not fill are not granted again": extents grow only for a
 * writer that used at least half of the last one, and shrink otherwise. */
Test(server_core, extents_grow_only_when_the_writer_filled_half_of_the_last_one)
{
	struct kvs_core_stats st;
	struct kvi_ctrl resp;
	uint64_t len;

	make_core(REGION, 0, SEG);
	cr_assert_eq(seg_req_need(1, 1, 100, 0, &resp), 0);
	len = resp.seg_grant.len;
	cr_expect_eq(len, KVS_MIN_EXTENT);
	for (int i = 0; i < 4; i++) { /* filled: doubles up to a segment */
		cr_assert_eq(seg_req_need(1, 1, 100, len, &resp), 0);
		cr_expect_eq(resp.seg_grant.len, len * 2 > SEG ? SEG : len * 2);
		len = resp.seg_grant.len;
	}
	cr_expect_eq(len, SEG);
	/* Asking again with little written: half the size each time (or less:
	 * what is left of the carving segment). */
	for (uint64_t want = SEG / 2; want >= KVS_MIN_EXTENT; want /= 2) {
		cr_assert_eq(seg_req_need(1, 1, 100, len / 4, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT);
		cr_expect_leq(resp.seg_grant.len, want, "%lu bytes", (unsigned long)resp.seg_grant.len);
		len = resp.seg_grant.len;
	}
	/* At the minimum, asking in a loop without writing costs nothing: each
	 * empty extent's bytes go back to the carving segment. */
	kvs_core_stats(core, &st);
	len = st.carved_bytes;
	for (int i = 0; i < 1000; i++) {
		cr_assert_eq(seg_req_need(1, 1, 100, 0, &resp), 0);
		cr_assert_eq(resp.type, KVI_CTRL_SEG_GRANT);
		cr_assert_leq(resp.seg_grant.len, KVS_MIN_EXTENT);
	}
	kvs_core_stats(core, &st);
	cr_expect_eq(st.carved_bytes, len, "carved %lu, was %lu", (unsigned long)st.carved_bytes, (unsigned long)len);
	cr_expect_eq(kvs_core_client_held(core, 1), len);
	/* An object larger than the shrunk extent still gets room for itself. */
	cr_assert_eq(seg_req_need(1, 1, 40000, 0, &resp), 0);
	cr_expect_geq(resp.seg_grant.len, 40000);
}

/* What a client holds: its grants, less the tails it gives back, less what
 * reclamation frees; clients that left are not counted. */
Test(server_core, held_bytes_follow_grants_returns_and_reclamation)
{
	struct kvi_ctrl ret = { .type = KVI_CTRL_SEG_RETURN, .seg_return = { .used = 160 } }, resp;

	make_core(REGION, 0, SEG);
	cr_assert_eq(seg_req_need(1, 1, 160, 0, &resp), 0);
	cr_expect_eq(kvs_core_client_held(core, 1), KVS_MIN_EXTENT);
	cr_assert_eq(seg_req_need(2, 1, 160, 0, &resp), 0);
	cr_assert_eq(kvs_core_ctrl(core, 2, &ret, &resp), 0);
	cr_expect_eq(kvs_core_client_held(core, 2), 160, "the unused tail came back");
	grant(3);
	grant(3);
	cr_expect_eq(kvs_core_client_held(core, 3), 2 * SEG);
	kvs_core_client_left(core, 1);
	cr_expect_eq(kvs_core_client_held(core, 1), 0);
	kvs_core_client_left(core, 3);
	reclaim_all_sealed();
	grant(3); /* the same id again must not inherit anything */
	cr_expect_eq(kvs_core_client_held(core, 3), SEG);
	cr_expect_eq(kvs_core_client_held(core, 2), 160, "its segment is still open: nothing reclaimed");
}

Test(server_core, without_a_reclaimer_an_exhausted_heap_answers_enomem)
{
	struct kvs_core_opts o = { .segment_size = SEG, .max_op_ms = MAX_OP_MS, .quarantine_ms = QUARANTINE_MS };
	struct kvi_errbuf e = { { 0 } };
	struct kvi_ctrl resp;
	unsigned n = 0;

	region = region_alloc(REGION);
	cr_assert_eq(kvs_core_create(region, REGION, &o, &core, &e), 0, "%s", e.msg);
	do
		cr_assert_eq(seg_req(1, 3, &resp), 0);
	while (resp.type == KVI_CTRL_SEG_GRANT && ++n < 1000);
	cr_expect_eq(resp.type, KVI_CTRL_ERROR);
	cr_expect_eq(resp.status, KVC_ENOMEM, "nothing would ever make room: %s", kvc_err_name(resp.status));
}

Test(server_core, client_left_seals_its_extent_and_keeps_its_bytes)
{
	struct kvs_core_stats st;
	uint64_t a[3], b;

	make_core(REGION, 0, SEG);
	for (int i = 0; i < 3; i++) {
		a[i] = grant(1);
		memset(region + a[i], 0x40 + i, SEG);
	}
	b = grant(2);
	(void)b;
	kvs_core_client_left(core, 1);
	kvs_core_client_left(core, 1); /* twice, and for unknown ids: harmless */
	kvs_core_client_left(core, 77);
	kvs_core_stats(core, &st);
	cr_expect_eq(st.segments_sealed, 3);
	cr_expect_eq(st.segments_granted, 4, "sealed segments stay allocated");
	cr_expect_eq(st.clients, 1);
	for (int i = 0; i < 3; i++)
		for (uint64_t j = 0; j < SEG; j++)
			if (region[a[i] + j] != 0x40 + i)
				cr_assert_fail("segment %d byte %lu changed by the seal", i, (unsigned long)j);
}

Test(server_core, sealed_segments_settle_then_are_reclaimed_quarantined_and_reused)
{
	uint64_t a, off, len, again;
	struct kvs_core_stats st;

	make_core(REGION, 0, SEG);
	a = grant(1);
	memset(region + a, 0x77, SEG);
	cr_expect_neq(kvs_core_reclaim_begin(core, &off, &len), 0, "an open segment is not reclaimable");
	kvs_core_client_left(core, 1);
	cr_expect_neq(kvs_core_reclaim_begin(core, &off, &len), 0, "not settled: a PUT may still publish there");
	usleep(SETTLE_US);
	cr_assert_eq(kvs_core_reclaim_begin(core, &off, &len), 0);
	cr_expect_eq(off, a);
	cr_expect_eq(len, SEG);
	kvs_core_reclaim_end(core, off, 1, 0, &(struct kvs_reclaim_stats){ .segments = 1, .evictions = 3 });
	kvs_core_stats(core, &st);
	cr_expect_eq(st.segments_quarantined, 1);
	cr_expect_eq(st.rc.evictions, 3);
	kvs_core_tick(core, 0);
	kvs_core_stats(core, &st);
	cr_expect_eq(st.segments_quarantined, 1, "the quarantine is not over");
	usleep(QUARANTINE_MS * 1000u + 2000u);
	kvs_core_tick(core, 0);
	kvs_core_stats(core, &st);
	cr_expect_eq(st.segments_quarantined, 0);
	cr_expect_eq(st.segments_free, st.segments_total);
	again = grant(2);
	cr_expect_eq(again, a, "the only segment ever used comes back");
}

Test(server_core, a_failed_reclaim_puts_the_segment_back_first_in_line)
{
	uint64_t a, b, off, len;

	make_core(REGION, 0, SEG);
	a = grant(1);
	b = grant(1);
	(void)b;
	kvs_core_client_left(core, 1);
	usleep(SETTLE_US);
	cr_assert_eq(kvs_core_reclaim_begin(core, &off, &len), 0);
	cr_assert_eq(off, a, "oldest first");
	kvs_core_reclaim_end(core, off, 0, 0, NULL);
	cr_assert_eq(kvs_core_reclaim_begin(core, &off, &len), 0);
	cr_expect_eq(off, a, "given back at the head");
	kvs_core_reclaim_end(core, off, 0, 1, NULL);
	cr_assert_eq(kvs_core_reclaim_begin(core, &off, &len), 0);
	cr_expect_eq(off, b, "rotated to the tail");
}

Test(server_core, unsafe_quarantine_and_watermarks_are_refused)
{
	struct kvi_geometry sb;
	struct kvi_errbuf e = { { 0 } };

	cr_expect_eq(kvs_core_plan(0, 64 * MIB, &(struct kvs_core_opts){ .max_op_ms = 1000, .quarantine_ms = 2000 },
				   &sb, &e), KVC_EINVAL, "quarantine must exceed 2 x max op");
	cr_expect(strstr(e.msg, "quarantine") != NULL, "%s", e.msg);
	cr_expect_eq(kvs_core_plan(0, 64 * MIB, &(struct kvs_core_opts){ .reclaim_low_pct = 20, .reclaim_high_pct = 10 },
				   &sb, &e), KVC_EINVAL);
	cr_expect_eq(kvs_core_plan(0, 64 * MIB, &(struct kvs_core_opts){ .max_op_ms = 1000, .quarantine_ms = 2100 },
				   &sb, &e), 0, "%s", e.msg);
}

Test(server_core, invalid_control_messages_are_refused)
{
	static const uint16_t types[] = { KVI_CTRL_SEG_GRANT, KVI_CTRL_ERROR, KVI_CTRL_SHUTDOWN,
					  KVI_CTRL_STATS, KVI_CTRL_SEG_RETURNED, 0,
					  KVI_CTRL_TYPE_MAX + 1, 0xffff };
	struct kvs_core_stats st;
	struct kvi_ctrl resp;

	make_core(REGION, 0, SEG);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct kvi_ctrl req = { .type = types[i], .seq = 5 };

		cr_expect_lt(kvs_core_ctrl(core, 1, &req, &resp), 0, "type %u", types[i]);
	}
	cr_expect_lt(seg_req(0, 1, &resp), 0, "client id 0 is nobody");
	cr_expect_lt(seg_req(KVI_MAX_CLIENT_ID + 1, 1, &resp), 0, "id beyond the lock word");
	cr_expect_eq(seg_req(KVI_MAX_CLIENT_ID, 1, &resp), 0);
	kvs_core_stats(core, &st);
	cr_expect_eq(st.segments_granted, 1, "refused requests granted nothing");
}

/* The metadata guarantee, structurally: with metadata_use_hooks = false the
 * hooks serve nothing while the arena is created, and at exhaustion every
 * byte they ever handed to jemalloc is a granted segment (granted segments are
 * carved from hooked extents, are disjoint and add up to all hooked bytes), so
 * no byte of the region holds jemalloc metadata. */
Test(server_core, jemalloc_gets_only_segments_from_the_region)
{
	struct kvs_heap_stats hs;
	struct kvs_core_stats st;
	uint64_t off[64], n;

	make_core(REGION, 0, SEG);
	kvs_heap_stats(kvs_core_heap(core), &hs);
	cr_expect_eq(hs.hook_allocs_at_create, 0, "arena creation took region memory");
	cr_expect_eq(hs.hook_bytes, 0);
	n = take_all(1, off, 64);
	kvs_core_stats(core, &st);
	kvs_heap_stats(kvs_core_heap(core), &hs);
	cr_expect_eq(n, st.segments_total);
	cr_expect_eq(hs.hook_bytes, n * kvs_heap_stride(SEG), "hooked %lu bytes for %lu segments",
		     (unsigned long)hs.hook_bytes, (unsigned long)n);
	cr_expect_eq(hs.hook_bytes, kvs_core_geometry(core)->heap_size, "the hooks served the heap, no more");
	expect_disjoint_segments_in_heap(off, n);
}

/* The same guarantee, behaviourally: a client scribbling over the whole
 * region (superblock, index, every segment, the alignment gaps) cannot
 * disturb the allocator or the core's own view of the layout. */
Test(server_core, a_region_scribbled_by_clients_does_not_disturb_the_server)
{
	struct kvi_geometry before;
	uint64_t off[64], n, m;

	make_core(REGION, 0, SEG);
	before = *kvs_core_geometry(core);
	n = grant_all(1, off, 64);
	memset(region, 0xa5, REGION);
	kvs_core_client_left(core, 1);
	cr_expect_eq(reclaim_all_sealed(), n);
	memset(region, 0x5a, REGION);
	m = grant_all(2, off, 64);
	cr_expect_eq(m, n, "every segment grantable again");
	expect_disjoint_segments_in_heap(off, m);
	cr_expect(kvi_geometry_equal(&before, kvs_core_geometry(core)));
}

/* The control experiment that shows the tests above can fail: an arena
 * created the ordinary way (arenas.create with hooks) takes its metadata
 * through the hooks, i.e. it would put it in the region. */
static uint8_t *ctl_mem;
static size_t ctl_used, ctl_calls;

static void *counting_alloc(extent_hooks_t *eh, void *new_addr, size_t size, size_t align, bool *zero,
			    bool *commit, unsigned ind)
{
	size_t at = (ctl_used + align - 1) & ~(align - 1);

	(void)eh, (void)ind;
	if (new_addr || at + size > 16 * MIB)
		return NULL;
	ctl_used = at + size;
	ctl_calls++;
	memset(ctl_mem + at, 0, size);
	*zero = true;
	*commit = true;
	return ctl_mem + at;
}

Test(server_core, control_plain_arenas_create_puts_metadata_through_the_hooks)
{
	static extent_hooks_t hooks = { .alloc = counting_alloc };
	extent_hooks_t *hp = &hooks;
	unsigned arena;
	size_t len = sizeof(arena);

	ctl_mem = aligned_alloc(2 * MIB, 16 * MIB); /* kept: the arena's metadata lives there */
	cr_assert_not_null(ctl_mem);
	cr_assert_eq(mallctl("arenas.create", &arena, &len, &hp, sizeof(hp)), 0);
	cr_expect_gt(ctl_calls, 0, "jemalloc allocated the arena's base through the hooks");
}

/* ---- the quota against real clients and the reclaimer thread ---------- */

static struct kvt_env qenv;
static struct kvs_reclaimer *qrcl;

static void quota_setup(void)
{
	struct kvs_core_opts o = { .segment_size = SEG, .max_op_ms = 50, .quarantine_ms = 110 };
	struct kvs_reclaim_hooks none = { 0 };

	cr_assert_eq(kvt_env_init_opts(&qenv, 4, &o), 0);
	cr_assert_eq(kvt_env_reclaimer(&qenv, &none, &qrcl), 0);
}

static void quota_teardown(void)
{
	kvs_reclaim_destroy(qrcl);
	qrcl = NULL;
	kvt_env_fini(&qenv);
}

TestSuite(quota, .init = quota_setup, .fini = quota_teardown, .timeout = 120);

struct bgthread {
	pthread_t t;
	int stop, err;
	unsigned grants, eagain, equota, other;
};

static int bg_stopped(struct bgthread *b)
{
	return __atomic_load_n(&b->stop, __ATOMIC_ACQUIRE);
}

static void *reclaimer_loop(void *arg)
{
	struct bgthread *b = arg;

	while (!bg_stopped(b)) {
		int rc = kvs_reclaim_run(qrcl);

		if (rc < 0) {
			b->err = rc;
			break;
		}
		kvs_core_tick(qenv.srv.core, 0);
		usleep(200);
	}
	return NULL;
}

#define FLOODER_ID 4000u /* far above the ids qenv gives its clients */

/* A raw control-path client asking for whole segments as fast as it can,
 * writing nothing. */
static void *flood_loop(void *arg)
{
	struct bgthread *b = arg;

	for (uint32_t seq = 1; !bg_stopped(b); seq++) {
		struct kvi_ctrl req = { .type = KVI_CTRL_SEG_REQ, .seq = seq, .seg_req = { .need = SEG } }, resp;

		pthread_mutex_lock(&qenv.srv.lock);
		b->err |= kvs_core_ctrl(qenv.srv.core, FLOODER_ID, &req, &resp);
		pthread_mutex_unlock(&qenv.srv.lock);
		if (resp.type == KVI_CTRL_SEG_GRANT)
			b->grants++;
		else if (resp.status == KVC_EAGAIN)
			__atomic_add_fetch(&b->eagain, 1, __ATOMIC_RELEASE); /* the test waits for it */ else if (resp.status == KVC_EQUOTA) {
			b->equota++;
		} else {
			b->other++;
		}
	}
	return NULL;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

Test(quota, a_flooder_cannot_starve_another_clients_puts)
{
	struct bgthread rec = { 0 }, fl = { 0 };
	struct kvs_core_stats st;
	uint64_t worst = 0;
	unsigned failed = 0, missing = 0;
	char k[32], v[600], got[700];
	kvc_t *victim;

	cr_assert_eq(kvt_env_client(&qenv, NULL, 0, 4, &victim), 0);
	cr_assert_eq(pthread_create(&rec.t, NULL, reclaimer_loop, &rec), 0);
	cr_assert_eq(pthread_create(&fl.t, NULL, flood_loop, &fl), 0);
	/* The flooder has the heap to itself until it has taken all it may. */
	for (int ms = 0; !__atomic_load_n(&fl.eagain, __ATOMIC_ACQUIRE) && ms < 20000; ms++)
		usleep(1000);
	cr_assert_gt(__atomic_load_n(&fl.eagain, __ATOMIC_ACQUIRE), 0, "the flooder never ran out of memory");
	/* 500 PUTs of 520-byte objects: about 4 heaps' worth of the flooder's
	 * reclamation cycles, and several extents of the victim's own. */
	for (unsigned i = 0; i < 500; i++) {
		uint64_t t0 = mono_ms(), dt;
		int rc;

		snprintf(k, sizeof(k), "victim-%u", i);
		snprintf(v, sizeof(v), "%0500u", i);
		rc = kvt_put_s(victim, k, v);
		dt = mono_ms() - t0;
		worst = dt > worst ? dt : worst;
		if (rc && !failed++)
			cr_log_warn("victim's PUT %u failed: %s\n", i, kvc_err_name(rc));
	}
	__atomic_store_n(&fl.stop, 1, __ATOMIC_RELEASE);
	pthread_join(fl.t, NULL);
	for (unsigned i = 490; i < 500; i++) { /* the newest cannot have been evicted yet */
		snprintf(k, sizeof(k), "victim-%u", i);
		missing += kvt_get_s(victim, k, got, sizeof(got)) != 0;
	}
	__atomic_store_n(&rec.stop, 1, __ATOMIC_RELEASE);
	pthread_join(rec.t, NULL);
	cr_expect_eq(rec.err, 0, "reclaimer: %s", kvc_err_name(rec.err));
	cr_expect_eq(fl.err, 0, "the flooder was never disconnected: its requests are well-formed");
	cr_expect_eq(fl.other, 0);
	cr_expect_gt(fl.grants, 0);
	kvs_core_stats(qenv.srv.core, &st);
	cr_expect_gt(st.grants_throttled + st.grants_over_quota, 0, "the flooder was never held back");
	cr_expect_eq(failed, 0, "%u of the victim's PUTs failed", failed);
	/* Without the quota the victim does get through now and then, after
	 * waiting up to its whole deadline (1.8 s of 2 s measured). */
	cr_expect_lt(worst, 1000, "a PUT waited %lu ms: half a client's default deadline", (unsigned long)worst);
	cr_expect_eq(missing, 0);
	printf("segment flood: the victim's 500 PUTs: %u failed, slowest %lu ms; the flooder: %u grants, "
	       "%u not yet (EAGAIN), %u refused (EQUOTA)\n",
	       failed, (unsigned long)worst, fl.grants, fl.eagain, fl.equota);
	kvc_destroy(victim);
}
