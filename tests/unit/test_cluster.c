/* Several servers behind one handle: the placement hash (balance, keys moved
 * when a server is added or removed, weights), the server list's syntax, and
 * a handle over three in-process servers -- routing, fail-fast while one is
 * down, rejoining it, auto-eject, and changing the list at run time. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "ring.h"

#define KEYS 100000u

static void key_of(unsigned i, char *out, size_t len)
{
	snprintf(out, len, "user%u", i);
}

static void ring_of(struct kvi_ring *r, unsigned n, const uint32_t *weights)
{
	char name[32];

	kvi_ring_clear(r);
	for (unsigned i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "10.0.0.%u:7471", i + 1);
		cr_assert_eq(kvi_ring_add(r, i, kvi_ring_name_hash(name), weights ? weights[i] : 1), 0);
	}
}

static int pick(const struct kvi_ring *r, unsigned i)
{
	char k[32];

	key_of(i, k, sizeof(k));
	return kvi_ring_pick(r, kvi_ring_key_hash(k, strlen(k)));
}

/* The targets: max/mean <= 1.1; a fourth server takes 20-30 % of
 * 100 k keys, and only keys that now go to it move. */
Test(ring, balance_and_keys_moved_by_a_fourth_server)
{
	static int before[KEYS];
	unsigned count[4] = { 0 }, moved = 0, max = 0;
	struct kvi_ring r3, r4;

	ring_of(&r3, 3, NULL);
	ring_of(&r4, 4, NULL);
	for (unsigned i = 0; i < KEYS; i++) {
		before[i] = pick(&r3, i);
		count[before[i]]++;
	}
	for (unsigned s = 0; s < 3; s++)
		max = count[s] > max ? count[s] : max;
	cr_log_info("3 servers: %u %u %u keys, max/mean %.3f", count[0], count[1], count[2], max * 3.0 / KEYS);
	cr_expect_leq(max * 3.0 / KEYS, 1.1);

	memset(count, 0, sizeof(count));
	max = 0;
	for (unsigned i = 0; i < KEYS; i++) {
		int s = pick(&r4, i);

		count[s]++;
		if (s != before[i]) {
			moved++;
			cr_expect_eq(s, 3, "key %u moved between two old servers", i);
		}
	}
	for (unsigned s = 0; s < 4; s++)
		max = count[s] > max ? count[s] : max;
	cr_log_info("4 servers: max/mean %.3f; the 4th moved %.1f %% of the keys", max * 4.0 / KEYS,
		    100.0 * moved / KEYS);
	cr_expect_leq(max * 4.0 / KEYS, 1.1);
	cr_expect(moved >= KEYS / 5 && moved <= KEYS * 3 / 10, "moved %u of %u", moved, KEYS);
}

Test(ring, removing_a_server_moves_only_its_keys)
{
	struct kvi_ring r4, r3;
	char name[32];

	ring_of(&r4, 4, NULL);
	/* The same names less 10.0.0.2, added in another order. */
	kvi_ring_clear(&r3);
	for (unsigned i = 4; i-- > 0;) {
		if (i == 1)
			continue;
		snprintf(name, sizeof(name), "10.0.0.%u:7471", i + 1);
		cr_assert_eq(kvi_ring_add(&r3, i, kvi_ring_name_hash(name), 1), 0);
	}
	for (unsigned i = 0; i < KEYS; i++) {
		int a = pick(&r4, i), b = pick(&r3, i);

		if (a != 1)
			cr_assert_eq(a, b, "key %u moved from server %d to %d", i, a, b);
		else
			cr_assert_neq(b, 1);
	}
}

Test(ring, weights_share_the_keys)
{
	static const uint32_t w[3] = { 2, 1, 1 };
	unsigned count[3] = { 0 };
	struct kvi_ring r;

	ring_of(&r, 3, w);
	for (unsigned i = 0; i < KEYS; i++)
		count[pick(&r, i)]++;
	cr_log_info("weights 2,1,1: %u %u %u", count[0], count[1], count[2]);
	cr_expect(count[0] > KEYS * 48 / 100 && count[0] < KEYS * 52 / 100, "weight 2 took %u", count[0]);
	cr_expect(count[1] > KEYS * 23 / 100 && count[1] < KEYS * 27 / 100, "weight 1 took %u", count[1]);
}

