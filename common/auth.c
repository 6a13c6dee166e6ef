#include "auth.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "kvclient_errors.h"

uint64_t kvi_auth_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int kvi_auth_random(void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return KVC_ESYS;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

void kvi_auth_wipe(void *buf, size_t n)
{
	OPENSSL_cleanse(buf, n);
}

void kvi_auth_mac(const void *key, size_t key_len, uint16_t role, uint64_t timestamp_ms,
		  const uint8_t nonce[KVI_AUTH_NONCE_LEN], uint8_t mac[KVI_AUTH_MAC_LEN])
{
	/* Exactly the wire bytes of the fields covered (wire.h), so both ends
	 * hash the same thing whatever their byte order. */
	struct {
		uint32_t magic;
		uint16_t version;
		uint16_t role;
		uint64_t timestamp_ms;
		uint8_t nonce[KVI_AUTH_NONCE_LEN];
	} m;
	uint8_t full[EVP_MAX_MD_SIZE];
	unsigned full_len = 0;

	_Static_assert(sizeof(m) == 32, "MAC input has no padding");
	m.magic = htole32(KVI_WIRE_MAGIC);
	m.version = htole16(KVI_WIRE_VERSION);
	m.role = htole16(role);
	m.timestamp_ms = htole64(timestamp_ms);
	memcpy(m.nonce, nonce, KVI_AUTH_NONCE_LEN);
	/* HMAC() fails only on a broken libcrypto; a zeroed MAC then matches no
	 * proof a peer could make without the key either. */
	if (!HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)&m, sizeof(m), full, &full_len) ||
	    full_len < KVI_AUTH_MAC_LEN)
		memset(full, 0, sizeof(full));
	memcpy(mac, full, KVI_AUTH_MAC_LEN);
	kvi_auth_wipe(full, sizeof(full));
}

int kvi_auth_prove(struct kvi_hello *h, const void *key, size_t key_len, uint64_t now_ms)
{
	if (kvi_auth_random(h->proof.nonce, sizeof(h->proof.nonce)))
		return KVC_ESYS;
	h->proof.timestamp_ms = now_ms;
	kvi_auth_mac(key, key_len, h->role, now_ms, h->proof.nonce, h->proof.mac);
	return 0;
}

int kvi_auth_verify(const struct kvi_hello *h, const void *key, size_t key_len, uint64_t now_ms)
{
	uint8_t want[KVI_AUTH_MAC_LEN];
	uint64_t ts = h->proof.timestamp_ms;
	int same;

	if (!h->has_proof)
		return KVI_REJECT_NOAUTH;
	kvi_auth_mac(key, key_len, h->role, ts, h->proof.nonce, want);
	/* Constant time: how many leading bytes matched must not show in how
	 * long the refusal took. */
	same = CRYPTO_memcmp(want, h->proof.mac, sizeof(want)) == 0;
	kvi_auth_wipe(want, sizeof(want));
	if (!same)
		return KVI_REJECT_AUTH;
	if ((ts > now_ms ? ts - now_ms : now_ms - ts) > KVI_AUTH_WINDOW_MS)
		return KVI_REJECT_STALE;
	return 0;
}

/* A plain array scanned whole on every admission: joins are rare and a scan of
 * a few thousand 24-byte entries takes microseconds, so a hash table would buy
 * nothing worth its code. A slot is free when its timestamp has left the
 * window (or it was never used: used == 0). */
struct replay_slot {
	uint64_t timestamp_ms;
	uint8_t nonce[KVI_AUTH_NONCE_LEN];
	uint8_t used;
};

struct kvi_auth_replay {
	unsigned nslots;
	struct replay_slot slot[];
};

struct kvi_auth_replay *kvi_auth_replay_create(unsigned slots)
{
	struct kvi_auth_replay *r;

	if (slots == 0)
		slots = KVI_AUTH_REPLAY_SLOTS;
	r = calloc(1, sizeof(*r) + (size_t)slots * sizeof(r->slot[0]));
	if (r)
		r->nslots = slots;
	return r;
}

void kvi_auth_replay_destroy(struct kvi_auth_replay *r)
{
	free(r);
}

/* Could a proof stamped ts still be accepted at now (or later, with the clock
 * set back)? Only then must its nonce be remembered. */
static int live(const struct replay_slot *s, uint64_t now_ms)
{
	return s->used && (s->timestamp_ms >= now_ms || now_ms - s->timestamp_ms <= KVI_AUTH_WINDOW_MS);
}

