/* kvproxy's parsed request: what text.c and meta.c make of a memcached
 * text- or meta-protocol command, and what exec.c turns into kvc_ops.
 *
 * Who owns what: a request points into the caller's read buffer (the key,
 * the value, the keys of a multi-get, the meta flags), except a base64 key,
 * decoded into keybuf. It stays valid while those bytes are not moved. */
#ifndef KVP_REQ_H
#define KVP_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "kvclient.h"

/* Lines longer than this without a newline close the connection (memcached
 * does so past 2048 bytes, except for get/gets, whose key lists are
 * unbounded there and bounded by KVP_GET_LINE_MAX here). */
#define KVP_LINE_MAX 2048u
#define KVP_GET_LINE_MAX (1u << 20)
#define KVP_MAX_TOKENS 24      /* memcached's MAX_TOKENS */
#define KVP_META_MAX_TOKENS 20 /* memcached's MFLAG_MAX_OPT_LENGTH */
#define KVP_OPAQUE_MAX 32      /* memcached's MFLAG_MAX_OPAQUE_LENGTH */

enum kvp_cmd {
	KVP_C_ERROR = 1, /* reply err (suppressed with noreply), then skip `swallow` bytes */
	KVP_C_GET, KVP_C_GETS, KVP_C_GAT, KVP_C_GATS,
	KVP_C_SET, KVP_C_ADD, KVP_C_REPLACE, KVP_C_APPEND, KVP_C_PREPEND, KVP_C_CAS,
	KVP_C_INCR, KVP_C_DECR, KVP_C_TOUCH, KVP_C_DELETE,
	KVP_C_FLUSH, KVP_C_VERSION, KVP_C_VERBOSITY, KVP_C_QUIT, KVP_C_STATS,
	KVP_C_MG, KVP_C_MS, KVP_C_MD, KVP_C_MA, KVP_C_MN,
	/* A store whose value is over the tier's maximum: "SERVER_ERROR object
	 * too large for cache", its bytes swallowed; a plain set also removes
	 * the key, as memcached does (no stale value survives a failed set). */
	KVP_C_TOOLARGE,
};

/* kvp_parse's results. */
enum kvp_parse_rc {
	KVP_NEED_MORE = 0, /* no complete request yet: read more (*need: bytes wanted, if known) */
	KVP_REQUEST = 1,   /* *r is a request of *used bytes */
	KVP_CLOSE = -1,    /* close the connection without a reply (as memcached does) */
};

/* Meta flags present, one bit per letter (kvp_mflag). */
#define KVP_MF(ch) (1ull << ((ch) >= 'a' ? (ch) - 'a' + 26 : (ch) - 'A'))

struct kvp_req {
	int cmd;            /* enum kvp_cmd */
	int noreply;        /* text "noreply", meta q */
	const char *err;    /* KVP_C_ERROR: the reply line, without CRLF */
	size_t swallow;     /* bytes after this request to discard (a refused value) */
	const char *key;
	size_t key_len;
	/* get/gets/gat/gats: the keys, separated by spaces (each 1..250 bytes);
	 * more: this is a part of the line's keys, others follow (conn.c), so
	 * its reply has no END */
	const char *keys;
	size_t keys_len;
	int more;
	uint32_t flags;     /* client flags to store */
	int32_t exptime;    /* memcached's exptime (0 never, < 0 expired, > 30 days absolute) */
	int has_exptime;
	uint64_t cas;       /* cas compare (text cas, meta C) */
	uint64_t delta;     /* incr/decr, ma D */
	uint64_t initial;   /* ma J */
	int32_t vivify_exptime; /* ma N */
	int32_t recache_ttl;    /* mg R: win the right to recache below this TTL (seconds) */
	const char *data;   /* value, without its CRLF */
	size_t data_len;
	/* Meta: flags present, the flag tokens as sent (for the reply, in
	 * their order), the mode letter, whether the key came in base64. */
	uint64_t mflags;
	const char *mtokens;
	size_t mtokens_len;
	char mode;
	int key_binary;
	char keybuf[KVC_MAX_KEY];
};

/* Parse one request from buf[0..len). max_value: the largest value the
 * tier takes (kvc_max_value); larger stores are answered KVP_C_TOOLARGE.
 * Pure: no I/O, no allocation. On KVP_REQUEST, *used bytes were consumed;
 * on KVP_NEED_MORE, *need is the total length wanted when known (a value
 * is coming), else 0. */
int kvp_parse(const char *buf, size_t len, size_t max_value, struct kvp_req *r, size_t *used, size_t *need);

/* The i-th token of a space-separated list: returns the offset after it and
 * sets *tok and *tok_len, or returns 0 with *tok_len 0 at the end. */
size_t kvp_next_token(const char *s, size_t len, size_t off, const char **tok, size_t *tok_len);

#endif