Test(ring, empty_ring_picks_nothing)
{
	struct kvi_ring r;

	kvi_ring_clear(&r);
	cr_assert_eq(kvi_ring_pick(&r, 42), -1);
}

/* ---- the list's syntax: refused before anything is dialled ------------- */

static void refused(const char *list, const char *says)
{
	struct kvc_opts o;
	char err[400] = "";
	kvc_t *h = (kvc_t *)1;

	kvc_opts_init(&o);
	o.server = list;
	cr_expect_eq(kvc_create(&o, &h, err, sizeof(err)), KVC_EINVAL, "'%s' accepted", list);
	cr_expect_null(h);
	cr_expect(strstr(err, says) != NULL, "'%s': message '%s' lacks '%s'", list, err, says);
}

Test(list, bad_lists_are_refused_with_a_reason)
{
	char many[65 * 20] = "";

	refused("", "no server in it");
	refused(" , ,", "no server in it");
	refused("a:1,b:0", "invalid server address 'b:0'");
	refused("a:1,b:70000", "invalid server address");
	refused("a=0", "weight after '=' must be 1..1000");
	refused("a=x", "weight after '=' must be 1..1000");
	refused("a=1001", "weight after '=' must be 1..1000");
	refused("a=-1", "weight after '=' must be 1..1000");
	refused("a=", "weight after '=' must be 1..1000");
	refused("a,a:7471", "a:7471 is listed twice");
	refused("[::1", "invalid server address");
	refused("::1:7471", "invalid server address");
	for (unsigned i = 0; i < 65; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "h%u,", i);
	refused(many, "more than 64 servers");
}

/* ---- a handle over three in-process servers ------------------------------ */

#define NSRV 3
static struct kvt_env envs[NSRV];
static kvc_t *cl;
static int slow1; /* dials of server 1 that say "still joining" at the start (a slow server) */
static const char *const names[NSRV] = { "10.0.0.1:7471", "10.0.0.2:7471", "10.0.0.3:7471" };

static void make(unsigned failure_limit, int retry_ms)
{
	struct kvc_opts o;

	kvc_opts_init(&o);
	o.depth = 16;
	o.op_timeout_ms = 2000;
	o.server_failure_limit = failure_limit;
	o.retry_timeout_ms = retry_ms;
	for (unsigned i = 0; i < NSRV; i++)
		cr_assert_eq(kvt_env_init(&envs[i], 8, 256, 64), 0);
	envs[1].slow = slow1;
	cr_assert_eq(kvi_client_new(&o, &cl), 0);
	for (unsigned i = 0; i < NSRV; i++) {
		kvi_dial_fn fn;
		void *arg;

		cr_assert_eq(kvt_env_dial(&envs[i], &fn, &arg), 0);
		cr_assert_eq(kvi_client_add(cl, names[i], 1, fn, arg, free), 0);
	}
	cr_assert_eq(kvc_server_count(cl), NSRV);
}

static void fini(void)
{
	kvc_destroy(cl);
	for (unsigned i = 0; i < NSRV; i++)
		kvt_env_fini(&envs[i]);
}

static void make_plain(void)
{
	make(0, 0);
}

