/* resizebench: latency and correctness across online index resizes.
 *
 *   resizebench --target HOST[:PORT] [-N ITEMS] [-T THREADS] [-s BYTES] [--mix M]
 *
 * Start kvserver with a small index (--buckets 64), room for ITEMS items and
 * --no-evict (with eviction on, reclamation may evict items nobody read, as
 * a cache should, and the read-back counts them missing).
 * THREADS client threads (one handle each) insert ITEMS new keys between them;
 * after each insert a thread does M operations on keys already inserted (half
 * GETs that must return the key's last value, half PUT updates), so the load
 * is mixed while the index doubles again and again. A monitor handle asks the
 * server for its statistics every 20 ms: while a resize has begun but not
 * ended (index_epoch > resizes + 1) operations count as "migrating", else as
 * "stable". At each new epoch it notes how full the index was when the resize
 * began (items inserted / (KVI_SLOTS_PER_BUCKET x buckets)). At the end every key is read back.
 *
 * Prints the latency quantiles of GET, update and insert, stable and migrating,
 * their p99.9 ratios, the index load at each trigger, failed operations by
 * code, and keys that did not read back: acknowledged ones (lost or wrong)
 * apart from those whose insert failed (absent, as they may be). Exit 0, or 1 if anything failed or read back
 * wrong, 2 on usage errors. */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "hist.h"
#include "kvclient.h"
#include "layout.h"

#define MAX_THREADS 64
#define MAX_EPOCHS 48

enum { C_GET, C_UPDATE, C_INSERT, NCLASS };
static const char *const class_name[NCLASS] = { "GET", "update", "insert" };

static struct {
	char server[256];
	uint64_t items;
	unsigned threads, mix, value_size;
} cfg = { .items = 1000000, .threads = 4, .mix = 2, .value_size = 100 };

static atomic_uint_fast64_t next_key, inserted; /* keys handed out; keys whose insert completed */
static atomic_int migrating, stop_monitor;
static atomic_uint_fast64_t failed, wrong;
/* Per key: its insert was acknowledged (1). A key whose insert failed may be
 * absent at the read-back without anything being lost. */
static unsigned char *acked;
/* Failures by code (KVC_ codes are small negatives). */
#define NCODES 32
static atomic_uint_fast64_t fail_codes[NCODES];
static atomic_uint_fast64_t fail_at[2][NCLASS]; /* [migrating][class] */

struct trigger {
	uint64_t epoch, buckets_before, items;
};
static struct trigger triggers[MAX_EPOCHS];
static unsigned ntriggers;

struct worker {
	pthread_t t;
	unsigned id;
	struct kvb_hist h[2][NCLASS]; /* [migrating][class] */
	int first_error;
};

static kvc_t *open_handle(void)
{
	struct kvc_opts o;
	char err[400];
	kvc_t *h;

	kvc_opts_init(&o);
	o.server = cfg.server;
	o.op_timeout_ms = 10000;
	if (kvc_create(&o, &h, err, sizeof(err))) {
		fprintf(stderr, "resizebench: %s\n", err);
		return NULL;
	}
	return h;
}

