/* kvproxy's parsers (proxy/text.c, meta.c, tok.c, b64.c): every command,
 * and memcached 1.6's answer to each kind of bad input. */
#include <criterion/criterion.h>
#include <string.h>

#include "b64.h"
#include "meta.h"
#include "req.h"
#include "tok.h"

#define MAXV 1000u

static struct kvp_req r;
static size_t used, need;

static int P(const char *s)
{
	return kvp_parse(s, strlen(s), MAXV, &r, &used, &need);
}

/* s parses to one request of cmd using all of s. */
static void ok(const char *s, int cmd)
{
	cr_assert_eq(P(s), KVP_REQUEST, "%s", s);
	cr_assert_eq(r.cmd, cmd, "%s: cmd %d, err %s", s, r.cmd, r.cmd == KVP_C_ERROR ? r.err : "");
	cr_assert_eq(used, strlen(s), "%s: used %zu", s, used);
}

/* s is answered with the line err. */
static void bad(const char *s, const char *err)
{
	cr_assert_eq(P(s), KVP_REQUEST, "%s", s);
	cr_assert_eq(r.cmd, KVP_C_ERROR, "%s: cmd %d", s, r.cmd);
	cr_assert_str_eq(r.err, err, "%s", s);
}

#define FMT "CLIENT_ERROR bad command line format"

Test(text, storage)
{
	ok("set k 5 10 3\r\nabc\r\n", KVP_C_SET);
	cr_assert_eq(r.key_len, 1);
	cr_assert_eq(r.flags, 5);
	cr_assert_eq(r.exptime, 10);
	cr_assert_eq(r.data_len, 3);
	cr_assert(!memcmp(r.data, "abc", 3));
	cr_assert(!r.noreply);
	ok("add k 0 0 1 noreply\r\nx\r\n", KVP_C_ADD);
	cr_assert(r.noreply);
	ok("replace k 0 0 0\r\n\r\n", KVP_C_REPLACE);
	ok("append k 0 0 1\r\nx\r\n", KVP_C_APPEND);
	ok("prepend k 0 0 1\r\nx\r\n", KVP_C_PREPEND);
	ok("cas k 0 0 1 99\r\nx\r\n", KVP_C_CAS);
	cr_assert_eq(r.cas, 99);
	ok("set k 4294967297 -1 1\nx\r\n", KVP_C_SET); /* LF alone ends a line; flags wrap as memcached's */
	cr_assert_eq(r.flags, 1);
	cr_assert_eq(r.exptime, -1);
}

Test(text, storage_incomplete_and_errors)
{
	cr_assert_eq(P("set k 0 0 10\r\nabc"), KVP_NEED_MORE);
	cr_assert_eq(need, 26);
	cr_assert_eq(P("set k 0 0 1"), KVP_NEED_MORE);
	bad("set k 0 0 1\r\nxyz\r\n", "CLIENT_ERROR bad data chunk");
	cr_assert_eq(used, 16); /* value + 2 consumed; the rest is the next line */
	bad("set k x 0 1\r\n", FMT);
	bad("set k 0 x 1\r\n", FMT);
	bad("set k 0 0 x\r\n", FMT);
	bad("set k 0 0 -1\r\n", FMT);
	bad("set k -1 0 1\r\n", FMT);
	bad("cas k 0 0 1 x\r\n", FMT);
	bad("set k 0 0\r\n", "ERROR");
	bad("set k 0 0 1 2 3\r\n", "ERROR");
	bad("cas k 0 0 1\r\n", "ERROR");
	bad("set k 0 0 x noreply\r\n", FMT);
	cr_assert(r.noreply); /* memcached suppresses even this */
	{
		char line[400];

		memset(line, 'k', sizeof(line));
		memcpy(line, "set ", 4);
		strcpy(line + 4 + 251, " 0 0 1\r\n");
		bad(line, FMT);
		cr_assert_eq(r.swallow, 0); /* the value line is read as a command */
	}
	cr_assert_eq(P("set k 0 0 1001\r\n"), KVP_REQUEST);
	cr_assert_eq(r.cmd, KVP_C_TOOLARGE);
	cr_assert_str_eq(r.err, "SERVER_ERROR object too large for cache");
	cr_assert_eq(r.swallow, 1003);
	cr_assert_eq(r.mode, KVP_C_SET);
	cr_assert_eq(P("add k 0 0 5000 noreply\r\n"), KVP_REQUEST);
	cr_assert_eq(r.cmd, KVP_C_TOOLARGE);
	cr_assert_eq(r.mode, KVP_C_ADD);
	cr_assert(r.noreply);
}