/* The first key "k<n>" (n >= *next) that belongs to server s. */
static void key_on(unsigned s, unsigned *next, char *out, size_t len)
{
	for (;; (*next)++) {
		snprintf(out, len, "k%u", *next);
		if (kvc_key_server(cl, out, strlen(out)) == (int)s) {
			(*next)++;
			return;
		}
	}
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A server "dies": its connections break and new ones are refused. */
static void kill_server(unsigned s)
{
	__atomic_store_n(&envs[s].down, 1, __ATOMIC_RELEASE);
	kvi_rmem_shutdown(kvi_client_conn(cl, s)->rm, KVC_ESERVERGONE);
}

Test(cluster, keys_spread_and_read_back, .init = make_plain, .fini = fini)
{
	char k[32], v[32], got[64];
	struct kvc_server_info info;
	unsigned on[NSRV] = { 0 };

	for (unsigned i = 0; i < 600; i++) {
		int s;

		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		s = kvc_key_server(cl, k, strlen(k));
		cr_assert(s >= 0 && s < NSRV);
		on[s]++;
		cr_assert_eq(kvt_put_s(cl, k, v), 0);
	}
	for (unsigned i = 0; i < 600; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		snprintf(v, sizeof(v), "value-%u", i);
		cr_assert_eq(kvt_get_s(cl, k, got, sizeof(got)), 0);
		cr_assert_str_eq(got, v);
	}
	for (unsigned s = 0; s < NSRV; s++) {
		cr_assert_eq(kvc_server_info(cl, s, &info), 0);
		cr_expect_str_eq(info.name, names[s]);
		cr_expect_eq(info.state, KVC_SERVER_UP);
		cr_expect_eq(info.ops, 2 * on[s], "server %u: %llu operations, %u keys", s,
			     (unsigned long long)info.ops, on[s]);
		cr_expect_gt(on[s], 150, "server %u holds %u of 600 keys", s, on[s]);
	}
}

/* Operations on different servers are in flight together, and depth bounds
 * them all. */
Test(cluster, async_operations_over_every_server, .init = make_plain, .fini = fini)
{
	struct kvc_op ops[16], *done[16];
	char keys[16][16], vals[16][16];
	unsigned finished = 0, next = 0;

	for (unsigned i = 0; i < 16; i++) {
		key_on(i % NSRV, &next, keys[i], sizeof(keys[i]));
		snprintf(vals[i], sizeof(vals[i]), "v%u", i);
		ops[i] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[i], .key_len = strlen(keys[i]),
					  .value = vals[i], .value_len = strlen(vals[i]) };
		cr_assert_eq(kvc_submit(cl, &ops[i]), 0);
	}
	cr_assert_eq(kvc_inflight(cl), 16);
	{
		struct kvc_op extra = { .type = KVC_OP_GET, .key = "x", .key_len = 1 };

		cr_assert_eq(kvc_submit(cl, &extra), KVC_EAGAIN, "depth bounds the whole handle");
	}
	while (finished < 16) {
		int n = kvc_poll(cl, done, 16, 1000);

		cr_assert_geq(n, 0);
		for (int j = 0; j < n; j++)
			cr_assert_eq(done[j]->status, 0, "%s: %s", kvc_err_name(done[j]->status),
				     (const char *)done[j]->key);
		finished += (unsigned)n;
	}
	cr_assert_eq(kvc_inflight(cl), 0);
}

Test(cluster, a_dead_server_fails_fast_and_comes_back, .init = make_plain, .fini = fini)
{
	char k[NSRV][32], got[64];
	unsigned next = 0;
	uint64_t t0, worst = 0, back;
	int rc;

	for (unsigned s = 0; s < NSRV; s++) {
		key_on(s, &next, k[s], sizeof(k[s]));
		cr_assert_eq(kvt_put_s(cl, k[s], "before"), 0);
	}
	kill_server(1);
	for (unsigned i = 0; i < 50; i++) {
		t0 = ms_now();
		rc = kvt_get_s(cl, k[1], got, sizeof(got));
		cr_assert_eq(rc, KVC_ESERVERGONE, "%s", kvc_err_name(rc));
		worst = ms_now() - t0 > worst ? ms_now() - t0 : worst;
		/* The others are not affected. */
		cr_assert_eq(kvt_get_s(cl, k[0], got, sizeof(got)), 0);
		cr_assert_eq(kvt_put_s(cl, k[2], "during"), 0);
	}
	cr_log_info("a dead server's key failed within %llu ms", (unsigned long long)worst);
	cr_expect_lt(worst, 100);
	{
		struct kvc_server_info info;

		cr_assert_eq(kvc_server_info(cl, 1, &info), 0);
		cr_expect_eq(info.state, KVC_SERVER_DOWN);
		cr_expect_geq(info.failures, 50);
	}
	/* Back: its keys are served again within the back-off (1 s at most). */
	__atomic_store_n(&envs[1].down, 0, __ATOMIC_RELEASE);
	t0 = ms_now();
	do
		rc = kvt_get_s(cl, k[1], got, sizeof(got));
	while (rc == KVC_ESERVERGONE && ms_now() - t0 < 5000);
	back = ms_now() - t0;
	cr_log_info("served again %llu ms after it came back", (unsigned long long)back);
	cr_assert_eq(rc, 0, "%s", kvc_err_name(rc));
	cr_assert_str_eq(got, "before");
	cr_expect_lt(back, 2000);
}

