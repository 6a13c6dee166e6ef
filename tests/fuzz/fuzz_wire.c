/* libFuzzer target: the handshake and control-message decoders (common/wire.h)
 * over arbitrary bytes, the way a peer hands them to us.
 *
 * Every input goes through all four decoders. Besides crashes and reads past
 * the input (libFuzzer's buffer is exactly `size` bytes, so ASan sees them),
 * this checks meaning: whatever a decoder accepts satisfies what the decoder
 * promises, and re-encodes to the same meaningful bytes and decodes again to
 * the same values; no hello carries a proof valid under a key the input
 * cannot know. A failed check aborts with the reason. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "auth_admit.h"
#include "fuzz_check.h"
#include "kvclient_errors.h"
#include "wire.h"

typedef unsigned __int128 u128;

static void hello(const uint8_t *data, size_t size)
{
	struct kvi_hello h = { 0 }, h2 = { 0 };
	struct kvi_wire_hello w;

	if (kvi_wire_hello_decode(data, size, &h) != 0)
		return;
	FUZZ_CHECK(size >= sizeof(w), "hello accepted from %zu bytes", size);
	FUZZ_CHECK(h.role == KVI_ROLE_CLIENT || h.role == KVI_ROLE_LOOPBACK, "hello role %u accepted", h.role);
	kvi_wire_hello_encode(&w, &h);
	/* magic, version, role and the proof: the bytes that mean something
	 * (only `reserved` between them is not). */
	FUZZ_CHECK(memcmp(&w, data, offsetof(struct kvi_wire_hello, reserved)) == 0, "hello re-encodes differently");
	FUZZ_CHECK(memcmp(&w.auth, data + offsetof(struct kvi_wire_hello, auth), sizeof(w.auth)) == 0,
		   "hello proof re-encodes differently");
	/* "No proof" is exactly an all-zero auth area. */
	{
		int nonzero = 0;

		for (size_t i = 0; i < sizeof(w.auth); i++)
			nonzero |= data[offsetof(struct kvi_wire_hello, auth) + i] != 0;
		FUZZ_CHECK(nonzero == h.has_proof, "hello has_proof %d for an auth area %s", h.has_proof,
			   nonzero ? "with data" : "of zeros");
	}
	/* Without the key no input is a valid proof (a MAC guessed right is a
	 * 2^-128 chance): the gate says "no proof" or "wrong proof", never yes. */
	{
		static const uint8_t key[16] = { 'f', 'u', 'z', 'z', '-', 's', 'e', 'c', 'r', 'e', 't' };
		struct sockaddr_in srv = { .sin_family = AF_INET, .sin_port = htons(7690),
					   .sin_addr.s_addr = htonl(0x0a000001) };
		int why = kvi_auth_verify(&h, key, sizeof(key), (struct sockaddr *)&srv, h.proof.timestamp_ms);

		FUZZ_CHECK(why == (h.has_proof ? KVI_REJECT_AUTH : KVI_REJECT_NOAUTH), "proof check said %d", why);
	}
	FUZZ_CHECK(kvi_wire_hello_decode(&w, sizeof(w), &h2) == 0 && h2.role == h.role &&
			   h2.has_proof == h.has_proof && memcmp(&h2.proof, &h.proof, sizeof(h.proof)) == 0,
		   "hello round trip");
}

