/* kill_worker: a client that dies right after the Nth doorbell of a write,
 * for the "kill at every step" test (test_kill_verbs.c).
 *
 *   kill_worker HOST:PORT KEY put|delete N [CACHE [stop]]
 *
 * Writes KEY = "acked" and waits for it (prints "ACKED"), then starts the
 * write under test (PUT KEY = "doomed", or DELETE KEY) and SIGKILLs itself
 * just after its Nth doorbell was rung (prints "STOP N" first). If the write
 * needs fewer doorbells it finishes and prints "DONE <code>". CACHE (default
 * 1024) sizes the location cache: 0 takes the two-bucket path.
 *
 * With "stop" it SIGSTOPs itself instead (a stalled client holding locks,
 * for the lease test): once continued, the write finishes ("DONE <code>"),
 * then one more PUT shows whether the handle rejoined ("AFTER <code> <rejoins>").
 *
 * The doorbells are counted by wrapping kvi_rmem_post at link time
 * (-Wl,--wrap=kvi_rmem_post): the library carries no test hook. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvclient.h"
#include "rmem.h"

int __real_kvi_rmem_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie);
int __wrap_kvi_rmem_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie);

static int armed, stop_sig = SIGKILL;
static unsigned posts, stop_at;

int __wrap_kvi_rmem_post(struct kvi_rmem *rm, const struct kvi_rop *ops, unsigned n, uint64_t cookie)
{
	int rc = __real_kvi_rmem_post(rm, ops, n, cookie);

	if (armed && rc == 0 && ++posts == stop_at) {
		printf("STOP %u\n", posts);
		fflush(stdout);
		raise(stop_sig); /* as if killed (or stopped) the moment the doorbell rang */
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct kvc_opts o;
	char err[400];
	kvc_t *h;
	int rc;

	if (argc < 5 || (strcmp(argv[3], "put") && strcmp(argv[3], "delete")) || atoi(argv[4]) < 1) {
		fprintf(stderr, "usage: kill_worker HOST:PORT KEY put|delete N [CACHE]\n");
		return 2;
	}
	kvc_opts_init(&o);
	o.server = argv[1];
	o.depth = 1;
	o.cache_entries = argc > 5 ? (unsigned)atoi(argv[5]) : 1024;
	if (argc > 6 && strcmp(argv[6], "stop") == 0)
		stop_sig = SIGSTOP;
	o.track_access = 0; /* no access marks riding in the doorbells counted */
	if ((rc = kvc_create(&o, &h, err, sizeof(err))) != 0) {
		fprintf(stderr, "kill_worker: %s\n", err);
		return 1;
	}
	/* On a loaded guest the lease may run out between the join and this
	 * first write (it is not what the callers measure): the handle rejoins
	 * on its next call, so try again a few times. */
	for (int tries = 0;; tries++) {
		rc = kvc_put(h, argv[2], strlen(argv[2]), "acked", 5, 0);
		if (tries >= 10 || (rc != KVC_EFENCED && rc != KVC_ETIMEDOUT && rc != KVC_ESERVERGONE))
			break;
		fprintf(stderr, "kill_worker: first put: %s, again\n", kvc_strerror(rc));
	}
	if (rc) {
		fprintf(stderr, "kill_worker: first put: %s\n", kvc_strerror(rc));
		kvc_destroy(h);
		return 1;
	}
	printf("ACKED\n");
	fflush(stdout);
	stop_at = (unsigned)atoi(argv[4]);
	armed = 1;
	if (strcmp(argv[3], "put") == 0)
		rc = kvc_put(h, argv[2], strlen(argv[2]), "doomed", 6, 0);
	else
		rc = kvc_delete(h, argv[2], strlen(argv[2]));
	armed = 0;
	printf("DONE %s\n", kvc_err_name(rc));
	if (stop_sig == SIGSTOP) {
		struct kvc_stats st;

		rc = kvc_put(h, argv[2], strlen(argv[2]), "resumed", 7, 0);
		kvc_get_stats(h, &st);
		printf("AFTER %s %llu\n", kvc_err_name(rc), (unsigned long long)st.rejoins);
	}
	kvc_destroy(h);
	return 0;
}
