/* Writes the seed corpus of the fuzz targets: a few valid encodings each, so
 * that the fuzzer starts past the magic numbers and checksums.
 *   gen_corpus <dir>    writes <dir>/fuzz_wire/, fuzz_layout/, fuzz_walk/, fuzz_client/, fuzz_proxy/,
 *                       fuzz_trace/
 * (the directories must exist). The committed copy is tests/fuzz/corpus/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "wire.h"

static const char *dir;

static void put(const char *target, const char *name, const void *buf, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", dir, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "gen_corpus: cannot write %s: create %s/%s first\n", path, dir, target);
		exit(1);
	}
}

static void wire(void)
{
	struct kvi_wire_hello h;
	struct kvi_wire_welcome w;
	struct kvi_wire_reject r;
	struct kvi_wire_ctrl c;
	struct kvi_welcome wv = { .client_id = 7, .rkey = 0x1234, .region_addr = 0x7f0000000000ull,
				  .max_op_ms = 1000, .quarantine_ms = 2600, .lease_ms = 500, .exec_ms = 587, .flags = KVI_WELCOME_NO_EVICT,
				  .geo = { .layout_version = KVI_LAYOUT_VERSION, .epoch = 1, .region_size = 1ull << 30,
					   .index_off = KVI_SUPERBLOCK_SIZE, .bucket_count = 16384,
					   .heap_off = KVI_SUPERBLOCK_SIZE + 16384ull * KVI_BUCKET_SIZE,
					   .heap_size = (1ull << 30) - KVI_SUPERBLOCK_SIZE - 16384ull * KVI_BUCKET_SIZE,
					   .segment_size = 1u << 20, .hash_seed = 0x5eed5eed5eed5eedull } };
	struct kvi_ctrl cv = { .type = KVI_CTRL_SEG_GRANT, .seq = 3,
			       .seg_grant = { .off = 1u << 20, .len = 1u << 20, .cas_base = 1 } };
	char name[32];

	kvi_wire_hello_encode(&h, &(struct kvi_hello){ .role = KVI_ROLE_CLIENT });
	put("fuzz_wire", "hello_client", &h, sizeof(h));
	kvi_wire_hello_encode(&h, &(struct kvi_hello){ .role = KVI_ROLE_LOOPBACK });
	put("fuzz_wire", "hello_loopback", &h, sizeof(h));
	kvi_wire_hello_encode(&h, &(struct kvi_hello){ .role = KVI_ROLE_CLIENT,
						       .proof = { .timestamp_ms = 1767225600000ull,
								  .nonce = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 },
								  .mac = { 0xa5, 0x5a, 0xa5, 0x5a } } });
	put("fuzz_wire", "hello_with_proof", &h, sizeof(h));
	kvi_wire_welcome_encode(&w, &wv);
	put("fuzz_wire", "welcome", &w, sizeof(w));
	for (uint16_t reason = KVI_REJECT_VERSION; reason <= KVI_REJECT_REPLAY; reason++) {
		kvi_wire_reject_encode(&r, reason);
		snprintf(name, sizeof(name), "reject_%u", reason);
		put("fuzz_wire", name, &r, sizeof(r));
	}
	kvi_wire_ctrl_encode(&c, &cv);
	put("fuzz_wire", "ctrl_grant", &c, sizeof(c));
	kvi_wire_ctrl_encode(&c, &(struct kvi_ctrl){ .type = KVI_CTRL_ERROR, .seq = 9, .status = -5 });
	put("fuzz_wire", "ctrl_error", &c, sizeof(c));
	kvi_wire_ctrl_encode(&c, &(struct kvi_ctrl){ .type = KVI_CTRL_STATS, .seq = 1, .arg = { 1, 2, 3, 4, 5 } });
	put("fuzz_wire", "ctrl_stats", &c, sizeof(c));
}

/* fuzz_layout input: superblock, slot word, object bytes. */
static void layout(void)
{
	struct kvi_superblock sb = {
		.magic = KVI_REGION_MAGIC, .layout_version = KVI_LAYOUT_VERSION, .state = KVI_STATE_SERVING,
		.epoch = 1, .region_size = 64ull << 20, .index_off = KVI_SUPERBLOCK_SIZE, .bucket_count = 16384,
		.heap_off = KVI_SUPERBLOCK_SIZE + 16384ull * KVI_BUCKET_SIZE,
		.heap_size = (64ull << 20) - KVI_SUPERBLOCK_SIZE - 16384ull * KVI_BUCKET_SIZE, .segment_size = 1u << 20,
	};
	unsigned char buf[sizeof(sb) + 8 + 512];
	uint64_t slot;
	size_t n;

	memset(buf, 0, sizeof(buf));
	memcpy(buf, &sb, sizeof(sb));
	n = kvi_obj_len(3, 100, 7);
	slot = kvi_slot_make(0xabc, sb.heap_off + 4096, n);
	memcpy(buf + sizeof(sb), &slot, 8);
	kvi_obj_build(buf + sizeof(sb) + 8, "key", 3, "0123456789012345678901234567890123456789012345678901234567890123"
					 "456789012345678901234567890123456789", 100, 0, 7, 1);
	put("fuzz_layout", "object_100", buf, sizeof(sb) + 8 + kvi_slot_read_len(slot));

	n = kvi_obj_len(250, 0, 0xdeadbeefu);
	slot = kvi_slot_make(1, sb.heap_off + sb.heap_size - 16, n);
	memcpy(buf + sizeof(sb), &slot, 8);
	memset(buf + sizeof(sb) + 8, 0, 300);
	{
		char key[250];

		memset(key, 'k', sizeof(key));
		kvi_obj_build(buf + sizeof(sb) + 8, key, 250, NULL, 0, 1234567890u, 0xdeadbeefu, (1ull << 40) + 5);
	}
	put("fuzz_layout", "object_longkey_heapend", buf, sizeof(sb) + 8 + n);
}