/* A join never holds the caller (cluster.h "Joining"): a server whose
 * connection broke and whose new join takes a while fails its keys fast
 * (not counted as failures), each call steps the join once (calls further
 * apart than KVI_JOIN_STEP_NS), and it serves again when the join ends. */
Test(cluster, a_rejoin_under_way_fails_fast_and_ends_in_the_background, .init = make_plain, .fini = fini)
{
	char k[NSRV][32], got[64];
	unsigned next = 0, fails = 0;
	uint64_t t0, worst = 0;
	int rc;

	for (unsigned s = 0; s < NSRV; s++) {
		key_on(s, &next, k[s], sizeof(k[s]));
		cr_assert_eq(kvt_put_s(cl, k[s], "before"), 0);
	}
	kill_server(1);
	envs[1].slow = 5;
	__atomic_store_n(&envs[1].down, 0, __ATOMIC_RELEASE);
	for (;;) {
		struct kvc_server_info info;

		usleep(1500);
		t0 = ms_now();
		rc = kvt_get_s(cl, k[1], got, sizeof(got));
		worst = ms_now() - t0 > worst ? ms_now() - t0 : worst;
		if (rc == 0)
			break;
		cr_assert_eq(rc, KVC_ESERVERGONE, "%s", kvc_err_name(rc));
		cr_assert_lt(++fails, 50, "the join never ended");
		cr_assert_eq(kvc_server_info(cl, 1, &info), 0);
		cr_expect_eq(info.state, KVC_SERVER_JOINING);
		cr_expect_eq(info.failures, 0, "a join under way counted as %u failures", info.failures);
		/* Its kvc_poll steps server 1's join too. */
		cr_assert_eq(kvt_get_s(cl, k[0], got, sizeof(got)), 0, "another server's key failed");
	}
	/* Five steps: the failing GET's submit and the other GET's kvc_poll
	 * each took one, then the sixth dial joined. */
	cr_expect_eq(fails, 3, "%u calls failed", fails);
	cr_expect_str_eq(got, "before");
	cr_expect_lt(worst, 100, "a call took %llu ms", (unsigned long long)worst);
}

static void make_slow(void)
{
	slow1 = 3;
	make(0, 0);
	slow1 = 0;
}

/* A server slow to join when the handle is made: adding it returns at once,
 * its keys fail fast, and kvc_poll alone (no key of its used) steps its join
 * to the end. */
Test(cluster, a_server_slow_to_join_is_joined_by_kvc_poll, .init = make_slow, .fini = fini)
{
	struct kvc_server_info info;
	struct kvc_op *done[1];
	char k[NSRV][32], got[64];
	unsigned next = 0, polls = 0;

	cr_assert_eq(kvc_server_info(cl, 1, &info), 0);
	cr_expect_eq(info.state, KVC_SERVER_JOINING);
	for (unsigned s = 0; s < NSRV; s++)
		key_on(s, &next, k[s], sizeof(k[s]));
	cr_assert_eq(kvt_put_s(cl, k[0], "zero"), 0, "a joined server waits for nobody");
	cr_assert_eq(kvt_put_s(cl, k[1], "one"), KVC_ESERVERGONE, "a key of a joining server fails fast");
	do {
		usleep(1500); /* a join is stepped at most every KVI_JOIN_STEP_NS */
		cr_assert_geq(kvc_poll(cl, done, 1, 0), 0);
		cr_assert_eq(kvc_server_info(cl, 1, &info), 0);
		cr_assert_lt(++polls, 1000, "the join never ended");
	} while (info.state == KVC_SERVER_JOINING);
	cr_expect_eq(info.state, KVC_SERVER_UP);
	cr_assert_eq(kvt_put_s(cl, k[1], "one"), 0);
	cr_assert_eq(kvt_get_s(cl, k[1], got, sizeof(got)), 0);
	cr_expect_str_eq(got, "one");
	cr_expect_eq(info.failures, 0, "a join under way is no failure: %llu", (unsigned long long)info.failures);
}

static void make_eject(void)
{
	make(3, 300);
}

