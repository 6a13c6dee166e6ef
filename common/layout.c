#include "layout.h"

#include <string.h>
#include <xxhash.h>

#include "kvclient_errors.h"

/* a + b <= limit without overflow */
static int fits(uint64_t a, uint64_t b, uint64_t limit)
{
	return a <= limit && b <= limit - a;
}

const char *kvi_geometry_check(const struct kvi_geometry *g)
{
	uint64_t index_end;

	if (g->layout_version != KVI_LAYOUT_VERSION)
		return "region layout version differs from ours: upgrade client and server together";
	if (g->epoch == 0)
		return "layout epoch 0";
	if (g->region_size <= KVI_SUPERBLOCK_SIZE || g->region_size > KVI_MAX_REGION_SIZE)
		return "region size outside 4 KiB .. 1 TiB";
	if (g->segment_size < KVI_MIN_SEGMENT_SIZE || g->segment_size > KVI_MAX_SEGMENT_SIZE ||
	    (g->segment_size & (g->segment_size - 1)))
		return "segment size is not a power of two from 64 KiB to 1 MiB";
	if (g->index_off % KVI_INDEX_CHUNK_ALIGN || g->heap_off % KVI_OBJ_ALIGN)
		return "index or heap offset misaligned";
	if (g->bucket_count < 2 || g->bucket_count > g->region_size / KVI_BUCKET_SIZE)
		return "bucket count below 2 or larger than the region";
	if (g->index_off < KVI_SUPERBLOCK_SIZE || !fits(g->index_off, g->bucket_count * KVI_BUCKET_SIZE, g->region_size))
		return "index overlaps the superblock page or ends past the region";
	index_end = g->index_off + g->bucket_count * KVI_BUCKET_SIZE;
	if (g->heap_off < index_end)
		return "heap starts before the index ends";
	if (g->heap_size < g->segment_size || !fits(g->heap_off, g->heap_size, g->region_size))
		return "heap smaller than a segment or ending past the region";
	return NULL;
}

const char *kvi_index_check(const struct kvi_index *x, const struct kvi_geometry *g)
{
	uint64_t chunk_bytes = g->segment_size, left;

	if (x->epoch == 0)
		return "index epoch 0";
	if (x->bucket_count < 2 || x->bucket_count > g->region_size / KVI_BUCKET_SIZE)
		return "index bucket count below 2 or larger than the region";
	if (x->chunk_shift != kvi_index_chunk_shift(g) || x->nchunks != kvi_index_nchunks(x->bucket_count, x->chunk_shift))
		return "index chunking does not match the segment size";
	left = x->bucket_count * KVI_BUCKET_SIZE;
	for (uint32_t k = 0; k < x->nchunks; k++) {
		uint64_t len = left < chunk_bytes ? left : chunk_bytes;

		if (x->chunk_off[k] % KVI_INDEX_CHUNK_ALIGN || x->chunk_off[k] < KVI_SUPERBLOCK_SIZE ||
		    !fits(x->chunk_off[k], len, g->region_size))
			return "index chunk misaligned, on the superblock page or past the region";
		left -= len;
	}
	return NULL;
}

void kvi_index_home(struct kvi_index *x, const struct kvi_geometry *g, uint64_t *chunk_off)
{
	x->epoch = 1;
	x->bucket_count = g->bucket_count;
	x->chunk_shift = kvi_index_chunk_shift(g);
	x->nchunks = kvi_index_nchunks(g->bucket_count, x->chunk_shift);
	x->chunk_off = chunk_off;
	for (uint32_t k = 0; k < x->nchunks; k++)
		chunk_off[k] = g->index_off + (uint64_t)k * g->segment_size;
}

int kvi_geometry_equal(const struct kvi_geometry *a, const struct kvi_geometry *b)
{
	return a->layout_version == b->layout_version && a->epoch == b->epoch &&
	       a->region_size == b->region_size && a->index_off == b->index_off &&
	       a->bucket_count == b->bucket_count && a->heap_off == b->heap_off &&
	       a->heap_size == b->heap_size && a->segment_size == b->segment_size &&
	       a->hash_seed == b->hash_seed;
}

