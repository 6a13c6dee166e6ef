/* kvbench --trace: request traces the tests write (libCacheSim's
 * oracleGeneral binary, Twitter's cache-trace CSV) replayed as a cache-aside
 * client against local:// (no RDMA: suite replay_local) and a real kvserver
 * (replay_verbs), with the exact-LRU baseline beside them. Each trace is
 * built so that every hit and miss is known in advance. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

TestSuite(replay_local, .timeout = 240);
TestSuite(replay_verbs, .init = kvt_require_rdma, .timeout = 240);

static char dir[64];

static const char *path_of(const char *name)
{
	static char p[128];

	if (!dir[0]) {
		strcpy(dir, "/tmp/kvreplay.XXXXXX");
		cr_assert(mkdtemp(dir) != NULL);
	}
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

/* One oracleGeneral record: {u32 time, u64 id, u32 size, i64 next}, packed,
 * little-endian. */
static void oracle_record(FILE *f, uint32_t t, uint64_t id, uint32_t size)
{
	unsigned char b[24] = { 0 };

	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char)(t >> (8 * i));
	for (int i = 0; i < 8; i++)
		b[4 + i] = (unsigned char)(id >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[12 + i] = (unsigned char)(size >> (8 * i));
	memset(b + 16, 0xff, 8); /* next access: -1 */
	cr_assert_eq(fwrite(b, 1, 24, f), 24u);
}

/* 200 objects, alternately 100 and 1000 bytes, requested once each, then the
 * 100 large ones again: 300 GETs, 100 hits when the cache holds them all;
 * bytes: 110,000 missed of 210,000 (plus the keys, "o<id>"). */
static const char *oracle_trace(void)
{
	const char *p = path_of("two-passes.oracleGeneral");
	FILE *f = fopen(p, "wb");

	cr_assert(f);
	for (uint32_t i = 0; i < 200; i++)
		oracle_record(f, i, 1000 + i, i % 2 ? 1000 : 100);
	for (uint32_t i = 1; i < 200; i += 2)
		oracle_record(f, 200 + i, 1000 + i, 1000);
	cr_assert_eq(fclose(f), 0);
	return p;
}

static int replay(struct kvt_proc *p, const char *target, const char *trace, const char *extra1,
		  const char *extra2)
{
	char *argv[] = { KV_BENCH_BIN, "--trace", (char *)trace, "--target", (char *)target, "-q", "4",
			 "--local-max-op-ms", "2000", (char *)extra1, (char *)extra2, NULL };

	cr_assert_eq(kvt_start(p, argv), 0);
	return kvt_wait(p, 120000);
}

/* The "(H hits of G GETs)" of the line starting with who ("\nNAME "). */
static void hits_of(const char *out, const char *who, unsigned long long *hits, unsigned long long *gets)
{
	const char *l = strstr(out, who), *h;

	cr_assert(l, "no line for %s: %s", who, out);
	h = strstr(l, "miss ratio");
	cr_assert(h && (h = strchr(h, '(')) && sscanf(h, "(%llu hits of %llu GETs)", hits, gets) == 2, "%s", out);
}

static void expect_two_passes(const char *out, const char *who)
{
	unsigned long long hits, gets;
	/* keys "o1000".."o1199": 5 bytes each */
	double byte_miss = (100 * 105.0 + 100 * 1005.0) / (100 * 105.0 + 200 * 1005.0);
	char want[64];

	hits_of(out, who, &hits, &gets);
	cr_expect_eq(gets, 300);
	cr_expect_eq(hits, 100, "%s: %s", who, out);
	snprintf(want, sizeof(want), "byte miss ratio %.4f", byte_miss);
	cr_expect(strstr(strstr(out, who), want), "%s: %s in %s", who, want, out);
	cr_expect(strstr(strstr(out, who), "request miss ratio 0.6667"), "%s", out);
}

Test(replay_local, an_oracle_general_trace_gives_the_miss_ratios_it_was_built_for)
{
	struct kvt_proc p;
	int st = replay(&p, "local://16", oracle_trace(), NULL, NULL);

	cr_assert_eq(st, 0, "%s", p.all);
	cr_expect(strstr(p.all, "(oracleGeneral)"), "told from the file: %s", p.all);
	expect_two_passes(p.all, "\nkvcache-local ");
	expect_two_passes(p.all, "\nexact LRU of");
	printf("%s", p.all);
}

/* A baseline of 2,500 bytes holds two large objects: the second pass misses
 * in it every time, while the cache (16 MiB) hits. */
Test(replay_local, the_lru_baseline_has_the_bytes_it_is_given)
{
	struct kvt_proc p;
	unsigned long long hits, gets;
	int st = replay(&p, "local://16", oracle_trace(), "--lru-bytes", "2500");

	cr_assert_eq(st, 0, "%s", p.all);
	cr_expect(strstr(p.all, "exact LRU of 2500 bytes"), "%s", p.all);
	hits_of(p.all, "\nexact LRU of", &hits, &gets);
	cr_expect_eq(hits, 0, "%s", p.all);
	hits_of(p.all, "\nkvcache-local ", &hits, &gets);
	cr_expect_eq(hits, 100, "%s", p.all);
}

/* Twitter's format: get/gets, set, delete replayed as they are; incr
 * counted and skipped; an item larger than the target takes skipped. */
