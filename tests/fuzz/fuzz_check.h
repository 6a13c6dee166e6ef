/* A failed property in a fuzz target: print why and abort, which libFuzzer
 * reports as a crash and saves the input for (crash-<sha1>). Not assert():
 * these checks must stay in any build type. */
#ifndef KV_FUZZ_CHECK_H
#define KV_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                              \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: property failed: ", __FILE__, __LINE__);  \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
			abort();                                                           \
		}                                                                          \
	} while (0)

/* A target's input, read front to back; zeros once it runs out. */
struct in {
	const uint8_t *p;
	size_t left;
};

static inline unsigned byte(struct in *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

#endif
