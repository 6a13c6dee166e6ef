#include "ids.h"

#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"

/* A released id, in release order (times and tickets never decrease along
 * the ring, so only its head can be the next one ready). */
struct released {
	uint32_t id;
	uint64_t at;     /* ns: when its holder left */
	uint64_t ticket; /* the fencer's pass that releases its locks */
};

struct kvs_ids {
	uint32_t max_id;
	uint32_t next_fresh; /* lowest id never handed out (> max_id: none left) */
	uint64_t hold_ns;
	uint64_t *in_use;    /* bitmap over 0..max_id */
	struct released *ring; /* cap a power of two; grows, never beyond max_id entries */
	uint32_t head, count, cap;
	uint64_t last_ticket;
	struct kvs_ids_stats st;
};

int kvs_ids_create(struct kvs_ids **out, uint32_t max_id, uint64_t hold_ns)
{
	struct kvs_ids *ids;

	*out = NULL;
	if (max_id == 0)
		return KVC_EINVAL;
	ids = calloc(1, sizeof(*ids));
	if (!ids)
		return KVC_ENOMEM;
	ids->in_use = calloc((size_t)max_id / 64 + 1, sizeof(uint64_t));
	ids->cap = 64;
	ids->ring = calloc(ids->cap, sizeof(*ids->ring));
	if (!ids->in_use || !ids->ring) {
		kvs_ids_destroy(ids);
		return KVC_ENOMEM;
	}
	ids->max_id = max_id;
	ids->next_fresh = 1;
	ids->hold_ns = hold_ns;
	*out = ids;
	return 0;
}

void kvs_ids_destroy(struct kvs_ids *ids)
{
	if (!ids)
		return;
	free(ids->in_use);
	free(ids->ring);
	free(ids);
}

static int used(const struct kvs_ids *ids, uint32_t id)
{
	return (int)(ids->in_use[id / 64] >> (id % 64) & 1);
}

static void set_used(struct kvs_ids *ids, uint32_t id, int on)
{
	if (on)
		ids->in_use[id / 64] |= 1ull << (id % 64);
	else
		ids->in_use[id / 64] &= ~(1ull << (id % 64));
}

uint32_t kvs_ids_take(struct kvs_ids *ids, uint64_t now, uint64_t fence_done)
{
	uint32_t id = 0;

	if (ids->count) {
		const struct released *r = &ids->ring[ids->head];

		if (r->ticket <= fence_done && now >= r->at && now - r->at >= ids->hold_ns) {
			id = r->id;
			ids->head = (ids->head + 1) & (ids->cap - 1);
			ids->count--;
			ids->st.reused++;
		}
	}
	if (!id && ids->next_fresh <= ids->max_id) {
		id = ids->next_fresh++;
		ids->st.fresh++;
	}
	if (!id) {
		ids->st.refused++;
		return 0;
	}
	set_used(ids, id, 1);
	ids->st.taken++;
	return id;
}

/* Double the ring, keeping its order. */
static int grow(struct kvs_ids *ids)
{
	struct released *r = malloc((size_t)ids->cap * 2 * sizeof(*r));

	if (!r)
		return KVC_ENOMEM;
	for (uint32_t i = 0; i < ids->count; i++)
		r[i] = ids->ring[(ids->head + i) & (ids->cap - 1)];
	free(ids->ring);
	ids->ring = r;
	ids->head = 0;
	ids->cap *= 2;
	return 0;
}

int kvs_ids_put(struct kvs_ids *ids, uint32_t id, uint64_t now, uint64_t fence_ticket)
{
	if (id == 0 || id > ids->max_id || !used(ids, id))
		return KVC_EINVAL;
	/* The ring never holds more than max_id entries (each id once), so
	 * growing can only fail for memory: the id is then lost for good,
	 * which costs one of millions, never a wrong reuse. */
	if (ids->count == ids->cap && grow(ids)) {
		set_used(ids, id, 0);
		return 0;
	}
	/* Keep the ring ordered by ticket as well as by time (the fencer's
	 * tickets only grow; a smaller one is waited for as the larger). */
	if (fence_ticket < ids->last_ticket)
		fence_ticket = ids->last_ticket;
	ids->last_ticket = fence_ticket;
	ids->ring[(ids->head + ids->count) & (ids->cap - 1)] =
		(struct released){ .id = id, .at = now, .ticket = fence_ticket };
	ids->count++;
	set_used(ids, id, 0);
	return 0;
}

void kvs_ids_stats(const struct kvs_ids *ids, struct kvs_ids_stats *out)
{
	*out = ids->st;
	out->waiting = ids->count;
	/* Handed out minus put back (every reuse was put back first). */
	out->in_use = ids->st.taken - ids->count - ids->st.reused;
}
