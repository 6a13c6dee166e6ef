/* libFuzzer target: the reclaimer's segment walk (server/reclaim.c, steps 1
 * and 2) over segment bytes that clients wrote, i.e. anything.
 *
 * A real server core and reclaimer run in-process (tests/unit/dpath_env.h).
 * The input is a small program that builds a segment: garbage runs, single
 * objects with fields from the input (valid or not: version, key length,
 * flags), runs of many small objects, and stray slot words; an object may get
 * a slot in one of its two buckets, as a client's PUT would give it. Raw
 * random bytes would almost never carry a right XXH3 checksum, so objects are
 * built with one; garbage runs stay raw.
 *
 * The walk reads the segment in place from a buffer of exactly its length
 * (ASan sees any read outside it) and must keep exactly the valid objects
 * that some slot names -- computed independently here. An object it misses
 * would keep its slot after the segment is zeroed and reused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dpath_env.h"
#include "fuzz_check.h"
#include "hash.h"
#include "layout.h"

#define SEGMENT_SIZE (64u << 10) /* the smallest the core allows */
#define BUCKETS 1024u
#define MAX_OBJS (SEGMENT_SIZE / KVI_OBJ_ALIGN)

static struct kvt_env env;
static struct kvs_reclaimer *rcl;
static struct kvi_geometry sb;
static struct kvi_bucket *index_;

/* What the builder put where. */
struct built {
	uint32_t pos, len;
	int valid; /* a header the walk must accept */
	uint64_t slot;
	uint64_t b[2];
};
static struct built objs[MAX_OBJS];
static uint32_t nobjs;
static uint8_t seg[SEGMENT_SIZE];
static uint32_t kept_pos[MAX_OBJS], kept_len[MAX_OBJS];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct kvs_core_opts o = { .buckets = BUCKETS, .segment_size = SEGMENT_SIZE, .max_op_ms = 50,
				   .quarantine_ms = 100 + KVS_QUARANTINE_MARGIN_MS,
				   .hash_seed = 0x5eed }; /* fixed: a crash replays the same placement */

	(void)argc;
	(void)argv;
	FUZZ_CHECK(kvt_env_init_opts(&env, 4, &o) == 0, "server core setup failed");
	FUZZ_CHECK(kvt_env_reclaimer(&env, NULL, &rcl) == 0, "reclaimer setup failed");
	sb = *kvs_core_geometry(env.srv.core);
	index_ = (struct kvi_bucket *)((uint8_t *)kvs_core_region(env.srv.core) + sb.index_off);
	return 0;
}

/* Little-endian, in two statements: the order of two calls in one
 * expression is unspecified. */
static unsigned byte2(struct in *in)
{
	unsigned lo = byte(in);

	return lo | byte(in) << 8;
}

/* A slot in the first empty place of bucket b (a client's insert); 0 if full. */
static void install(uint64_t b, uint64_t slot)
{
	for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++) {
		if (index_[b].slot[i] == 0) {
			index_[b].slot[i] = slot;
			return;
		}
	}
}

/* Object at p with these fields, checksum right over whatever it says it
 * covers; 0 when it does not fit the segment. */
static int put_obj(uint32_t p, unsigned version, unsigned key_len, uint32_t value_len, unsigned flags,
		   const uint8_t *key, int live, unsigned which)
{
	struct kvi_obj_hdr h = { .access = 0, .version = (uint8_t)version, .flags = (uint8_t)flags,
				 .key_len = (uint8_t)key_len, .len_exp = value_len };
	uint64_t len = kvi_obj_len(key_len, value_len, flags & KVI_OBJ_F_CFLAGS);
	struct built *o = &objs[nobjs];
	struct kvi_keyhash kh;

	if (len > SEGMENT_SIZE - p || nobjs == MAX_OBJS)
		return 0;
	memcpy(seg + p + sizeof(h), key, key_len);
	memset(seg + p + sizeof(h) + key_len, 0x5a, len - sizeof(h) - key_len); /* value, flags word */
	memcpy(seg + p, &h, sizeof(h));
	h.checksum = (uint32_t)XXH3_64bits(seg + p + KVI_OBJ_CSUM_FROM, len - KVI_OBJ_CSUM_FROM);
	memcpy(seg + p, &h, sizeof(h));
	kvi_key_hash(key, key_len, sb.hash_seed, sb.bucket_count, &kh);
	*o = (struct built){ .pos = p, .len = (uint32_t)len, .b = { kh.b[0], kh.b[1] },
			     .valid = version == KVI_LAYOUT_VERSION && key_len >= 1 && key_len <= KVI_MAX_KEY,
			     .slot = kvi_slot_make(kh.fp, sb.heap_off + p, len) };
	if (live)
		install(kh.b[which & 1], o->slot);
	nobjs++;
	return 1;
}

