/* Growable byte buffer (buf.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

char *kvp_buf_reserve(struct kvp_buf *b, size_t n)
{
	if (b->oom)
		return NULL;
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 1024;
		char *p;

		while (cap - b->len < n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	return b->p + b->len;
}

void kvp_buf_add(struct kvp_buf *b, const void *p, size_t n)
{
	char *d = kvp_buf_reserve(b, n);

	if (d && n) {
		memcpy(d, p, n);
		b->len += n;
	}
}

void kvp_buf_str(struct kvp_buf *b, const char *s)
{
	kvp_buf_add(b, s, strlen(s));
}

void kvp_buf_u64(struct kvp_buf *b, uint64_t v)
{
	char t[24];

	kvp_buf_add(b, t, (size_t)snprintf(t, sizeof(t), "%llu", (unsigned long long)v));
}

void kvp_buf_i64(struct kvp_buf *b, int64_t v)
{
	char t[24];

	kvp_buf_add(b, t, (size_t)snprintf(t, sizeof(t), "%lld", (long long)v));
}

void kvp_buf_consume(struct kvp_buf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
		return;
	}
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
}

void kvp_buf_free(struct kvp_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}