Test(replay_local, a_twitter_trace_replays_its_sets_deletes_and_gets)
{
	static const char *const lines[] = {
		"0,keyA,4,30,1,set,0",  "1,keyA,4,30,1,get,0",  "2,keyA,4,30,1,delete,0",
		"3,keyA,4,30,1,get,0",  "4,keyA,4,30,1,gets,0", "5,keyB,4,50,2,get,3600",
		"6,keyB,4,50,2,get,3600", "7,keyC,4,1,2,incr,0", "8,keyD,4,90000000,2,set,0",
		"9,keyD,4,90000000,2,get,0",
	};
	const char *path = path_of("small.twitter.csv");
	FILE *f = fopen(path, "w");
	unsigned long long hits, gets;
	struct kvt_proc p;
	int st;

	cr_assert(f);
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		fprintf(f, "%s\n", lines[i]);
	cr_assert_eq(fclose(f), 0);
	st = replay(&p, "local://16", path, NULL, NULL);
	cr_assert_eq(st, 0, "%s", p.all);
	cr_expect(strstr(p.all, "(twitter)"), "%s", p.all);
	cr_expect(strstr(p.all, "1 sets, 1 deletes"), "%s", p.all);
	cr_expect(strstr(p.all, "(1 other operations, 2 items larger than"), "%s", p.all);
	/* GETs: A hit, A miss (deleted) then filled, A hit, B miss, B hit. */
	hits_of(p.all, "\nkvcache-local ", &hits, &gets);
	cr_expect_eq(gets, 5, "%s", p.all);
	cr_expect_eq(hits, 3, "%s", p.all);
	hits_of(p.all, "\nexact LRU of", &hits, &gets);
	cr_expect_eq(gets, 5, "%s", p.all);
	cr_expect_eq(hits, 3, "%s", p.all);
}

Test(replay_local, a_malformed_trace_stops_with_where_and_why)
{
	const char *path = path_of("bad.twitter.csv");
	FILE *f = fopen(path, "w");
	struct kvt_proc p;
	int st;

	cr_assert(f);
	fprintf(f, "0,k1,2,10,1,get,0\n1,k2,2,10,1,get,0\n2,k3,2,ten,1,get,0\n");
	cr_assert_eq(fclose(f), 0);
	st = replay(&p, "local://16", path, NULL, NULL);
	cr_expect_eq(st, 1, "%s", p.all);
	cr_expect(strstr(p.all, "line 3"), "names the line: %s", p.all);
	cr_expect(!strstr(p.all, "miss ratio"), "no ratio from a trace read in part: %s", p.all);

	st = replay(&p, "local://16", path_of("does-not-exist"), NULL, NULL);
	cr_expect_eq(st, 1, "%s", p.all);
	cr_expect(strstr(p.all, "does-not-exist"), "%s", p.all);
}

/* --cache-aside goes through the same replayer: over 200 keys of many sizes
 * in a 16 MiB cache nothing is evicted, so the cache hits exactly where an
 * unbounded LRU does (every miss is a key's first request). */
static void cache_aside_like_lru(const char *kind, const char *sizes)
{
	char *argv[] = { KV_BENCH_BIN, "--cache-aside", (char *)kind, "--target", "local://16", "-r", "200",
			 "-n", "3000", "--warmup-requests", "300", "-s", (char *)sizes, "-q", "4",
			 "--local-max-op-ms", "2000", "--lru-bytes", "100000000", NULL };
	struct kvt_proc p;
	unsigned long long hits, gets, lru_hits, lru_gets;

	cr_assert_eq(kvt_start(&p, argv), 0);
	cr_assert_eq(kvt_wait(&p, 120000), 0, "%s", p.all);
	cr_expect(strstr(p.all, "working set "), "%s", p.all);
	hits_of(p.all, "\nkvcache-local ", &hits, &gets);
	hits_of(p.all, "\nexact LRU of", &lru_hits, &lru_gets);
	cr_expect_eq(gets, 2700, "%s", p.all);
	cr_expect_eq(lru_gets, 2700);
	cr_expect_eq(hits, lru_hits, "%s %s: the cache holds everything, as the LRU does: %s", kind, sizes, p.all);
	cr_expect(hits > 1000, "%s", p.all);
}

Test(replay_local, cache_aside_runs_of_many_sizes_hit_where_an_unbounded_lru_does)
{
	cache_aside_like_lru("zipf", "100");
	cache_aside_like_lru("zipf", "lognormal:300,1");
	cache_aside_like_lru("scan", "10-2000");
}

Test(replay_verbs, an_oracle_general_trace_against_a_kvserver)
{
	const char *extra[] = { "-m", "64", NULL };
	struct kvt_proc srv, p;
	char target[160];
	int st;

	kvt_start_server(&srv, "7696", extra);
	snprintf(target, sizeof(target), "rdma://%s:7696", kvt_rdma_addr());
	st = replay(&p, target, oracle_trace(), NULL, NULL);
	cr_assert_eq(st, 0, "%s", p.all);
	expect_two_passes(p.all, "\nkvcache ");
	expect_two_passes(p.all, "\nexact LRU of");
	printf("%s", p.all);
	kvt_kill(&srv, SIGTERM);
	cr_expect_eq(kvt_wait(&srv, 20000), 0, "kvserver: %s", srv.all);
}