Test(text, retrieval)
{
	const char *k;
	size_t kl, off;
	unsigned n = 0;

	ok("get a bb ccc\r\n", KVP_C_GET);
	for (off = 0; (off = kvp_next_token(r.keys, r.keys_len, off, &k, &kl)) != 0;)
		cr_assert_eq(kl, ++n);
	cr_assert_eq(n, 3);
	ok("gets a\r\n", KVP_C_GETS);
	ok("bget a\r\n", KVP_C_GET);
	ok("gat 10 a b\r\n", KVP_C_GAT);
	cr_assert_eq(r.exptime, 10);
	ok("gats -1 a\r\n", KVP_C_GATS);
	ok("gat 10\r\n", KVP_C_GAT);
	cr_assert_eq(r.keys_len, 0);
	bad("get\r\n", "ERROR");
	bad("gat x a\r\n", "CLIENT_ERROR invalid exptime argument");
	bad("gut a\r\n", "ERROR");
	{
		char line[600];

		memset(line, 'k', sizeof(line));
		memcpy(line, "get a ", 6);
		strcpy(line + 6 + 251, " b\r\n");
		bad(line, FMT);
	}
}

Test(text, long_lines)
{
	static char buf[KVP_LINE_MAX + 100];

	memset(buf, 'x', sizeof(buf));
	cr_assert_eq(kvp_parse(buf, KVP_LINE_MAX, MAXV, &r, &used, &need), KVP_NEED_MORE);
	cr_assert_eq(kvp_parse(buf, sizeof(buf), MAXV, &r, &used, &need), KVP_CLOSE);
	memcpy(buf, "get ", 4); /* a long multi-get may go on */
	cr_assert_eq(kvp_parse(buf, sizeof(buf), MAXV, &r, &used, &need), KVP_NEED_MORE);
	cr_assert_eq(P("GET / HTTP/1.1\r\n"), KVP_CLOSE);
}

