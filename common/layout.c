#include "layout.h"

#include <string.h>
#include <xxhash.h>

#include "kvclient_errors.h"

/* a + b <= limit without overflow */
static int fits(uint64_t a, uint64_t b, uint64_t limit)
{
	return a <= limit && b <= limit - a;
}

int kvi_superblock_check(const struct kvi_superblock *sb, uint64_t region_size)
{
	if (sb->magic != KVI_REGION_MAGIC || sb->layout_version != KVI_LAYOUT_VERSION)
		return KVC_EPROTO;
	if (sb->region_size != region_size || sb->bucket_count < 2 || sb->segment_size < 4096 ||
	    (sb->index_off % KVI_BUCKET_SIZE) || (sb->heap_off % KVI_OBJ_ALIGN))
		return KVC_EPROTO;
	if (sb->index_off < KVI_SUPERBLOCK_SIZE || sb->bucket_count > region_size / KVI_BUCKET_SIZE ||
	    !fits(sb->index_off, sb->bucket_count * KVI_BUCKET_SIZE, region_size))
		return KVC_EPROTO;
	if (sb->heap_off < sb->index_off + sb->bucket_count * KVI_BUCKET_SIZE ||
	    !fits(sb->heap_off, sb->heap_size, region_size))
		return KVC_EPROTO;
	return 0;
}

int kvi_slot_in_heap(const struct kvi_superblock *sb, uint64_t slot)
{
	uint64_t off = kvi_slot_obj_off(slot), len = kvi_slot_read_len(slot);

	if (len < sizeof(struct kvi_obj_hdr))
		return 0;
	/* The READ length is rounded up to 64 bytes and may run past the object's
	 * end, but it must not run past the heap. The reader clamps it to the heap
	 * end; only the object's start and header must be inside. */
	return off >= sb->heap_off && fits(off, sizeof(struct kvi_obj_hdr), sb->heap_off + sb->heap_size);
}

uint64_t kvi_obj_checksum(const struct kvi_obj_hdr *h)
{
	const unsigned char *p = (const unsigned char *)h + KVI_OBJ_CSUM_FROM;
	size_t n = sizeof(*h) - KVI_OBJ_CSUM_FROM + h->key_len + kvi_obj_value_len(h);

	return XXH3_64bits(p, n);
}

void kvi_obj_build(void *buf, const void *key, uint16_t key_len, const void *val, uint32_t val_len,
		   uint64_t expiry_ms)
{
	struct kvi_obj_hdr *h = buf;
	unsigned char *p = (unsigned char *)buf + sizeof(*h);

	memset(h, 0, sizeof(*h));
	if (expiry_ms > KVI_OBJ_EXPIRY_MAX)
		expiry_ms = KVI_OBJ_EXPIRY_MAX;
	h->len_exp = (uint64_t)val_len | expiry_ms << KVI_OBJ_VLEN_BITS;
	h->key_len = (uint8_t)key_len;
	h->version = KVI_LAYOUT_VERSION;
	memcpy(p, key, key_len);
	if (val_len)
		memcpy(p + key_len, val, val_len);
	h->checksum = kvi_obj_checksum(h);
}

int kvi_obj_verify(const void *buf, uint64_t got)
{
	const struct kvi_obj_hdr *h = buf;

	if (got < sizeof(*h) || h->version != KVI_LAYOUT_VERSION || h->key_len == 0 ||
	    h->key_len > KVI_MAX_KEY || kvi_obj_len(h->key_len, kvi_obj_value_len(h)) > got)
		return KVC_ECORRUPT;
	return kvi_obj_checksum(h) == h->checksum ? 0 : KVC_ECORRUPT;
}
