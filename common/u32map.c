#include "u32map.h"

#include <stdlib.h>

#include "kvclient_errors.h"

static uint32_t home(const struct kvi_u32map *m, uint32_t key)
{
	return (uint32_t)((key * 2654435761u) ^ (key >> 16)) & (m->cap - 1);
}

static struct kvi_u32map_slot *find(const struct kvi_u32map *m, uint32_t key)
{
	if (!m->cap || !key)
		return NULL;
	for (uint32_t i = home(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (m->t[i].key == key)
			return &m->t[i];
		if (m->t[i].key == 0)
			return NULL;
	}
}

void *kvi_u32map_get(const struct kvi_u32map *m, uint32_t key)
{
	struct kvi_u32map_slot *s = find(m, key);

	return s ? s->val : NULL;
}

static void place(struct kvi_u32map *m, uint32_t key, void *val)
{
	uint32_t i;

	for (i = home(m, key); m->t[i].key; i = (i + 1) & (m->cap - 1))
		;
	m->t[i] = (struct kvi_u32map_slot){ key, val };
}

static int grow(struct kvi_u32map *m)
{
	struct kvi_u32map_slot *old = m->t;
	uint32_t oldcap = m->cap, cap = oldcap ? oldcap * 2 : 64;

	if (cap < oldcap)
		return KVC_ENOMEM;
	m->t = calloc(cap, sizeof(*m->t));
	if (!m->t) {
		m->t = old;
		return KVC_ENOMEM;
	}
	m->cap = cap;
	for (uint32_t i = 0; i < oldcap; i++)
		if (old[i].key)
			place(m, old[i].key, old[i].val);
	free(old);
	return 0;
}

int kvi_u32map_put(struct kvi_u32map *m, uint32_t key, void *val)
{
	struct kvi_u32map_slot *s;

	if (!key || !val)
		return KVC_EINVAL;
	s = find(m, key);
	if (s) {
		s->val = val;
		return 0;
	}
	if ((uint64_t)(m->n + 1) * 2 > m->cap && grow(m))
		return KVC_ENOMEM;
	place(m, key, val);
	m->n++;
	return 0;
}

void kvi_u32map_del(struct kvi_u32map *m, uint32_t key)
{
	struct kvi_u32map_slot *s = find(m, key);
	uint32_t i, j;

	if (!s)
		return;
	/* Backward-shift deletion keeps every probe chain unbroken. */
	i = (uint32_t)(s - m->t);
	m->t[i].key = 0;
	for (j = (i + 1) & (m->cap - 1); m->t[j].key; j = (j + 1) & (m->cap - 1)) {
		uint32_t h = home(m, m->t[j].key);

		/* Move t[j] into the hole at i unless its home lies in (i, j]. */
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			m->t[i] = m->t[j];
			m->t[j].key = 0;
			i = j;
		}
	}
	m->n--;
}

void kvi_u32map_free(struct kvi_u32map *m)
{
	free(m->t);
	*m = (struct kvi_u32map){ 0 };
}