/* fuzz_walk input: a build program (fuzz_walk.c build()). */
static void walk(void)
{
	/* Three live objects, one garbage run, one dead object. */
	static const unsigned char few[] = {
		0x81, 3, 10, 0, 'a', 'b', 'c',      /* live, key "abc", value 10 */
		0x00, 15, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, /* 16 bytes garbage */
		0xc1, 1, 0, 1, 'x',                 /* live in its second bucket, value 256 */
		0x01, 5, 40, 0, 'd', 'e', 'a', 'd', '!', /* no slot: superseded */
		0xa1, 2, 0, 0, 'f', 'f',            /* live, already-fetched copy */
		0x91, 9, 4, 0, 0, 'b', 'a', 'd', 'v', 'e', 'r', 's', 'i', 'o', /* version 9: not an object */
	};
	/* A segment full of the smallest objects: 2041 of 32 bytes. */
	static const unsigned char many[] = { 0x02, 255, 0, 0 };
	/* A stray slot word, then objects. */
	static const unsigned char stray[] = { 0x03, 1, 0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
					       0x02, 20, 7, 3, 0x81, 250, 0, 0 };

	put("fuzz_walk", "few", few, sizeof(few));
	put("fuzz_walk", "many_small", many, sizeof(many));
	put("fuzz_walk", "stray_slot", stray, sizeof(stray));
}

/* fuzz_client input: flags, key, one slot record (mode + 8 bytes) per slot
 * of the pair, data area. */
