#define _GNU_SOURCE /* memmem */
/* The join proof and the admission decision (common/auth.h, auth_admit.h), without RDMA:
 * a proof round-trips; a wrong secret, a missing proof, a stale timestamp
 * (either way) and a replayed nonce are each refused with their own reason; a
 * proof is good for the one server it was made for; a failing HMAC() or an
 * all-zero MAC never passes (HMAC is made to fail through a link-time wrapper,
 * -Wl,--wrap=HMAC); a loopback claim needs the loopback key; the replay cache
 * holds every proof of the window however many, is bounded, refuses when full
 * (never the loopback) and forgets only what has left the window; secret
 * files are read as documented and refused when others may read them; and the
 * MAC is compared with CRYPTO_memcmp (counted through -Wl,--wrap=CRYPTO_memcmp). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "auth_admit.h"
#include "kvclient_errors.h"

static unsigned memcmp_calls;
int __real_CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len);
int __wrap_CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len);
int __wrap_CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len)
{
	memcmp_calls++;
	return __real_CRYPTO_memcmp(a, b, len);
}

/* HMAC() as libcrypto has it, or failing: returning NULL, or "succeeding"
 * with a digest shorter than the MAC. */
static enum { HMAC_WORKS, HMAC_FAILS, HMAC_SHORT } hmac_mode;
unsigned char *__real_HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d, size_t n,
			   unsigned char *out, unsigned int *out_len);
unsigned char *__wrap_HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d, size_t n,
			   unsigned char *out, unsigned int *out_len);
unsigned char *__wrap_HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d, size_t n,
			   unsigned char *out, unsigned int *out_len)
{
	if (hmac_mode == HMAC_FAILS)
		return NULL;
	if (hmac_mode == HMAC_SHORT) {
		*out_len = 8;
		return out;
	}
	return __real_HMAC(md, key, key_len, d, n, out, out_len);
}

static const uint8_t secret[] = "0123456789abcdef-the-shared-secret";
static const uint8_t other[] = "0123456789abcdef-another-secret!!";
#define NOW 1767225600000ull /* 2026-01-01, ms */

/* Servers, as the client dials them and the server's listener sees them. */
static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;

	in->sin_family = AF_INET;
	in->sin_port = htons(port);
	cr_assert_eq(inet_pton(AF_INET, ip, &in->sin_addr), 1);
	return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port, uint32_t scope)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(port);
	in6->sin6_scope_id = scope;
	cr_assert_eq(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
	return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))
static struct sockaddr_storage srv_a;
static void set_servers(void)
{
	srv_a = v4("10.0.0.1", 7690);
}
TestSuite(auth, .init = set_servers);
#define A SA(srv_a)

/* A hello as the server decodes it, proved under key at ts for server A. */
static struct kvi_hello proved_for(uint16_t role, const uint8_t *key, size_t len, const struct sockaddr *to,
				   uint64_t ts)
{
	struct kvi_wire_hello w;
	struct kvi_hello h = { .role = role };

	cr_assert_eq(kvi_auth_prove(&h, key, len, to, ts), 0);
	kvi_wire_hello_encode(&w, &h);
	cr_assert_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), 0);
	return h;
}

static struct kvi_hello proved(uint16_t role, const uint8_t *key, size_t len, uint64_t ts)
{
	return proved_for(role, key, len, A, ts);
}

static struct kvi_auth_gate gate_with(const uint8_t *key, size_t len, const uint8_t *loop, unsigned max)
{
	struct kvi_auth_gate g = { .secret = key, .secret_len = len, .loopback_key = loop,
				   .replay = kvi_auth_replay_create(max), .loop_replay = kvi_auth_replay_create(0) };

	cr_assert_not_null(g.replay);
	cr_assert_not_null(g.loop_replay);
	return g;
}

static void gate_done(struct kvi_auth_gate *g)
{
	kvi_auth_replay_destroy(g->replay);
	kvi_auth_replay_destroy(g->loop_replay);
}

Test(auth, a_proof_round_trips_and_the_secret_is_not_in_it)
{
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	struct kvi_wire_hello w;

	cr_expect(h.has_proof);
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, A, NOW), 0);
	kvi_wire_hello_encode(&w, &h);
	cr_expect_null(memmem(&w, sizeof(w), secret, 8), "the secret must never be on the wire");
}

