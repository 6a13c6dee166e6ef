/* Fuzz target: kvproxy's request parsers (proxy/text.c, meta.c, tok.c,
 * b64.c) fed a client's byte stream, as a connection feeds them. The first
 * input byte picks the tier's maximum value size. Properties: a request
 * lies inside the bytes given and uses at least one; every key it names is
 * 1..250 bytes inside the buffer (or its decoded copy); a value is inside
 * the buffer; an error has a reply line; and a request parses the same
 * from exactly its own bytes as from a longer stream (what a connection
 * that read it in pieces sees). */
#include <stdint.h>
#include <string.h>

#include "fuzz_check.h"
#include "req.h"
#include "tok.h"

static int inside(const uint8_t *buf, size_t len, const void *p, size_t n)
{
	const uint8_t *q = p;

	return q >= buf && q <= buf + len && n <= (size_t)(buf + len - q);
}

static void check_req(const uint8_t *buf, size_t len, const struct kvp_req *r, size_t used)
{
	FUZZ_CHECK(used >= 1 && used <= len, "used %zu of %zu", used, len);
	if (r->cmd == KVP_C_ERROR || r->cmd == KVP_C_TOOLARGE) {
		FUZZ_CHECK(r->err && r->err[0], "an error without a reply");
		return;
	}
	if (r->key) {
		FUZZ_CHECK(r->key_len >= 1 && r->key_len <= KVC_MAX_KEY, "key of %zu bytes", r->key_len);
		FUZZ_CHECK(r->key == r->keybuf || inside(buf, used, r->key, r->key_len), "key outside the request");
	}
	if (r->data)
		FUZZ_CHECK(inside(buf, used, r->data, r->data_len + 2), "value outside the request");
	if (r->keys) {
		const char *k;
		size_t kl, off = 0;

		FUZZ_CHECK(inside(buf, used, r->keys, r->keys_len), "keys outside the request");
		while ((off = kvp_next_token(r->keys, r->keys_len, off, &k, &kl)) != 0)
			FUZZ_CHECK(kl >= 1 && (kl <= KVC_MAX_KEY || r->cmd == KVP_C_STATS), "a key of %zu bytes", kl);
	}
	if (r->mtokens)
		FUZZ_CHECK(inside(buf, used, r->mtokens, r->mtokens_len), "meta flags outside the request");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t maxes[4] = { 0, 16, 1000, 1u << 20 };
	size_t max_value, off = 1;

	if (size < 1)
		return 0;
	max_value = maxes[data[0] & 3];
	while (off < size) {
		const uint8_t *buf = data + off;
		size_t len = size - off, used, need, used2, need2;
		struct kvp_req r, r2;
		int rc = kvp_parse((const char *)buf, len, max_value, &r, &used, &need), rc2;

		if (rc == KVP_NEED_MORE) {
			FUZZ_CHECK(need == 0 || need > len, "need %zu with %zu bytes", need, len);
			break;
		}
		if (rc == KVP_CLOSE)
			break;
		FUZZ_CHECK(rc == KVP_REQUEST, "result %d", rc);
		check_req(buf, len, &r, used);
		rc2 = kvp_parse((const char *)buf, used, max_value, &r2, &used2, &need2);
		FUZZ_CHECK(rc2 == KVP_REQUEST && r2.cmd == r.cmd && used2 == used && r2.swallow == r.swallow,
			   "a request parses differently from its own %zu bytes", used);
		off += used;
		off += r.swallow < size - off ? r.swallow : size - off;
	}
	return 0;
}
