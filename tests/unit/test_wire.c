/* Handshake messages: round trips, and every malformed input refused. */
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

Test(wire, welcome_round_trip_with_padding_from_cm)
{
	unsigned char buf[KVI_CM_ACCEPT_PDATA_MAX] = { 0 };
	struct kvi_wire_welcome w;
	struct kvi_welcome in = { .client_id = 7, .rkey = 0xabcdef01u, .region_addr = 0x7f0000001000ull,
				  .region_size = 1ull << 30, .epoch = 3, .max_op_ms = 1000, .quarantine_ms = 2500 };
	struct kvi_welcome out;

	kvi_wire_welcome_encode(&w, &in);
	memcpy(buf, &w, sizeof(w)); /* rdma_cm delivers the whole private-data area */
	cr_assert_eq(kvi_wire_welcome_decode(buf, sizeof(buf), &out), 0);
	cr_expect_eq(out.client_id, 7);
	cr_expect_eq(out.rkey, 0xabcdef01u);
	cr_expect_eq(out.region_addr, 0x7f0000001000ull);
	cr_expect_eq(out.region_size, 1ull << 30);
	cr_expect_eq(out.epoch, 3);
	cr_expect_eq(out.max_op_ms, 1000);
	cr_expect_eq(out.quarantine_ms, 2500);
}

Test(wire, welcome_rejects_impossible_values)
{
	struct kvi_wire_welcome w;
	struct kvi_welcome out;
	struct kvi_welcome base = { .client_id = 1, .rkey = 1, .region_addr = 4096, .region_size = 4096,
				    .max_op_ms = 10, .quarantine_ms = 20 };
	struct kvi_welcome bad;

	bad = base;
	bad.client_id = 0; /* 0 means "unlocked" in lock words: never a client */
	kvi_wire_welcome_encode(&w, &bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), KVC_EPROTO);
	bad = base;
	bad.region_size = 0;
	kvi_wire_welcome_encode(&w, &bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), KVC_EPROTO);
	bad = base;
	bad.region_addr = UINT64_MAX - 10; /* wraps */
	kvi_wire_welcome_encode(&w, &bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), KVC_EPROTO);
	bad = base;
	bad.quarantine_ms = 19; /* reuse before every operation has ended */
	kvi_wire_welcome_encode(&w, &bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), KVC_EPROTO);
	bad = base;
	bad.max_op_ms = 0;
	kvi_wire_welcome_encode(&w, &bad);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), KVC_EPROTO);
	kvi_wire_welcome_encode(&w, &base);
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), 0);
	w.flags = 0x8000; /* an unknown flag */
	cr_expect_eq(kvi_wire_welcome_decode(&w, sizeof(w), &out), KVC_EPROTO);
	cr_expect_eq(kvi_wire_welcome_decode(&w, 10, &out), KVC_EPROTO);
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
