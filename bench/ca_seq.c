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

int kvb_ca_kind_parse(const char *name)
{
	if (strcmp(name, "zipf") == 0)
		return KVB_CA_ZIPF;
	if (strcmp(name, "scan") == 0)
		return KVB_CA_SCAN;
	return 0;
}
