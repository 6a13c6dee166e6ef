/* What the handle reports about its servers: its statistics summed over
 * them (and over the connections already closed), the servers' own
 * statistics summed, each server's state, and the largest value all take. */
#include <string.h>

#include "cluster.h"
#include "cluster_member.h"
#include "cluster_stats.h"
#include "engine.h"
#include "stats.h"

void kvi_stats_fold(struct kvc_stats *acc, const struct kvc_stats *s)
{
	uint64_t *a = (uint64_t *)acc;
	const uint64_t *b = (const uint64_t *)s;

	_Static_assert(sizeof(struct kvc_stats) % sizeof(uint64_t) == 0, "kvc_stats is counters only");
	for (size_t i = 0; i < sizeof(*s) / sizeof(uint64_t); i++)
		a[i] += b[i];
}

void kvc_get_stats(const kvc_t *h, struct kvc_stats *out)
{
	*out = h->gone;
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		if (h->m[i]->c) {
			struct kvc_stats s;

			kvi_conn_get_stats(h->m[i]->c, &s);
			kvi_stats_fold(out, &s);
		}
}

void kvc_reset_stats(kvc_t *h)
{
	memset(&h->gone, 0, sizeof(h->gone));
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		if (h->m[i]->c)
			kvi_conn_reset_stats(h->m[i]->c);
}

int kvc_server_stats_at(kvc_t *h, unsigned i, struct kvc_server_stats *out)
{
	if (!h || !out || i >= h->n)
		return KVC_EINVAL;
	if (!h->m[i]->c)
		return KVC_ESERVERGONE;
	return kvi_conn_server_stats(h->m[i]->c, out);
}

int kvc_server_stats(kvc_t *h, struct kvc_server_stats *out)
{
	int rc = KVC_ESERVERGONE, answered = 0;

	if (!h || !out)
		return KVC_EINVAL;
	if (h->single)
		return kvi_conn_server_stats(h->m[0]->c, out);
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < h->n; i++) {
		struct kvc_server_stats s;
		uint64_t *a = (uint64_t *)out;
		const uint64_t *b = (const uint64_t *)&s;
		uint64_t epoch = out->index_epoch, buckets = out->index_buckets;

		rc = kvc_server_stats_at(h, i, &s);
		if (rc)
			continue;
		answered++;
		for (size_t k = 0; k < sizeof(s) / sizeof(uint64_t); k++)
			a[k] += b[k];
		/* Not quantities: the largest. */
		out->index_epoch = epoch > s.index_epoch ? epoch : s.index_epoch;
		out->index_buckets = buckets > s.index_buckets ? buckets : s.index_buckets;
	}
	return answered ? 0 : rc;
}

unsigned kvc_server_count(const kvc_t *h)
{
	return h ? h->n : 0;
}

int kvc_server_info(const kvc_t *h, unsigned i, struct kvc_server_info *out)
{
	const struct kvi_member *m;
	struct kvc_stats s;

	if (!h || !out || i >= h->n)
		return KVC_EINVAL;
	m = h->m[i];
	memset(out, 0, sizeof(*out));
	out->name = m->name;
	out->weight = m->weight;
	out->failures = m->fails;
	if (m->ejected_until)
		out->state = KVC_SERVER_EJECTED;
	else if (kvi_member_joining(m))
		out->state = KVC_SERVER_JOINING;
	else
		out->state = !m->c || kvi_conn_broken(m->c) ? KVC_SERVER_DOWN : KVC_SERVER_UP;
	if (m->c) {
		kvi_conn_get_stats(m->c, &s);
		for (int k = 0; k < KVC_STAT_KINDS; k++)
			out->ops += s.ops[k];
	}
	return 0;
}

size_t kvc_max_value(const kvc_t *h, size_t key_len)
{
	size_t best = 0;
	int any = 0;

	for (unsigned i = 0; i < h->n; i++)
		if (h->m[i]->c) {
			size_t v = kvi_conn_max_value(h->m[i]->c, key_len);

			best = !any || v < best ? v : best;
			any = 1;
		}
	return best;
}
