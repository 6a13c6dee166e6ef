/* libFuzzer target: the checks a reader makes on bytes it READ from the region
 * (common/layout.h): kvi_superblock_check, kvi_slot_in_heap, kvi_obj_verify.
 *
 * Input: a 128-byte superblock, an 8-byte slot word, then object bytes (as
 * many as a READ returned). What is accepted must really lie inside the bounds
 * checked; the oracles below recompute those bounds in 128-bit arithmetic
 * and the object checksum with XXH3 directly, so an off-by-one or an overflow
 * in the checks fails here even where it would not crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fuzz_check.h"
#include "layout.h"

typedef unsigned __int128 u128;

/* Used for the slot check when the input's superblock is refused, so that
 * every input exercises kvi_slot_in_heap: 1 GiB, 4096 buckets. */
static const struct kvi_superblock fixed_sb = {
	.magic = KVI_REGION_MAGIC,
	.layout_version = KVI_LAYOUT_VERSION,
	.region_size = 1ull << 30,
	.index_off = KVI_SUPERBLOCK_SIZE,
	.bucket_count = 4096,
	.heap_off = KVI_SUPERBLOCK_SIZE + 4096ull * KVI_BUCKET_SIZE,
	.heap_size = (1ull << 30) - KVI_SUPERBLOCK_SIZE - 4096ull * KVI_BUCKET_SIZE,
	.segment_size = 1u << 20,
};

static int superblock(const struct kvi_superblock *sb)
{
	u128 index_end = (u128)sb->index_off + (u128)sb->bucket_count * KVI_BUCKET_SIZE;

	if (kvi_superblock_check(sb, sb->region_size) != 0)
		return 0;
	FUZZ_CHECK(sb->magic == KVI_REGION_MAGIC && sb->layout_version == KVI_LAYOUT_VERSION, "bad magic accepted");
	FUZZ_CHECK(sb->bucket_count >= 2 && sb->segment_size >= 4096, "bucket_count %llu segment_size %llu accepted",
		   (unsigned long long)sb->bucket_count, (unsigned long long)sb->segment_size);
	FUZZ_CHECK(sb->index_off % KVI_BUCKET_SIZE == 0 && sb->heap_off % KVI_OBJ_ALIGN == 0, "misaligned area accepted");
	/* superblock page < index < heap, all inside the region: disjoint and in bounds. */
	FUZZ_CHECK(sb->index_off >= KVI_SUPERBLOCK_SIZE, "index overlaps the superblock");
	FUZZ_CHECK(index_end <= sb->region_size, "index ends past the region");
	FUZZ_CHECK(sb->heap_off >= index_end, "heap overlaps the index");
	FUZZ_CHECK((u128)sb->heap_off + sb->heap_size <= sb->region_size, "heap ends past the region");
	/* The same superblock for any other region size is refused. */
	FUZZ_CHECK(kvi_superblock_check(sb, sb->region_size ^ 1) != 0, "superblock accepted for another region size");
	return 1;
}

static void slot(const struct kvi_superblock *ssb, uint64_t s)
{
	struct kvi_geometry g, *sb = &g;
	uint64_t off, len;
	int want;

	kvi_geometry_from_superblock(&g, ssb);
	off = kvi_slot_obj_off(s);
	len = kvi_slot_read_len(s);
	want = len >= sizeof(struct kvi_obj_hdr) && off >= sb->heap_off &&
		   (u128)off + sizeof(struct kvi_obj_hdr) <= (u128)sb->heap_off + sb->heap_size;
	FUZZ_CHECK(!!kvi_slot_in_heap(sb, s) == want, "slot %#llx: in heap %d, expected %d", (unsigned long long)s,
		   !want, want);
	if (want)
		FUZZ_CHECK(off + sizeof(struct kvi_obj_hdr) <= sb->region_size, "accepted slot header past the region");
}

