/* Handshake and control messages: round trips, and every malformed input
 * refused. */
#include <criterion/criterion.h>
#include <string.h>

#include "kvclient_errors.h"
#include "wire.h"

Test(wire, hello_round_trip)
{
	struct kvi_wire_hello w;
	struct kvi_hello h = { 0 };

	kvi_wire_hello_encode(&w, &(struct kvi_hello){ .role = KVI_ROLE_LOOPBACK });
	cr_assert_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), 0);
	cr_expect_eq(h.role, KVI_ROLE_LOOPBACK);
}

Test(wire, hello_carries_the_proof_and_says_whether_there_is_one)
{
	struct kvi_hello in = { .role = KVI_ROLE_CLIENT, .proof = { .timestamp_ms = 0x0102030405060708ull } }, h;
	struct kvi_wire_hello w;
	const unsigned char *b = (const unsigned char *)&w;

	for (unsigned i = 0; i < KVI_AUTH_NONCE_LEN; i++)
		in.proof.nonce[i] = (uint8_t)(0x10 + i);
	for (unsigned i = 0; i < KVI_AUTH_MAC_LEN; i++)
		in.proof.mac[i] = (uint8_t)(0x80 + i);
	kvi_wire_hello_encode(&w, &in);
	/* The auth area: timestamp (little-endian) at 16, nonce at 24, MAC at 40. */
	cr_expect_eq(b[16], 0x08);
	cr_expect_eq(b[23], 0x01);
	cr_expect_eq(b[24], 0x10);
	cr_expect_eq(b[39], 0x1f);
	cr_expect_eq(b[40], 0x80);
	cr_expect_eq(b[55], 0x8f);
	cr_assert_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), 0);
	cr_expect(h.has_proof);
	cr_expect_eq(h.proof.timestamp_ms, in.proof.timestamp_ms);
	cr_expect_eq(memcmp(h.proof.nonce, in.proof.nonce, sizeof(h.proof.nonce)), 0);
	cr_expect_eq(memcmp(h.proof.mac, in.proof.mac, sizeof(h.proof.mac)), 0);

	/* All zero: no proof. One non-zero byte anywhere in the area: a proof. */
	kvi_wire_hello_encode(&w, &(struct kvi_hello){ .role = KVI_ROLE_CLIENT });
	cr_assert_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), 0);
	cr_expect(!h.has_proof);
	w.auth.mac[KVI_AUTH_MAC_LEN - 1] = 1;
	cr_assert_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), 0);
	cr_expect(h.has_proof);
}

Test(wire, hello_is_little_endian_on_the_wire)
{
	struct kvi_wire_hello w;
	const unsigned char *b = (const unsigned char *)&w;

	kvi_wire_hello_encode(&w, &(struct kvi_hello){ .role = KVI_ROLE_CLIENT });
	cr_expect_eq(memcmp(b, "KVC1", 4), 0, "magic bytes %02x %02x %02x %02x", b[0], b[1], b[2], b[3]);
	cr_expect_eq(b[4], KVI_WIRE_VERSION);
	cr_expect_eq(b[5], 0);
}

Test(wire, hello_rejects_short_bad_magic_bad_version_bad_role)
{
	struct kvi_wire_hello w;
	struct kvi_hello h;

	kvi_wire_hello_encode(&w, &(struct kvi_hello){ .role = KVI_ROLE_CLIENT });
	cr_expect_eq(kvi_wire_hello_decode(&w, sizeof(w) - 1, &h), KVC_EPROTO);
	cr_expect_eq(kvi_wire_hello_decode(NULL, 0, &h), KVC_EPROTO);
	w.magic ^= 1;
	cr_expect_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), KVC_EPROTO);
	w.magic ^= 1;
	w.version = 99;
	cr_expect_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), KVC_EPROTO);
	kvi_wire_hello_encode(&w, &(struct kvi_hello){ .role = 77 });
	cr_expect_eq(kvi_wire_hello_decode(&w, sizeof(w), &h), KVC_EPROTO);
}

