/* kvserver as a cache tier over real verbs: memory comes back. Many
 * short-lived clients never exhaust a small server; sustained updates of
 * several times the heap succeed while the reclaimer thread (its own loopback
 * QP, bucket locks by RDMA CAS) moves and frees segments; live data larger
 * than the heap evicts; and the statistics say so. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvclient.h"

TestSuite(cache_verbs, .init = kvt_require_rdma, .timeout = 300);

static kvc_t *connect_kv(const char *port, unsigned depth)
{
	return kvt_kv_connect(port, depth, 4096);
}

static void stop_server(struct kvt_proc *srv)
{
	kvt_kill(srv, SIGTERM);
	cr_expect_eq(kvt_wait(srv, 20000), 0, "kvserver: %s", srv->all);
}

static struct kvc_server_stats server_stats(const char *port)
{
	struct kvc_server_stats ss;
	kvc_t *h = connect_kv(port, 1);
	int rc = kvc_server_stats(h, &ss);

	cr_assert_eq(rc, 0, "server statistics: %s", kvc_err_name(rc));
	kvc_destroy(h);
	return ss;
}

/* Connections that come and go must give back what they were carved (a
 * 1 MiB segment kept for good per connection would make a 16 MiB server
 * refuse its 14th client's PUT). */
Test(cache_verbs, short_lived_clients_never_exhaust_a_small_server)
{
	struct kvc_server_stats ss;
	struct kvt_proc srv;
	char k[32], v[64];
	unsigned failed = 0, missing = 0;
	kvc_t *h;

	kvt_start_server(&srv, "7651", (const char *const[]){ "-m", "16", NULL });
	for (unsigned i = 0; i < 40; i++) {
		h = connect_kv("7651", 1);
		snprintf(k, sizeof(k), "oneshot-%u", i);
		failed += kvc_put(h, k, strlen(k), k, strlen(k), 0) != 0;
		kvc_destroy(h);
	}
	h = connect_kv("7651", 1);
	for (unsigned i = 0; i < 40; i++) {
		size_t len = 0;

		snprintf(k, sizeof(k), "oneshot-%u", i);
		missing += kvc_get(h, k, strlen(k), v, sizeof(v), &len) != 0;
	}
	kvc_destroy(h);
	ss = server_stats("7651");
	stop_server(&srv);
	cr_expect_eq(failed, 0);
	cr_expect_eq(missing, 0);
	cr_expect_leq(ss.segments_used, 1, "40 small items took %llu segments", (unsigned long long)ss.segments_used);
	cr_expect_lt(ss.bytes, 4096, "40 items and returned tails: %llu bytes", (unsigned long long)ss.bytes);
}

/* PUT keys [0, n) with values of vlen bytes, depth in flight; returns the
 * number of failures (first code in *first). */
static unsigned put_many(kvc_t *h, const char *prefix, unsigned n, unsigned keyspace, size_t vlen, unsigned *seqs,
			 int *first)
{
	static struct kvc_op ops[16];
	static char keys[16][32], vals[16][1100];
	int busy[16] = { 0 }; /* from kvc_submit until kvc_poll hands the op back */
	unsigned next = 0, done = 0, inflight = 0, failed = 0;
	uint64_t rng = 0x853c49e6748fea9bull;

	while (done < n) {
		struct kvc_op *got[16];
		int m;

		for (unsigned s = 0; s < 16 && next < n && inflight < 16; s++) {
			unsigned key;

			if (busy[s])
				continue;
			rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
			key = keyspace ? (unsigned)(rng % keyspace) : next;
			/* One write per key in flight: two concurrent PUTs of a key
			 * may land in either order, and "the last acknowledged
			 * value" would be undefined. */
			for (unsigned t = 0; t < 16; t++)
				if (busy[t] && (unsigned)(uintptr_t)ops[t].user == key)
					key = UINT32_MAX;
			if (key == UINT32_MAX)
				continue;
			snprintf(keys[s], sizeof(keys[s]), "%s-%u", prefix, key);
			snprintf(vals[s], sizeof(vals[s]), "%u:%0*u", next, (int)vlen, key);
			ops[s] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[s], .key_len = strlen(keys[s]),
						  .value = vals[s], .value_len = strlen(vals[s]),
						  .user = (void *)(uintptr_t)key };
			if (kvc_submit(h, &ops[s]) != 0) {
				failed++;
				done++;
				next++;
				continue;
			}
			busy[s] = 1;
			next++;
			inflight++;
		}
		m = kvc_poll(h, got, 16, 1000);
		cr_assert_geq(m, 0);
		for (int j = 0; j < m; j++) {
			unsigned key = (unsigned)(uintptr_t)got[j]->user;

			busy[got[j] - ops] = 0;
			inflight--;
			done++;
			if (got[j]->status) {
				if (!failed++ && first)
					*first = got[j]->status;
			} else if (seqs) {
				unsigned seq = (unsigned)strtoul(got[j]->value, NULL, 10);

				if (seq >= seqs[key] || seqs[key] == UINT32_MAX)
					seqs[key] = seq;
			}
		}
	}
	return failed;
}

