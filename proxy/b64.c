/* Base64 (b64.h). */
#include "b64.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0..63, 64 for '=', -1 outside the alphabet. */
static int digit(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return c == '=' ? 64 : -1;
}

size_t kvp_b64_decode(const char *src, size_t len, unsigned char *out, size_t out_len)
{
	size_t n = 0, o = 0;
	unsigned v[4];
	unsigned k = 0;

	for (size_t i = 0; i < len; i++)
		n += digit((unsigned char)src[i]) >= 0;
	if (n == 0 || n % 4 || n / 4 * 3 > out_len)
		return 0;
	for (size_t i = 0; i < len; i++) {
		int d = digit((unsigned char)src[i]);
		unsigned pad;

		if (d < 0)
			continue;
		v[k++] = (unsigned)d;
		if (k < 4)
			continue;
		k = 0;
		pad = (v[2] == 64) + (v[3] == 64) + (v[0] == 64) + (v[1] == 64);
		for (unsigned j = 0; j < 4; j++)
			v[j] &= 63; /* '=' decodes as zero bits */
		out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
		out[o++] = (unsigned char)(v[1] << 4 | v[2] >> 2);
		out[o++] = (unsigned char)(v[2] << 6 | v[3]);
		if (pad) {
			if (pad > 2)
				return 0;
			return o - pad;
		}
	}
	return o;
}

size_t kvp_b64_encode(const unsigned char *src, size_t len, char *out)
{
	size_t o = 0, i = 0;

	for (; i + 3 <= len; i += 3) {
		out[o++] = alphabet[src[i] >> 2];
		out[o++] = alphabet[(src[i] & 3) << 4 | src[i + 1] >> 4];
		out[o++] = alphabet[(src[i + 1] & 15) << 2 | src[i + 2] >> 6];
		out[o++] = alphabet[src[i + 2] & 63];
	}
	if (i < len) {
		out[o++] = alphabet[src[i] >> 2];
		if (i + 1 == len) {
			out[o++] = alphabet[(src[i] & 3) << 4];
			out[o++] = '=';
		} else {
			out[o++] = alphabet[(src[i] & 3) << 4 | src[i + 1] >> 4];
			out[o++] = alphabet[(src[i + 1] & 15) << 2];
		}
		out[o++] = '=';
	}
	return o;
}