static void client(void)
{
	unsigned char b[2 + 3 + 2 * KVI_SLOTS_PER_BUCKET * 9 + 64];
	size_t n = 0;

	memset(b, 0, sizeof(b));
	b[n++] = 1 | 2;  /* GET, then PUT */
	b[n++] = 3;
	memcpy(b + n, "abc", 3);
	n += 3;
	b[n] = 1 | 2 | 4; /* slot 0: aimed, the key's fingerprint, an object of the key planted */
	b[n + 1] = 40;    /* value length 40 (top byte of the word) */
	b[n + 8] = 0x20;  /* offset 32 units into the data area */
	put("fuzz_client", "planted_hit", b, sizeof(b));
	b[n + 9] = 1 | 2; /* slot 1: aimed at zeros, the key's fingerprint: fails verification */
	b[n + 9 + 7] = 0x40;
	b[n + 18] = 1 | 2 | 4 | 8; /* slot 2: an object of another key, same fingerprint */
	b[n + 18 + 8] = 0x60;
	put("fuzz_client", "planted_and_garbage", b, sizeof(b));
	b[0] = 1 | 2 | 4 | 8; /* GET into a 16-byte buffer, PUT, DELETE */
	put("fuzz_client", "truncated_get_delete", b, sizeof(b));
	b[1] = 0; /* empty key */
	put("fuzz_client", "empty_key", b, 2);
}

/* kvproxy: memcached sessions, the first byte choosing the maximum value
 * (fuzz_proxy.c). */
static void proxy(void)
{
	static const char *const sessions[][2] = {
		{ "text_storage", "\x02set a 5 0 3\r\nabc\r\nadd b 0 0 1 noreply\r\nx\r\ncas c 0 0 1 7\r\ny\r\n"
				  "append a 0 0 1\r\nz\r\nprepend a 0 0 1\r\nz\r\nreplace a 0 -1 1\r\nq\r\n" },
		{ "text_other", "\x02get a b c\r\ngets a\r\ngat 10 a\r\ngats 0 a b\r\nincr n 5\r\ndecr n 1 noreply\r\n"
				"touch a 10\r\ndelete a 0 noreply\r\nflush_all 10\r\nversion\r\nverbosity 1\r\nstats\r\nquit\r\n" },
		{ "text_bad", "\x02set a 0 0 1\r\nxyz\r\nset a x 0 1\r\nset a 0 0 5000\r\nincr a -1\r\n\r\nbogus\r\n"
			      "delete a 1\r\nGET / HTTP/1.1\r\n" },
		{ "meta", "\x02mg a v f s t c k O123 q T30\r\nms a 2 F5 T9 c k MA C3 I\r\nhi\r\nmd a q C1\r\n"
			  "ma a N0 J7 D5 MD v\r\nmg YWJj b k v\r\nmn\r\nme a\r\n" },
		{ "meta_bad", "\x02mg a v v\r\nmg a !\r\nms a 1 MZ\r\nx\r\nms a 1 Fx\r\nx\r\nma a Dx\r\nmg a b\r\n"
			      "ms a 5000 q\r\n" },
	};

	for (size_t i = 0; i < sizeof(sessions) / sizeof(sessions[0]); i++)
		put("fuzz_proxy", sessions[i][0], sessions[i][1], strlen(sessions[i][1]));
}

/* kvbench's trace reader: the first byte picks the format (fuzz_trace.c). */
static void trace(void)
{
	static const unsigned char bin[1 + 48] = { 1, 9, 0, 0, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0, 0x10, 0x27, 0, 0,
						   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 9, 0, 0, 0, 1, 0,
						   0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const char *const texts[][2] = {
		{ "oracle_csv", "\x02time,id,size,next\r\n5,42,100,-1\r\n\r\n6,7,3\n" },
		{ "twitter", "\x03" "1,abc,3,10,7,gets,60\n2,k2,2,5,7,cas,0\n3,abc,3,0,7,incr,0\n4,abc,3,0,7,delete,0\n" },
		{ "detect_bad", "\x00" "1,abc,3,ten,7,get,0\n2,b,1,1,1,frob,0\n" },
	};

	put("fuzz_trace", "oracle_bin", bin, sizeof(bin));
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		put("fuzz_trace", texts[i][0], texts[i][1], strlen(texts[i][1]) ? strlen(texts[i][1]) : 1);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gen_corpus <dir>  (writes <dir>/fuzz_wire|fuzz_layout|fuzz_walk|fuzz_client|fuzz_proxy|fuzz_trace/*)\n");
		return 2;
	}
	dir = argv[1];
	wire();
	layout();
	walk();
	client();
	proxy();
	trace();
	return 0;
}
