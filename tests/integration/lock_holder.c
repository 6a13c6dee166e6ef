/* lock_holder: a client that takes the bucket locks of a key and then hangs,
 * to be killed by a test (a client dying in the middle of a PUT).
 *
 *   lock_holder HOST PORT KEY [loopback]   prints "LOCKED <client id>" and sleeps
 *
 * With "loopback" its hello claims the server's own loopback role: the server
 * must fence it all the same (roles are the server's decision). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "layout.h"
#include "rmem_verbs.h"

int main(int argc, char **argv)
{
	struct kvi_errbuf e = { { 0 } };
	struct kvi_superblock sb;
	struct kvi_keyhash kh;
	struct kvi_welcome w;
	struct kvi_rmem *rm;
	uint64_t *lb;
	struct kvi_rop op;

	if (argc != 4 && !(argc == 5 && strcmp(argv[4], "loopback") == 0))
		return 2;
	if (kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = argv[1], .port = argv[2], .lbuf_size = 4096,
							      .timeout_ms = 10000, .role = argc == 5 ? KVI_ROLE_LOOPBACK : 0 },
				   &rm, &w, &e)) {
		fprintf(stderr, "lock_holder: %s\n", e.msg);
		return 1;
	}
	lb = kvi_rmem_lbuf(rm, NULL);
	op = kvi_rop_read(0, lb, sizeof(sb));
	if (kvi_rmem_exec(rm, &op, 1, 10000))
		return 1;
	memcpy(&sb, lb, sizeof(sb));
	kvi_key_hash(argv[3], strlen(argv[3]), sb.bucket_count, &kh);
	for (int i = 0; i < 2; i++) {
		op = kvi_rop_cas(kvi_bucket_off(&sb, kh.b[i]), &lb[i], 0, kvi_lock_held_by(w.client_id));
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