/* listen: NULL for a server on all addresses, whose loopback (reclaimer and
 * fencer) finds an address of its device by itself. */
static void sustained_updates(const char *listen, const char *port)
{
	static unsigned seqs[4096];
	struct kvc_server_stats before, after;
	struct kvt_proc srv;
	unsigned keys, n, failed, wrong = 0, missing = 0;
	int first = 0;
	char v[1200];
	kvc_t *h;

	kvt_start_server_on(&srv, listen, port,
			    (const char *const[]){ "-m", "4", "--segment-size", "64", "--no-evict", NULL });
	before = server_stats(port);
	/* Working set: 30 % of the heap in ~1 KiB items; written 4 times over. */
	keys = (unsigned)(before.limit_maxbytes * 3 / 10 / 1100);
	n = (unsigned)(4 * before.limit_maxbytes / 1100);
	memset(seqs, 0xff, sizeof(seqs));
	h = connect_kv(port, 16);
	failed = put_many(h, "upd", n, keys, 1000, seqs, &first);
	for (unsigned i = 0; i < keys; i++) {
		char k[32];
		size_t len = 0;
		int rc;

		if (seqs[i] == UINT32_MAX)
			continue;
		snprintf(k, sizeof(k), "upd-%u", i);
		rc = kvc_get(h, k, strlen(k), v, sizeof(v), &len);
		if (rc) {
			missing++;
			continue;
		}
		v[len] = '\0';
		wrong += (unsigned)strtoul(v, NULL, 10) != seqs[i];
	}
	kvc_destroy(h);
	after = server_stats(port);
	stop_server(&srv);
	cr_expect_eq(failed, 0, "%u of %u PUTs failed, first %s", failed, n, kvc_err_name(first));
	cr_expect_eq(missing, 0, "no eviction: every key stays");
	cr_expect_eq(wrong, 0, "%u keys not at their last acknowledged value", wrong);
	cr_expect_gt(after.reclaimed, 4, "reclaimed %llu segments", (unsigned long long)after.reclaimed);
	cr_expect_gt(after.dropped, 0);
	cr_expect_eq(after.evictions, 0);
	cr_expect_lt(after.bytes, after.limit_maxbytes, "what clients hold stays below the heap");
}

Test(cache_verbs, sustained_updates_of_several_heaps_succeed_and_reads_see_the_last_value)
{
	sustained_updates(kvt_rdma_addr(), "7652");
}

/* A server started without -l (the default) must reclaim too: its loopback
 * finds its own address (else a 64 MiB server refuses every PUT with
 * KVC_ENOMEM after ~60 MiB of updates to 256 keys). */
Test(cache_verbs, a_server_on_all_addresses_reclaims_too)
{
	sustained_updates(NULL, "7656");
}

Test(cache_verbs, live_data_beyond_the_heap_is_evicted_not_refused)
{
	struct kvc_server_stats ss;
	struct kvt_proc srv;
	unsigned n, failed, recent_missing = 0;
	int first = 0;
	char v[1200];
	kvc_t *h;

	kvt_start_server(&srv, "7653", (const char *const[]){ "-m", "4", "--segment-size", "64", NULL });
	ss = server_stats("7653");
	n = (unsigned)(2 * ss.limit_maxbytes / 1100);
	h = connect_kv("7653", 16);
	failed = put_many(h, "fill", n, 0, 1000, NULL, &first);
	/* Before anything is read: the reclaimer may go on meanwhile, and the
	 * reads below would make what it evicts after them fetched. */
	ss = server_stats("7653");
	for (unsigned i = n - 200; i < n; i++) {
		char k[32];
		size_t len = 0;

		snprintf(k, sizeof(k), "fill-%u", i);
		recent_missing += kvc_get(h, k, strlen(k), v, sizeof(v), &len) != 0;
	}
	kvc_destroy(h);
	stop_server(&srv);
	cr_expect_eq(failed, 0, "%u of %u PUTs failed, first %s", failed, n, kvc_err_name(first));
	cr_expect_eq(recent_missing, 0, "%u of the 200 newest keys missing", recent_missing);
	cr_expect_gt(ss.evictions, 0);
	cr_expect_eq(ss.evictions, ss.evicted_unfetched, "nothing was read, so nothing evicted had been");
	cr_expect_lt(ss.reclaim_cpu_ns, 60ull * 1000000000u);
}
