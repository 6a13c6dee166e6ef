/* Trace reading (bench/trace.h) and the byte-capacity LRU baseline
 * (bench/lrusim.h): traces the tests write, read back field by field;
 * malformed ones refused at the right line or byte; the LRU against a
 * brute-force one on random gets, sets and deletes of random sizes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

Test(trace, byte_lru_matches_a_brute_force_lru)
{
	static struct ref f;
	struct kvb_lru *l;
	struct kvb_rng rng;
	unsigned hits = 0;

	memset(&f, 0, sizeof(f));
	f.cap = 20000;
	cr_assert_eq(kvb_lru_create_bytes(f.cap, &l), 0);
	kvb_rng_seed(&rng, 3);
	for (unsigned i = 0; i < 200000; i++) {
		uint64_t key = kvb_rng_next(&rng) % 400, size = 1 + kvb_rng_next(&rng) % 500;
		unsigned what = (unsigned)(kvb_rng_next(&rng) % 10);

		if (i % 1000 == 0)
			size = 25000; /* larger than the whole LRU */
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
	cr_expect_gt(hits, 1000);
	kvb_lru_destroy(l);
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
