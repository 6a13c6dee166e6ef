#include "auth.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
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

int kvi_auth_server_of(const struct sockaddr *sa, struct kvi_auth_server *s)
{
	memset(s, 0, sizeof(*s));
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		s->addr[10] = s->addr[11] = 0xff; /* ::ffff:a.b.c.d */
		memcpy(&s->addr[12], &in->sin_addr, 4);
		s->port = ntohs(in->sin_port);
		return 0;
	}
	if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		memcpy(s->addr, &in6->sin6_addr, 16);
		s->port = ntohs(in6->sin6_port);
		return 0;
	}
	return KVC_EINVAL;
}

int kvi_auth_mac(const void *key, size_t key_len, uint16_t role, uint64_t timestamp_ms,
		 const uint8_t nonce[KVI_AUTH_NONCE_LEN], const struct kvi_auth_server *srv,
		 uint8_t mac[KVI_AUTH_MAC_LEN])
{
	/* Exactly the wire bytes of the fields covered (wire.h), so both ends
	 * hash the same thing whatever their byte order. */
	struct {
		uint32_t magic;
		uint16_t version;
		uint16_t role;
		uint64_t timestamp_ms;
		uint8_t nonce[KVI_AUTH_NONCE_LEN];
		uint8_t server_addr[16];
		uint16_t server_port;
		uint8_t zero[6];
	} m;
	uint8_t full[EVP_MAX_MD_SIZE];
	unsigned full_len = 0;
	int ok;

	_Static_assert(sizeof(m) == 56, "MAC input has no padding");
	memset(&m, 0, sizeof(m));
	m.magic = htole32(KVI_WIRE_MAGIC);
	m.version = htole16(KVI_WIRE_VERSION);
	m.role = htole16(role);
	m.timestamp_ms = htole64(timestamp_ms);
	memcpy(m.nonce, nonce, KVI_AUTH_NONCE_LEN);
	memcpy(m.server_addr, srv->addr, sizeof(m.server_addr));
	m.server_port = htole16(srv->port);
	ok = key_len <= INT_MAX &&
	     HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)&m, sizeof(m), full, &full_len) &&
	     full_len >= KVI_AUTH_MAC_LEN;
	/* Whatever a failing HMAC() left is no MAC: the callers refuse to use
	 * it (and the zeros put here instead are refused by kvi_auth_verify). */
	if (ok)
		memcpy(mac, full, KVI_AUTH_MAC_LEN);
	else
		memset(mac, 0, KVI_AUTH_MAC_LEN);
	kvi_auth_wipe(full, sizeof(full));
	return ok ? 0 : KVC_ESYS;
}

int kvi_auth_prove(struct kvi_hello *h, const void *key, size_t key_len, const struct sockaddr *server_addr,
		   uint64_t now_ms)
{
	struct kvi_auth_server srv;

	if (kvi_auth_server_of(server_addr, &srv))
		return KVC_EINVAL;
	if (kvi_auth_random(h->proof.nonce, sizeof(h->proof.nonce)))
		return KVC_ESYS;
	h->proof.timestamp_ms = now_ms;
	if (kvi_auth_mac(key, key_len, h->role, now_ms, h->proof.nonce, &srv, h->proof.mac)) {
		memset(&h->proof, 0, sizeof(h->proof));
		return KVC_ESYS;
	}
	return 0;
}

int kvi_auth_load_secret(const char *path, uint8_t buf[KVI_AUTH_SECRET_MAX], size_t *len, struct kvi_errbuf *e)
{
	struct stat st;
	size_t n = 0;
	int fd;

	*len = 0;
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
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		kvi_errbuf_set(e, "secret file %s can be read or written by group or others (mode %03o): "
			       "chmod 600 %s", path, (unsigned)(st.st_mode & 0777), path);
		close(fd);
		return KVC_EINVAL;
	}
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