void kvi_superblock_from_geometry(struct kvi_superblock *sb, const struct kvi_geometry *g)
{
	memset(sb, 0, sizeof(*sb));
	sb->magic = KVI_REGION_MAGIC;
	sb->layout_version = g->layout_version;
	sb->state = KVI_STATE_SERVING;
	sb->epoch = g->epoch;
	sb->region_size = g->region_size;
	sb->index_off = g->index_off;
	sb->bucket_count = g->bucket_count;
	sb->heap_off = g->heap_off;
	sb->heap_size = g->heap_size;
	sb->segment_size = g->segment_size;
}

void kvi_geometry_from_superblock(struct kvi_geometry *g, const struct kvi_superblock *sb)
{
	*g = (struct kvi_geometry){ .layout_version = sb->layout_version, .epoch = sb->epoch,
				    .region_size = sb->region_size, .index_off = sb->index_off,
				    .bucket_count = sb->bucket_count, .heap_off = sb->heap_off,
				    .heap_size = sb->heap_size, .segment_size = sb->segment_size };
}

int kvi_superblock_check(const struct kvi_superblock *sb, uint64_t region_size)
{
	struct kvi_geometry g;

	if (sb->magic != KVI_REGION_MAGIC || sb->region_size != region_size)
		return KVC_EPROTO;
	kvi_geometry_from_superblock(&g, sb);
	return kvi_geometry_check(&g) ? KVC_EPROTO : 0;
}

int kvi_slot_in_heap(const struct kvi_geometry *g, uint64_t slot)
{
	uint64_t off = kvi_slot_obj_off(slot), len = kvi_slot_read_len(slot);

	if (len < sizeof(struct kvi_obj_hdr))
		return 0;
	/* The READ length is rounded up to 64 bytes and may run past the object's
	 * end, but it must not run past the heap. The reader clamps it to the heap
	 * end; only the object's start and header must be inside. */
	return off >= g->heap_off && fits(off, sizeof(struct kvi_obj_hdr), g->heap_off + g->heap_size);
}

uint32_t kvi_obj_checksum(const struct kvi_obj_hdr *h)
{
	const unsigned char *p = (const unsigned char *)h + KVI_OBJ_CSUM_FROM;

	return (uint32_t)XXH3_64bits(p, kvi_obj_len_of(h) - KVI_OBJ_CSUM_FROM);
}

void kvi_obj_build(void *buf, const void *key, uint16_t key_len, const void *val, uint32_t val_len,
		   uint64_t expiry_ms, uint32_t client_flags, uint64_t cas)
{
	struct kvi_obj_hdr *h = buf;
	unsigned char *p = (unsigned char *)buf + sizeof(*h);

	memset(h, 0, sizeof(*h));
	if (expiry_ms > KVI_OBJ_EXPIRY_MAX)
		expiry_ms = KVI_OBJ_EXPIRY_MAX;
	h->len_exp = (uint64_t)val_len | expiry_ms << KVI_OBJ_VLEN_BITS;
	h->key_len = (uint8_t)key_len;
	h->version = KVI_LAYOUT_VERSION;
	h->cas = cas;
	memcpy(p, key, key_len);
	if (val_len)
		memcpy(p + key_len, val, val_len);
	if (client_flags) {
		h->flags = KVI_OBJ_F_CFLAGS;
		memcpy(p + key_len + val_len, &client_flags, sizeof(client_flags));
	}
	h->checksum = kvi_obj_checksum(h);
}

void kvi_obj_set_cas(void *buf, uint64_t cas)
{
	struct kvi_obj_hdr *h = buf;

	h->cas = cas;
	h->checksum = kvi_obj_checksum(h);
}

int kvi_obj_verify(const void *buf, uint64_t got)
{
	const struct kvi_obj_hdr *h = buf;

	if (got < sizeof(*h) || h->version != KVI_LAYOUT_VERSION || h->key_len == 0 ||
	    h->key_len > KVI_MAX_KEY || kvi_obj_len_of(h) > got)
		return KVC_ECORRUPT;
	return kvi_obj_checksum(h) == h->checksum ? 0 : KVC_ECORRUPT;
}
