/* memcached's meta protocol, parsed (meta.h). memcached 1.6.18 checks, in
 * this order: enough tokens, key length, token count, then every flag
 * (duplicates, unknown letters, numbers); the replies below are its own. */
#include <string.h>

#include "b64.h"
#include "meta.h"

#define BAD_FORMAT "CLIENT_ERROR bad command line format"
#define BAD_TOKEN "CLIENT_ERROR bad token in command line format"

static int error(struct kvp_req *r, const char *msg)
{
	r->cmd = KVP_C_ERROR;
	r->err = msg;
	r->noreply = 0; /* meta errors are always reported */
	return KVP_REQUEST;
}

/* memcached's flag pre-pass over t->v[start..]: 0, or -1 with *err. */
static int flags(const struct kvp_tokens *t, size_t start, struct kvp_req *r, const char **err)
{
	unsigned char seen[128] = { 0 };
	int bad = 0;

	for (size_t i = start; i < t->n; i++) {
		unsigned char o = (unsigned char)t->v[i][0];
		const char *arg = t->v[i] + 1;
		size_t alen = t->l[i] - 1;

		if (o >= 127 || seen[o]) {
			*err = "CLIENT_ERROR duplicate flag";
			return -1;
		}
		seen[o] = 1;
		if ((o >= 'a' && o <= 'z') || (o >= 'A' && o <= 'Z'))
			r->mflags |= KVP_MF(o);
		switch (o) {
		case 'b': {
			size_t n = kvp_b64_decode(r->key, r->key_len, (unsigned char *)r->keybuf, sizeof(r->keybuf));

			if (n == 0) {
				*err = "CLIENT_ERROR error decoding key";
				bad = 1;
			}
			r->key = r->keybuf;
			r->key_len = n;
			r->key_binary = 1;
			break;
		}
		case 'N': /* vivify TTL */
		case 'T': /* new TTL */
		case 'R': /* recache below this TTL */
			if (!kvp_num_i32(arg, alen, o == 'N' ? &r->vivify_exptime : o == 'T' ? &r->exptime
											  : &r->recache_ttl)) {
				*err = BAD_TOKEN;
				bad = 1;
			}
			r->has_exptime |= o == 'T';
			break;
		case 'q':
			r->noreply = 1;
			break;
		case 'F':
			if (!kvp_num_u32(arg, alen, &r->flags))
				bad = 1;
			break;
		case 'C':
			if (!kvp_num_u64(arg, alen, &r->cas)) {
				*err = BAD_TOKEN;
				bad = 1;
			}
			break;
		case 'M':
			if (t->l[i] != 2) {
				*err = "CLIENT_ERROR incorrect length for M token";
				bad = 1;
			} else {
				r->mode = t->v[i][1];
			}
			break;
		case 'J':
			if (!kvp_num_u64(arg, alen, &r->initial)) {
				*err = "CLIENT_ERROR invalid numeric initial value";
				bad = 1;
			}
			break;
		case 'D':
			if (!kvp_num_u64(arg, alen, &r->delta)) {
				*err = "CLIENT_ERROR invalid numeric delta value";
				bad = 1;
			}
			break;
		case 'l': case 'O': case 'P': case 'L': case 'k': case 's': case 't':
		case 'c': case 'f': case 'v': case 'h': case 'u': case 'I':
			break;
		default:
			*err = "CLIENT_ERROR invalid flag";
			return -1;
		}
	}
	return bad ? -1 : 0;
}

/* An opaque (O) longer than memcached allows. */
static int opaque_too_long(const struct kvp_tokens *t, size_t start)
{
	for (size_t i = start; i < t->n; i++)
		if (t->v[i][0] == 'O' && t->l[i] > KVP_OPAQUE_MAX)
			return 1;
	return 0;
}