/* The value of key i: its number, padded to the value size. */
static size_t value_of(uint64_t i, char *v)
{
	int n = snprintf(v, cfg.value_size + 1, "v%" PRIu64 "-", i);

	for (size_t k = (size_t)n; k < cfg.value_size; k++)
		v[k] = (char)('a' + (i + k) % 26);
	return cfg.value_size;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void record(struct worker *w, int c, uint64_t t0, int mig)
{
	kvb_hist_record(&w->h[mig][c], kvi_mono_ns() - t0);
}

static void fail(struct worker *w, int rc, int c, int mig)
{
	atomic_fetch_add(&failed, 1);
	atomic_fetch_add(&fail_at[mig][c], 1);
	atomic_fetch_add(&fail_codes[-rc > 0 && -rc < NCODES ? -rc : 0], 1);
	if (!w->first_error)
		w->first_error = rc;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (w->id + 1);
	char k[32], *v = malloc(cfg.value_size + 1), *got = malloc(cfg.value_size + 64);
	kvc_t *h = open_handle();

	if (!h || !v || !got) {
		atomic_fetch_add(&failed, 1);
		goto out;
	}
	for (;;) {
		uint64_t i = atomic_fetch_add(&next_key, 1), t0;
		size_t vlen;
		int rc, mig;

		if (i >= cfg.items)
			break;
		snprintf(k, sizeof(k), "rb-%" PRIu64, i);
		vlen = value_of(i, v);
		mig = atomic_load(&migrating);
		t0 = kvi_mono_ns();
		rc = kvc_put(h, k, strlen(k), v, vlen, 0);
		record(w, C_INSERT, t0, mig);
		if (rc) {
			fail(w, rc, C_INSERT, mig);
		} else {
			acked[i] = 1;
			atomic_fetch_add(&inserted, 1);
		}
		for (unsigned m = 0; m < cfg.mix; m++) {
			uint64_t done = atomic_load(&inserted), j;
			size_t len = 0;

			if (done == 0)
				break;
			/* Keys below `inserted` may still be in flight on another
			 * thread (inserted counts completions, not order): a
			 * missing one is only wrong if its insert completed, which
			 * the final read-back checks. */
			j = rnd(&seed) % done;
			snprintf(k, sizeof(k), "rb-%" PRIu64, j);
			mig = atomic_load(&migrating);
			t0 = kvi_mono_ns();
			if (m % 2 == 0) {
				rc = kvc_get(h, k, strlen(k), got, cfg.value_size + 64, &len);
				record(w, C_GET, t0, mig);
				if (rc == 0) {
					char want[256];

					value_of(j, want);
					if (len != cfg.value_size || memcmp(got, want, len) != 0)
						atomic_fetch_add(&wrong, 1);
				} else if (rc != KVC_ENOTFOUND) {
					fail(w, rc, C_GET, mig);
				}
			} else {
				char want[256];

				value_of(j, want); /* updates rewrite the same value: reads stay checkable */
				rc = kvc_put(h, k, strlen(k), want, cfg.value_size, 0);
				record(w, C_UPDATE, t0, mig);
				if (rc)
					fail(w, rc, C_UPDATE, mig);
			}
		}
	}
out:
	kvc_destroy(h);
	free(v);
	free(got);
	return NULL;
}

static void *monitor(void *arg)
{
	kvc_t *h = arg;
	uint64_t last_epoch = 1, buckets = 0;

	while (!atomic_load(&stop_monitor)) {
		struct kvc_server_stats s;
		char got[8];
		size_t len;

		/* An operation now and then keeps the handle's lease (and rejoins it
		 * if it lapsed): statistics calls alone do not. */
		kvc_get(h, "rb-monitor", 10, got, sizeof(got), &len);

		if (kvc_server_stats(h, &s) == 0) {
			if (buckets == 0)
				buckets = s.index_buckets;
			atomic_store(&migrating, s.index_epoch > s.resizes + 1);
			if (s.index_epoch > last_epoch && ntriggers < MAX_EPOCHS) {
				triggers[ntriggers++] = (struct trigger){ .epoch = s.index_epoch,
									  .buckets_before = buckets,
									  .items = atomic_load(&inserted) };
				last_epoch = s.index_epoch;
			}
			if (s.index_epoch == s.resizes + 1)
				buckets = s.index_buckets;
		}
		usleep(20000);
	}
	return NULL;
}

/* Keys acknowledged and not read back as written (lost or wrong); *unstored:
 * keys whose insert failed and that are absent, as they may be. */
static uint64_t read_back(kvc_t *h, uint64_t *unstored)
{
	char k[32], *want = malloc(cfg.value_size + 1), *got = malloc(cfg.value_size + 64);
	uint64_t bad = 0;

	*unstored = 0;
	for (uint64_t i = 0; want && got && i < cfg.items; i++) {
		size_t len = 0;
		int rc;

		snprintf(k, sizeof(k), "rb-%" PRIu64, i);
		value_of(i, want);
		rc = kvc_get(h, k, strlen(k), got, cfg.value_size + 64, &len);
		if (rc == KVC_ENOTFOUND && !acked[i]) {
			(*unstored)++;
			continue;
		}
		if (rc != 0 || len != cfg.value_size || memcmp(got, want, len) != 0) {
			if (bad++ < 5)
				fprintf(stderr, "resizebench: %s reads back %s\n", k, kvc_err_name(rc));
		}
	}
	free(want);
	free(got);
	return bad;
}

static void usage(void)
{
	fprintf(stderr, "usage: resizebench --target HOST[:PORT] [-N ITEMS] [-T THREADS] [-s BYTES] [--mix M]\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "target", required_argument, NULL, 't' }, { "items", required_argument, NULL, 'N' },
		{ "threads", required_argument, NULL, 'T' }, { "value-size", required_argument, NULL, 's' },
		{ "mix", required_argument, NULL, 'x' },     { "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static struct worker w[MAX_THREADS];
	struct kvb_hist all[2][NCLASS];
	pthread_t mon;
	uint64_t t0, bad;
	kvc_t *mh;
	int c;

	while ((c = getopt_long(argc, argv, "t:N:T:s:h", lo, NULL)) != -1) {
		char *end = NULL;
		unsigned long long n = 0;

		if (c != 't' && c != 'h')
			n = strtoull(optarg, &end, 10);
		switch (c) {
		case 't':
			snprintf(cfg.server, sizeof(cfg.server), "%s", optarg);
			break;
		case 'N':
			if (*end || n == 0 || n > 100000000ull)
				goto bad;
			cfg.items = n;
			break;
		case 'T':
			if (*end || n == 0 || n > MAX_THREADS)
				goto bad;
			cfg.threads = (unsigned)n;
			break;
		case 's':
			if (*end || n < 24 || n > 200)
				goto bad;
			cfg.value_size = (unsigned)n;
			break;
		case 'x':
			if (*end || n > 16)
				goto bad;
			cfg.mix = (unsigned)n;
			break;
		case 'h':
			usage();
			return 0;
		default:
			goto bad;
		}
	}
	if (!cfg.server[0] || optind != argc)
		goto bad;
	acked = calloc(cfg.items, 1);
	if (!acked) {
		fprintf(stderr, "resizebench: out of memory for %" PRIu64 " items\n", cfg.items);
		return 1;
	}
	mh = open_handle();
	if (!mh)
		return 1;
	pthread_create(&mon, NULL, monitor, mh);
	t0 = kvi_mono_ns();
	for (unsigned i = 0; i < cfg.threads; i++) {
		w[i].id = i;
		for (int m = 0; m < 2; m++)
			for (int k = 0; k < NCLASS; k++)
				kvb_hist_init(&w[i].h[m][k]);
		pthread_create(&w[i].t, NULL, work, &w[i]);
	}
	for (unsigned i = 0; i < cfg.threads; i++)
		pthread_join(w[i].t, NULL);
	usleep(100000);
	atomic_store(&stop_monitor, 1);
	pthread_join(mon, NULL);
	printf("resizebench: %" PRIu64 " items, %u threads, %u ops per insert: %.1f s, %" PRIu64
	       " failed operations, %" PRIu64 " GETs with a wrong value\n",
	       cfg.items, cfg.threads, cfg.mix, (double)(kvi_mono_ns() - t0) / 1e9, (uint64_t)atomic_load(&failed),
	       (uint64_t)atomic_load(&wrong));
	for (unsigned i = 0; i < cfg.threads; i++)
		if (w[i].first_error)
			printf("  thread %u: first failure %s\n", i, kvc_err_name(w[i].first_error));
	for (unsigned i = 0; i < ntriggers; i++)
		printf("resize to epoch %" PRIu64 ": began with %" PRIu64 " items in %" PRIu64
		       " buckets: index load at the trigger %.1f %%\n",
		       triggers[i].epoch, triggers[i].items, triggers[i].buckets_before,
		       100.0 * (double)triggers[i].items / ((double)KVI_SLOTS_PER_BUCKET * (double)triggers[i].buckets_before));
	for (int m = 0; m < 2; m++)
		for (int k = 0; k < NCLASS; k++)
			kvb_hist_init(&all[m][k]);
	for (unsigned i = 0; i < cfg.threads; i++)
		for (int m = 0; m < 2; m++)
			for (int k = 0; k < NCLASS; k++)
				kvb_hist_merge(&all[m][k], &w[i].h[m][k]);
	for (int k = 0; k < NCLASS; k++) {
		const struct kvb_hist *s = &all[0][k], *g = &all[1][k];
		double p999s = (double)kvb_hist_quantile(s, 0.999), p999g = (double)kvb_hist_quantile(g, 0.999);

		printf("%-6s stable    n=%-8" PRIu64 " p50 %7.1f us  p99 %8.1f us  p99.9 %8.1f us\n", class_name[k],
		       s->count, kvb_hist_quantile(s, 0.5) / 1e3, kvb_hist_quantile(s, 0.99) / 1e3, p999s / 1e3);
		printf("%-6s migrating n=%-8" PRIu64 " p50 %7.1f us  p99 %8.1f us  p99.9 %8.1f us  (p99.9 %.2fx stable)\n",
		       class_name[k], g->count, kvb_hist_quantile(g, 0.5) / 1e3, kvb_hist_quantile(g, 0.99) / 1e3,
		       p999g / 1e3, p999s > 0 ? p999g / p999s : 0.0);
	}
	fflush(stdout); /* the figures survive a read-back that is cut short */
	if (atomic_load(&failed)) {
		printf("failed operations by class, stable / migrating:");
		for (int k = 0; k < NCLASS; k++)
			printf(" %s %" PRIu64 " / %" PRIu64 "%s", class_name[k], (uint64_t)atomic_load(&fail_at[0][k]),
			       (uint64_t)atomic_load(&fail_at[1][k]), k + 1 < NCLASS ? "," : "\n");
	}
	for (int code = 0; code < NCODES; code++)
		if (atomic_load(&fail_codes[code]))
			printf("failed operations %s: %" PRIu64 "\n", code ? kvc_err_name(-code) : "other",
			       (uint64_t)atomic_load(&fail_codes[code]));
	fflush(stdout);
	{
		uint64_t unstored;

		bad = read_back(mh, &unstored);
		printf("read back: %" PRIu64 " of %" PRIu64 " acknowledged keys missing or wrong; %" PRIu64
		       " keys whose insert failed are absent\n", bad, cfg.items, unstored);
	}
	kvc_destroy(mh);
	return atomic_load(&failed) || atomic_load(&wrong) || bad ? 1 : 0;
bad:
	usage();
	return 2;
}
