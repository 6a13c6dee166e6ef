/* Threaded data-path scenario: several clients hammer a small key set through
 * the real client code and the real server core, over the local transport
 * (which moves 8-byte words atomically, so concurrent READs and WRITEs really
 * tear as they would on a NIC). Values encode writer and sequence number. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dpath_env.h"
#include "kvclient_errors.h"
#include "scenarios.h"

#define THREADS 4
#define OPS 3000
#define SHARED 6
#define OWN 4

struct hammer {
	pthread_t t;
	struct kvt_env *env;
	unsigned id;
	uint64_t rng;
	uint64_t last_acked[OWN];          /* own keys: last acknowledged sequence */
	uint64_t seen[SHARED][THREADS + 1]; /* shared keys: highest seq seen per writer */
	uint64_t ops_ok, lock_conflicts;
	const char *why;
};

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int parse(const char *v, size_t len, unsigned *w, unsigned long long *seq)
{
	char buf[40];

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, v, len);
	buf[len] = '\0';
	return sscanf(buf, "w%u:%llu", w, seq) == 2 ? 0 : -1;
}

static void *hammer_thread(void *arg)
{
	struct hammer *hm = arg;
	uint64_t seq = 0;
	kvc_t *h;
	char k[32], v[40], got[64];

	if (kvt_env_client(hm->env, NULL, 256, 4, &h)) {
		hm->why = "cannot open a client";
		return NULL;
	}
	for (int i = 0; i < OPS && !hm->why; i++) {
		unsigned r = (unsigned)(next_rand(&hm->rng) % 10);
		unsigned key = (unsigned)(next_rand(&hm->rng) >> 8);
		size_t len = 0;
		unsigned w;
		unsigned long long s;
		int rc;

		if (r < 3) { /* PUT a shared key */
			snprintf(k, sizeof(k), "shared-%u", key % SHARED);
			snprintf(v, sizeof(v), "w%u:%llu", hm->id, (unsigned long long)++seq);
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
		} else if (r < 5) { /* PUT an own key */
			snprintf(k, sizeof(k), "own-%u-%u", hm->id, key % OWN);
			snprintf(v, sizeof(v), "w%u:%llu", hm->id, (unsigned long long)++seq);
			rc = kvc_put(h, k, strlen(k), v, strlen(v), 0);
			if (rc == 0)
				hm->last_acked[key % OWN] = seq;
		} else if (r < 6) { /* an own temporary key: put, delete, must be gone */
			snprintf(k, sizeof(k), "tmp-%u", hm->id);
			rc = kvc_put(h, k, strlen(k), "t", 1, 0);
			if (rc == 0)
				rc = kvc_delete(h, k, strlen(k));
			if (rc == 0 && kvc_get(h, k, strlen(k), got, sizeof(got), &len) != KVC_ENOTFOUND)
				hm->why = "a deleted key was still readable by its deleter";
		} else if (r < 8) { /* GET a shared key: per writer, sequences never go back */
			unsigned sk = key % SHARED;

			snprintf(k, sizeof(k), "shared-%u", sk);
			rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
			if (rc == 0) {
				if (parse(got, len, &w, &s) || w == 0 || w > THREADS)
					hm->why = "a GET returned a value nobody wrote";
				else if (s < hm->seen[sk][w])
					hm->why = "a writer's sequence went backwards on a shared key";
				else
					hm->seen[sk][w] = s;
			} else if (rc == KVC_ENOTFOUND) {
				rc = 0; /* not written yet */
			}
		} else { /* GET an own key: read-your-writes */
			unsigned ok = key % OWN;

			snprintf(k, sizeof(k), "own-%u-%u", hm->id, ok);
			rc = kvc_get(h, k, strlen(k), got, sizeof(got), &len);
			if (rc == KVC_ENOTFOUND && hm->last_acked[ok] == 0) {
				rc = 0;
			} else if (rc == 0 && (parse(got, len, &w, &s) || w != hm->id || s != hm->last_acked[ok])) {
				hm->why = "an own key did not hold its last acknowledged value";
			}
		}
		if (rc && !hm->why) {
			static __thread char msg[96];

			snprintf(msg, sizeof(msg), "unexpected %s", kvc_err_name(rc));
			hm->why = msg;
		}
		hm->ops_ok++;
	}
	struct kvc_stats st;
	kvc_get_stats(h, &st);
	hm->lock_conflicts = st.lock_conflicts;
	kvc_destroy(h);
	return NULL;
}

const char *dpath_hammer_keeps_per_key_order_and_acked_values(void)
{
	static struct hammer hm[THREADS];
	struct kvt_env env;
	const char *why = NULL;
	kvc_t *check;
	char k[32], got[64];

	if (kvt_env_init(&env, 32, 0, 64))
		return "cannot create the environment";
	for (unsigned i = 0; i < THREADS; i++) {
		memset(&hm[i], 0, sizeof(hm[i]));
		hm[i].env = &env;
		hm[i].id = i + 1;
		hm[i].rng = 0x9e3779b97f4a7c15ull * (i + 1);
		if (pthread_create(&hm[i].t, NULL, hammer_thread, &hm[i]))
			return "cannot start a thread";
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(hm[i].t, NULL);
		if (hm[i].why && !why)
			why = hm[i].why;
	}
	/* Every acknowledged own key ends with its writer's last acknowledged value. */
	if (!why && kvt_env_client(&env, NULL, 0, 4, &check) == 0) {
		for (unsigned t = 0; t < THREADS && !why; t++) {
			for (unsigned i = 0; i < OWN && !why; i++) {
				size_t len = 0;
				unsigned w;
				unsigned long long s;
				int rc;

				if (hm[t].last_acked[i] == 0)
					continue;
				snprintf(k, sizeof(k), "own-%u-%u", t + 1, i);
				rc = kvc_get(check, k, strlen(k), got, sizeof(got), &len);
				if (rc)
					why = "an acknowledged key is missing";
				else if (parse(got, len, &w, &s) || w != t + 1 || s != hm[t].last_acked[i])
					why = "an own key ended with a value other than its last acknowledged one";
			}
		}
		kvc_destroy(check);
	} else if (!why) {
		why = "cannot open the checking client";
	}
	kvt_env_fini(&env);
	return why;
}
