/* libFuzzer target: the client's decoding of bucket and object bytes it READ
 * from the region (slot words, candidates, objects), through the public API
 * against a real server core over the in-process transport.
 *
 * The input fills the key's two buckets with slot words (raw, or aimed into a
 * data area of the heap, with the key's fingerprint, naming an object planted
 * there with this key or another), fills the data area with raw bytes, then
 * runs kvc_get / kvc_put / kvc_delete. Each must return a KVC_ code, never
 * crash; and a GET that succeeds must return a value some object of this key
 * really holds (a planted one, or what an earlier kvc_put wrote): garbage is
 * never a result. Lock words stay 0: a held lock is a matter of timing, not
 * of decoding, and would make every input wait out a deadline. */
#include <stdint.h>
#include <string.h>

#include "dpath_env.h"
#include "fuzz_check.h"
#include "hash.h"
#include "kvclient.h"
#include "layout.h"

#define DATA_SIZE (16u << 10) /* the data area: the last 16 KiB of the heap */
#define NSLOTS (2 * KVI_SLOTS_PER_BUCKET)
#define RESET_EVERY 2048 /* inputs; no reclaimer runs, so PUTs fill the heap */
static const char put_value[] = "value written by kvc_put";

static struct kvt_env env;
static kvc_t *cli;
static struct kvi_geometry sb;
static uint8_t *region;
static uint64_t data_off;
static unsigned inputs;

/* A fresh server core and client (also after the client broke its handle). */
static void reset(void)
{
	struct kvs_core_opts o = { .buckets = 64, .segment_size = 64u << 10, .max_op_ms = 50,
				   .quarantine_ms = 100 + KVS_QUARANTINE_MARGIN_MS, .no_evict = 1,
				   .hash_seed = 0x5eed }; /* fixed: a crash replays the same placement */

	if (cli) {
		kvc_destroy(cli);
		cli = NULL;
		kvt_env_fini(&env);
	}
	FUZZ_CHECK(kvt_env_init_opts(&env, 4, &o) == 0, "server core setup failed");
	FUZZ_CHECK(kvt_env_client(&env, NULL, 0, 4, &cli) == 0, "client setup failed");
	sb = *kvs_core_geometry(env.srv.core);
	region = kvs_core_region(env.srv.core);
	data_off = (sb.heap_off + sb.heap_size - DATA_SIZE) & ~(uint64_t)(KVI_OBJ_ALIGN - 1);
	inputs = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	reset();
	return 0;
}

static int known_code(int rc)
{
	return rc <= 0 && rc >= KVC_EQUOTA;
}

/* Planted values: length and filler byte, to recognise a returned value. */
struct planted {
	uint32_t len;
	uint8_t fill;
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	unsigned flags, key_len;
	uint8_t key[256] = { 0 }, val[256], out[512];
	struct planted pl[NSLOTS];
	unsigned npl = 0;
	struct kvi_keyhash kh;
	size_t vlen = 0;
	int rc;

	if (++inputs > RESET_EVERY)
		reset();
	flags = byte(&in);
	key_len = byte(&in);
	for (unsigned i = 0; i < key_len; i++)
		key[i] = (uint8_t)byte(&in);
	kvi_key_hash(key, key_len ? key_len : 1, sb.hash_seed, sb.bucket_count, &kh);

	memset(region + sb.index_off, 0, sb.bucket_count * KVI_BUCKET_SIZE);
	memset(region + data_off, 0, DATA_SIZE);
	/* Slot records first (their bytes are at a fixed place in the input),
	 * then the data area, then the planted objects over it. */
	uint64_t slots[NSLOTS];
	unsigned mode[NSLOTS];
	for (unsigned s = 0; s < NSLOTS; s++) {
		mode[s] = byte(&in);
		slots[s] = 0;
		for (int b = 0; b < 8; b++)
			slots[s] = slots[s] << 8 | byte(&in);
	}
	memcpy(region + data_off, in.p, in.left < DATA_SIZE ? in.left : DATA_SIZE);
	for (unsigned s = 0; s < NSLOTS; s++) {
		uint64_t w = slots[s];

		if (mode[s] & 1) { /* aim into the data area */
			uint64_t off = data_off + KVI_OBJ_ALIGN * (kvi_slot_obj_off(w) / KVI_OBJ_ALIGN % (DATA_SIZE / KVI_OBJ_ALIGN));
			uint32_t units = (uint32_t)(kvi_slot_read_len(w) / KVI_SLOT_SIZE_UNIT);

			if (mode[s] & 4) { /* plant an object of this key (or another) there */
				uint32_t vl = (uint32_t)(w >> 56) % 200, len = (uint32_t)kvi_obj_len(key_len ? key_len : 1, vl, 0);
				/* "another key" only if the input's key is not that very string
				 * (the fuzzer finds it in the binary and tries it). */
				int other = (mode[s] & 8) && !(key_len == 11 && memcmp(key, "another key", 11) == 0);

				if (off + len > sb.heap_off + sb.heap_size)
					off = data_off;
				memset(val, 0xa0 + s, vl);
				kvi_obj_build(region + off, other ? (const void *)"another key" : key,
					      other ? 11 : (key_len ? key_len : 1), val, vl, 0, 0, 1 + s);
				units = (len + KVI_SLOT_SIZE_UNIT - 1) / KVI_SLOT_SIZE_UNIT;
				if (!other && npl < NSLOTS)
					pl[npl++] = (struct planted){ vl, (uint8_t)(0xa0 + s) };
			}
			w = kvi_slot_make(mode[s] & 2 ? kh.fp : kvi_slot_fp(w), off, (uint64_t)units * KVI_SLOT_SIZE_UNIT);
		} else if (mode[s] & 2) {
			w = (w & ~(((1ull << KVI_SLOT_FP_BITS) - 1) << KVI_SLOT_FP_SHIFT)) |
			    (uint64_t)kh.fp << KVI_SLOT_FP_SHIFT;
		}
		((struct kvi_bucket *)(region + kvi_home_bucket_off(&sb, kh.b[s / KVI_SLOTS_PER_BUCKET])))
			->slot[s % KVI_SLOTS_PER_BUCKET] = w;
	}

	if (flags & 1) {
		size_t cap = flags & 8 ? 16 : sizeof(out);

		rc = kvc_get(cli, key, key_len, out, cap, &vlen);
		FUZZ_CHECK(known_code(rc), "kvc_get returned %d", rc);
		if (rc == 0) {
			int ok = vlen == sizeof(put_value) && memcmp(out, put_value, vlen) == 0;

			for (unsigned i = 0; i < npl && !ok; i++) {
				ok = vlen == pl[i].len;
				for (size_t j = 0; j < vlen && ok; j++)
					ok = out[j] == pl[i].fill;
			}
			FUZZ_CHECK(ok, "kvc_get returned a value (%zu bytes) no object of the key holds", vlen);
		}
	}
	if (flags & 2) {
		rc = kvc_put(cli, key, key_len, put_value, sizeof(put_value), 0);
		FUZZ_CHECK(known_code(rc), "kvc_put returned %d", rc);
	}
	if (flags & 4) {
		rc = kvc_delete(cli, key, key_len);
		FUZZ_CHECK(known_code(rc), "kvc_delete returned %d", rc);
	}
	/* A write past its deadline breaks the handle on purpose (kvclient.h). */
	if (kvc_get(cli, "k", 1, out, sizeof(out), &vlen) == KVC_ESERVERGONE)
		reset();
	return 0;
}
