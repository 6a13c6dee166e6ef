/* Splitting a command line into tokens and reading numbers out of them
 * exactly as memcached 1.6 does (its tokenizer and safe_strto* rules), so
 * that odd input gets memcached's own answers. Pure functions. */
#ifndef KVP_TOK_H
#define KVP_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "req.h"

struct kvp_tokens {
	const char *v[KVP_MAX_TOKENS];
	size_t l[KVP_MAX_TOKENS];
	size_t n;         /* tokens found (at most KVP_MAX_TOKENS - 1) */
	const char *rest; /* NULL, or the unsplit remainder when the line had more */
	size_t rest_len;
};

/* Split line[0..len) at spaces (only ' ': other blanks belong to tokens).
 * memcached's ntokens is t->n + 1 (its terminal token). */
void kvp_tokenize(const char *line, size_t len, struct kvp_tokens *t);

/* memcached's safe_strtoul / safe_strtol / safe_strtoull on a token: 1 when
 * it is a number followed by nothing or a blank; the 32-bit forms keep the
 * low 32 bits of a larger number, as memcached's do on 64-bit Linux. */
int kvp_num_u32(const char *s, size_t len, uint32_t *out);
int kvp_num_i32(const char *s, size_t len, int32_t *out);
int kvp_num_u64(const char *s, size_t len, uint64_t *out);

int kvp_tok_is(const char *s, size_t len, const char *word);

#endif