/* A usable geometry: 1 GiB, 4096 buckets after the superblock page, heap after them. */
static const struct kvi_geometry good_geo = {
	.layout_version = KVI_LAYOUT_VERSION, .epoch = 3, .region_size = 1ull << 30,
	.index_off = KVI_SUPERBLOCK_SIZE, .bucket_count = 4096,
	.heap_off = KVI_SUPERBLOCK_SIZE + 4096ull * KVI_BUCKET_SIZE,
	.heap_size = (1ull << 30) - KVI_SUPERBLOCK_SIZE - 4096ull * KVI_BUCKET_SIZE,
	.segment_size = 1u << 20, .hash_seed = 0x0123456789abcdefull,
};

Test(wire, welcome_round_trip_with_padding_from_cm)
{
	unsigned char buf[KVI_CM_ACCEPT_PDATA_MAX] = { 0 };
	struct kvi_wire_welcome w;
	struct kvi_welcome in = { .client_id = 7, .rkey = 0xabcdef01u, .region_addr = 0x7f0000001000ull,
				  .max_op_ms = 1000, .quarantine_ms = 2600, .lease_ms = 300, .exec_ms = 587,
				  .flags = KVI_WELCOME_NO_EVICT, .geo = good_geo };
	struct kvi_welcome out;

	kvi_wire_welcome_encode(&w, &in);
	memcpy(buf, &w, sizeof(w)); /* rdma_cm delivers the whole private-data area */
	cr_assert_eq(kvi_wire_welcome_decode(buf, sizeof(buf), &out, NULL), 0);
	cr_expect_eq(out.client_id, 7);
	cr_expect_eq(out.rkey, 0xabcdef01u);
	cr_expect_eq(out.region_addr, 0x7f0000001000ull);
	cr_expect_eq(out.max_op_ms, 1000);
	cr_expect_eq(out.quarantine_ms, 2600);
	cr_expect_eq(out.lease_ms, 300);
	cr_expect_eq(out.exec_ms, 587);
	cr_expect_eq(out.flags, KVI_WELCOME_NO_EVICT);
	cr_expect(kvi_geometry_equal(&out.geo, &good_geo), "geometry round trip");
	/* Fixed little-endian layout: the seed's first byte on the wire. */
	cr_expect_eq(((const unsigned char *)&w)[offsetof(struct kvi_wire_welcome, geo) +
						 offsetof(struct kvi_wire_geometry, hash_seed)], 0xef);
}

static void expect_refused(const struct kvi_welcome *bad, const char *what, const char *why_part)
{
	struct kvi_wire_welcome w;
	struct kvi_welcome out;
	const char *why = NULL;

	kvi_wire_welcome_encode(&w, bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out, &why), KVC_EPROTO, "%s accepted", what);
	cr_expect(why && strstr(why, why_part), "%s: reason '%s' lacks '%s'", what, why ? why : "(none)", why_part);
}

Test(wire, welcome_rejects_impossible_values)
{
	struct kvi_wire_welcome w;
	struct kvi_welcome out;
	struct kvi_welcome base = { .client_id = 1, .rkey = 1, .region_addr = 4096, .max_op_ms = 10,
				    .quarantine_ms = 20, .geo = good_geo };
	struct kvi_welcome bad;

	bad = base;
	bad.client_id = 0; /* 0 means "unlocked" in lock words: never a client */
	expect_refused(&bad, "client id 0", "client id");
	bad = base;
	bad.region_addr = UINT64_MAX - 10; /* wraps */
	expect_refused(&bad, "wrapping region", "wraps");
	bad = base;
	bad.quarantine_ms = 19; /* reuse before every operation has ended */
	expect_refused(&bad, "short quarantine", "quarantine");
	bad = base;
	bad.max_op_ms = 0;
	expect_refused(&bad, "deadline 0", "quarantine");
	bad = base;
	bad.exec_ms = 1; /* a late write could land in reused memory */
	expect_refused(&bad, "quarantine short of the execution bound", "execution bound");
	bad.quarantine_ms = 21;
	kvi_wire_welcome_encode(&w, &bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out, NULL), 0);
	cr_expect_eq(out.exec_ms, 1);
	kvi_wire_welcome_encode(&w, &base);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out, NULL), 0);
	w.flags = 0x8000; /* an unknown flag */
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out, NULL), KVC_EPROTO);
	cr_expect_eq(kvi_wire_welcome_decode(&w, 10, &out, NULL), KVC_EPROTO);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w) - 1, &out, NULL), KVC_EPROTO);
}

