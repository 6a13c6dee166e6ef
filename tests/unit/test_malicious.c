/* Malicious region contents (any client may write any byte of the region):
 * garbage headers and slots matching a key, and an object corrupted under a
 * still valid cached location, never crash the client or return a value
 * (meaningful under the ASan build too). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpath_check.h"
#include "kvclient_errors.h"

KVT_DPATH_SUITE(malicious);

static void write_hdr(uint64_t off, uint16_t key_len, uint32_t value_len, const char *key)
{
	struct kvi_obj_hdr h = { .len_exp = value_len, .key_len = (uint8_t)key_len, .version = KVI_LAYOUT_VERSION };

	memcpy(kvt_base(&env) + off, &h, sizeof(h));
	if (key && off + sizeof(h) + strlen(key) <= kvt_heap_end(&env))
		memcpy(kvt_base(&env) + off + sizeof(h), key, strlen(key));
}

static uint64_t raw_slot(uint32_t fp, uint64_t off, uint64_t units)
{
	return ((uint64_t)fp << KVI_SLOT_FP_SHIFT) | (units << KVI_SLOT_SIZE_SHIFT) | (off / KVI_OBJ_ALIGN);
}

Test(malicious, garbage_headers_and_slots_matching_the_key_never_crash_or_return_values)
{
	kvc_t *a = kvt_client(&env, NULL, 0, 4), *c = kvt_client(&env, NULL, 1024, 4);
	const char *key = "target";
	struct kvi_keyhash kh = kvt_hash_of(&env, key);
	uint64_t end = kvt_heap_end(&env), g[KVI_SLOTS_PER_BUCKET];
	unsigned ng = 0;
	char v[64];
	int rc;

	/* Headers in the heap's last, never granted, bytes. */
	write_hdr(end - 32, 6, 0xffffffffu, NULL);                 /* read clamped to 32 bytes */
	write_hdr(end - 4096, 0xffff, 0xfffffff0u, key);           /* huge key and value */
	write_hdr(end - 8192, 6, 0xffffffffu, key);                /* our key, huge value */
	write_hdr(end - 12288, 6, 1u << 20, key);                  /* value past the READ */
	write_hdr(end - 16384, 0, 5, NULL);                        /* empty key */
	g[ng++] = raw_slot(kh.fp, end - 32, 1);
	g[ng++] = raw_slot(kh.fp, end - 4096, 3);
	g[ng++] = raw_slot(kh.fp, end - 8192, KVI_SLOT_MAX_UNITS);  /* READ longer than any object */
	g[ng++] = raw_slot(kh.fp, end - 12288, 2);
	g[ng++] = raw_slot(kh.fp, end - 16384, 1);
	g[ng++] = raw_slot(kh.fp, end - 16, 1);                     /* header past the heap end */
	g[ng++] = raw_slot(kh.fp, kvt_geom(&env)->heap_off - 16, 1);           /* below the heap */
	g[ng++] = raw_slot(kh.fp, kvt_geom(&env)->region_size - 16, 5);        /* at the region's end */
	g[ng++] = raw_slot(kh.fp, 0, 2);                             /* the superblock */
	for (unsigned i = 0; i < ng; i++)
		*kvt_slot_ptr(&env, kh.b[i & 1], i / 2) = g[i];

	rc = kvt_get_s(a, key, v, sizeof(v));
	cr_expect(rc == KVC_ENOTFOUND || rc == KVC_ECORRUPT, "GET got %s", kvc_err_name(rc));
	rc = kvt_del_s(a, key);
	cr_expect(rc == KVC_ENOTFOUND || rc == KVC_ECORRUPT, "DELETE got %s", kvc_err_name(rc));
	rc = kvt_put_s(a, key, "real");
	cr_expect(rc == 0 || rc == KVC_ECORRUPT, "PUT got %s", kvc_err_name(rc));
	if (rc == 0) {
		cr_assert_eq(kvt_get_s(c, key, v, sizeof(v)), 0);
		cr_expect_str_eq(v, "real");
		cr_assert_eq(kvt_get_s(c, key, v, sizeof(v)), 0, "through the cache");
		cr_expect_str_eq(v, "real");
	}
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	kvc_destroy(c);
	kvc_destroy(a);
}

Test(malicious, object_corrupted_under_a_still_valid_cached_location_is_never_returned)
{
	kvc_t *a = kvt_client(&env, NULL, 1024, 4);
	struct kvi_keyhash kh = kvt_hash_of(&env, "victim");
	struct kvi_obj_hdr *oh;
	uint64_t s = 0;
	char v[64];

	cr_assert_eq(kvt_put_s(a, "victim", "value"), 0);
	for (unsigned w = 0; w < 2 && !s; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET && !s; i++)
			if (*kvt_slot_ptr(&env, kh.b[w], i))
				s = *kvt_slot_ptr(&env, kh.b[w], i);
	cr_assert_neq(s, 0);
	oh = (struct kvi_obj_hdr *)(void *)(kvt_base(&env) + kvi_slot_obj_off(s));
	oh->len_exp = (1u << KVI_OBJ_VLEN_BITS) - 1; /* the slot word is unchanged: the cache check passes */
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), KVC_ECORRUPT);
	oh->len_exp = 5;
	oh->key_len = 0xff; /* beyond KVI_MAX_KEY */
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), KVC_ECORRUPT);
	/* The failed GETs dropped the cached location. A PUT, holding both
	 * locks, takes the unreadable slot as junk and replaces it in place,
	 * never inserting a second one (a key must stay writable whatever a
	 * stray WRITE left in its slot). */
	cr_expect_eq(kvt_put_s(a, "victim", "new"), 0);
	cr_expect_eq(kvt_locked_buckets(&env), 0);
	cr_expect_eq(kvt_get_s(a, "victim", v, sizeof(v)), 0);
	cr_expect_str_eq(v, "new");
	kvc_destroy(a);
}
