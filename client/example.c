/* A small libkvclient program to copy: connect, PUT, GET, DELETE, then a batch
 * of asynchronous GETs kept in flight together.
 *
 *   kvclient_example HOST[:PORT] */
#include <stdio.h>
#include <string.h>

#include <kvclient.h>

int main(int argc, char **argv)
{
	struct kvc_opts o;
	struct kvc_op ops[8], *done[8];
	char err[400], buf[64], keys[8][16], vals[8][32] = { { 0 } };
	size_t len = 0;
	unsigned finished = 0;
	kvc_t *h;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s HOST[:PORT]\n", argv[0]);
		return 2;
	}
	kvc_opts_init(&o);
	o.server = argv[1];
	rc = kvc_create(&o, &h, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "connect: %s\n", err);
		return 1;
	}

	/* Blocking calls. */
	rc = kvc_put(h, "greeting", 8, "hello", 5, 60000 /* milliseconds to live */);
	if (rc == 0)
		rc = kvc_get(h, "greeting", 8, buf, sizeof(buf), &len);
	if (rc) {
		fprintf(stderr, "put/get: %s\n", kvc_strerror(rc));
		kvc_destroy(h);
		return 1;
	}
	printf("greeting = %.*s\n", (int)len, buf);

	/* Asynchronous: submit several, then collect them as they complete.
	 * (Blocking calls need an idle handle, so the PUTs come first.) */
	for (int i = 0; i < 8; i++) {
		snprintf(keys[i], sizeof(keys[i]), "item-%d", i);
		rc = kvc_put(h, keys[i], strlen(keys[i]), keys[i], strlen(keys[i]), 0);
		if (rc)
			fprintf(stderr, "put %s: %s\n", keys[i], kvc_strerror(rc));
	}
	for (int i = 0; i < 8; i++) {
		ops[i] = (struct kvc_op){ .type = KVC_OP_GET, .key = keys[i], .key_len = strlen(keys[i]),
					  .buf = vals[i], .buf_len = sizeof(vals[i]) };
		rc = kvc_submit(h, &ops[i]);
		if (rc)
			fprintf(stderr, "submit %s: %s\n", keys[i], kvc_strerror(rc));
	}
	while (kvc_inflight(h) > 0) {
		int n = kvc_poll(h, done, 8, 1000);

		if (n < 0) {
			fprintf(stderr, "poll: %s\n", kvc_strerror(n));
			break;
		}
		for (int i = 0; i < n; i++, finished++)
			printf("%.*s -> %s\n", (int)done[i]->key_len, (const char *)done[i]->key,
			       done[i]->status ? kvc_strerror(done[i]->status) : (const char *)done[i]->buf);
	}
	printf("%u asynchronous GETs completed\n", finished);

	rc = kvc_delete(h, "greeting", 8);
	printf("delete greeting: %s\n", rc ? kvc_strerror(rc) : "done");
	kvc_destroy(h);
	return 0;
}
