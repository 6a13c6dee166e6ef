/* The server's side of join proofs (auth.h): checking a proof, remembering
 * every accepted nonce, and the admission decision built on both.
 *
 * The server recomputes the MAC, compares it in constant time (CRYPTO_memcmp),
 * refuses a timestamp more than KVI_AUTH_WINDOW_MS away from its own clock,
 * and remembers every accepted nonce until its timestamp leaves the window, so
 * a captured hello cannot be used twice. Nothing here touches RDMA: the
 * listener calls kvi_auth_admit() before rdma_accept, and the unit tests call
 * everything directly. Server-only: built into kvserver_common, never into
 * libkvclient. */
#ifndef KVI_AUTH_ADMIT_H
#define KVI_AUTH_ADMIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "auth.h"
#include "wire.h"

/* The most accepted proofs a replay cache remembers at once: the hard memory
 * bound (28 B a proof plus 4 B of hash table: 32 MiB at the bound, allocated
 * only as joins need it). A proof is remembered from its acceptance until its
 * timestamp is a window (+ one tick) behind the clock: about 31 s for clocks in
 * step, at most 61 s for one 30 s ahead. So the bound holds any legitimate
 * rate below 2^20 / 61 s = 17 000 joins/s, sustained, whatever the clocks
 * (33 000/s for clocks in step); only a flood of joins by holders of the
 * secret reaches it, and then new joins are refused (KVI_REJECT_FULL) rather
 * than a live nonce forgotten, which would make its hello replayable. */
#define KVI_AUTH_REPLAY_MAX (1u << 20)
#define KVI_AUTH_REPLAY_TICK_MS 1000u /* expiry granularity: remembered at most this much longer */

/* Check h's proof under key, for the server at local_addr (the address the
 * peer connected to), at now_ms: 0, KVI_REJECT_NOAUTH (no proof),
 * KVI_REJECT_AUTH (the MAC is not key's for this server, is all zero, or could
 * not be computed: every failure refuses) or KVI_REJECT_STALE (right MAC,
 * timestamp outside the window). The MAC is checked first, so only holders of
 * the key learn anything about the server's clock. */
int kvi_auth_verify(const struct kvi_hello *h, const void *key, size_t key_len, const struct sockaddr *local_addr,
		    uint64_t now_ms);

/* Nonces of accepted proofs, each until its timestamp is out of the window:
 * a hash set (keyed with random bits, so no peer can aim at one chain) whose
 * entries also hang on a wheel of one-tick expiry buckets, so an admission
 * costs amortised O(1) whatever the number remembered. Grows as needed up to
 * its bound. */
struct kvi_auth_replay;
/* max: how many nonces it may hold at once (0, or anything above it, is
 * KVI_AUTH_REPLAY_MAX). NULL when out of memory or random bytes. */
struct kvi_auth_replay *kvi_auth_replay_create(unsigned max);
void kvi_auth_replay_destroy(struct kvi_auth_replay *r); /* accepts NULL */
/* Remember p's nonce at now_ms: 0, KVI_REJECT_REPLAY (already there),
 * KVI_REJECT_STALE (p's timestamp is outside the window: nothing to remember),
 * or KVI_REJECT_FULL (max nonces still inside the window, or out of memory). */
int kvi_auth_replay_admit(struct kvi_auth_replay *r, const struct kvi_proof *p, uint64_t now_ms);
/* Nonces remembered at now_ms (forgetting those past the window first). */
unsigned kvi_auth_replay_live(struct kvi_auth_replay *r, uint64_t now_ms);

/* What the server admits with. */
struct kvi_auth_gate {
	const uint8_t *secret; /* shared with clients; NULL: clients join without proof */
	size_t secret_len;
	const uint8_t *loopback_key; /* KVI_AUTH_LOOPBACK_KEY_LEN bytes; NULL: no loopback peers */
	struct kvi_auth_replay *replay; /* clients' proofs; NULL refuses them */
	/* The loopback's own proofs, apart: however many clients join, the
	 * server's own (re)connections are never refused as "full". NULL
	 * refuses them. */
	struct kvi_auth_replay *loop_replay;
};

/* The admission decision for a hello that arrived at local_addr: 0 with *role
 * set to what the peer proved it is (a claim of KVI_ROLE_LOOPBACK needs a
 * valid proof under the loopback key, else KVI_REJECT_AUTH), or the enum
 * kvi_reject_reason to refuse it with. */
int kvi_auth_admit(struct kvi_auth_gate *g, const struct kvi_hello *h, const struct sockaddr *local_addr,
		   uint64_t now_ms, uint16_t *role);

#endif
