/* Base64 for meta-protocol keys (flag b), with memcached's leniency:
 * bytes outside the alphabet are skipped, the rest must be whole groups of
 * four, and decoding stops at the first group that carries padding. */
#ifndef KVP_B64_H
#define KVP_B64_H

#include <stddef.h>

/* Decoded length (at most out_len), or 0 when src is not valid base64. */
size_t kvp_b64_decode(const char *src, size_t len, unsigned char *out, size_t out_len);
/* Encoded length; out needs 4 * ((len + 2) / 3) bytes. */
size_t kvp_b64_encode(const unsigned char *src, size_t len, char *out);

#endif