static void welcome(const uint8_t *data, size_t size)
{
	struct kvi_welcome h, h2;
	struct kvi_wire_welcome w;
	const struct kvi_geometry *g = &h.geo;
	const char *why = NULL;

	memset(&h, 0, sizeof(h));
	memset(&h2, 0, sizeof(h2));
	if (kvi_wire_welcome_decode(data, size, &h, &why) != 0) {
		FUZZ_CHECK(why != NULL, "welcome refused without a reason");
		return;
	}
	FUZZ_CHECK(size >= sizeof(w), "welcome accepted from %zu bytes", size);
	FUZZ_CHECK(h.client_id != 0, "welcome with client id 0 accepted");
	FUZZ_CHECK(h.max_op_ms >= 1 && (uint64_t)h.quarantine_ms >= 2ull * h.max_op_ms,
		   "welcome max_op_ms %u quarantine_ms %u accepted", h.max_op_ms, h.quarantine_ms);
	FUZZ_CHECK(h.region_addr + g->region_size > h.region_addr, "welcome region %#llx + %#llx accepted",
		   (unsigned long long)h.region_addr, (unsigned long long)g->region_size);
	FUZZ_CHECK((h.flags & ~(unsigned)KVI_WELCOME_FLAGS) == 0, "welcome flags %#x accepted", h.flags);
	/* The geometry, checked independently of kvi_geometry_check: superblock
	 * page < index < heap, all inside the region, sizes and alignment. */
	FUZZ_CHECK(g->layout_version == KVI_LAYOUT_VERSION && g->epoch != 0, "welcome version/epoch accepted");
	FUZZ_CHECK(g->segment_size >= KVI_MIN_SEGMENT_SIZE && g->segment_size <= KVI_MAX_SEGMENT_SIZE &&
			   (g->segment_size & (g->segment_size - 1)) == 0,
		   "welcome segment size %#llx accepted", (unsigned long long)g->segment_size);
	FUZZ_CHECK(g->bucket_count >= 2 && g->index_off >= KVI_SUPERBLOCK_SIZE && g->index_off % KVI_BUCKET_SIZE == 0 &&
			   g->heap_off % KVI_OBJ_ALIGN == 0,
		   "welcome index/heap placement accepted");
	FUZZ_CHECK((u128)g->index_off + (u128)g->bucket_count * KVI_BUCKET_SIZE <= g->heap_off,
		   "welcome index overlapping the heap accepted");
	FUZZ_CHECK(g->heap_size >= g->segment_size && (u128)g->heap_off + g->heap_size <= g->region_size &&
			   g->region_size <= KVI_MAX_REGION_SIZE,
		   "welcome heap past the region accepted");
	kvi_wire_welcome_encode(&w, &h);
	/* Everything but the reserved words means something and re-encodes the same. */
	FUZZ_CHECK(memcmp(&w, data, offsetof(struct kvi_wire_welcome, geo.reserved)) == 0 &&
			   memcmp(&w.geo.epoch, data + offsetof(struct kvi_wire_welcome, geo.epoch),
				  sizeof(w.geo) - offsetof(struct kvi_wire_geometry, epoch)) == 0 &&
			   memcmp(&w.geo, data + offsetof(struct kvi_wire_welcome, geo), 4) == 0,
		   "welcome re-encodes differently");
	FUZZ_CHECK(kvi_wire_welcome_decode(&w, sizeof(w), &h2, NULL) == 0, "re-encoded welcome refused");
	FUZZ_CHECK(h2.client_id == h.client_id && h2.rkey == h.rkey && h2.region_addr == h.region_addr &&
			   h2.max_op_ms == h.max_op_ms && h2.quarantine_ms == h.quarantine_ms &&
			   h2.lease_ms == h.lease_ms && h2.exec_ms == h.exec_ms && h2.flags == h.flags &&
			   kvi_geometry_equal(&h2.geo, &h.geo),
		   "welcome round trip");
}

static void reject(const uint8_t *data, size_t size)
{
	uint16_t reason = kvi_wire_reject_decode(data, size);
	struct kvi_wire_reject w;

	/* Every reason, known or not, maps to a code and a hint. */
	FUZZ_CHECK(kvi_reject_reason_code(reason) < 0, "reject reason %u has no error code", reason);
	FUZZ_CHECK(kvi_reject_reason_text(reason) && kvi_reject_reason_text(reason)[0], "reason %u has no text",
		   reason);
	if (reason == 0)
		return;
	FUZZ_CHECK(size >= sizeof(w), "reject read from %zu bytes", size);
	kvi_wire_reject_encode(&w, reason);
	/* Any version is accepted, so magic and reason are what must survive. */
	FUZZ_CHECK(memcmp(&w.magic, data, sizeof(w.magic)) == 0 &&
			   memcmp(&w.reason, data + offsetof(struct kvi_wire_reject, reason), sizeof(w.reason)) == 0,
		   "reject re-encodes differently");
	FUZZ_CHECK(kvi_wire_reject_decode(&w, sizeof(w)) == reason, "reject round trip");
}

static void ctrl(const uint8_t *data, size_t size)
{
	struct kvi_ctrl c, c2;
	struct kvi_wire_ctrl w;

	memset(&c, 0, sizeof(c));
	memset(&c2, 0, sizeof(c2));
	if (kvi_wire_ctrl_decode(data, size, &c) != 0)
		return;
	FUZZ_CHECK(size == sizeof(w), "control message accepted from %zu bytes", size);
	FUZZ_CHECK(c.type >= 1 && c.type <= KVI_CTRL_TYPE_MAX, "control type %u accepted", c.type);
	kvi_wire_ctrl_encode(&w, &c);
	/* Everything but the reserved word carries meaning. */
	FUZZ_CHECK(memcmp(&w, data, offsetof(struct kvi_wire_ctrl, reserved)) == 0 &&
			   memcmp(&w.arg, data + offsetof(struct kvi_wire_ctrl, arg), sizeof(w.arg)) == 0,
		   "control message re-encodes differently");
	FUZZ_CHECK(kvi_wire_ctrl_decode(&w, sizeof(w), &c2) == 0, "re-encoded control message refused");
	FUZZ_CHECK(c2.type == c.type && c2.seq == c.seq && c2.status == c.status &&
			   memcmp(c2.arg, c.arg, sizeof(c.arg)) == 0,
		   "control message round trip");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	hello(data, size);
	welcome(data, size);
	reject(data, size);
	ctrl(data, size);
	return 0;
}