static int ms(const char *buf, size_t len, size_t max_value, const struct kvp_tokens *t, struct kvp_req *r,
	      size_t *used, size_t *need)
{
	const char *err = BAD_FORMAT;
	int32_t vlen;

	if (t->n + 1 == 3)
		return error(r, BAD_FORMAT);
	if (t->n + 1 > KVP_META_MAX_TOKENS)
		return error(r, "CLIENT_ERROR options flags too long");
	if (!kvp_num_i32(t->v[2], t->l[2], &vlen) || vlen < 0 || vlen > 0x7ffffffd)
		return error(r, BAD_FORMAT);
	/* From here on an error swallows the value, as memcached does. */
	r->swallow = (size_t)vlen + 2;
	if (flags(t, 3, r, &err))
		return error(r, err);
	switch (r->mode) {
	case 0: case 'S':
		r->cmd = r->mflags & KVP_MF('C') ? KVP_C_CAS : KVP_C_SET;
		break;
	case 'E':
		r->cmd = KVP_C_ADD;
		break;
	case 'A':
		r->cmd = KVP_C_APPEND;
		break;
	case 'P':
		r->cmd = KVP_C_PREPEND;
		break;
	case 'R':
		r->cmd = r->mflags & KVP_MF('C') ? KVP_C_CAS : KVP_C_REPLACE;
		break;
	default:
		return error(r, "CLIENT_ERROR invalid mode for ms M token");
	}
	if (opaque_too_long(t, 3))
		return error(r, "CLIENT_ERROR opaque token too long");
	r->swallow = 0;
	r->mode = (char)r->cmd; /* the store's mode; exec.c answers in meta's words */
	r->cmd = KVP_C_MS;
	return kvp_value(buf, len, max_value, (size_t)vlen, r, used, need);
}

int kvp_meta(const char *buf, size_t len, size_t max_value, const struct kvp_tokens *t, struct kvp_req *r,
	     size_t *used, size_t *need)
{
	char c = t->v[0][1];
	const char *err = BAD_FORMAT;

	if (c == 'n') {
		r->cmd = KVP_C_MN;
		return KVP_REQUEST;
	}
	if (c == 'e')
		return error(r, "CLIENT_ERROR me not supported by kvproxy");
	if (c != 'g' && c != 's' && c != 'd' && c != 'a')
		return error(r, "ERROR");
	if (t->n + 1 < 3)
		return error(r, "ERROR");
	if (t->l[1] > KVC_MAX_KEY)
		return error(r, BAD_FORMAT);
	r->key = t->v[1];
	r->key_len = t->l[1];
	r->mtokens = t->n > 2 ? t->v[2] : t->v[1] + t->l[1];
	r->mtokens_len = (size_t)(t->v[t->n - 1] + t->l[t->n - 1] - r->mtokens);
	if (c == 's')
		return ms(buf, len, max_value, t, r, used, need);
	if (t->n + 1 > KVP_META_MAX_TOKENS)
		return error(r, c == 'g' ? "CLIENT_ERROR options flags are too long" : "CLIENT_ERROR options flags too long");
	if (flags(t, 2, r, &err))
		return error(r, c == 'g' ? err : "CLIENT_ERROR invalid or duplicate flag");
	if (c == 'a') {
		if (!(r->mflags & KVP_MF('D')))
			r->delta = 1;
		switch (r->mode) {
		case 0: case 'I': case '+':
			r->cmd = KVP_C_INCR;
			break;
		case 'D': case '-':
			r->cmd = KVP_C_DECR;
			break;
		default:
			return error(r, "CLIENT_ERROR invalid mode for ma M token");
		}
	}
	if (opaque_too_long(t, 2))
		return error(r, "CLIENT_ERROR opaque token too long");
	switch (c) {
	case 'g':
		if (r->mflags & KVP_MF('l'))
			return error(r, KVP_UNSUPPORTED_FLAG);
		r->cmd = KVP_C_MG;
		break;
	case 'd':
		r->cmd = KVP_C_MD;
		break;
	default:
		r->mode = (char)r->cmd;
		r->cmd = KVP_C_MA;
		break;
	}
	return KVP_REQUEST;
}