Test(auth, nonces_are_fresh)
{
	struct kvi_hello a = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	struct kvi_hello b = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);

	cr_expect_neq(memcmp(a.proof.nonce, b.proof.nonce, KVI_AUTH_NONCE_LEN), 0);
	cr_expect_neq(memcmp(a.proof.mac, b.proof.mac, KVI_AUTH_MAC_LEN), 0);
}

Test(auth, a_wrong_secret_or_any_changed_field_is_a_wrong_proof)
{
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, other, sizeof(other) - 1, NOW), t;

	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH);
	/* A shorter key that is a prefix of the right one is another key. */
	h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 2, NOW);
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH);

	h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	t = h;
	t.role = KVI_ROLE_LOOPBACK;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH, "role is covered");
	t = h;
	t.proof.timestamp_ms++;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH, "timestamp is covered");
	t = h;
	t.proof.nonce[7] ^= 1;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH, "nonce is covered");
	t = h;
	t.proof.mac[KVI_AUTH_MAC_LEN - 1] ^= 0x80;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH, "last MAC byte counts");
}

/* A proof binds to the server it is for. Server B sharing the
 * secret (another address, or another port on the same host) refuses a proof
 * sniffed on its way to A; A knows itself however the address is written. */
Test(auth, a_proof_is_good_for_the_one_server_it_was_made_for)
{
	const size_t n = sizeof(secret) - 1;
	struct sockaddr_storage b = v4("10.0.0.2", 7690), a_port = v4("10.0.0.1", 7691),
				a_mapped = v6("::ffff:10.0.0.1", 7690, 0), six = v6("fd00::1", 7690, 0),
				six_scoped = v6("fd00::1", 7690, 3), six_other = v6("fd00::2", 7690, 0),
				unix_sa = { .ss_family = AF_UNIX };
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, n, NOW);
	struct kvi_auth_gate g = gate_with(secret, n, NULL, 0);
	uint16_t role;

	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), 0);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, SA(b), NOW), KVI_REJECT_AUTH, "another server");
	cr_expect_eq(kvi_auth_verify(&h, secret, n, SA(a_port), NOW), KVI_REJECT_AUTH, "another port");
	cr_expect_eq(kvi_auth_admit(&g, &h, SA(b), NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), 0);
	/* An IPv6 listener may see an IPv4 peer's request at ::ffff:a.b.c.d. */
	cr_expect_eq(kvi_auth_verify(&h, secret, n, SA(a_mapped), NOW), 0, "IPv4-mapped is the same server");
	h = proved_for(KVI_ROLE_CLIENT, secret, n, SA(six), NOW);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, SA(six_scoped), NOW), 0, "the scope is not the server");
	cr_expect_eq(kvi_auth_verify(&h, secret, n, SA(six_other), NOW), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), KVI_REJECT_AUTH);
	/* No IP address, no proof either way. */
	cr_expect_eq(kvi_auth_verify(&h, secret, n, SA(unix_sa), NOW), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, NULL, NOW), KVI_REJECT_AUTH);
	h = (struct kvi_hello){ .role = KVI_ROLE_CLIENT };
	cr_expect_eq(kvi_auth_prove(&h, secret, n, SA(unix_sa), NOW), KVC_EINVAL);
	gate_done(&g);
}

/* A failing HMAC() must refuse, never leave both ends computing an all-zero
 * MAC (a hello carrying zeros where its MAC goes would then be accepted, as
 * a client and as the server's own loopback): every failure refuses, and
 * zeros are never a MAC. */
