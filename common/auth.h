/* Proof of the shared secret at join (the hello's auth area, wire.h
 * "kvi_wire_proof"), and the server's admission decision built on it.
 *
 * The secret never crosses the wire: a joining peer sends a fresh timestamp,
 * a random nonce and a truncated HMAC-SHA256 over them (OpenSSL's libcrypto).
 * The server recomputes the MAC, compares it in constant time (CRYPTO_memcmp),
 * refuses a timestamp more than KVI_AUTH_WINDOW_MS away from its own clock,
 * and remembers every accepted nonce until its timestamp leaves the window, so
 * a captured hello cannot be used twice. Nothing here touches RDMA: the
 * listener calls kvi_auth_admit() before rdma_accept, and the unit tests call
 * everything directly. */
#ifndef KVI_AUTH_H
#define KVI_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "verbs_util.h"
#include "wire.h"

#define KVI_AUTH_WINDOW_MS 30000u   /* +- this much clock skew is accepted */
#define KVI_AUTH_SECRET_MIN 16u     /* bytes: shorter secrets are guessable */
#define KVI_AUTH_SECRET_MAX 4096u   /* bytes read from a secret file */
#define KVI_AUTH_LOOPBACK_KEY_LEN 32u
/* Accepted proofs remembered at once. Joins are rare (one per client handle),
 * so a few thousand within 2 x 30 s is far more than a real deployment makes;
 * past it, joins are refused (KVI_REJECT_FULL) rather than a live nonce
 * forgotten, which would make its hello replayable. */
#define KVI_AUTH_REPLAY_SLOTS 4096u

/* Now on the clock proofs are stamped with (CLOCK_REALTIME, ms). */
uint64_t kvi_auth_now_ms(void);

/* n bytes from the kernel's CSPRNG (getrandom). 0, or KVC_ESYS. */
int kvi_auth_random(void *buf, size_t n);

/* The MAC of a proof for role (wire.h: over magic|version|role|timestamp|nonce). */
void kvi_auth_mac(const void *key, size_t key_len, uint16_t role, uint64_t timestamp_ms,
		  const uint8_t nonce[KVI_AUTH_NONCE_LEN], uint8_t mac[KVI_AUTH_MAC_LEN]);

/* Fill h->proof for h->role: timestamp now_ms, a fresh random nonce, the MAC
 * under key. 0, or KVC_ESYS when no random bytes could be had. */
int kvi_auth_prove(struct kvi_hello *h, const void *key, size_t key_len, uint64_t now_ms);

/* Check h's proof under key at now_ms: 0, KVI_REJECT_NOAUTH (no proof),
 * KVI_REJECT_AUTH (the MAC is not key's) or KVI_REJECT_STALE (right MAC,
 * timestamp outside the window). The MAC is checked first, so only holders of
 * the key learn anything about the server's clock. */
int kvi_auth_verify(const struct kvi_hello *h, const void *key, size_t key_len, uint64_t now_ms);

/* Nonces of accepted proofs, each until its timestamp is out of the window. */
struct kvi_auth_replay;
/* slots: how many live nonces it holds (0 = KVI_AUTH_REPLAY_SLOTS). NULL when out of memory. */
struct kvi_auth_replay *kvi_auth_replay_create(unsigned slots);
void kvi_auth_replay_destroy(struct kvi_auth_replay *r); /* accepts NULL */
/* Remember p's nonce: 0, KVI_REJECT_REPLAY (already there), or
 * KVI_REJECT_FULL (every slot holds a nonce still inside the window). */
int kvi_auth_replay_admit(struct kvi_auth_replay *r, const struct kvi_proof *p, uint64_t now_ms);
/* Nonces still inside the window at now_ms. */
unsigned kvi_auth_replay_live(const struct kvi_auth_replay *r, uint64_t now_ms);

/* What the server admits with. */
struct kvi_auth_gate {
	const uint8_t *secret; /* shared with clients; NULL: clients join without proof */
	size_t secret_len;
	const uint8_t *loopback_key; /* KVI_AUTH_LOOPBACK_KEY_LEN bytes; NULL: no loopback peers */
	struct kvi_auth_replay *replay;
};

/* The admission decision for a hello: 0 with *role set to what the peer
 * proved it is (a claim of KVI_ROLE_LOOPBACK needs a valid proof under the
 * loopback key, else KVI_REJECT_AUTH), or the enum kvi_reject_reason to
 * refuse it with. */
int kvi_auth_admit(struct kvi_auth_gate *g, const struct kvi_hello *h, uint64_t now_ms, uint16_t *role);

/* Read a secret file: its contents, one trailing newline (\n or \r\n)
 * stripped, at least KVI_AUTH_SECRET_MIN bytes. 0, or KVC_EINVAL with one line
 * in e naming the file, the problem and what to do. *loose is set when group or
 * others may read the file (the caller warns). */
int kvi_auth_load_secret(const char *path, uint8_t buf[KVI_AUTH_SECRET_MAX], size_t *len, int *loose,
			 struct kvi_errbuf *e);

/* Overwrite key material before its memory is given back. */
void kvi_auth_wipe(void *buf, size_t n);

#endif
