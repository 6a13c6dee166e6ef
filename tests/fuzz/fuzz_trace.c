/* Fuzz target: kvbench's trace reader (bench/trace.c) fed any bytes as a
 * trace file. The first input byte picks the format (0: detect). Properties:
 * every request it gives has a NUL-terminated key of 1..39 bytes with no
 * NUL inside and a known operation; an error has a message and stays
 * (the next call fails the same way); the reader ends in at most as many
 * requests as the input has bytes. */
#include <stdio.h>
#include <string.h>

#include "fuzz_check.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvb_trace_req r;
	struct kvb_trace *t;
	char err[512], again[512];
	size_t n = 0;
	FILE *f;
	int rc;

	if (size < 1)
		return 0;
	f = fmemopen((void *)(data + 1), size - 1 ? size - 1 : 1, "rb");
	if (!f)
		return 0;
	if (size == 1) /* fmemopen needs a size: an empty trace */
		(void)fgetc(f);
	if (kvb_trace_open_stream(f, "fuzz", data[0] % 4, &t, err, sizeof(err))) {
		FUZZ_CHECK(err[0], "a refusal without a message");
		fclose(f);
		return 0;
	}
	while ((rc = kvb_trace_next(t, &r, err, sizeof(err))) == 1) {
		FUZZ_CHECK(++n <= size, "%zu requests from %zu bytes", n, size);
		FUZZ_CHECK(r.key_len >= 1 && r.key_len <= KVB_TRACE_KEY_MAX, "key of %zu bytes", r.key_len);
		FUZZ_CHECK(strlen(r.key) == r.key_len, "key length %zu, string %zu", r.key_len, strlen(r.key));
		FUZZ_CHECK(r.op >= KVB_TOP_GET && r.op <= KVB_TOP_OTHER, "operation %d", r.op);
	}
	if (rc < 0) {
		FUZZ_CHECK(err[0], "an error without a message");
		FUZZ_CHECK(kvb_trace_next(t, &r, again, sizeof(again)) == -1 && !strcmp(err, again), "not sticky");
	}
	kvb_trace_close(t);
	fclose(f);
	return 0;
}