Test(auth, a_failing_hmac_or_an_all_zero_mac_never_passes)
{
	uint8_t loop[KVI_AUTH_LOOPBACK_KEY_LEN];
	struct kvi_auth_gate g;
	struct kvi_hello good, zero_client, zero_loop, h;
	uint16_t role;

	cr_assert_eq(kvi_auth_random(loop, sizeof(loop)), 0);
	g = gate_with(secret, sizeof(secret) - 1, loop, 0);
	good = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	zero_client = good;
	memset(zero_client.proof.mac, 0, KVI_AUTH_MAC_LEN);
	zero_loop = proved(KVI_ROLE_LOOPBACK, loop, sizeof(loop), NOW);
	memset(zero_loop.proof.mac, 0, KVI_AUTH_MAC_LEN);

	for (int mode = HMAC_FAILS; mode <= HMAC_SHORT; mode++) {
		hmac_mode = mode;
		role = 0;
		cr_expect_eq(kvi_auth_admit(&g, &zero_client, A, NOW, &role), KVI_REJECT_AUTH, "mode %d", mode);
		cr_expect_eq(kvi_auth_admit(&g, &zero_loop, A, NOW, &role), KVI_REJECT_AUTH, "loopback, mode %d", mode);
		cr_expect_eq(kvi_auth_admit(&g, &good, A, NOW, &role), KVI_REJECT_AUTH, "unverifiable, mode %d", mode);
		cr_expect_eq(role, 0);
		/* Nor is a proof made when HMAC() fails. */
		h = (struct kvi_hello){ .role = KVI_ROLE_CLIENT };
		cr_expect_eq(kvi_auth_prove(&h, secret, sizeof(secret) - 1, A, NOW), KVC_ESYS, "mode %d", mode);
	}
	hmac_mode = HMAC_WORKS;
	/* With libcrypto working, zeros are still not a MAC, and the good
	 * proof (never remembered while refused) is accepted. */
	cr_expect_eq(kvi_auth_admit(&g, &zero_client, A, NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&g, &zero_loop, A, NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&g, &good, A, NOW, &role), 0);
	gate_done(&g);
}

Test(auth, no_proof_is_its_own_reason)
{
	struct kvi_hello h = { .role = KVI_ROLE_CLIENT };

	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_NOAUTH);
}

Test(auth, stale_both_ways_at_the_window_edge)
{
	const size_t n = sizeof(secret) - 1;
	struct kvi_hello h;

	h = proved(KVI_ROLE_CLIENT, secret, n, NOW - KVI_AUTH_WINDOW_MS);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), 0, "30 s behind is inside");
	h = proved(KVI_ROLE_CLIENT, secret, n, NOW - KVI_AUTH_WINDOW_MS - 1);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), KVI_REJECT_STALE, "client clock behind");
	h = proved(KVI_ROLE_CLIENT, secret, n, NOW + KVI_AUTH_WINDOW_MS);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), 0, "30 s ahead is inside");
	h = proved(KVI_ROLE_CLIENT, secret, n, NOW + KVI_AUTH_WINDOW_MS + 1);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), KVI_REJECT_STALE, "client clock ahead");
	/* Stale under the wrong key is just wrong: the clock is told only to
	 * holders of the secret. */
	h = proved(KVI_ROLE_CLIENT, other, sizeof(other) - 1, NOW + 3600000);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, A, NOW), KVI_REJECT_AUTH);
}

Test(auth, the_mac_is_compared_in_constant_time)
{
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);

	memcmp_calls = 0;
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, A, NOW), 0);
	cr_expect_eq(memcmp_calls, 1, "CRYPTO_memcmp called %u times for a good proof", memcmp_calls);
	h.proof.mac[0] ^= 1;
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, A, NOW), KVI_REJECT_AUTH);
	cr_expect_eq(memcmp_calls, 2, "CRYPTO_memcmp called %u times in all", memcmp_calls);
}

Test(auth, a_replayed_proof_is_refused_and_refusals_are_not_remembered)
{
	struct kvi_auth_gate g = gate_with(secret, sizeof(secret) - 1, NULL, 0);
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	struct kvi_hello wrong = proved(KVI_ROLE_CLIENT, other, sizeof(other) - 1, NOW);
	struct kvi_hello stale = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW - 60000);
	uint16_t role = 0;

	cr_expect_eq(kvi_auth_admit(&g, &wrong, A, NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&g, &stale, A, NOW, &role), KVI_REJECT_STALE);
	cr_expect_eq(kvi_auth_replay_live(g.replay, NOW), 0, "refused proofs take no room");
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), 0);
	cr_expect_eq(role, KVI_ROLE_CLIENT);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW + 1, &role), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW + KVI_AUTH_WINDOW_MS, &role), KVI_REJECT_REPLAY);
	/* Once out of the window it is stale, whatever the cache says. */
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW + KVI_AUTH_WINDOW_MS + 1, &role), KVI_REJECT_STALE);
	gate_done(&g);
}

/* A proof as the replay cache sees it: only the nonce and timestamp count. */
static struct kvi_proof nonce_at(uint32_t n, uint64_t ts)
{
	struct kvi_proof p = { .timestamp_ms = ts };

	memcpy(p.nonce, &n, sizeof(n));
	p.nonce[15] = 0x5a;
	return p;
}

