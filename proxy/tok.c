/* memcached's tokenizer and number rules (tok.h). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tok.h"

void kvp_tokenize(const char *line, size_t len, struct kvp_tokens *t)
{
	size_t s = 0, e = 0;

	t->n = 0;
	t->rest = NULL;
	t->rest_len = 0;
	for (; e < len; e++) {
		if (line[e] != ' ')
			continue;
		if (s != e) {
			t->v[t->n] = line + s;
			t->l[t->n] = e - s;
			if (++t->n == KVP_MAX_TOKENS - 1) {
				/* memcached stops here; what follows is left whole */
				if (e + 1 < len) {
					t->rest = line + e + 1;
					t->rest_len = len - e - 1;
				}
				return;
			}
		}
		s = e + 1;
	}
	if (s != e) {
		t->v[t->n] = line + s;
		t->l[t->n] = e - s;
		t->n++;
	}
}

/* The token as a C string; numbers longer than this are refused. */
static int cstr(const char *s, size_t len, char *buf, size_t cap)
{
	if (len >= cap)
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return 0;
}

/* What follows the digits: the end, or a blank (strtoul skips leading ones). */
static int ends_ok(const char *str, const char *end)
{
	return end != str && (*end == '\0' || isspace((unsigned char)*end));
}

int kvp_num_u64(const char *s, size_t len, uint64_t *out)
{
	char b[256], *end;
	unsigned long long v;

	*out = 0;
	if (cstr(s, len, b, sizeof(b)))
		return 0;
	errno = 0;
	v = strtoull(b, &end, 10);
	if (errno == ERANGE || end == b || !ends_ok(b, end))
		return 0;
	if ((long long)v < 0 && strchr(b, '-'))
		return 0;
	*out = v;
	return 1;
}

int kvp_num_u32(const char *s, size_t len, uint32_t *out)
{
	uint64_t v;

	*out = 0;
	if (!kvp_num_u64(s, len, &v))
		return 0;
	*out = (uint32_t)v;
	return 1;
}

int kvp_num_i32(const char *s, size_t len, int32_t *out)
{
	char b[256], *end;
	long v;

	*out = 0;
	if (cstr(s, len, b, sizeof(b)))
		return 0;
	errno = 0;
	v = strtol(b, &end, 10);
	if (errno == ERANGE || end == b || !ends_ok(b, end))
		return 0;
	*out = (int32_t)(uint32_t)(unsigned long)v;
	return 1;
}

int kvp_tok_is(const char *s, size_t len, const char *word)
{
	return strlen(word) == len && memcmp(s, word, len) == 0;
}

size_t kvp_next_token(const char *s, size_t len, size_t off, const char **tok, size_t *tok_len)
{
	while (off < len && s[off] == ' ')
		off++;
	*tok = s + off;
	*tok_len = 0;
	if (off >= len)
		return 0;
	while (off + *tok_len < len && s[off + *tok_len] != ' ')
		(*tok_len)++;
	return off + *tok_len;
}
