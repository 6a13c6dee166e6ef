#define _GNU_SOURCE /* memmem */
/* The join proof and the admission decision (common/auth.h), without RDMA:
 * a proof round-trips; a wrong secret, a missing proof, a stale timestamp
 * (either way) and a replayed nonce are each refused with their own reason; a
 * loopback claim needs the loopback key; the replay cache is bounded, refuses
 * when full and forgets only what has left the window; secret files are read
 * as documented; and the MAC is compared with CRYPTO_memcmp (counted here
 * through a link-time wrapper: -Wl,--wrap=CRYPTO_memcmp). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "kvclient_errors.h"

static unsigned memcmp_calls;
int __real_CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len);
int __wrap_CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len);
int __wrap_CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len)
{
	memcmp_calls++;
	return __real_CRYPTO_memcmp(a, b, len);
}

static const uint8_t secret[] = "0123456789abcdef-the-shared-secret";
static const uint8_t other[] = "0123456789abcdef-another-secret!!";
#define NOW 1767225600000ull /* 2026-01-01, ms */

/* A hello as the server decodes it, proved under key at ts. */
static struct kvi_hello proved(uint16_t role, const uint8_t *key, size_t len, uint64_t ts)
{
	struct kvi_wire_hello w;
	struct kvi_hello h = { .role = role };

	cr_assert_eq(kvi_auth_prove(&h, key, len, ts), 0);
	kvi_wire_hello_encode(&w, &h);
	cr_assert_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), 0);
	return h;
}

Test(auth, a_proof_round_trips_and_the_secret_is_not_in_it)
{
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	struct kvi_wire_hello w;

	cr_expect(h.has_proof);
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, NOW), 0);
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

	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH);
	/* A shorter key that is a prefix of the right one is another key. */
	h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 2, NOW);
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH);

	h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	t = h;
	t.role = KVI_ROLE_LOOPBACK;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH, "role is covered");
	t = h;
	t.proof.timestamp_ms++;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH, "timestamp is covered");
	t = h;
	t.proof.nonce[7] ^= 1;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH, "nonce is covered");
	t = h;
	t.proof.mac[KVI_AUTH_MAC_LEN - 1] ^= 0x80;
	cr_expect_eq(kvi_auth_verify(&t, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH, "last MAC byte counts");
}

Test(auth, no_proof_is_its_own_reason)
{
	struct kvi_hello h = { .role = KVI_ROLE_CLIENT };

	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, NOW), KVI_REJECT_NOAUTH);
}

Test(auth, stale_both_ways_at_the_window_edge)
{
	const size_t n = sizeof(secret) - 1;
	struct kvi_hello h;

	h = proved(KVI_ROLE_CLIENT, secret, n, NOW - KVI_AUTH_WINDOW_MS);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, NOW), 0, "30 s behind is inside");
	h = proved(KVI_ROLE_CLIENT, secret, n, NOW - KVI_AUTH_WINDOW_MS - 1);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, NOW), KVI_REJECT_STALE, "client clock behind");
	h = proved(KVI_ROLE_CLIENT, secret, n, NOW + KVI_AUTH_WINDOW_MS);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, NOW), 0, "30 s ahead is inside");
	h = proved(KVI_ROLE_CLIENT, secret, n, NOW + KVI_AUTH_WINDOW_MS + 1);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, NOW), KVI_REJECT_STALE, "client clock ahead");
	/* Stale under the wrong key is just wrong: the clock is told only to
	 * holders of the secret. */
	h = proved(KVI_ROLE_CLIENT, other, sizeof(other) - 1, NOW + 3600000);
	cr_expect_eq(kvi_auth_verify(&h, secret, n, NOW), KVI_REJECT_AUTH);
}

Test(auth, the_mac_is_compared_in_constant_time)
{
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);

	memcmp_calls = 0;
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, NOW), 0);
	cr_expect_eq(memcmp_calls, 1, "CRYPTO_memcmp called %u times for a good proof", memcmp_calls);
	h.proof.mac[0] ^= 1;
	cr_expect_eq(kvi_auth_verify(&h, secret, sizeof(secret) - 1, NOW), KVI_REJECT_AUTH);
	cr_expect_eq(memcmp_calls, 2, "CRYPTO_memcmp called %u times in all", memcmp_calls);
}

static struct kvi_auth_gate gate_with(const uint8_t *key, size_t len, const uint8_t *loop, unsigned slots)
{
	struct kvi_auth_gate g = { .secret = key, .secret_len = len, .loopback_key = loop,
				   .replay = kvi_auth_replay_create(slots) };

	cr_assert_not_null(g.replay);
	return g;
}

Test(auth, a_replayed_proof_is_refused_and_refusals_are_not_remembered)
{
	struct kvi_auth_gate g = gate_with(secret, sizeof(secret) - 1, NULL, 0);
	struct kvi_hello h = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW);
	struct kvi_hello wrong = proved(KVI_ROLE_CLIENT, other, sizeof(other) - 1, NOW);
	struct kvi_hello stale = proved(KVI_ROLE_CLIENT, secret, sizeof(secret) - 1, NOW - 60000);
	uint16_t role = 0;

	cr_expect_eq(kvi_auth_admit(&g, &wrong, NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&g, &stale, NOW, &role), KVI_REJECT_STALE);
	cr_expect_eq(kvi_auth_replay_live(g.replay, NOW), 0, "refused proofs take no room");
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW, &role), 0);
	cr_expect_eq(role, KVI_ROLE_CLIENT);
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW + 1, &role), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW + KVI_AUTH_WINDOW_MS, &role), KVI_REJECT_REPLAY);
	/* Once out of the window it is stale, whatever the cache says. */
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW + KVI_AUTH_WINDOW_MS + 1, &role), KVI_REJECT_STALE);
	kvi_auth_replay_destroy(g.replay);
}