Test(text, others)
{
	ok("incr k 5\r\n", KVP_C_INCR);
	cr_assert_eq(r.delta, 5);
	ok("decr k 18446744073709551615 noreply\r\n", KVP_C_DECR);
	cr_assert_eq(r.delta, UINT64_MAX);
	cr_assert(r.noreply);
	bad("incr k -1\r\n", "CLIENT_ERROR invalid numeric delta argument");
	bad("incr k 18446744073709551616\r\n", "CLIENT_ERROR invalid numeric delta argument");
	bad("incr k\r\n", "ERROR");
	ok("touch k 10\r\n", KVP_C_TOUCH);
	bad("touch k x\r\n", "CLIENT_ERROR invalid exptime argument");
	ok("delete k\r\n", KVP_C_DELETE);
	ok("delete k 0\r\n", KVP_C_DELETE);
	ok("delete k noreply\r\n", KVP_C_DELETE);
	cr_assert(r.noreply);
	ok("delete k 0 noreply\r\n", KVP_C_DELETE);
	bad("delete k 1\r\n", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
	bad("delete\r\n", "ERROR");
	ok("flush_all\r\n", KVP_C_FLUSH);
	ok("flush_all 10\r\n", KVP_C_FLUSH);
	cr_assert_eq(r.exptime, 10);
	ok("flush_all noreply\r\n", KVP_C_FLUSH);
	cr_assert(r.noreply);
	bad("flush_all x\r\n", "CLIENT_ERROR invalid exptime argument");
	bad("flush_all 1 2 3\r\n", "ERROR");
	ok("version\r\n", KVP_C_VERSION);
	ok("quit\r\n", KVP_C_QUIT);
	ok("stats\r\n", KVP_C_STATS);
	ok("verbosity 1\r\n", KVP_C_VERBOSITY);
	bad("verbosity x\r\n", FMT);
	bad("verbosity\r\n", "ERROR");
	bad("\r\n", "ERROR");
	bad("x\r\n", "ERROR");
	bad("bogus\r\n", "ERROR");
	/* a NUL ends the line, as in memcached: "set" alone */
	cr_assert_eq(kvp_parse("set\0 k 0 0 1\r\n", 14, MAXV, &r, &used, &need), KVP_REQUEST);
	cr_assert_eq(r.cmd, KVP_C_ERROR);
	cr_assert_str_eq(r.err, "ERROR");
	cr_assert_eq(used, 14);
}

Test(meta, mg)
{
	ok("mg k v f s t c k O123 q\r\n", KVP_C_MG);
	cr_assert(r.noreply);
	cr_assert(r.mflags & KVP_MF('v'));
	cr_assert(r.mflags & KVP_MF('O'));
	cr_assert_eq(r.mtokens_len, strlen("v f s t c k O123 q"));
	ok("mg k T30\r\n", KVP_C_MG);
	cr_assert(r.has_exptime);
	cr_assert_eq(r.exptime, 30);
	ok("mg YWJj b\r\n", KVP_C_MG);
	cr_assert_eq(r.key_len, 3);
	cr_assert(!memcmp(r.key, "abc", 3));
	cr_assert(r.key_binary);
	bad("mg\r\n", "ERROR");
	bad("mg k v v\r\n", "CLIENT_ERROR duplicate flag");
	bad("mg k !\r\n", "CLIENT_ERROR invalid flag");
	bad("mg k \xff\r\n", "CLIENT_ERROR duplicate flag");
	bad("mg k T\r\n", "CLIENT_ERROR bad token in command line format");
	bad("mg k b\r\n", "CLIENT_ERROR error decoding key");
	bad("mg k O123456789012345678901234567890123\r\n", "CLIENT_ERROR opaque token too long");
	bad("mg k a b c d e f g h i j k l m n o p q r\r\n", "CLIENT_ERROR options flags are too long");
	ok("mg k N30 v\r\n", KVP_C_MG);
	cr_assert(r.mflags & KVP_MF('N'));
	cr_assert_eq(r.vivify_exptime, 30);
	bad("mg k Nx\r\n", "CLIENT_ERROR bad token in command line format");
	bad("mg k l\r\n", KVP_UNSUPPORTED_FLAG);
	ok("mg k R30 h v\r\n", KVP_C_MG);
	cr_assert_eq(r.recache_ttl, 30);
	bad("mg k Rx\r\n", "CLIENT_ERROR bad token in command line format");
	bad("mg k v q T\r\n", "CLIENT_ERROR bad token in command line format");
	cr_assert(!r.noreply); /* meta errors are never quiet */
}

Test(meta, ms)
{
	ok("ms k 2 F7 T9 c k O1\r\nhi\r\n", KVP_C_MS);
	cr_assert_eq(r.mode, KVP_C_SET);
	cr_assert_eq(r.flags, 7);
	cr_assert_eq(r.exptime, 9);
	ok("ms k 1 ME\r\nx\r\n", KVP_C_MS);
	cr_assert_eq(r.mode, KVP_C_ADD);
	ok("ms k 1 MA\r\nx\r\n", KVP_C_MS);
	cr_assert_eq(r.mode, KVP_C_APPEND);
	ok("ms k 1 MP\r\nx\r\n", KVP_C_MS);
	cr_assert_eq(r.mode, KVP_C_PREPEND);
	ok("ms k 1 MR\r\nx\r\n", KVP_C_MS);
	cr_assert_eq(r.mode, KVP_C_REPLACE);
	ok("ms k 1 MR C5\r\nx\r\n", KVP_C_MS);
	cr_assert_eq(r.mode, KVP_C_CAS);
	cr_assert_eq(r.cas, 5);
	ok("ms k 1 I\r\nx\r\n", KVP_C_MS); /* I without C does nothing */
	ok("ms k 1 C5 I\r\nx\r\n", KVP_C_MS); /* with C: an older unique stores stale */
	cr_assert_eq(r.mode, KVP_C_CAS);
	cr_assert(r.mflags & KVP_MF('I'));
	bad("ms k\r\n", FMT);
	bad("ms k x\r\n", FMT);
	cr_assert_eq(r.swallow, 0);
	bad("ms k 1 MZ\r\nx\r\n", "CLIENT_ERROR invalid mode for ms M token");
	cr_assert_eq(r.swallow, 3);
	bad("ms k 1 Fx\r\nx\r\n", FMT);
	cr_assert_eq(r.swallow, 3);
	bad("ms k 1 Mxx\r\nx\r\n", "CLIENT_ERROR incorrect length for M token");
	bad("ms k 1 q\r\nxyz\r\n", "CLIENT_ERROR bad data chunk");
	cr_assert(!r.noreply);
	cr_assert_eq(P("ms k 2000 q\r\n"), KVP_REQUEST);
	cr_assert_eq(r.cmd, KVP_C_TOOLARGE);
	cr_assert(!r.noreply);
}

Test(meta, md_ma_mn)
{
	ok("md k q O1 k\r\n", KVP_C_MD);
	cr_assert(r.noreply);
	bad("md k !\r\n", "CLIENT_ERROR invalid or duplicate flag");
	ok("md k C1 I T30\r\n", KVP_C_MD);
	cr_assert_eq(r.cas, 1);
	cr_assert(r.mflags & KVP_MF('I'));
	cr_assert_eq(r.exptime, 30);
	ok("ma k\r\n", KVP_C_MA);
	cr_assert_eq(r.mode, KVP_C_INCR);
	cr_assert_eq(r.delta, 1);
	ok("ma k MD D5 N30 J7 T10 v\r\n", KVP_C_MA);
	cr_assert_eq(r.mode, KVP_C_DECR);
	cr_assert_eq(r.delta, 5);
	cr_assert_eq(r.initial, 7);
	cr_assert_eq(r.vivify_exptime, 30);
	ok("ma k M-\r\n", KVP_C_MA);
	cr_assert_eq(r.mode, KVP_C_DECR);
	bad("ma k MX\r\n", "CLIENT_ERROR invalid mode for ma M token");
	bad("ma k Dx\r\n", "CLIENT_ERROR invalid or duplicate flag");
	ok("ma k C12 c\r\n", KVP_C_MA);
	cr_assert_eq(r.cas, 12);
	ok("ma k t v\r\n", KVP_C_MA);
	cr_assert(r.mflags & KVP_MF('t'));
	ok("mn\r\n", KVP_C_MN);
	bad("mz k\r\n", "ERROR");
}

Test(tok, numbers_and_tokens)
{
	struct kvp_tokens t;
	uint32_t u;
	int32_t i;
	uint64_t v;

	cr_assert(kvp_num_u32("4294967296", 10, &u) && u == 0);
	cr_assert(!kvp_num_u32("-1", 2, &u));
	cr_assert(kvp_num_u32("-0", 2, &u) && u == 0);
	cr_assert(kvp_num_i32("-5", 2, &i) && i == -5);
	cr_assert(kvp_num_i32("1\t", 2, &i) && i == 1); /* a blank may follow */
	cr_assert(!kvp_num_i32("1x", 2, &i));
	cr_assert(!kvp_num_u64("", 0, &v));
	cr_assert(kvp_num_u64("18446744073709551615", 20, &v) && v == UINT64_MAX);
	kvp_tokenize("  a  bb c ", 10, &t);
	cr_assert_eq(t.n, 3);
	cr_assert_eq(t.l[1], 2);
	cr_assert_null(t.rest);
}

Test(b64, round_trip)
{
	unsigned char out[16];
	char enc[24];

	cr_assert_eq(kvp_b64_decode("YWJj", 4, out, sizeof(out)), 3);
	cr_assert_eq(kvp_b64_decode("YQ==", 4, out, sizeof(out)), 1);
	cr_assert_eq(out[0], 'a');
	cr_assert_eq(kvp_b64_decode("YQ", 2, out, sizeof(out)), 0);
	cr_assert_eq(kvp_b64_decode("====", 4, out, sizeof(out)), 0);
	cr_assert_eq(kvp_b64_encode((const unsigned char *)"ab", 2, enc), 4);
	cr_assert(!memcmp(enc, "YWI=", 4));
}
