/* lock_holder: a client that takes the bucket locks of a key and then hangs,
 * to be killed by a test (a client dying in the middle of a PUT).
 *
 *   lock_holder HOST PORT KEY      prints "LOCKED <client id>" and sleeps */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "layout.h"
#include "rmem_verbs.h"

int main(int argc, char **argv)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_keyhash kh;
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	uint64_t *lb;
	struct kvi_rop op;

	if (argc != 4)
		return 2;
	if (kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = argv[1], .port = argv[2], .lbuf_size = 4096,
							      .timeout_ms = 10000 },
				   &rm, &w, &e)) {
		fprintf(stderr, "lock_holder: %s\n", e.msg);
		return 1;
	}
	lb = kvi_rmem_lbuf(rm, NULL);
	/* Where the key lives, by the geometry the server stated (its seed too). */
	kvi_key_hash(argv[3], strlen(argv[3]), w.geo.hash_seed, w.geo.bucket_count, &kh);
	for (int i = 0; i < 2; i++) {
		op = kvi_rop_cas(kvi_bucket_off(&w.geo, kh.b[i]), &lb[i], 0, kvi_lock_held_by(w.client_id));
		if (kvi_rmem_exec(rm, &op, 1, 10000) || lb[i] != 0) {
			fprintf(stderr, "lock_holder: bucket %d not free\n", i);
			return 1;
		}
	}
	printf("LOCKED %u\n", w.client_id);
	fflush(stdout);
	for (;;)
		pause();
}