Test(cluster, auto_eject_moves_a_dead_servers_keys_and_takes_them_back, .init = make_eject, .fini = fini)
{
	struct kvc_server_info info;
	char k[32], got[64];
	unsigned next = 0;
	uint64_t t0;
	int rc;

	key_on(2, &next, k, sizeof(k));
	cr_assert_eq(kvt_put_s(cl, k, "on-2"), 0);
	kill_server(2);
	/* Three failures in a row eject it ... */
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(kvt_get_s(cl, k, got, sizeof(got)), KVC_ESERVERGONE);
	cr_assert_eq(kvc_server_info(cl, 2, &info), 0);
	cr_assert_eq(info.state, KVC_SERVER_EJECTED);
	/* ... and its keys go to the others meanwhile (a miss there, then a PUT). */
	rc = kvc_key_server(cl, k, strlen(k));
	cr_assert(rc == 0 || rc == 1, "an ejected server's key maps to %d", rc);
	cr_assert_eq(kvt_get_s(cl, k, got, sizeof(got)), KVC_ENOTFOUND);
	cr_assert_eq(kvt_put_s(cl, k, "elsewhere"), 0);
	cr_assert_eq(kvt_get_s(cl, k, got, sizeof(got)), 0);
	cr_assert_str_eq(got, "elsewhere");
	/* After retry_timeout it is tried again: back, it serves its keys. */
	__atomic_store_n(&envs[2].down, 0, __ATOMIC_RELEASE);
	t0 = ms_now();
	do
		rc = kvt_get_s(cl, k, got, sizeof(got));
	while ((rc != 0 || strcmp(got, "on-2") != 0) && ms_now() - t0 < 5000);
	cr_assert_eq(rc, 0, "%s", kvc_err_name(rc));
	cr_assert_str_eq(got, "on-2", "the key is served by its own server again");
	cr_assert_eq(kvc_key_server(cl, k, strlen(k)), 2);
	cr_assert_eq(kvc_server_info(cl, 2, &info), 0);
	cr_expect_eq(info.state, KVC_SERVER_UP);
}

