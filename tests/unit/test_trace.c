/* Trace reading (bench/trace.h) and the byte-capacity LRU baseline
 * (bench/lrusim.h): traces the tests write, read back field by field;
 * malformed ones refused at the right line or byte; the LRU against a
 * brute-force one on random gets, sets and deletes of random sizes, also
 * while its tables grow past their first 1 024 entries. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "lrusim.h"
#include "trace.h"
#include "ycsb_gen.h"

static char path[64];

static const char *write_file(const void *data, size_t n)
{
	int fd;

	strcpy(path, "/tmp/kvtrace.XXXXXX");
	fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, data, n), (ssize_t)n);
	close(fd);
	return path;
}

static struct kvb_trace *open_text(const char *text, int fmt)
{
	struct kvb_trace *t;
	char err[256];

	cr_assert_eq(kvb_trace_open(write_file(text, strlen(text)), fmt, &t, err, sizeof(err)), 0, "%s", err);
	return t;
}

Test(trace, oracle_csv_with_a_header_crlf_and_blank_lines)
{
	struct kvb_trace *t = open_text("time,id,size,next\r\n\r\n5,42,100,-1\r\n6,7,3\n", 0);
	struct kvb_trace_req r;
	char err[256];

	cr_expect_eq(kvb_trace_fmt_of(t), KVB_TRACE_ORACLE_CSV);
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect(r.time == 5 && r.id == 42 && r.value_size == 100 && r.op == KVB_TOP_GET && r.ttl_s == 0);
	cr_expect_str_eq(r.key, "o42");
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect(r.id == 7 && r.value_size == 3);
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), 0);
	kvb_trace_close(t);
	unlink(path);
}

Test(trace, binary_records_and_a_truncated_one)
{
	unsigned char b[24 * 2 + 10] = { 0 };
	struct kvb_trace_req r;
	struct kvb_trace *t;
	char err[256];

	b[0] = 9;                  /* time 9 */
	b[4] = 0x34, b[5] = 0x12;  /* id 0x1234 */
	b[12] = 0x10, b[13] = 0x27; /* size 10000 */
	memcpy(b + 24, b, 24);
	cr_assert_eq(kvb_trace_open(write_file(b, sizeof(b)), 0, &t, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(kvb_trace_fmt_of(t), KVB_TRACE_ORACLE_BIN);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
		cr_expect(r.time == 9 && r.id == 0x1234 && r.value_size == 10000);
	}
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1);
	cr_expect(strstr(err, "48"), "names the byte offset: %s", err);
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1, "sticky");
	kvb_trace_close(t);
	unlink(path);
}

Test(trace, twitter_operations_ttls_and_long_keys)
{
	char longkey[80];
	char text[400];
	struct kvb_trace *t;
	struct kvb_trace_req r;
	char err[256];

	memset(longkey, 'x', 60);
	longkey[60] = '\0';
	snprintf(text, sizeof(text), "1,abc,3,10,7,gets,60\n2,%s,60,5,7,cas,0\n3,abc,3,0,7,incr,0\n4,abc,3,0,7,frob,0\n",
		 longkey);
	t = open_text(text, 0);
	cr_expect_eq(kvb_trace_fmt_of(t), KVB_TRACE_TWITTER);
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect(r.op == KVB_TOP_GET && r.ttl_s == 60 && r.value_size == 10 && r.key_len == 3);
	cr_expect_str_eq(r.key, "abc");
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect_eq(r.op, KVB_TOP_SET);
	cr_expect(r.key_len <= KVB_TRACE_KEY_MAX && r.key[0] == 'h', "a long key is hashed: %s", r.key);
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect_eq(r.op, KVB_TOP_OTHER);
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1);
	cr_expect(strstr(err, "line 4") && strstr(err, "frob"), "%s", err);
	kvb_trace_close(t);
	unlink(path);
}

Test(trace, missing_fields_and_bad_numbers_are_refused)
{
	static const char *const bad[] = { "1,abc,3,10,7,get\n", "1,abc,3,-4,7,get,0\n", "1,,3,4,7,get,0\n",
					   "1,abc,300,4,7,get,0\n", "1,abc,3,99999999999,7,get,0\n" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvb_trace *t = open_text(bad[i], KVB_TRACE_TWITTER);
		struct kvb_trace_req r;
		char err[256] = "";

		cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1, "%s", bad[i]);
		cr_expect(strstr(err, "line 1"), "%s: %s", bad[i], err);
		kvb_trace_close(t);
		unlink(path);
	}
}

