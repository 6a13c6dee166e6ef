/* Which member takes a key: the ring (ring.h, rendezvous hashing) over the
 * members of the list that are not ejected, rebuilt whenever the list or an
 * ejection changes; and whether the handle goes straight to its one
 * connection (cluster.h). */
#include "cluster.h"
#include "cluster_route.h"
#include "dial.h"

void kvi_route_rebuild(kvc_t *h)
{
	kvi_ring_clear(&h->ring);
	h->next_return = UINT64_MAX;
	for (unsigned i = 0; i < h->n; i++) {
		struct kvi_member *m = h->m[i];

		if (m->ejected_until) {
			if (m->ejected_until < h->next_return)
				h->next_return = m->ejected_until;
			continue;
		}
		(void)kvi_ring_add(&h->ring, i, m->name_hash, m->weight);
	}
	h->single = h->n == 1 && h->ndrain == 0 && !h->many && !h->list_file && h->o.server_failure_limit == 0 &&
		    h->m[0]->c != NULL;
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		if (h->m[i]->d)
			h->m[i]->d->async = !h->single; /* cluster.h "Joining" */
}

int kvc_key_server(const kvc_t *h, const void *key, size_t key_len)
{
	int i;

	if (!h || !key || key_len == 0 || key_len > KVI_MAX_KEY)
		return KVC_EINVAL;
	if (h->single)
		return 0;
	i = kvi_ring_pick(&h->ring, kvi_ring_key_hash(key, key_len));
	return i < 0 ? KVC_ESERVERGONE : i;
}
