/* Which consistent hash spreads a cache tier's keys best? libkvclient's
 * weighted rendezvous hashing (client/ring.h) beside libmemcached's ketama
 * (160 points per server, MD5), over the same keys and server names:
 *   - balance: the most keys one server holds, over the mean;
 *   - keys moved when one server is added to N (ideal: 1/(N+1));
 *   - time to place one key.
 * No network: both are pure functions of the key and the list.
 *
 *   hashbench [KEYS]      (default 100000) */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ring.h"

#define MAXS 64

static void name_of(unsigned i, char *out, size_t len)
{
	snprintf(out, len, "10.0.%u.%u", i / 200, i % 200 + 1);
}

struct placer {
	struct kvi_ring ring;
	memcached_st *mc;
};

static void make(struct placer *p, unsigned n)
{
	char name[64];

	kvi_ring_clear(&p->ring);
	p->mc = memcached_create(NULL);
	memcached_behavior_set(p->mc, MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
	for (unsigned i = 0; i < n; i++) {
		char full[80];

		name_of(i, name, sizeof(name));
		snprintf(full, sizeof(full), "%s:7471", name);
		kvi_ring_add(&p->ring, i, kvi_ring_name_hash(full), 1);
		memcached_server_add(p->mc, name, 7471);
	}
}

static unsigned place(const struct placer *p, int ketama, const char *key, size_t len)
{
	if (ketama)
		return memcached_generate_hash(p->mc, key, len);
	return (unsigned)kvi_ring_pick(&p->ring, kvi_ring_key_hash(key, len));
}

int main(int argc, char **argv)
{
	static const unsigned sizes[] = { 3, 4, 10, 32 };
	unsigned keys = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100000;
	unsigned *was = malloc(sizeof(*was) * keys);
	char key[32];

	if (!was || keys == 0) {
		fprintf(stderr, "usage: hashbench [KEYS]\n");
		return 2;
	}
	printf("%-10s %8s %14s %18s %12s\n", "hash", "servers", "max/mean", "moved by +1 (%)", "ns/key");
	for (int ketama = 0; ketama < 2; ketama++) {
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			unsigned n = sizes[si], count[MAXS] = { 0 }, max = 0, moved = 0;
			struct placer a, b;
			double t0, t;

			make(&a, n);
			make(&b, n + 1);
			t0 = kvi_mono_s();
			for (unsigned i = 0; i < keys; i++) {
				int len = snprintf(key, sizeof(key), "user%u", i);

				was[i] = place(&a, ketama, key, (size_t)len);
				count[was[i]]++;
			}
			t = kvi_mono_s() - t0;
			for (unsigned s = 0; s < n; s++)
				max = count[s] > max ? count[s] : max;
			for (unsigned i = 0; i < keys; i++) {
				int len = snprintf(key, sizeof(key), "user%u", i);

				moved += place(&b, ketama, key, (size_t)len) != was[i];
			}
			printf("%-10s %8u %14.3f %11.1f (%4.1f) %12.0f\n", ketama ? "ketama" : "rendezvous", n,
			       (double)max * n / keys, 100.0 * moved / keys, 100.0 / (n + 1), t * 1e9 / keys);
			memcached_free(a.mc);
			memcached_free(b.mc);
		}
	}
	free(was);
	return 0;
}
