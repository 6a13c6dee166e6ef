/* Proof of the shared secret at join (the hello's auth area, wire.h
 * "kvi_wire_proof"): what a joining peer (a client, or the server's own
 * loopback) needs to prove itself, and the MAC both ends compute.
 *
 * The secret never crosses the wire: a joining peer sends a fresh timestamp,
 * a random nonce and a truncated HMAC-SHA256 over them and the address of the
 * server it is for (OpenSSL's libcrypto). Checking a proof, the replay cache
 * and the admission decision are the server's (auth_admit.h), so libkvclient
 * carries none of them. Nothing here touches RDMA. */
#ifndef KVI_AUTH_H
#define KVI_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "errbuf.h"
#include "wire.h"

#define KVI_AUTH_WINDOW_MS 30000u   /* +- this much clock skew is accepted */
#define KVI_AUTH_SECRET_MIN 16u     /* bytes: shorter secrets are guessable */
#define KVI_AUTH_SECRET_MAX 4096u   /* bytes read from a secret file */
#define KVI_AUTH_LOOPBACK_KEY_LEN 32u

/* Now on the clock proofs are stamped with (CLOCK_REALTIME, ms). */
uint64_t kvi_auth_now_ms(void);

/* n bytes from the kernel's CSPRNG (getrandom). 0, or KVC_ESYS. */
int kvi_auth_random(void *buf, size_t n);

/* The server a proof is for, as the client dials it: its IP address (IPv4 as
 * an IPv4-mapped IPv6 address, so an IPv4 peer of an IPv6 wildcard listener
 * is named the same on both ends; an IPv6 scope is not part of it) and port.
 * The client takes it from the address it connects to, the server from the
 * local address of the connection request (rdma_get_local_addr), so neither
 * trusts the other for it and a proof sniffed on its way to one server is
 * refused by every other server sharing the secret. */
struct kvi_auth_server {
	uint8_t addr[16];
	uint16_t port;
};
/* sa (AF_INET or AF_INET6, port included) as a kvi_auth_server: 0, or
 * KVC_EINVAL for any other family (or NULL). */
int kvi_auth_server_of(const struct sockaddr *sa, struct kvi_auth_server *s);

/* The MAC of a proof for role, addressed to srv (wire.h: over
 * magic|version|role|timestamp|nonce|server address|server port). 0, or
 * KVC_ESYS when libcrypto failed: mac is then all zero and must not be used. */
int kvi_auth_mac(const void *key, size_t key_len, uint16_t role, uint64_t timestamp_ms,
		 const uint8_t nonce[KVI_AUTH_NONCE_LEN], const struct kvi_auth_server *srv,
		 uint8_t mac[KVI_AUTH_MAC_LEN]);

/* Fill h->proof for h->role and the server at server_addr (where we connect):
 * timestamp now_ms, a fresh random nonce, the MAC under key. 0, KVC_EINVAL
 * (server_addr not IP), or KVC_ESYS when no random bytes or no MAC could be
 * had. */
int kvi_auth_prove(struct kvi_hello *h, const void *key, size_t key_len, const struct sockaddr *server_addr,
		   uint64_t now_ms);

/* Read a secret file: its contents, one trailing newline (\n or \r\n)
 * stripped, at least KVI_AUTH_SECRET_MIN bytes. 0, or KVC_EINVAL with one line
 * in e naming the file, the problem and what to do. A file that group or
 * others may read or write is refused, like ssh does with a private key:
 * whoever can read the secret can join and read and write the whole region. */
int kvi_auth_load_secret(const char *path, uint8_t buf[KVI_AUTH_SECRET_MAX], size_t *len, struct kvi_errbuf *e);

/* Overwrite key material before its memory is given back. */
void kvi_auth_wipe(void *buf, size_t n);

#endif