/* Every kind of impossible geometry is refused, with the reason named: a
 * client must never address a region by it (layout.h "Geometry"). */
Test(wire, welcome_rejects_every_kind_of_bad_geometry)
{
	static const struct {
		const char *what, *why;
		int field;
		uint64_t value;
	} bad[] = {
		{ "layout version", "version", 0, KVI_LAYOUT_VERSION + 1 },
		{ "epoch 0", "epoch", 1, 0 },
		{ "region size 0", "region size", 2, 0 },
		{ "region over 1 TiB", "region size", 2, (1ull << 40) + (1ull << 30) },
		{ "region smaller than the heap", "past the region", 2, 1ull << 29 },
		{ "index on the superblock page", "superblock", 3, 0 },
		{ "index misaligned", "misaligned", 3, KVI_SUPERBLOCK_SIZE + 8 },
		{ "index past the region", "past the region", 3, (1ull << 30) - KVI_INDEX_CHUNK_ALIGN },
		{ "one bucket", "bucket count", 4, 1 },
		{ "more buckets than the region holds", "bucket count", 4, (1ull << 30) / KVI_BUCKET_SIZE + 1 },
		{ "buckets overlapping the heap", "heap starts before", 4, 8192 },
		{ "heap inside the index", "heap starts before", 5, KVI_SUPERBLOCK_SIZE + 64 * KVI_BUCKET_SIZE },
		{ "heap misaligned", "misaligned", 5, KVI_SUPERBLOCK_SIZE + 4096ull * KVI_BUCKET_SIZE + 2 },
		{ "heap past the region", "past the region", 6, 1ull << 30 },
		{ "heap wrapping", "past the region", 6, UINT64_MAX - 4095 },
		{ "heap smaller than a segment", "smaller than a segment", 6, (1u << 20) - 16 },
		{ "segment not a power of two", "segment size", 7, 3u << 18 },
		{ "segment too small", "segment size", 7, 32u << 10 },
		{ "segment too large", "segment size", 7, 2u << 20 },
		{ "segment 0", "segment size", 7, 0 },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvi_welcome wv = { .client_id = 1, .rkey = 1, .region_addr = 1ull << 40, .max_op_ms = 10,
					  .quarantine_ms = 20, .geo = good_geo };
		uint64_t *f[] = { NULL, &wv.geo.epoch, &wv.geo.region_size, &wv.geo.index_off,
				  &wv.geo.bucket_count, &wv.geo.heap_off, &wv.geo.heap_size, &wv.geo.segment_size };

		if (bad[i].field == 0)
			wv.geo.layout_version = (uint32_t)bad[i].value;
		else
			*f[bad[i].field] = bad[i].value;
		expect_refused(&wv, bad[i].what, bad[i].why);
	}
	/* ... and the good one passes, with any seed. */
	{
		struct kvi_welcome wv = { .client_id = 1, .rkey = 1, .region_addr = 1ull << 40, .max_op_ms = 10,
					  .quarantine_ms = 20, .geo = good_geo };
		struct kvi_wire_welcome w;
		struct kvi_welcome out;

		wv.geo.hash_seed = UINT64_MAX;
		kvi_wire_welcome_encode(&w, &wv);
		cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out, NULL), 0);
		cr_expect_eq(out.geo.hash_seed, UINT64_MAX);
	}
}