Test(cluster, changing_the_list_moves_only_the_keys_that_must_move, .init = make_plain, .fini = fini)
{
	static int was[2000];
	char k[32], err[400] = "", list[128];
	unsigned moved = 0;

	for (unsigned i = 0; i < 2000; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		was[i] = kvc_key_server(cl, k, strlen(k));
	}
	/* Drop the second server (list order does not matter). */
	snprintf(list, sizeof(list), "%s, %s", names[2], names[0]);
	cr_assert_eq(kvc_set_servers(cl, list, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_server_count(cl), 2);
	for (unsigned i = 0; i < 2000; i++) {
		struct kvc_server_info info;
		int s;

		snprintf(k, sizeof(k), "key-%u", i);
		s = kvc_key_server(cl, k, strlen(k));
		cr_assert_eq(kvc_server_info(cl, (unsigned)s, &info), 0);
		if (strcmp(names[was[i]], info.name) != 0) {
			moved++;
			cr_assert_eq(was[i], 1, "key %u moved off %s, which stayed", i, names[was[i]]);
		}
		cr_assert_eq(kvt_put_s(cl, k, "v"), 0);
	}
	cr_expect(moved > 500 && moved < 850, "moved %u of 2000", moved);
	/* A bad list changes nothing. */
	cr_assert_eq(kvc_set_servers(cl, "a=0", err, sizeof(err)), KVC_EINVAL);
	cr_assert_eq(kvc_server_count(cl), 2);
}

/* Lists changed faster than the servers leaving them finish their
 * operations: the handle's table (list + draining) never overflows; the
 * change is refused with KVC_EBUSY, and taken once they have finished. */
Test(cluster, a_list_changed_while_servers_drain_is_refused_when_it_would_not_fit, .init = make_plain, .fini = fini)
{
	char list[64 * 24], list2[64 * 24], err[400] = "", keys[NSRV][16];
	struct kvc_op ops[NSRV], *done[NSRV];
	unsigned next = 0, got = 0;

	for (unsigned s = 0; s < NSRV; s++) { /* one operation in flight on each server */
		key_on(s, &next, keys[s], sizeof(keys[s]));
		ops[s] = (struct kvc_op){ .type = KVC_OP_PUT, .key = keys[s], .key_len = strlen(keys[s]),
					  .value = "v", .value_len = 1 };
		cr_assert_eq(kvc_submit(cl, &ops[s]), 0);
	}
	list[0] = list2[0] = '\0';
	for (unsigned i = 0; i < 64; i++) { /* servers that cannot be joined here: they stay down */
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "10.1.0.%u:7471,", i + 1);
		snprintf(list2 + strlen(list2), sizeof(list2) - strlen(list2), "10.2.0.%u:7471,", i + 1);
	}
	list[strlen(list) - 1] = list2[strlen(list2) - 1] = '\0';
	cr_assert_eq(kvc_set_servers(cl, list, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_server_count(cl), 64);
	/* 64 new + 64 leaving + 3 still draining > 128 */
	cr_assert_eq(kvc_set_servers(cl, list2, err, sizeof(err)), KVC_EBUSY);
	cr_expect(strstr(err, "still finish their operations") != NULL, "%s", err);
	cr_assert_eq(kvc_server_count(cl), 64, "a refused list changes nothing");
	while (got < NSRV) {
		int n = kvc_poll(cl, done, NSRV, 1000);

		cr_assert_geq(n, 0);
		got += (unsigned)n;
	}
	cr_assert_eq(kvc_set_servers(cl, list2, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_server_count(cl), 64);
}

/* memcached's counters (client/counts.c) are each server's own: a handle
 * reports to every server what it did there, and kvc_server_stats sums
 * the servers. */
Test(cluster, memcached_counters_are_summed_over_servers, .init = make_plain, .fini = fini)
{
	struct kvc_server_stats all, one;
	unsigned on[NSRV] = { 0 };
	char k[32], got[64];
	kvc_t *again;
	struct kvc_opts o;

	for (unsigned i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "key-%u", i);
		on[kvc_key_server(cl, k, strlen(k))]++;
		cr_assert_eq(kvt_put_s(cl, k, "v"), 0);
		cr_assert_eq(kvt_get_s(cl, k, got, sizeof(got)), 0);
	}
	for (unsigned i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "absent-%u", i);
		cr_assert_eq(kvt_get_s(cl, k, got, sizeof(got)), KVC_ENOTFOUND);
	}
	/* A handle reports what is left when it closes. */
	kvc_destroy(cl);
	kvc_opts_init(&o);
	cr_assert_eq(kvi_client_new(&o, &again), 0);
	cl = again;
	for (unsigned i = 0; i < NSRV; i++) {
		kvi_dial_fn fn;
		void *arg;

		cr_assert_eq(kvt_env_dial(&envs[i], &fn, &arg), 0);
		cr_assert_eq(kvi_client_add(cl, names[i], 1, fn, arg, free), 0);
	}
	for (unsigned s = 0; s < NSRV; s++) {
		cr_assert_eq(kvc_server_stats_at(cl, s, &one), 0);
		cr_expect_eq(one.get_hits, on[s], "server %u", s);
		cr_expect_eq(one.cmd_set, on[s], "server %u", s);
		cr_expect_eq(one.curr_items, on[s], "server %u", s);
	}
	cr_assert_eq(kvc_server_stats(cl, &all), 0);
	cr_expect_eq(all.get_hits, 300);
	cr_expect_eq(all.get_misses, 100);
	cr_expect_eq(all.cmd_get, 400);
	cr_expect_eq(all.curr_items, 300);
	cr_expect_eq(all.total_items, 300);
}

/* kvc_flush_all blocks anyway: it waits for a server still joining, so that
 * server's items are flushed too (here the in-process servers may have no
 * flusher: only the join is looked at). */
Test(cluster, flush_all_waits_for_a_server_still_joining, .init = make_slow, .fini = fini)
{
	struct kvc_server_info info;

	cr_assert_eq(kvc_server_info(cl, 1, &info), 0);
	cr_assert_eq(info.state, KVC_SERVER_JOINING);
	(void)kvc_flush_all(cl, 0);
	cr_assert_eq(kvc_server_info(cl, 1, &info), 0);
	cr_expect_eq(info.state, KVC_SERVER_UP, "state %d after kvc_flush_all", info.state);
}