Test(auth, the_replay_cache_is_bounded_refuses_when_full_and_expires)
{
	const uint64_t T = KVI_AUTH_REPLAY_TICK_MS;
	struct kvi_auth_replay *r = kvi_auth_replay_create(4);
	struct kvi_proof p[6];

	cr_assert_not_null(r);
	for (unsigned i = 0; i < 6; i++)
		p[i] = nonce_at(i, NOW + i * T); /* a tick apart: they expire one by one */
	for (unsigned i = 0; i < 4; i++)
		cr_expect_eq(kvi_auth_replay_admit(r, &p[i], NOW), 0);
	cr_expect_eq(kvi_auth_replay_live(r, NOW), 4);
	/* Full of live nonces: refuse rather than forget one. */
	cr_expect_eq(kvi_auth_replay_admit(r, &p[4], NOW), KVI_REJECT_FULL);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW), KVI_REJECT_REPLAY, "still known when full");
	/* p[0] is acceptable up to NOW + window and remembered that long (and
	 * at most one tick more); then its room is free, the others are still
	 * remembered. */
	cr_expect_eq(kvi_auth_replay_live(r, NOW + KVI_AUTH_WINDOW_MS), 4);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + KVI_AUTH_WINDOW_MS), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_replay_live(r, NOW + KVI_AUTH_WINDOW_MS + T), 3);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[4], NOW + KVI_AUTH_WINDOW_MS + T), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[1], NOW + KVI_AUTH_WINDOW_MS + T), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[5], NOW + KVI_AUTH_WINDOW_MS + T), KVI_REJECT_FULL);
	/* Past its window a proof is stale, not something to remember. */
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + KVI_AUTH_WINDOW_MS + T), KVI_REJECT_STALE);
	/* Much later everything has expired. */
	cr_expect_eq(kvi_auth_replay_live(r, NOW + 10 * KVI_AUTH_WINDOW_MS), 0);
	p[5].timestamp_ms = NOW + 10 * KVI_AUTH_WINDOW_MS;
	cr_expect_eq(kvi_auth_replay_admit(r, &p[5], NOW + 10 * KVI_AUTH_WINDOW_MS), 0);
	/* A timestamp ahead of the clock stays remembered until it is behind
	 * by the window. */
	p[0].timestamp_ms = NOW + 20 * KVI_AUTH_WINDOW_MS;
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + 19 * KVI_AUTH_WINDOW_MS), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + 21 * KVI_AUTH_WINDOW_MS), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_replay_live(r, NOW + 21 * KVI_AUTH_WINDOW_MS + T), 0);
	kvi_auth_replay_destroy(r);
}

/* A tier may join faster than any fixed number of proofs per window (a
 * cache of 4096 would refuse the 4097th). Every distinct proof inside the
 * window is accepted, through several growths of the cache; each is still known
 * (a replay of any of them refused), and all are forgotten after the window. */
Test(auth, thousands_of_fresh_proofs_in_the_window_are_all_accepted)
{
	struct kvi_auth_gate g = gate_with(secret, sizeof(secret) - 1, NULL, 0);
	enum { JOINS = 20000 };
	static struct kvi_hello h[JOINS];
	uint16_t role;
	unsigned refused = 0;

	/* 20 000 joins over 10 s, from clocks up to half a window apart. */
	for (unsigned i = 0; i < JOINS; i++) {
		uint64_t now = NOW + i / 2;

		h[i] = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1,
			      now - KVI_AUTH_WINDOW_MS / 2 + (uint64_t)i * 7 % KVI_AUTH_WINDOW_MS);
		refused += kvi_auth_admit(&g, &h[i], A, now, &role) != 0;
	}
	cr_expect_eq(refused, 0, "%u of %u fresh proofs refused", refused, JOINS);
	cr_expect_eq(kvi_auth_replay_live(g.replay, NOW + JOINS / 2), JOINS);
	for (unsigned i = 0; i < JOINS; i += 97)
		cr_expect_eq(kvi_auth_admit(&g, &h[i], A, NOW + JOINS / 2, &role), KVI_REJECT_REPLAY, "join %u", i);
	/* A window (and a tick) after the last timestamp, nothing is left. */
	cr_expect_eq(kvi_auth_replay_live(g.replay, NOW + JOINS / 2 + 2 * KVI_AUTH_WINDOW_MS + KVI_AUTH_REPLAY_TICK_MS),
		     0);
	gate_done(&g);
}