/* ---- The byte-capacity LRU against a brute-force one ----------------------- */

#define REF_MAX 4096
struct ref {
	uint64_t key[REF_MAX], size[REF_MAX]; /* [0] least recent */
	unsigned n;
	uint64_t cap, bytes;
};

static int ref_find(const struct ref *f, uint64_t key)
{
	for (unsigned i = 0; i < f->n; i++)
		if (f->key[i] == key)
			return (int)i;
	return -1;
}

static void ref_remove(struct ref *f, unsigned i)
{
	f->bytes -= f->size[i];
	memmove(f->key + i, f->key + i + 1, (f->n - i - 1) * sizeof(uint64_t));
	memmove(f->size + i, f->size + i + 1, (f->n - i - 1) * sizeof(uint64_t));
	f->n--;
}

static void ref_insert(struct ref *f, uint64_t key, uint64_t size)
{
	if (size > f->cap)
		return;
	while (f->bytes + size > f->cap)
		ref_remove(f, 0);
	cr_assert(f->n < REF_MAX);
	f->key[f->n] = key;
	f->size[f->n++] = size;
	f->bytes += size;
}

static int ref_get(struct ref *f, uint64_t key, uint64_t size)
{
	int i = ref_find(f, key);

	if (i < 0) {
		ref_insert(f, key, size);
		return 0;
	}
	{
		uint64_t s = size ? size : f->size[i];

		ref_remove(f, (unsigned)i);
		ref_insert(f, key, s);
	}
	return 1;
}

/* steps random gets (7 in 10), sets (2 in 10) and deletes of keys below keys,
 * sizes 1..max_size and every 1000th one larger than cap, on the LRU and on
 * the reference alike: every hit or miss and the bytes held after each step
 * must agree. The hits. */
static unsigned against_ref(uint64_t cap, uint64_t keys, uint64_t max_size, unsigned steps, uint64_t seed)
{
	static struct ref f;
	struct kvb_lru *l;
	struct kvb_rng rng;
	unsigned hits = 0;

	memset(&f, 0, sizeof(f));
	f.cap = cap;
	cr_assert_eq(kvb_lru_create_bytes(f.cap, &l), 0);
	kvb_rng_seed(&rng, seed);
	for (unsigned i = 0; i < steps; i++) {
		uint64_t key = kvb_rng_next(&rng) % keys, size = 1 + kvb_rng_next(&rng) % max_size;
		unsigned what = (unsigned)(kvb_rng_next(&rng) % 10);

		if (i % 1000 == 0)
			size = cap + 1 + max_size; /* larger than the whole LRU */
		if (what < 7) {
			int a = kvb_lru_get(l, key, size), b = ref_get(&f, key, size);

			cr_assert_eq(a, b, "step %u: get %llu", i, (unsigned long long)key);
			hits += (unsigned)a;
		} else if (what < 9) {
			int j = ref_find(&f, key);

			kvb_lru_set(l, key, size);
			if (j >= 0)
				ref_remove(&f, (unsigned)j);
			ref_insert(&f, key, size);
		} else {
			int j = ref_find(&f, key);

			kvb_lru_delete(l, key);
			if (j >= 0)
				ref_remove(&f, (unsigned)j);
		}
		cr_assert_eq(kvb_lru_bytes(l), f.bytes, "step %u", i);
	}
	kvb_lru_destroy(l);
	return hits;
}

Test(trace, byte_lru_matches_a_brute_force_lru)
{
	cr_expect_gt(against_ref(20000, 400, 500, 200000, 3), 1000);
}

/* Some 2 700 objects held at once: the node array and the hash table (1 024
 * of each at first) grow and rehash while the answers must stay the same. */
Test(trace, byte_lru_matches_a_brute_force_lru_while_its_table_grows)
{
	cr_expect_gt(against_ref(12000, 3000, 8, 100000, 5), 10000);
}

