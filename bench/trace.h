/* Request traces for kvbench --trace (replay.h): a streaming reader of three
 * published formats, in constant memory (one 128 KiB buffer), from a file or
 * from standard input ("-"), so that `zstd -dc t.zst | kvbench --trace - ...`
 * works; the format is told from the first bytes without seeking.
 *
 *   oracleGeneral  libCacheSim's binary: packed little-endian 24-byte records
 *                  {u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime}.
 *                  Every request is a GET; no TTL.
 *   oracle-csv     the same as text lines `time,id,size[,next_access]`; the
 *                  first non-blank line is a header, and skipped, when none of
 *                  its fields is a number. Every request is a GET; no TTL.
 *   twitter        github.com/twitter/cache-trace: `timestamp,anonymized key,
 *                  key size,value size,client id,operation,TTL`, no header.
 *
 * Text lines end in \n or \r\n, are at most 64 KiB, and blank ones are skipped;
 * numbers are decimal (blanks around them allowed). */
#ifndef KVB_TRACE_H
#define KVB_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum kvb_trace_fmt { KVB_TRACE_ORACLE_BIN = 1, KVB_TRACE_ORACLE_CSV = 2, KVB_TRACE_TWITTER = 3 };

/* twitter: get, gets -> GET; set, add, replace, cas, append, prepend -> SET;
 * delete -> DELETE; incr, decr -> OTHER (the caller counts and skips them). */
enum kvb_trace_op { KVB_TOP_GET = 1, KVB_TOP_SET = 2, KVB_TOP_DELETE = 3, KVB_TOP_OTHER = 4 };

#define KVB_TRACE_KEY_MAX 39

struct kvb_trace_req {
	uint64_t time; /* the trace's timestamp (seconds in the published traces) */
	/* oracle: obj_id; twitter: XXH3_64bits of the key column, the identity
	 * the LRU baseline (lrusim.h) keys on. */
	uint64_t id;
	int op; /* enum kvb_trace_op */
	/* The key to send, NUL-terminated, 1..39 bytes: oracle "o<decimal id>";
	 * twitter the anonymized key when it is 1..39 bytes of printable ASCII
	 * without spaces, else "h<16 hex digits of id>". */
	char key[KVB_TRACE_KEY_MAX + 1];
	size_t key_len;
	uint32_t value_size; /* oracle: obj_size; twitter: the value size column */
	uint32_t ttl_s;      /* twitter's TTL column; 0 = none (oracle: always 0) */
};

struct kvb_trace;

/* Opens path ("-": standard input, which close leaves open). fmt 0 detects:
 * a file whose first 24 bytes hold a NUL or a byte that is not printable
 * ASCII, tab, CR or LF is oracleGeneral; otherwise the first non-blank line
 * with 7 comma-separated fields is twitter, with 3 or 4 oracle-csv. 0, or -1
 * with one line in err (the file cannot be opened or read, the format cannot
 * be told, out of memory). */
int kvb_trace_open(const char *path, int fmt, struct kvb_trace **out, char *err, size_t errlen);
/* The same on a stream the caller opened, and closes after kvb_trace_close;
 * name is what errors call it (the fuzz target reads from memory). */
int kvb_trace_open_stream(FILE *f, const char *name, int fmt, struct kvb_trace **out, char *err, size_t errlen);
/* The format read: the one given, or the one detected. */
int kvb_trace_fmt_of(const struct kvb_trace *t);
/* 1 with *r filled, 0 at the end of the trace, -1 with one line in err naming
 * the line (text) or byte offset (binary) and what is wrong: a missing field,
 * a non-number, a number out of range (sizes fit uint32; twitter's key size
 * is 1..250), an unknown operation, an empty key, a line over 64 KiB, a
 * truncated binary record, a read error. Errors are sticky: later calls give
 * -1 and the same line. */
int kvb_trace_next(struct kvb_trace *t, struct kvb_trace_req *r, char *err, size_t errlen);
/* Accepts NULL. */
void kvb_trace_close(struct kvb_trace *t);
/* "oracleGeneral" (or "oracle"), "oracle-csv", "twitter" -> fmt; 0 if unknown. */
int kvb_trace_fmt_parse(const char *name);
/* The name kvb_trace_fmt_parse takes; "?" for anything else. */
const char *kvb_trace_fmt_name(int fmt);

#endif
