#define _GNU_SOURCE /* secure_getenv */
/* The public handle (cluster.h): creating it from kvc_opts (the server list
 * given, in KVC_SERVERS or in the list file), destroying it, and the handles
 * over given transports that tests and local:// benchmarks use. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "cluster.h"
#include "cluster_list.h"
#include "cluster_member.h"
#include "cluster_route.h"
#include "dial.h"
#include "engine.h"

static void handle_free(kvc_t *h)
{
	free(h->device);
	free(h->secret_file);
	free(h->list_file);
	free(h);
}

/* list_file: the list file in use, or NULL. */
static kvc_t *handle_new(const struct kvc_opts *o, const char *list_file)
{
	kvc_t *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->o = *o;
	h->o.server = h->o.servers_file = NULL;
	h->o.device = h->o.secret_file = NULL;
	if ((o->device && !(h->device = strdup(o->device))) ||
	    (o->secret_file && !(h->secret_file = strdup(o->secret_file))) ||
	    (list_file && !(h->list_file = strdup(list_file)))) {
		handle_free(h);
		return NULL;
	}
	h->o.device = h->device;
	h->o.secret_file = h->secret_file;
	if (h->o.retry_timeout_ms <= 0)
		h->o.retry_timeout_ms = 2000;
	h->next_return = UINT64_MAX;
	return h;
}

/* One step of each join under way (started if not yet): how many members
 * are joined now. The first failure's code and line go to *first_rc, first. */
static unsigned step_all(kvc_t *h, char *first, size_t len, int *first_rc)
{
	uint64_t now = kvi_now_ns();
	unsigned joined = 0;

	for (unsigned i = 0; i < h->n; i++) {
		struct kvi_member *m = h->m[i];
		int rc;

		if (!m->c && (m->joining || m->join_at == 0)) {
			rc = kvi_member_join(h, m, now, first[0] ? NULL : first, len);
			if (rc < 0 && !*first_rc)
				*first_rc = rc; /* and m->join_at is set: not started again here */
		}
		joined += m->c != NULL;
	}
	return joined;
}

/* kvc_create's joins (cluster.h "Joining"): all started at once and driven
 * together, until each has ended -- or, once one has joined, until each of
 * those still under way has waited for its next answer twice as long as the
 * slowest answer a joined server gave (KVI_JOIN_GRACE_MIN_MS at least): a
 * server that answers as the others do is waited for, a silent one is left
 * to join after kvc_create returns. How many joined. */
static unsigned join_all(kvc_t *h, char *first, size_t len, int *first_rc)
{
	for (;;) {
		uint64_t grace = KVI_JOIN_GRACE_MIN_MS * 1000000ull, now;
		struct pollfd pf[KVI_RING_MAX];
		unsigned joined = step_all(h, first, len, first_rc), np = 0, waiting = 0;

		now = kvi_mono_ns();
		for (unsigned i = 0; i < h->n; i++)
			if (h->m[i]->c && h->m[i]->d && 2 * h->m[i]->d->answer_ns > grace)
				grace = 2 * h->m[i]->d->answer_ns;
		for (unsigned i = 0; i < h->n; i++) {
			const struct kvi_member *m = h->m[i];

			if (!m->joining || !m->d) /* kvc_create's members all have a dial */
				continue;
			pf[np++] = (struct pollfd){ .fd = kvi_dial_fd(m->d), .events = POLLIN };
			waiting += !joined || kvi_dial_quiet_ns(m->d, now) < grace;
		}
		if (waiting == 0)
			return joined;
		/* A join's own deadline ends it; a step is cheap. */
		(void)poll(pf, np, 1);
	}
}