Test(trace, one_big_object_evicts_several_small_ones)
{
	struct kvb_lru *l;

	cr_assert_eq(kvb_lru_create_bytes(1000, &l), 0);
	for (uint64_t k = 0; k < 10; k++)
		cr_expect_eq(kvb_lru_get(l, k, 100), 0);
	cr_expect_eq(kvb_lru_bytes(l), 1000);
	cr_expect_eq(kvb_lru_get(l, 99, 350), 0);
	cr_expect_eq(kvb_lru_bytes(l), 950, "keys 0-3 went");
	cr_expect_eq(kvb_lru_get(l, 3, 100), 0);
	cr_expect_eq(kvb_lru_get(l, 9, 100), 1);
	cr_expect_eq(kvb_lru_get(l, 7, 2000), 1, "a hit, then too large to keep");
	cr_expect_eq(kvb_lru_get(l, 7, 100), 0);
	kvb_lru_destroy(l);
}

/* Every field at an extreme and every byte of the id distinct: a wrong byte
 * order, width or offset shows. */
Test(trace, binary_fields_decode_little_endian_at_their_extremes)
{
	static const unsigned char b[24] = {
		0xfe, 0xff, 0xff, 0xff,                         /* clock_time 0xfffffffe */
		0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, /* obj_id 0xfedcba9876543210 */
		0xff, 0xff, 0xff, 0xff,                         /* obj_size UINT32_MAX */
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* next_access_vtime -1 */
	};
	struct kvb_trace_req r;
	struct kvb_trace *t;
	char err[256];

	cr_assert_eq(kvb_trace_open(write_file(b, sizeof(b)), KVB_TRACE_ORACLE_BIN, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect_eq(r.time, 0xfffffffeull);
	cr_expect_eq(r.id, 0xfedcba9876543210ull, "%" PRIx64, r.id);
	cr_expect_eq(r.value_size, UINT32_MAX);
	cr_expect(r.op == KVB_TOP_GET && r.ttl_s == 0);
	cr_expect_str_eq(r.key, "o18364758544493064720");
	cr_expect_eq(r.key_len, strlen("o18364758544493064720"));
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), 0);
	kvb_trace_close(t);
	unlink(path);
}

Test(trace, twitter_maps_every_operation)
{
	static const struct {
		const char *name;
		int op;
	} ops[] = { { "get", KVB_TOP_GET },	   { "gets", KVB_TOP_GET },	 { "set", KVB_TOP_SET },
		    { "add", KVB_TOP_SET },	   { "replace", KVB_TOP_SET }, { "cas", KVB_TOP_SET },
		    { "append", KVB_TOP_SET },	   { "prepend", KVB_TOP_SET }, { "delete", KVB_TOP_DELETE },
		    { "incr", KVB_TOP_OTHER },	   { "decr", KVB_TOP_OTHER } };
	char text[1024] = "";
	struct kvb_trace_req r;
	struct kvb_trace *t;
	char err[256];

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%zu,k%zu,2,%zu,1,%s,%zu\n", 100 + i, i,
			 10 * i, ops[i].name, i);
	t = open_text(text, 0);
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		char key[8];

		cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
		snprintf(key, sizeof(key), "k%zu", i);
		cr_expect_eq(r.op, ops[i].op, "%s", ops[i].name);
		cr_expect_eq(r.time, 100 + i);
		cr_expect_eq(r.value_size, 10 * i);
		cr_expect_eq(r.ttl_s, i);
		cr_expect_str_eq(r.key, key);
		cr_expect_eq(r.id, XXH3_64bits(key, strlen(key)), "the id is the key's hash whatever is sent");
	}
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), 0);
	kvb_trace_close(t);
	unlink(path);
}

/* 39 bytes go as they are; 40 bytes, a space or a byte past ASCII make the key
 * "h" and the 16 hex digits of its XXH3. */
Test(trace, twitter_keys_no_cache_takes_are_sent_as_their_hash)
{
	static const char *const keys[] = { "abcdefghijabcdefghijabcdefghijabcdefghi",
					    "abcdefghijabcdefghijabcdefghijabcdefghij", "a b", "caf\xc3\xa9" };
	struct kvb_trace_req r;
	struct kvb_trace *t;
	char text[512] = "", err[256];

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "1,%s,%zu,5,1,get,0\n", keys[i],
			 strlen(keys[i]));
	t = open_text(text, KVB_TRACE_TWITTER);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		uint64_t h = XXH3_64bits(keys[i], strlen(keys[i]));
		char want[40];

		if (i == 0)
			snprintf(want, sizeof(want), "%s", keys[i]);
		else
			snprintf(want, sizeof(want), "h%016" PRIx64, h);
		cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
		cr_expect_eq(r.id, h);
		cr_expect_str_eq(r.key, want);
		cr_expect_eq(r.key_len, strlen(want));
	}
	kvb_trace_close(t);
	unlink(path);
}