/* What kvi_obj_verify must decide, computed independently. */
static int obj_ok(const uint8_t *b, uint64_t got)
{
	struct kvi_obj_hdr h;
	uint64_t n;

	if (got < sizeof(h))
		return 0;
	memcpy(&h, b, sizeof(h));
	n = sizeof(h) + (uint64_t)h.key_len + kvi_obj_value_len(&h) + (h.flags & KVI_OBJ_F_CFLAGS ? 4 : 0);
	if (h.version != KVI_LAYOUT_VERSION || h.key_len < 1 || h.key_len > KVI_MAX_KEY || n > got)
		return 0;
	return (uint32_t)XXH3_64bits(b + KVI_OBJ_CSUM_FROM, n - KVI_OBJ_CSUM_FROM) == h.checksum;
}

static void object(const uint8_t *data, size_t got)
{
	/* Exactly got bytes on the heap: a read past them is an ASan report. */
	uint8_t *b = malloc(got ? got : 1);
	struct kvi_obj_hdr h;
	uint64_t n;
	uint32_t cflags = 0;

	FUZZ_CHECK(b, "out of memory");
	memcpy(b, data, got);
	FUZZ_CHECK((kvi_obj_verify(b, got) == 0) == obj_ok(b, got), "object verify disagrees (got %zu)", got);
	/* Again with the checksum made right, so the lengths and fields are what
	 * decides: the fuzzer cannot forge XXH3 by itself. */
	if (got >= sizeof(h)) {
		memcpy(&h, b, sizeof(h));
		n = sizeof(h) + (uint64_t)h.key_len + kvi_obj_value_len(&h) + (h.flags & KVI_OBJ_F_CFLAGS ? 4 : 0);
		if (n <= got) {
			h.checksum = (uint32_t)XXH3_64bits(b + KVI_OBJ_CSUM_FROM, n - KVI_OBJ_CSUM_FROM);
			memcpy(b, &h, sizeof(h));
			FUZZ_CHECK((kvi_obj_verify(b, got) == 0) == obj_ok(b, got), "object verify disagrees (fixed)");
		}
		if (n <= got && (h.flags & KVI_OBJ_F_CFLAGS))
			memcpy(&cflags, b + n - 4, 4);
		/* Building gives these bytes only for a flags byte it would write:
		 * none, or the flags word's bit with a word that is not 0. */
		if (n <= got && kvi_obj_verify(b, got) == 0 &&
		    (h.flags == 0 || (h.flags == KVI_OBJ_F_CFLAGS && cflags != 0))) {
			FUZZ_CHECK(kvi_obj_client_flags((const struct kvi_obj_hdr *)(const void *)b) == cflags,
				   "flags word read differs");
			/* Accepted: building the same item gives the same bytes (all but
			 * the access byte, which is outside the checksum). */
			uint8_t *o = malloc(n);

			FUZZ_CHECK(o, "out of memory");
			kvi_obj_build(o, b + sizeof(h), h.key_len, b + sizeof(h) + h.key_len, kvi_obj_value_len(&h),
				      kvi_obj_expiry_ms(&h), cflags, h.cas);
			FUZZ_CHECK(memcmp(o, b, offsetof(struct kvi_obj_hdr, access)) == 0 &&
					   memcmp(o + KVI_OBJ_CSUM_FROM, b + KVI_OBJ_CSUM_FROM, n - KVI_OBJ_CSUM_FROM) == 0,
				   "verified object differs from the one built from its fields");
			free(o);
		}
	}
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvi_superblock sb;
	uint64_t s;

	if (size < sizeof(sb) + sizeof(s))
		return 0;
	memcpy(&sb, data, sizeof(sb));
	memcpy(&s, data + sizeof(sb), sizeof(s));
	slot(superblock(&sb) ? &sb : &fixed_sb, s);
	object(data + sizeof(sb) + sizeof(s), size - sizeof(sb) - sizeof(s));
	return 0;
}
