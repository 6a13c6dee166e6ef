#include "ca_seq.h"

#include <string.h>

#define SCAN_ONE_IN 3 /* one request in three is a never-repeated key */

int kvb_ca_seq_init(struct kvb_ca_seq *s, int kind, uint64_t records, uint64_t seed)
{
	if ((kind != KVB_CA_ZIPF && kind != KVB_CA_SCAN) || records == 0)
		return -1;
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->records = records;
	s->next_unique = records;
	kvb_rng_seed(&s->rng, seed);
	return kvb_scrambled_init(&s->hot, 0, records - 1);
}

uint64_t kvb_ca_seq_next(struct kvb_ca_seq *s)
{
	if (s->kind == KVB_CA_SCAN && kvb_rng_next(&s->rng) % SCAN_ONE_IN == 0)
		return s->next_unique++;
	return kvb_scrambled_next(&s->hot, &s->rng);
}

int kvb_ca_src_init(struct kvb_ca_src *s, int kind, uint64_t records, uint64_t seed, const struct kvb_sizedist *sizes)
{
	s->sizes = sizes;
	s->salt = seed * 0x9e3779b97f4a7c15ull + 0x5eed;
	return kvb_ca_seq_init(&s->seq, kind, records, seed);
}

void kvb_ca_src_key(const struct kvb_ca_src *s, uint64_t i, struct kvb_trace_req *r)
{
	memset(r, 0, sizeof(*r));
	r->op = KVB_TOP_GET;
	r->id = i;
	r->key_len = kvb_key_name(i, 0, 0, r->key, sizeof(r->key));
	r->value_size = kvb_sizedist_draw(s->sizes, kvb_mix64(i ^ s->salt)); /* the key's size, always */
}

int kvb_ca_src_next(void *arg, struct kvb_trace_req *r, char *err, size_t errlen)
{
	struct kvb_ca_src *s = arg;

	(void)err;
	(void)errlen;
	kvb_ca_src_key(s, kvb_ca_seq_next(&s->seq), r);
	return 1;
}

uint64_t kvb_ca_src_bytes(const struct kvb_ca_src *s)
{
	struct kvb_trace_req r;
	uint64_t total = 0;

	for (uint64_t i = 0; i < s->seq.records; i++) {
		kvb_ca_src_key(s, i, &r);
		total += r.key_len + r.value_size;
	}
	return total;
}

int kvb_ca_kind_parse(const char *name)
{
	if (strcmp(name, "zipf") == 0)
		return KVB_CA_ZIPF;
	if (strcmp(name, "scan") == 0)
		return KVB_CA_SCAN;
	return 0;
}