Test(auth, the_replay_cache_is_bounded_refuses_when_full_and_expires)
{
	struct kvi_auth_replay *r = kvi_auth_replay_create(4);
	struct kvi_proof p[6];

	cr_assert_not_null(r);
	for (unsigned i = 0; i < 6; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		p[i].timestamp_ms = NOW + i; /* a little apart: they expire one by one */
		p[i].nonce[0] = (uint8_t)(i + 1);
	}
	for (unsigned i = 0; i < 4; i++)
		cr_expect_eq(kvi_auth_replay_admit(r, &p[i], NOW + 4), 0);
	cr_expect_eq(kvi_auth_replay_live(r, NOW + 4), 4);
	/* Full of live nonces: refuse rather than forget one. */
	cr_expect_eq(kvi_auth_replay_admit(r, &p[4], NOW + 4), KVI_REJECT_FULL);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + 4), KVI_REJECT_REPLAY, "still known when full");
	/* p[0] leaves the window at NOW + 30001: its slot is free again, the
	 * others are still remembered. */
	cr_expect_eq(kvi_auth_replay_live(r, NOW + KVI_AUTH_WINDOW_MS + 1), 3);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[4], NOW + KVI_AUTH_WINDOW_MS + 1), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[1], NOW + KVI_AUTH_WINDOW_MS + 1), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[5], NOW + KVI_AUTH_WINDOW_MS + 1), KVI_REJECT_FULL);
	/* Much later everything has expired. */
	cr_expect_eq(kvi_auth_replay_live(r, NOW + 10 * KVI_AUTH_WINDOW_MS), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[5], NOW + 10 * KVI_AUTH_WINDOW_MS), 0);
	/* A timestamp ahead of the clock stays remembered until it is behind
	 * by the window. */
	p[0].timestamp_ms = NOW + 20 * KVI_AUTH_WINDOW_MS;
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + 19 * KVI_AUTH_WINDOW_MS), 0);
	cr_expect_eq(kvi_auth_replay_admit(r, &p[0], NOW + 21 * KVI_AUTH_WINDOW_MS), KVI_REJECT_REPLAY);
	kvi_auth_replay_destroy(r);
	cr_expect_eq(kvi_auth_replay_create(0) != NULL, 1);
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
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW, &role), 0);
	cr_expect_eq(role, KVI_ROLE_LOOPBACK);
	/* Claiming the loopback with the clients' secret, or with no proof, on
	 * a server with or without a secret: refused as a wrong proof. */
	h = proved(KVI_ROLE_LOOPBACK, secret, sizeof(secret) - 1, NOW);
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW, &role), KVI_REJECT_AUTH);
	h = (struct kvi_hello){ .role = KVI_ROLE_LOOPBACK };
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW, &role), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_auth_admit(&open, &h, NOW, &role), KVI_REJECT_AUTH);
	h = proved(KVI_ROLE_LOOPBACK, other, sizeof(other) - 1, NOW);
	cr_expect_eq(kvi_auth_admit(&open, &h, NOW, &role), KVI_REJECT_AUTH);
	/* The loopback key does not make a client: clients prove the secret. */
	h = proved(KVI_ROLE_CLIENT, loop, sizeof(loop), NOW);
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW, &role), KVI_REJECT_AUTH);
	/* Without a secret anyone joins, as a client and nothing more. */
	h = (struct kvi_hello){ .role = KVI_ROLE_CLIENT };
	role = 0;
	cr_expect_eq(kvi_auth_admit(&open, &h, NOW, &role), 0);
	cr_expect_eq(role, KVI_ROLE_CLIENT);
	cr_expect_eq(kvi_auth_admit(&g, &h, NOW, &role), KVI_REJECT_NOAUTH);
	kvi_auth_replay_destroy(g.replay);
	kvi_auth_replay_destroy(open.replay);
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
	int loose;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);

	write_file(path, "0123456789abcdef\n", 0600);
	cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &loose, &e), 0, "%s", e.msg);
	cr_expect_eq(len, 16, "one trailing newline is stripped");
	cr_expect_eq(memcmp(buf, "0123456789abcdef", 16), 0);
	cr_expect_eq(loose, 0);

	write_file(path, "0123456789abcdef\r\n", 0640);
	cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &loose, &e), 0, "%s", e.msg);
	cr_expect_eq(len, 16);
	cr_expect_eq(loose, 1, "group-readable is reported");

	write_file(path, "0123456789abcde\n", 0600);
	cr_expect_eq(kvi_auth_load_secret(path, buf, &len, &loose, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "fewer than 16"), "%s", e.msg);

	cr_expect_eq(kvi_auth_load_secret("/nonexistent/secret", buf, &len, &loose, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "/nonexistent/secret"), "%s", e.msg);

	cr_expect_eq(kvi_auth_load_secret(dir, buf, &len, &loose, &e), KVC_EINVAL);
	cr_expect(strstr(e.msg, "not a regular file"), "%s", e.msg);

	unlink(path);
	rmdir(dir);
}