int kvc_create(const struct kvc_opts *o, kvc_t **out, char *err, size_t errlen)
{
	struct kvi_list_entry e[KVI_RING_MAX];
	const char *list, *file;
	char *text = NULL, first[640] = "";
	int rc, first_rc = 0;
	unsigned ne, joined;
	uint64_t now = kvi_now_ns();
	kvc_t *h;

	if (!out)
		return KVC_EINVAL;
	*out = NULL;
	if (!o || o->depth == 0 || o->depth > KVI_RMEM_MAX_INFLIGHT || o->connect_timeout_ms <= 0 ||
	    o->op_timeout_ms <= 0) {
		kvi_set_err(err, errlen, "invalid options: depth must be 1..64 and timeouts positive");
		return KVC_EINVAL;
	}
	if (o->busy_poll_us < -1 || o->busy_poll_us > 1000000) {
		kvi_set_err(err, errlen, "invalid options: busy_poll_us must be -1 (never sleep) or 0..1000000");
		return KVC_EINVAL;
	}
	file = o->servers_file ? o->servers_file : secure_getenv("KVC_SERVERS_FILE");
	if (file && !*file)
		file = NULL;
	list = o->server ? o->server : secure_getenv("KVC_SERVERS");
	if (!list && file) {
		text = kvi_list_read_file(file, err, errlen);
		if (!text)
			return KVC_EINVAL;
		list = text;
	}
	if (!list) {
		kvi_set_err(err, errlen, "no server given: set kvc_opts.server (or KVC_SERVERS) to HOST[:PORT][,...]");
		return KVC_EINVAL;
	}
	rc = kvi_list_parse(list, o, e, &ne, err, errlen);
	free(text);
	if (rc)
		return rc;
	h = handle_new(o, file);
	if (!h) {
		kvi_list_free_entries(e, ne);
		kvi_set_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	h->single = ne == 1 && !h->list_file && o->server_failure_limit == 0;
	for (unsigned i = 0; i < ne; i++) {
		struct kvi_member *m = calloc(1, sizeof(*m));

		if (!m) {
			kvi_list_free_entries(e + i, ne - i);
			kvc_destroy(h);
			kvi_set_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
		m->d = e[i].d;
		m->weight = e[i].weight;
		snprintf(m->name, sizeof(m->name), "%s", m->d->name);
		m->name_hash = kvi_ring_name_hash(m->name);
		h->m[h->n++] = m;
	}
	joined = join_all(h, first, sizeof(first), &first_rc);
	/* One server: it must answer, as with a single address. Several: one
	 * is enough; the others go on joining, or are joined again when their
	 * keys are used. */
	if (joined == 0) {
		kvi_set_err(err, errlen, first);
		kvc_destroy(h);
		return first_rc;
	}
	if (h->list_file) {
		struct stat sb;

		h->file_checked = now;
		if (stat(h->list_file, &sb) == 0) {
			h->file_ino = sb.st_ino;
			h->file_size = sb.st_size;
			h->file_mtime = sb.st_mtim;
		}
	}
	kvi_route_rebuild(h);
	*out = h;
	return 0;
}

void kvc_destroy(kvc_t *h)
{
	if (!h)
		return;
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		kvi_member_free(h, h->m[i]);
	handle_free(h);
}

/* ---- handles over given transports (tests, local:// benchmarks) -------- */

int kvi_client_open(struct kvi_rmem *rm, const struct kvc_opts *o, kvc_t **out)
{
	struct kvi_member *m;
	kvc_t *h;
	int rc;

	*out = NULL;
	h = handle_new(o, NULL);
	m = calloc(1, sizeof(*m));
	if (!h || !m) {
		if (h)
			handle_free(h);
		free(m);
		kvi_rmem_destroy(rm);
		return KVC_ENOMEM;
	}
	rc = kvi_conn_open(rm, o, &m->c);
	if (rc) {
		handle_free(h);
		free(m);
		return rc;
	}
	snprintf(m->name, sizeof(m->name), "local");
	m->weight = 1;
	h->m[h->n++] = m;
	kvi_route_rebuild(h);
	*out = h;
	return 0;
}

void kvi_client_set_dial(kvc_t *h, kvi_dial_fn dial, void *arg, void (*free_arg)(void *arg))
{
	kvi_conn_set_dial(h->m[0]->c, dial, arg, free_arg);
}

struct kvi_conn *kvi_client_conn(kvc_t *h, unsigned i)
{
	return i < h->n ? h->m[i]->c : NULL;
}

int kvi_client_new(const struct kvc_opts *o, kvc_t **out)
{
	*out = handle_new(o, NULL);
	if (!*out)
		return KVC_ENOMEM;
	(*out)->many = 1;
	return 0;
}

int kvi_client_add(kvc_t *h, const char *name, uint32_t weight, kvi_dial_fn dial, void *arg,
		   void (*free_arg)(void *arg))
{
	struct kvi_member *m;

	if (h->n + h->ndrain >= KVI_RING_MAX || strlen(name) >= sizeof(m->name)) {
		if (free_arg)
			free_arg(arg);
		return KVC_EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		if (free_arg)
			free_arg(arg);
		return KVC_ENOMEM;
	}
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->name_hash = kvi_ring_name_hash(name);
	m->weight = weight ? weight : 1;
	m->dial = dial;
	m->dial_arg = arg;
	m->dial_free = free_arg;
	/* Draining members sit after the list: keep them there. */
	if (h->ndrain)
		h->m[h->n + h->ndrain] = h->m[h->n];
	h->m[h->n++] = m;
	(void)kvi_member_join(h, m, kvi_now_ns(), NULL, 0); /* started: "Joining" */
	kvi_route_rebuild(h);
	return 0;
}
