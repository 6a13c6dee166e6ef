/* bind_src: an LD_PRELOAD shim that gives the netem scenario's client a source
 * address (KV_NETEM_SRC, an IPv4 address) when it resolves the server without one.
 *
 * Why: client and server share one kernel in the scenario, and policy rules
 * send traffic from the client's address to the server's over the veth cable
 * under test. kvserver's own loopback connection (it releases dead clients'
 * locks through it) goes to the same server address and must stay on the
 * server's device; the two differ only in this source address, which
 * libkvclient has no option for. Test-only: nothing else loads it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	static int (*real)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int);
	const char *want = getenv("KV_NETEM_SRC");
	struct sockaddr_in src;

	if (!real)
		real = (int (*)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int))dlsym(
			RTLD_NEXT, "rdma_resolve_addr");
	if (!src_addr && want && dst_addr && dst_addr->sa_family == AF_INET) {
		memset(&src, 0, sizeof(src));
		src.sin_family = AF_INET;
		if (inet_pton(AF_INET, want, &src.sin_addr) == 1)
			src_addr = (struct sockaddr *)&src;
	}
	return real(id, src_addr, dst_addr, timeout_ms);
}