/* Build the segment; returns its length. */
static uint32_t build(struct in *in)
{
	uint32_t p = 0, serial = 0;

	nobjs = 0;
	while (in->left && p < SEGMENT_SIZE) {
		unsigned tag = byte(in);

		switch (tag & 3) {
		case 0: { /* raw garbage */
			uint32_t n = byte(in) + 1u;

			if (n > SEGMENT_SIZE - p)
				n = SEGMENT_SIZE - p;
			if (n > in->left)
				n = (uint32_t)in->left;
			memcpy(seg + p, in->p, n);
			in->p += n;
			in->left -= n;
			p += n;
			break;
		}
		case 1: { /* one object, fields from the input */
			unsigned key_len = byte(in), version = tag & 0x10 ? byte(in) : KVI_LAYOUT_VERSION;
			uint32_t value_len = byte2(in);
			uint8_t key[256] = { 0 };

			for (unsigned i = 0; i < key_len; i++)
				key[i] = (uint8_t)byte(in);
			p = (p + KVI_OBJ_ALIGN - 1) & ~(KVI_OBJ_ALIGN - 1);
			if (p >= SEGMENT_SIZE || !put_obj(p, version, key_len, value_len, tag >> 5 & 1, key, tag & 0x80,
							  tag >> 6))
				return p < SEGMENT_SIZE ? p : SEGMENT_SIZE;
			p += objs[nobjs - 1].len;
			break;
		}
		case 2: { /* many small live objects, distinct keys */
			unsigned count = byte(in) * 8u + 1, key_len = 4 + byte(in) % 12, value_len = byte(in) % 8;

			for (unsigned i = 0; i < count; i++) {
				uint8_t key[16] = { 0 };

				serial++;
				memcpy(key, &serial, sizeof(serial));
				p = (p + KVI_OBJ_ALIGN - 1) & ~(KVI_OBJ_ALIGN - 1);
				if (p >= SEGMENT_SIZE || !put_obj(p, KVI_LAYOUT_VERSION, key_len, value_len, 0, key, 1, i))
					return p < SEGMENT_SIZE ? p : SEGMENT_SIZE;
				p += objs[nobjs - 1].len;
			}
			break;
		}
		default: { /* a stray slot word anywhere in the index */
			uint64_t b = byte2(in) % sb.bucket_count, s = 0;

			for (int i = 0; i < 8; i++)
				s = s << 8 | byte(in);
			install(b, s);
			break;
		}
		}
	}
	return p;
}

static int named(const struct built *o)
{
	for (int w = 0; w < 2; w++)
		for (unsigned i = 0; i < KVI_SLOTS_PER_BUCKET; i++)
			if (index_[o->b[w]].slot[i] == o->slot)
				return 1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	uint32_t len, n, want = 0, k = 0;
	uint8_t *buf;

	memset(index_, 0, sb.bucket_count * sizeof(*index_));
	memset(seg, 0, sizeof(seg));
	len = build(&in);
	/* Exactly len bytes: a read past the segment's end is an ASan report. */
	buf = malloc(len ? len : 1);
	FUZZ_CHECK(buf, "out of memory");
	memcpy(buf, seg, len);
	n = kvs_reclaim_walk_for_test(rcl, buf, sb.heap_off, len, kept_pos, kept_len, MAX_OBJS);
	free(buf);

	for (uint32_t i = 0; i < nobjs; i++)
		want += objs[i].valid && named(&objs[i]);
	FUZZ_CHECK(n == want, "walk kept %u objects of %u that slots name (segment of %u bytes, %u objects)", n, want,
		   len, nobjs);
	/* Same ones: both lists are in segment order. */
	for (uint32_t i = 0; i < nobjs && k < n; i++) {
		if (!objs[i].valid || !named(&objs[i]))
			continue;
		FUZZ_CHECK(kept_pos[k] == objs[i].pos && kept_len[k] == objs[i].len,
			   "walk kept object %u at %u+%u, expected %u+%u", k, kept_pos[k], kept_len[k], objs[i].pos,
			   objs[i].len);
		k++;
	}
	return 0;
}
