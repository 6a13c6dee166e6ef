/* Single-operation latency modes of kvbench (rdma:// targets only). */
#ifndef KVB_MICRO_H
#define KVB_MICRO_H

#include <stdint.h>

struct kvb_micro_opts {
	char host[256];
	char port[16];
	const char *device;
	uint64_t ops;  /* operations per kind */
	uint32_t size; /* value size, or READ/WRITE size for --raw */
};

/* Each returns the process exit status: 0, or 1 with one line on stderr. */
int kvb_micro(const struct kvb_micro_opts *o);
int kvb_raw(const struct kvb_micro_opts *o);

#endif