/* The cache at scale, straight: a quarter million nonces (eight doublings),
 * all remembered, then all forgotten tick by tick as the clock moves on and
 * their room reused, without growing further. */
Test(auth, the_replay_cache_grows_and_shrinks_by_the_clock)
{
	struct kvi_auth_replay *r = kvi_auth_replay_create(1u << 18);
	const uint32_t n = 1u << 18;
	struct kvi_proof p;

	cr_assert_not_null(r);
	for (uint32_t i = 0; i < n; i++) {
		p = nonce_at(i, NOW + i % KVI_AUTH_WINDOW_MS);
		cr_assert_eq(kvi_auth_replay_admit(r, &p, NOW), 0, "nonce %u", i);
	}
	p = nonce_at(n, NOW);
	cr_expect_eq(kvi_auth_replay_admit(r, &p, NOW), KVI_REJECT_FULL, "the bound holds");
	for (uint32_t i = 0; i < n; i += 1031) {
		p = nonce_at(i, NOW + i % KVI_AUTH_WINDOW_MS);
		cr_expect_eq(kvi_auth_replay_admit(r, &p, NOW + KVI_AUTH_WINDOW_MS), KVI_REJECT_REPLAY, "nonce %u", i);
	}
	/* Half the window later, the older half of the timestamps is out. */
	{
		unsigned live = kvi_auth_replay_live(r, NOW + KVI_AUTH_WINDOW_MS + KVI_AUTH_WINDOW_MS / 2);

		cr_expect(live > n / 2 - n / 20 && live < n / 2 + n / 20, "%u of %u live", live, n);
	}
	/* The next window: all of them gone, the room taken by new ones. */
	for (uint32_t i = 0; i < n; i++) {
		p = nonce_at(i, NOW + 3 * KVI_AUTH_WINDOW_MS);
		cr_assert_eq(kvi_auth_replay_admit(r, &p, NOW + 3 * KVI_AUTH_WINDOW_MS), 0, "nonce %u again", i);
	}
	kvi_auth_replay_destroy(r);
}

/* The wall clock may jump: forward, everything old is forgotten at once;
 * back, nothing is forgotten early (a proof is remembered until the clock is
 * past its window again). */
Test(auth, the_replay_cache_follows_clock_jumps_without_forgetting_early)
{
	struct kvi_auth_replay *r = kvi_auth_replay_create(0);
	const uint64_t DAY = 86400000;
	struct kvi_proof a = nonce_at(1, NOW), b = nonce_at(2, NOW - 40000), c = nonce_at(3, NOW + DAY);

	cr_assert_not_null(r);
	cr_expect_eq(kvi_auth_replay_admit(r, &a, NOW), 0);
	/* Back 40 s: a (stamped NOW) is acceptable until NOW + window again. */
	cr_expect_eq(kvi_auth_replay_admit(r, &b, NOW - 40000), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &a, NOW - 10000), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_replay_admit(r, &b, NOW - 40000 + KVI_AUTH_WINDOW_MS), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_replay_admit(r, &a, NOW + KVI_AUTH_WINDOW_MS), KVI_REJECT_REPLAY);
	/* A day forward: all forgotten, and the cache works on. */
	cr_expect_eq(kvi_auth_replay_live(r, NOW + DAY), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &c, NOW + DAY), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &c, NOW + DAY + 1), KVI_REJECT_REPLAY);
	kvi_auth_replay_destroy(r);
}

/* Client joins that fill the proof cache must not refuse the server's own
 * loopback reconnections (fencing, reclaimer): loopbacks have their own. */
Test(auth, loopback_proofs_are_accepted_with_the_client_cache_full)
{
	uint8_t loop[KVI_AUTH_LOOPBACK_KEY_LEN];
	struct kvi_auth_gate g;
	struct kvi_hello h;
	uint16_t role = 0;

	cr_assert_eq(kvi_auth_random(loop, sizeof(loop)), 0);
	g = gate_with(secret, sizeof(secret) - 1, loop, 4);
	for (unsigned i = 0; i < 4; i++) {
		h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
		cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), 0);
	}
	h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), KVI_REJECT_FULL, "the clients' cache is full");
	for (unsigned i = 0; i < 100; i++) {
		h = proved(KVI_ROLE_LOOPBACK, loop, sizeof(loop), NOW);
		role = 0;
		cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), 0, "loopback %u", i);
		cr_expect_eq(role, KVI_ROLE_LOOPBACK);
	}
	/* ... and still protected against replay. */
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), KVI_REJECT_REPLAY);
	gate_done(&g);
}

