/* lock_holder: a client that takes the bucket locks of a key and then hangs,
 * to be killed by a test (a client dying in the middle of a PUT).
 *
 *   lock_holder HOST PORT KEY            prints "LOCKED <client id>" and sleeps
 *   lock_holder HOST PORT KEY loopback   the same, its hello claiming the server's own
 *                                        loopback role: the server must fence it all the
 *                                        same (roles are the server's decision)
 *   lock_holder HOST PORT KEY MS         a late writer instead: joins, prints "JOINED
 *                                        <client id>", sleeps MS (it never renews its
 *                                        lease, so the server fences it), then WRITEs
 *                                        zeros over KEY's two buckets, prints "WIPE <code>" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "kvclient_errors.h"
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
	int loopback = argc == 5 && strcmp(argv[4], "loopback") == 0;
	int late_ms = argc == 5 && !loopback ? atoi(argv[4]) : 0;

	if (argc != 4 && argc != 5)
		return 2;
	if (kvi_rmem_verbs_connect(&(struct kvi_verbs_opts){ .host = argv[1], .port = argv[2], .lbuf_size = 4096,
							      .timeout_ms = 10000, .role = loopback ? KVI_ROLE_LOOPBACK : 0 },
				   &rm, &w, &e)) {
		fprintf(stderr, "lock_holder: %s\n", e.msg);
		return 1;
	}
	lb = kvi_rmem_lbuf(rm, NULL);
	/* Where the key lives, by the geometry the server stated (its seed too). */
	kvi_key_hash(argv[3], strlen(argv[3]), w.geo.hash_seed, w.geo.bucket_count, &kh);
	if (late_ms > 0) {
		struct kvi_rop wipe[2];
		int rc;

		printf("JOINED %u\n", w.client_id);
		fflush(stdout);
		usleep((useconds_t)atoi(argv[4]) * 1000u);
		memset(lb, 0, 2 * KVI_BUCKET_SIZE);
		wipe[0] = kvi_rop_write(kvi_home_bucket_off(&w.geo, kh.b[0]), lb, KVI_BUCKET_SIZE);
		wipe[1] = kvi_rop_write(kvi_home_bucket_off(&w.geo, kh.b[1]), (char *)lb + KVI_BUCKET_SIZE, KVI_BUCKET_SIZE);
		rc = kvi_rmem_exec(rm, wipe, 2, 10000);
		printf("WIPE %s\n", kvc_err_name(rc));
		return 0;
	}
	for (int i = 0; i < 2; i++) {
		op = kvi_rop_cas(kvi_home_bucket_off(&w.geo, kh.b[i]), &lb[i], 0, kvi_lock_held_by(w.client_id));
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
