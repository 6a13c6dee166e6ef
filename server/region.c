#include "region.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "hugemap.h"
#include "kvclient_errors.h"
#include "log.h"

int kvs_region_create(struct kvs_region *r, size_t size, enum kvs_hugepages mode, struct ibv_pd *pd,
		      struct kvi_errbuf *e)
{
	/* REMOTE_ATOMIC requires LOCAL_WRITE; both READ and WRITE are one-sided ops. */
	const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_ATOMIC;

	memset(r, 0, sizeof(*r));
	r->size = size;
	if (mode != KVS_HUGE_OFF) {
		r->map_size = (size + KVI_HUGEPAGE_SIZE - 1) & ~(size_t)(KVI_HUGEPAGE_SIZE - 1);
		r->base = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
		if (r->base != MAP_FAILED) {
			r->huge = 1;
		} else if (mode == KVS_HUGE_ON) {
			kvi_errbuf_set(e, "cannot map %zu MiB of 2 MiB hugepages: %s (reserve them: "
				       "sysctl vm.nr_hugepages=%zu, or use --hugepages auto)",
				       r->map_size >> 20, strerror(errno), r->map_size / KVI_HUGEPAGE_SIZE);
			r->base = NULL;
			return KVC_ENOMEM;
		} else {
			kvi_ev_warn("hugepages_unavailable", "region_mib=%zu reason=%s msg=\"using 4 KiB pages, which "
				    "register slower and miss the NIC's translation cache more; reserve with sysctl "
				    "vm.nr_hugepages=%zu\"", r->map_size >> 20, strerror(errno), r->map_size / KVI_HUGEPAGE_SIZE);
			r->base = NULL;
		}
	}
	if (!r->base) {
		r->map_size = (size + 4095) & ~(size_t)4095;
		/* 4 KiB pages, but from a 2 MiB boundary: transparent hugepages
		 * can back the region from its first byte (and the layout is the
		 * same with and without hugetlb pages). */
		r->base = kvi_map_huge(r->map_size);
		if (!r->base) {
			kvi_errbuf_set(e, "cannot map a %zu MiB region: %s", size >> 20, strerror(errno));
			return KVC_ENOMEM;
		}
	}
	r->mr = ibv_reg_mr(pd, r->base, r->size, access);
	if (!r->mr) {
		int err = errno;

		kvi_errbuf_set(e, "cannot register the %zu MiB region with the RDMA device: %s%s", size >> 20,
			       strerror(err),
			       err == ENOMEM || err == EPERM
				       ? " (raise the locked-memory limit: ulimit -l unlimited, "
					 "or LimitMEMLOCK=infinity in the systemd unit)"
				       : "");
		kvs_region_destroy(r);
		return KVC_ENOMEM;
	}
	return 0;
}

void kvs_region_destroy(struct kvs_region *r)
{
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->base)
		munmap(r->base, r->map_size);
	memset(r, 0, sizeof(*r));
}