Test(wire, reject_reason_survives_and_maps_to_codes)
{
	struct kvi_wire_reject r;

	kvi_wire_reject_encode(&r, KVI_REJECT_AUTH);
	cr_expect_eq(kvi_wire_reject_decode(&r, sizeof(r)), KVI_REJECT_AUTH);
	cr_expect_eq(kvi_reject_reason_code(KVI_REJECT_AUTH), KVC_EAUTH);
	cr_expect_eq(kvi_reject_reason_code(KVI_REJECT_VERSION), KVC_EPROTO);
	/* Each way a proof can fail has its own code and says what to do. */
	cr_expect_eq(kvi_reject_reason_code(KVI_REJECT_NOAUTH), KVC_ENOAUTH);
	cr_expect_eq(kvi_reject_reason_code(KVI_REJECT_STALE), KVC_ESTALE);
	cr_expect_eq(kvi_reject_reason_code(KVI_REJECT_REPLAY), KVC_EREPLAY);
	cr_expect_eq(KVC_ENOAUTH, -23);
	cr_expect_eq(KVC_ESTALE, -24);
	cr_expect_eq(KVC_EREPLAY, -25);
	cr_expect(strstr(kvi_reject_reason_text(KVI_REJECT_NOAUTH), "secret file"));
	cr_expect(strstr(kvi_reject_reason_text(KVI_REJECT_STALE), "clocks"));
	cr_expect(strstr(kvi_reject_reason_text(KVI_REJECT_AUTH), "secret"));
	cr_expect(strstr(kvi_reject_reason_text(KVI_REJECT_REPLAY), "already"));
	kvi_wire_reject_encode(&r, KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_wire_reject_decode(&r, sizeof(r)), KVI_REJECT_REPLAY);
	cr_expect_eq(kvi_wire_reject_decode("garbage!", 8), 0);
	cr_expect_eq(kvi_wire_reject_decode(&r, 4), 0);
}

/* A message built through its view (struct kvi_ctrl) puts each field on the
 * argument word wire.h gives it and zeroes the words it does not name. */
static void expect_words(const struct kvi_ctrl *c, const uint64_t want[5])
{
	struct kvi_wire_ctrl w;
	struct kvi_ctrl out;
	const unsigned char *b = (const unsigned char *)&w;

	kvi_wire_ctrl_encode(&w, c);
	for (unsigned i = 0; i < 5; i++)
		for (unsigned k = 0; k < 8; k++)
			cr_expect_eq(b[offsetof(struct kvi_wire_ctrl, arg) + 8 * i + k], (uint8_t)(want[i] >> (8 * k)),
				     "type %u arg %u byte %u", c->type, i, k);
	cr_assert_eq(kvi_wire_ctrl_decode(&w, sizeof(w), &out), 0);
	cr_expect_eq(memcmp(out.arg, want, sizeof(out.arg)), 0, "type %u", c->type);
}

Test(wire, ctrl_views_lay_their_fields_on_the_argument_words)
{
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_SEG_REQ, .seg_req = { .need = 100, .used = 4096 } },
		     (const uint64_t[5]){ 100, 4096 });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_LEASE,
					 .lease = { .lease_ms = 1, .renew_ms = 2, .epoch = 3, .state = 4,
						    .flags = 5 } },
		     (const uint64_t[5]){ 1, 2, 3, 4, 5 });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_LEASE_RENEW,
					 .lease_renew = { .epoch = 7, .idle_addr = 0x7f0000001000ull,
							  .idle_rkey = 0x1234 } },
		     (const uint64_t[5]){ 7, 0x7f0000001000ull, 0x1234 });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_GROW, .grow = { .epoch = 9, .full_pair = { 11, 12 } } },
		     (const uint64_t[5]){ 9, 0, 11, 12 });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_INDEX,
					 .index = { .epoch = 2, .bucket_count = 1024, .chunks = 4ull << 32,
						    .pages = { 5, 6 } } },
		     (const uint64_t[5]){ 2, 1024, 4ull << 32, 5, 6 });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_GROWING, .growing = { .verdict = KVI_GROW_STALE } },
		     (const uint64_t[5]){ KVI_GROW_STALE });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_FLUSH, .flush = { .delay_ms = 1500, .ticket = 3 } },
		     (const uint64_t[5]){ 1500, 3 });
	expect_words(&(struct kvi_ctrl){ .type = KVI_CTRL_FLUSHED,
					 .flushed = { .ticket = 4, .done = 3, .walked = 77, .due_ms = 9 } },
		     (const uint64_t[5]){ 4, 3, 77, 9 });
}
