#include "wire.h"

#include <endian.h>
#include <string.h>

#include "kvclient.h" /* struct kvc_server_stats */
#include "kvclient_errors.h"

/* struct kvc_server_stats is the statistics in wire order: each field where
 * its KVI_STAT_ id says (server_stats.h pairs them). */
#define KVI_STAT_AT(id, name, field, ...)                                                            \
	_Static_assert(offsetof(struct kvc_server_stats, field) == KVI_STAT_##id * sizeof(uint64_t), \
		       "kvc_server_stats." #field " is not at KVI_STAT_" #id);
KVI_SERVER_STATS(KVI_STAT_AT)
#undef KVI_STAT_AT
_Static_assert(sizeof(struct kvc_server_stats) == KVI_STAT_COUNT * sizeof(uint64_t),
	       "kvc_server_stats has a field for every statistic and no other");

static int check_header(uint32_t magic_le, uint16_t version_le)
{
	if (le32toh(magic_le) != KVI_WIRE_MAGIC)
		return KVC_EPROTO;
	if (le16toh(version_le) != KVI_WIRE_VERSION)
		return KVC_EPROTO;
	return 0;
}

void kvi_wire_hello_encode(struct kvi_wire_hello *w, const struct kvi_hello *h)
{
	memset(w, 0, sizeof(*w));
	w->magic = htole32(KVI_WIRE_MAGIC);
	w->version = htole16(KVI_WIRE_VERSION);
	w->role = htole16(h->role);
	w->auth.timestamp_ms = htole64(h->proof.timestamp_ms);
	memcpy(w->auth.nonce, h->proof.nonce, sizeof(w->auth.nonce));
	memcpy(w->auth.mac, h->proof.mac, sizeof(w->auth.mac));
}

int kvi_wire_hello_decode(const void *buf, size_t len, struct kvi_hello *out)
{
	struct kvi_wire_hello w;

	/* rdma_cm may hand us more bytes than were sent (padding to the CM limit),
	 * never fewer for a valid peer. */
	if (!buf || len < sizeof(w))
		return KVC_EPROTO;
	memcpy(&w, buf, sizeof(w));
	if (check_header(w.magic, w.version))
		return KVC_EPROTO;
	out->role = le16toh(w.role);
	if (out->role != KVI_ROLE_CLIENT && out->role != KVI_ROLE_LOOPBACK)
		return KVC_EPROTO;
	out->proof.timestamp_ms = le64toh(w.auth.timestamp_ms);
	memcpy(out->proof.nonce, w.auth.nonce, sizeof(out->proof.nonce));
	memcpy(out->proof.mac, w.auth.mac, sizeof(out->proof.mac));
	out->has_proof = 0;
	for (size_t i = 0; i < sizeof(w.auth); i++)
		out->has_proof |= ((const uint8_t *)&w.auth)[i] != 0;
	return 0;
}

void kvi_wire_welcome_encode(struct kvi_wire_welcome *w, const struct kvi_welcome *h)
{
	memset(w, 0, sizeof(*w));
	w->magic = htole32(KVI_WIRE_MAGIC);
	w->version = htole16(KVI_WIRE_VERSION);
	w->client_id = htole32(h->client_id);
	w->rkey = htole32(h->rkey);
	w->region_addr = htole64(h->region_addr);
	w->max_op_ms = htole32(h->max_op_ms);
	w->quarantine_ms = htole32(h->quarantine_ms);
	w->lease_ms = htole32(h->lease_ms);
	w->exec_ms = htole32(h->exec_ms);
	w->flags = htole16(h->flags);
	w->geo.layout_version = htole32(h->geo.layout_version);
	w->geo.epoch = htole64(h->geo.epoch);
	w->geo.region_size = htole64(h->geo.region_size);
	w->geo.index_off = htole64(h->geo.index_off);
	w->geo.bucket_count = htole64(h->geo.bucket_count);
	w->geo.heap_off = htole64(h->geo.heap_off);
	w->geo.heap_size = htole64(h->geo.heap_size);
	w->geo.segment_size = htole64(h->geo.segment_size);
	w->geo.hash_seed = htole64(h->geo.hash_seed);
}

static int bad_welcome(const char **why, const char *what)
{
	if (why)
		*why = what;
	return KVC_EPROTO;
}

int kvi_wire_welcome_decode(const void *buf, size_t len, struct kvi_welcome *out, const char **why)
{
	struct kvi_wire_welcome w;
	const char *geo_bad;

	if (!buf || len < sizeof(w))
		return bad_welcome(why, "too short");
	memcpy(&w, buf, sizeof(w));
	if (check_header(w.magic, w.version))
		return bad_welcome(why, "wrong magic or protocol version");
	if (le16toh(w.flags) & ~(unsigned)KVI_WELCOME_FLAGS)
		return bad_welcome(why, "unknown flags");
	out->client_id = le32toh(w.client_id);
	out->rkey = le32toh(w.rkey);
	out->region_addr = le64toh(w.region_addr);
	out->max_op_ms = le32toh(w.max_op_ms);
	out->quarantine_ms = le32toh(w.quarantine_ms);
	out->lease_ms = le32toh(w.lease_ms);
	out->exec_ms = le32toh(w.exec_ms);
	out->flags = le16toh(w.flags);
	out->geo = (struct kvi_geometry){
		.layout_version = le32toh(w.geo.layout_version),
		.epoch = le64toh(w.geo.epoch),
		.region_size = le64toh(w.geo.region_size),
		.index_off = le64toh(w.geo.index_off),
		.bucket_count = le64toh(w.geo.bucket_count),
		.heap_off = le64toh(w.geo.heap_off),
		.heap_size = le64toh(w.geo.heap_size),
		.segment_size = le64toh(w.geo.segment_size),
		.hash_seed = le64toh(w.geo.hash_seed),
	};
	/* A quarantine too short for the deadline is a lie (layout.h "Reuse");
	 * so is a region the client could not address without wrapping. */
	if (out->max_op_ms == 0 || (uint64_t)out->quarantine_ms < 2ull * out->max_op_ms + out->exec_ms)
		return bad_welcome(why, "quarantine not above twice the operation deadline plus the execution bound");
	if (out->client_id == 0)
		return bad_welcome(why, "client id 0");
	geo_bad = kvi_geometry_check(&out->geo);
	if (geo_bad)
		return bad_welcome(why, geo_bad);
	if (out->region_addr + out->geo.region_size < out->region_addr)
		return bad_welcome(why, "region address wraps");
	return 0;
}

void kvi_wire_reject_encode(struct kvi_wire_reject *w, uint16_t reason)
{
	w->magic = htole32(KVI_WIRE_MAGIC);
	w->version = htole16(KVI_WIRE_VERSION);
	w->reason = htole16(reason);
}

uint16_t kvi_wire_reject_decode(const void *buf, size_t len)
{
	struct kvi_wire_reject w;

	if (!buf || len < sizeof(w))
		return 0;
	memcpy(&w, buf, sizeof(w));
	/* Any version: an older or newer server still tells us why it said no. */
	if (le32toh(w.magic) != KVI_WIRE_MAGIC)
		return 0;
	return le16toh(w.reason);
}

int kvi_reject_reason_code(uint16_t reason)
{
	switch (reason) {
	case KVI_REJECT_AUTH:
		return KVC_EAUTH;
	case KVI_REJECT_NOAUTH:
		return KVC_ENOAUTH;
	case KVI_REJECT_STALE:
		return KVC_ESTALE;
	case KVI_REJECT_REPLAY:
		return KVC_EREPLAY;
	case KVI_REJECT_VERSION:
		return KVC_EPROTO;
	case KVI_REJECT_FULL:
		return KVC_ENOMEM;
	case KVI_REJECT_SHUTDOWN:
		return KVC_ESERVERGONE;
	default:
		return KVC_EUNREACHABLE;
	}
}

const char *kvi_reject_reason_text(uint16_t reason)
{
	switch (reason) {
	case KVI_REJECT_VERSION:
		return "server speaks another protocol version: upgrade client and server together";
	case KVI_REJECT_AUTH:
		return "server refused our proof: our secret is not the server's; give the file kvserver "
		       "--secret-file reads (kvc_opts.secret_file, KVC_SECRET_FILE or --secret-file)";
	case KVI_REJECT_NOAUTH:
		return "server requires authentication: give a secret file (kvc_opts.secret_file, "
		       "KVC_SECRET_FILE or --secret-file) with the server's secret";
	case KVI_REJECT_STALE:
		return "server found our proof's timestamp outside its +-30 s window: check the clocks of "
		       "client and server (NTP)";
	case KVI_REJECT_REPLAY:
		return "server has already seen this proof (a replayed hello): connect again for a fresh one";
	case KVI_REJECT_DEVICE:
		return "request reached the server on an RDMA device it does not serve: check kvserver -d/-l";
	case KVI_REJECT_FULL:
		return "server has no room for another client: raise its limits or retry later";
	case KVI_REJECT_SHUTDOWN:
		return "server is shutting down: retry later";
	default:
		return "server rejected the connection for an unknown reason";
	}
}

void kvi_wire_ctrl_encode(struct kvi_wire_ctrl *w, const struct kvi_ctrl *c)
{
	memset(w, 0, sizeof(*w));
	w->magic = htole32(KVI_WIRE_MAGIC);
	w->version = htole16(KVI_WIRE_VERSION);
	w->type = htole16(c->type);
	w->length = htole32(sizeof(*w));
	w->seq = htole32(c->seq);
	w->status = (int32_t)htole32((uint32_t)c->status);
	for (int i = 0; i < 5; i++)
		w->arg[i] = htole64(c->arg[i]);
}

int kvi_wire_ctrl_decode(const void *buf, size_t len, struct kvi_ctrl *out)
{
	struct kvi_wire_ctrl w;

	if (!buf || len != sizeof(w))
		return KVC_EPROTO;
	memcpy(&w, buf, sizeof(w));
	if (check_header(w.magic, w.version) || le32toh(w.length) != sizeof(w))
		return KVC_EPROTO;
	out->type = le16toh(w.type);
	if (out->type == 0 || out->type > KVI_CTRL_TYPE_MAX)
		return KVC_EPROTO;
	out->seq = le32toh(w.seq);
	out->status = (int32_t)le32toh((uint32_t)w.status);
	for (int i = 0; i < 5; i++)
		out->arg[i] = le64toh(w.arg[i]);
	return 0;
}