int kvi_auth_replay_admit(struct kvi_auth_replay *r, const struct kvi_proof *p, uint64_t now_ms)
{
	struct replay_slot *free_slot = NULL;

	for (unsigned i = 0; i < r->nslots; i++) {
		struct replay_slot *s = &r->slot[i];

		if (!live(s, now_ms)) {
			if (!free_slot)
				free_slot = s;
			continue;
		}
		/* A nonce is random per proof: the same one is the same proof
		 * (a different timestamp under it would need the key anyway). */
		if (memcmp(s->nonce, p->nonce, sizeof(s->nonce)) == 0)
			return KVI_REJECT_REPLAY;
	}
	if (!free_slot)
		return KVI_REJECT_FULL;
	free_slot->used = 1;
	free_slot->timestamp_ms = p->timestamp_ms;
	memcpy(free_slot->nonce, p->nonce, sizeof(free_slot->nonce));
	return 0;
}

unsigned kvi_auth_replay_live(const struct kvi_auth_replay *r, uint64_t now_ms)
{
	unsigned n = 0;

	for (unsigned i = 0; i < r->nslots; i++)
		n += (unsigned)live(&r->slot[i], now_ms);
	return n;
}

int kvi_auth_admit(struct kvi_auth_gate *g, const struct kvi_hello *h, uint64_t now_ms, uint16_t *role)
{
	int why;

	if (h->role == KVI_ROLE_LOOPBACK) {
		/* Only this process knows the loopback key: a claim without a
		 * valid proof under it is a lie, whatever else the hello holds. */
		if (!g->loopback_key)
			return KVI_REJECT_AUTH;
		why = kvi_auth_verify(h, g->loopback_key, KVI_AUTH_LOOPBACK_KEY_LEN, now_ms);
		if (why == KVI_REJECT_NOAUTH)
			why = KVI_REJECT_AUTH;
	} else if (g->secret) {
		why = kvi_auth_verify(h, g->secret, g->secret_len, now_ms);
	} else {
		/* No secret: anyone may join as a client (the server warned). */
		*role = KVI_ROLE_CLIENT;
		return 0;
	}
	if (why)
		return why;
	/* Only proofs that verified are remembered: strangers cannot fill the
	 * cache, and a full cache refuses rather than forgets. */
	why = g->replay ? kvi_auth_replay_admit(g->replay, &h->proof, now_ms) : KVI_REJECT_FULL;
	if (why)
		return why;
	*role = h->role;
	return 0;
}

int kvi_auth_load_secret(const char *path, uint8_t buf[KVI_AUTH_SECRET_MAX], size_t *len, int *loose,
			 struct kvi_errbuf *e)
{
	struct stat st;
	size_t n = 0;
	int fd;

	*len = 0;
	*loose = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		kvi_errbuf_set(e, "cannot read secret file %s: %s: give a readable file holding the shared secret",
			       path, strerror(errno));
		return KVC_EINVAL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		kvi_errbuf_set(e, "secret file %s is not a regular file: give a file holding the shared secret",
			       path);
		close(fd);
		return KVC_EINVAL;
	}
	*loose = (st.st_mode & (S_IRWXG | S_IRWXO)) != 0;
	for (;;) {
		ssize_t got = read(fd, buf + n, KVI_AUTH_SECRET_MAX - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			kvi_errbuf_set(e, "cannot read secret file %s: %s", path, strerror(errno));
			close(fd);
			kvi_auth_wipe(buf, KVI_AUTH_SECRET_MAX);
			return KVC_EINVAL;
		}
		if (got == 0)
			break;
		n += (size_t)got;
		if (n == KVI_AUTH_SECRET_MAX) {
			char extra;

			if (read(fd, &extra, 1) > 0) {
				kvi_errbuf_set(e, "secret file %s is longer than %u bytes: use a shorter secret "
					       "(e.g. head -c 32 /dev/urandom | base64)", path, KVI_AUTH_SECRET_MAX);
				close(fd);
				kvi_auth_wipe(buf, KVI_AUTH_SECRET_MAX);
				return KVC_EINVAL;
			}
			break;
		}
	}
	close(fd);
	/* Files written by editors and echo end in a newline that is not part
	 * of the secret; both ends strip it the same way. */
	if (n && buf[n - 1] == '\n') {
		n--;
		if (n && buf[n - 1] == '\r')
			n--;
	}
	if (n < KVI_AUTH_SECRET_MIN) {
		kvi_errbuf_set(e, "secret file %s holds %zu bytes, fewer than %u: make a longer secret "
			       "(e.g. head -c 32 /dev/urandom | base64 > %s)", path, n, KVI_AUTH_SECRET_MIN, path);
		kvi_auth_wipe(buf, KVI_AUTH_SECRET_MAX);
		return KVC_EINVAL;
	}
	*len = n;
	return 0;
}