Test(auth, the_role_comes_from_the_key_that_proves_it)
{
	uint8_t loop[KVI_AUTH_LOOPBACK_KEY_LEN];
	struct kvi_auth_gate g, open;
	struct kvi_hello h;
	uint16_t role = 0;

	cr_assert_eq(kvi_auth_random(loop, sizeof(loop)), 0);
	g = gate_with(secret, sizeof(secret) - 1, loop, 0);
	open = gate_with(NULL, 0, loop, 0);

	h = proved(KVI_ROLE_LOOPBACK, loop, sizeof(loop), NOW);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), 0);
	cr_expect_eq(role, KVI_ROLE_LOOPBACK);
	/* Claiming the loopback with the clients' secret, or with no proof, on
	 * a server with or without a secret: refused as a wrong proof. */
	h = proved(KVI_ROLE_LOOPBACK, secret, sizeof(secret) - 1, NOW);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), KVI_REJECT_AUTH);
	h = (struct kvi_hello){ .role = KVI_ROLE_LOOPBACK };
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&open, &h, A, NOW, &role), KVI_REJECT_AUTH);
	h = proved(KVI_ROLE_LOOPBACK, other, sizeof(other) - 1, NOW);
	cr_expect_eq(kvi_auth_admit(&open, &h, A, NOW, &role), KVI_REJECT_AUTH);
	/* The loopback key does not make a client: clients prove the secret. */
	h = proved(KVI_ROLE_CLIENT, loop, sizeof(loop), NOW);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), KVI_REJECT_AUTH);
	/* Without a secret anyone joins, as a client and nothing more. */
	h = (struct kvi_hello){ .role = KVI_ROLE_CLIENT };
	role = 0;
	cr_expect_eq(kvi_auth_admit(&open, &h, A, NOW, &role), 0);
	cr_expect_eq(role, KVI_ROLE_CLIENT);
	cr_expect_eq(kvi_auth_admit(&g, &h, A, NOW, &role), KVI_REJECT_NOAUTH);
	gate_done(&g);
	gate_done(&open);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, mode), 0);
}

Test(auth, secret_files)
{
	char dir[] = "/tmp/kv_auth_XXXXXX", path[64];
	uint8_t buf[KVI_AUTH_SECRET_MAX];
	struct kvi_errbuf e = { { 0 } };
	size_t len;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);

	write_file(path, "0123456789abcdef\n", 0600);
	cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(len, 16, "one trailing newline is stripped");
	cr_expect_eq(memcmp(buf, "0123456789abcdef", 16), 0);

	write_file(path, "0123456789abcdef\r\n", 0400);
	cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(len, 16);

	write_file(path, "0123456789abcde\n", 0600);
	cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "fewer than 16"), "%s", e.msg);

	cr_expect_eq(kvi_auth_load_secret("/nonexistent/secret", buf, &len, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "/nonexistent/secret"), "%s", e.msg);

	cr_expect_eq(kvi_auth_load_secret(dir, buf, &len, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "not a regular file"), "%s", e.msg);

	unlink(path);
	rmdir(dir);
}

/* A secret that group or others can read (or replace) is refused, not
 * merely warned about, with one line that says how to fix it. */
Test(auth, a_secret_file_others_may_read_or_write_is_refused)
{
	static const mode_t loose[] = { 0640, 0604, 0644, 0620, 0602, 0660, 0666 };
	char dir[] = "/tmp/kv_auth_XXXXXX", path[64];
	uint8_t buf[KVI_AUTH_SECRET_MAX];
	size_t len;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);
	for (unsigned i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
		struct kvi_errbuf e = { { 0 } };

		write_file(path, "0123456789abcdef\n", loose[i]);
		len = 99;
		cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &e), KVC_EINVAL, "mode %03o", loose[i]);
		cr_expect_eq(len, 0);
		cr_expect(strstr(e.msg, path) && strstr(e.msg, "group or others") && strstr(e.msg, "chmod 600"),
			  "mode %03o: %s", loose[i], e.msg);
		cr_expect_null(strchr(e.msg, '\n'), "one line: %s", e.msg);
	}
	unlink(path);
	rmdir(dir);
}