Test(trace, detection_refuses_what_it_cannot_tell)
{
	char dir[] = "/tmp/kvtrace_XXXXXX", missing[64], err[256] = "";
	struct kvb_trace *t = (void *)1;

	cr_expect_eq(kvb_trace_open(write_file("", 0), 0, &t, err, sizeof(err)), -1);
	cr_expect_null(t);
	cr_expect(strstr(err, "empty"), "%s", err);
	unlink(path);
	cr_expect_eq(kvb_trace_open(write_file("1,2,3,4,5\n", 10), 0, &t, err, sizeof(err)), -1);
	cr_expect(strstr(err, "5 comma-separated fields"), "%s", err);
	unlink(path);
	cr_assert_not_null(mkdtemp(dir));
	snprintf(missing, sizeof(missing), "%s/none", dir);
	cr_expect_eq(kvb_trace_open(missing, 0, &t, err, sizeof(err)), -1);
	cr_expect(strstr(err, "cannot open") && strstr(err, missing), "%s", err);
	rmdir(dir);
	/* Named, an empty file is an empty trace. */
	cr_assert_eq(kvb_trace_open(write_file("", 0), KVB_TRACE_TWITTER, &t, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(kvb_trace_next(t, &(struct kvb_trace_req){ 0 }, err, sizeof(err)), 0);
	kvb_trace_close(t);
	unlink(path);
}

/* Each bad line after a good one: the error names the line and what is wrong. */
Test(trace, oracle_csv_errors_name_the_line_and_the_field)
{
	static const struct {
		const char *line, *says;
	} bad[] = {
		{ "7,x8,9\n", "id \"x8\" is not a number" },
		{ "7,8\n", "2 fields" },
		{ "7,8,9,10,11\n", "5 fields" },
		{ "7,8,4294967296\n", "size 4294967296 is out of range" },
		{ "7,8,9,soon\n", "next_access \"soon\" is not a number" },
		{ "7,,9\n", "id is empty" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvb_trace_req r;
		struct kvb_trace *t;
		char text[128], err[256] = "";

		snprintf(text, sizeof(text), "1,2,4294967295\n\n%s", bad[i].line);
		t = open_text(text, 0);
		cr_expect_eq(kvb_trace_fmt_of(t), KVB_TRACE_ORACLE_CSV);
		cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
		cr_expect_eq(r.value_size, UINT32_MAX);
		cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1, "%s", bad[i].line);
		cr_expect(strstr(err, "line 3: ") && strstr(err, bad[i].says), "%s -> %s", bad[i].line, err);
		kvb_trace_close(t);
		unlink(path);
	}
}

/* A first line with some numbers is data, and bad data, not a header. */
Test(trace, oracle_csv_header_needs_no_number_in_it)
{
	struct kvb_trace *t = open_text("time,5,size\n1,2,3\n", KVB_TRACE_ORACLE_CSV);
	struct kvb_trace_req r;
	char err[256] = "";

	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1);
	cr_expect(strstr(err, "line 1: time \"time\" is not a number"), "%s", err);
	kvb_trace_close(t);
	unlink(path);
}

/* 64 KiB of line is read (the key then sent as its hash); one byte more is refused. */
Test(trace, a_line_over_64_KiB_is_refused)
{
	size_t n = (64u << 10) - strlen("1,,3,4,5,get,0"), len;
	char *text = malloc(2 * (64u << 10) + 64), *p = text;
	struct kvb_trace_req r;
	struct kvb_trace *t;
	char err[256] = "";

	cr_assert_not_null(text);
	for (int extra = 0; extra < 2; extra++) {
		p += sprintf(p, "1,");
		memset(p, 'k', n + (size_t)extra);
		p += n + (size_t)extra;
		p += sprintf(p, ",3,4,5,get,0\r\n");
	}
	len = (size_t)(p - text);
	cr_assert_eq(kvb_trace_open(write_file(text, len), KVB_TRACE_TWITTER, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvb_trace_next(t, &r, err, sizeof(err)), 1, "%s", err);
	cr_expect_eq(r.key[0], 'h');
	cr_expect_eq(kvb_trace_next(t, &r, err, sizeof(err)), -1);
	cr_expect(strstr(err, "line 2: longer than 65536 bytes"), "%s", err);
	kvb_trace_close(t);
	unlink(path);
	free(text);
}

Test(trace, format_names_round_trip)
{
	for (int f = KVB_TRACE_ORACLE_BIN; f <= KVB_TRACE_TWITTER; f++)
		cr_expect_eq(kvb_trace_fmt_parse(kvb_trace_fmt_name(f)), f);
	cr_expect_str_eq(kvb_trace_fmt_name(KVB_TRACE_ORACLE_BIN), "oracleGeneral");
	cr_expect_eq(kvb_trace_fmt_parse("oracle"), KVB_TRACE_ORACLE_BIN);
	cr_expect_eq(kvb_trace_fmt_parse("oracle-csv"), KVB_TRACE_ORACLE_CSV);
	cr_expect_eq(kvb_trace_fmt_parse("twitter"), KVB_TRACE_TWITTER);
	cr_expect_eq(kvb_trace_fmt_parse("csv"), 0);
	cr_expect_str_eq(kvb_trace_fmt_name(9), "?");
}

/* 50 000 objects of one byte: the tables grow from 1 024 and every key is
 * still found, and still in recency order. */
Test(trace, byte_lru_keeps_every_key_while_it_grows)
{
	struct kvb_lru *l;

	cr_assert_eq(kvb_lru_create_bytes(50000, &l), 0);
	for (uint64_t k = 0; k < 50000; k++)
		cr_assert_eq(kvb_lru_get(l, k * 7919, 1), 0);
	for (uint64_t k = 0; k < 50000; k++)
		cr_assert_eq(kvb_lru_get(l, k * 7919, 0), 1, "key %llu", (unsigned long long)k);
	cr_expect_eq(kvb_lru_bytes(l), 50000);
	cr_expect_eq(kvb_lru_get(l, 1, 1), 0);
	cr_expect_eq(kvb_lru_get(l, 0, 1), 0, "the least recent (0) went for key 1");
	cr_expect_eq(kvb_lru_get(l, 7919, 1), 0, "7919, least recent then, went for 0");
	cr_expect_eq(kvb_lru_get(l, 2 * 7919, 1), 0, "and 2 * 7919 for 7919");
	cr_expect_eq(kvb_lru_get(l, 49999ull * 7919, 1), 1);
	for (uint64_t k = 4; k < 50000; k += 2)
		kvb_lru_delete(l, k * 7919);
	cr_expect_eq(kvb_lru_bytes(l), 50000 - 24998, "the even keys from 4 up went");
	kvb_lru_destroy(l);
}

/* A SET larger than the LRU takes the old entry with it; so does a GET whose
 * object grew past it. */
Test(trace, byte_lru_object_larger_than_the_capacity)
{
	struct kvb_lru *l;

	cr_assert_eq(kvb_lru_create_bytes(100, &l), 0);
	cr_expect_eq(kvb_lru_get(l, 1, 101), 0);
	cr_expect_eq(kvb_lru_bytes(l), 0, "not inserted");
	cr_expect_eq(kvb_lru_get(l, 1, 101), 0);
	cr_expect_eq(kvb_lru_get(l, 2, 60), 0);
	kvb_lru_set(l, 2, 500);
	cr_expect_eq(kvb_lru_bytes(l), 0, "the old entry went");
	cr_expect_eq(kvb_lru_get(l, 2, 60), 0);
	kvb_lru_set(l, 3, 40);
	cr_expect_eq(kvb_lru_bytes(l), 100, "exactly full");
	cr_expect_eq(kvb_lru_get(l, 2, 0), 1, "size 0: keeps its size");
	cr_expect_eq(kvb_lru_bytes(l), 100);
	kvb_lru_destroy(l);
	cr_expect_eq(kvb_lru_create_bytes(0, &l), -1);
}
