#include "fence.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient_errors.h"
#include "log.h"
#include "rmem_verbs.h"

#define FENCE_TIMEOUT_MS 5000

struct kvs_fence {
	pthread_t t;
	int joined;
	atomic_int done; /* the connect thread has finished (rm set or rc) */
	int rc;
	struct kvi_rmem *rm;
	char host[256], port[16], device[64];
	struct kvi_errbuf e;
};

static void *connect_main(void *arg)
{
	struct kvs_fence *f = arg;
	struct kvi_welcome w;

	f->rc = kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = f->host, .port = f->port,
								 .device = f->device[0] ? f->device : NULL,
								 .lbuf_size = 64, .timeout_ms = FENCE_TIMEOUT_MS,
								 .role = KVI_ROLE_LOOPBACK },
				       &f->rm, &w, &f->e);
	atomic_store(&f->done, 1);
	return NULL;
}

int kvs_fence_start(struct kvs_fence **out, const char *host, const char *port, const char *device)
{
	struct kvs_fence *f = calloc(1, sizeof(*f));

	*out = NULL;
	if (!f)
		return KVC_ENOMEM;
	snprintf(f->host, sizeof(f->host), "%s", host);
	snprintf(f->port, sizeof(f->port), "%s", port);
	snprintf(f->device, sizeof(f->device), "%s", device ? device : "");
	if (pthread_create(&f->t, NULL, connect_main, f)) {
		free(f);
		return KVC_ESYS;
	}
	*out = f;
	return 0;
}

/* The loopback, once its connect thread is done; NULL if it failed. */
static struct kvi_rmem *loopback(struct kvs_fence *f)
{
	if (!f || !atomic_load(&f->done))
		return NULL;
	if (!f->joined) {
		pthread_join(f->t, NULL);
		f->joined = 1;
		if (f->rc)
			kvi_err("no loopback connection to release dead clients' locks: %s", f->e.msg);
	}
	return f->rc ? NULL : f->rm;
}

int kvs_fence_client(struct kvs_fence *f, const struct kvi_geometry *sb, const void *base,
		     uint32_t client_id)
{
	const struct kvi_bucket *index = (const void *)((const char *)base + sb->index_off);
	struct kvi_rmem *rm = loopback(f);
	uint64_t *old;
	int released = 0;

	if (!rm)
		return KVC_ESERVERGONE;
	old = kvi_rmem_lbuf(rm, NULL);
	for (uint64_t b = 0; b < sb->bucket_count; b++) {
		/* Reading the word with the CPU is fine; changing it is the NIC's job. */
		uint64_t lock = __atomic_load_n(&index[b].lock, __ATOMIC_RELAXED);
		struct kvi_rop op;
		int rc;

		if (!(lock & KVI_LOCK_LOCKED) || kvi_lock_owner(lock) != client_id)
			continue;
		/* Keep any MOVED mark; drop the holder. */
		op = kvi_rop_cas(kvi_bucket_off(sb, b), old, lock, lock & KVI_LOCK_MOVED);
		rc = kvi_rmem_exec(rm, &op, 1, FENCE_TIMEOUT_MS);
		if (rc)
			return rc;
		released += *old == lock;
	}
	return released;
}

uint32_t kvs_fence_own_id(const struct kvs_fence *f)
{
	if (!f || !atomic_load(&f->done) || f->rc || !f->rm)
		return 0;
	return f->rm->client_id;
}

void kvs_fence_destroy(struct kvs_fence *f)
{
	if (!f)
		return;
	if (!f->joined)
		pthread_join(f->t, NULL);
	kvi_rmem_destroy(f->rm);
	free(f);
}
