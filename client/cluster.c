#define _GNU_SOURCE /* secure_getenv */
/* The public handle: one connection (kvi_conn) per server of its list, each
 * key routed to one server by rendezvous hashing (ring.h).
 *
 * Ownership: the handle owns its members; a member owns its dial (where the
 * server is) and its connection, which rejoins through that dial by itself
 * (lease.c "Rejoin"). A member that left the list (kvc_set_servers, the
 * list file) takes no new operation and is closed once the operations it
 * has in flight are returned ("draining").
 *
 * With one server, no list file and no auto-eject, every call goes straight
 * to the connection: one server costs nothing for the others' sake. With
 * several, kvc_poll polls each connection in turn without blocking, and
 * waits as kvi_rmem_wait does over one: it polls all of them for
 * busy_poll_us, then sleeps on all of them at once (kvi_conns_block). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "cluster.h"
#include "conn.h"
#include "dial.h"
#include "engine.h"
#include "log.h"
#include "ring.h"
#include "stats.h"

#define REDIAL_CAP_MS 250u   /* a join attempt, with several servers: it holds the caller */
#define JOIN_MIN_MS 10u      /* back-off of the joins of a member that has no connection */
#define JOIN_MAX_MS 1000u
#define FILE_CHECK_NS 1000000000ull /* the list file is looked at once a second */
#define FILE_MAX 65536       /* bytes of list file read */
#define WEIGHT_MAX 1000u
#define IDLE_NS 200000ull    /* while waiting: let connections notice a vanished peer */
#define SLEEP_MAX_MS 10      /* one sleep of kvc_poll over several servers */

struct member {
	char name[272];         /* "host:port": in the list, and hashed */
	struct kvi_dial *d;     /* where it is (verbs); NULL: joined through dial below */
	kvi_dial_fn dial;       /* tests: a given transport (kvi_client_add) */
	void *dial_arg;
	void (*dial_free)(void *arg);
	uint32_t weight;
	uint64_t name_hash;
	struct kvi_conn *c;     /* NULL: not joined (a join failed); joined again at a key's use */
	uint64_t join_at;       /* ns: the next join attempt while c is NULL */
	uint32_t backoff_ms;
	unsigned fails;         /* failures in a row */
	uint64_t ejected_until; /* ns; 0: in the hash */
	unsigned inflight;      /* this handle's operations on c not yet returned (several servers) */
};

struct kvc {
	struct kvc_opts o;  /* device and secret_file point at our copies below */
	char *device, *secret_file; /* for the dials of servers added later */
	char *list_file;    /* kvc_opts.servers_file or KVC_SERVERS_FILE; NULL: none */
	struct member *m[2 * KVI_RING_MAX]; /* [0, n): the list; [n, n + ndrain): draining */
	unsigned n, ndrain;
	int single;         /* straight to m[0]->c */
	int many;           /* built by kvi_client_new (tests): never single */
	struct kvi_ring ring;
	uint64_t next_return; /* ns: when the first ejected member comes back; UINT64_MAX: none */
	unsigned inflight;  /* submitted, not yet returned by kvc_poll (several servers) */
	unsigned rr;        /* the member kvc_poll looks at first */
	struct kvc_stats gone; /* statistics of closed connections */
	/* The list file as last read: when we looked, and what it was. */
	uint64_t file_checked;
	struct timespec file_mtime;
	off_t file_size;
	ino_t file_ino;
};

static void set_err(char *err, size_t len, const char *msg)
{
	if (err && len)
		snprintf(err, len, "%s", msg);
}

static const char *member_name(const struct member *m)
{
	return m->name;
}

/* ---- the server list ------------------------------------------------------ */

struct entry {
	struct kvi_dial *d;
	uint32_t weight;
};

static void free_entries(struct entry *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(e[i].d);
}

/* "ADDR[=WEIGHT]" items separated by commas, blanks or newlines; '#' to the
 * end of the line is a comment. 0 with *n entries, or KVC_EINVAL/KVC_ENOMEM
 * and one line in err (nothing allocated is left). */
static int parse_list(const char *s, const struct kvc_opts *o, struct entry *e, unsigned *n, char *err,
		      size_t errlen)
{
	const char *tok = s, *end = s;
	char msg[400];
	int rc;

	*n = 0;
	while (*s) {
		const char *eq;
		unsigned long w = 1;

		if (*s == '#') {
			while (*s && *s != '\n')
				s++;
			continue;
		}
		if (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
			s++;
			continue;
		}
		tok = s;
		while (*s && *s != ',' && *s != ' ' && *s != '\t' && *s != '\n' && *s != '\r' && *s != '#')
			s++;
		end = s;
		eq = memchr(tok, '=', (size_t)(end - tok));
		if (eq) {
			char wbuf[16], *we;

			if (end - eq - 1 <= 0 || end - eq - 1 >= (long)sizeof(wbuf)) {
				rc = KVC_EINVAL;
				goto bad_weight;
			}
			memcpy(wbuf, eq + 1, (size_t)(end - eq - 1));
			wbuf[end - eq - 1] = '\0';
			errno = 0;
			w = strtoul(wbuf, &we, 10);
			if (errno || *we || wbuf[0] == '-' || wbuf[0] == '+' || w < 1 || w > WEIGHT_MAX) {
				rc = KVC_EINVAL;
				goto bad_weight;
			}
		}
		if (*n >= KVI_RING_MAX) {
			snprintf(msg, sizeof(msg), "invalid server list: more than %u servers", KVI_RING_MAX);
			set_err(err, errlen, msg);
			rc = KVC_EINVAL;
			goto fail;
		}
		rc = kvi_dial_new(tok, (size_t)((eq ? eq : end) - tok), o, &e[*n].d, err, errlen);
		if (rc)
			goto fail;
		e[*n].weight = (uint32_t)w;
		for (unsigned i = 0; i < *n; i++)
			if (strcmp(e[i].d->name, e[*n].d->name) == 0) {
				snprintf(msg, sizeof(msg), "invalid server list: %s is listed twice", e[i].d->name);
				set_err(err, errlen, msg);
				free(e[*n].d);
				rc = KVC_EINVAL;
				goto fail;
			}
		(*n)++;
	}
	if (*n == 0) {
		set_err(err, errlen, "invalid server list: no server in it (expected HOST[:PORT][=WEIGHT],...)");
		return KVC_EINVAL;
	}
	return 0;
bad_weight:
	snprintf(msg, sizeof(msg), "invalid server list item '%.*s': the weight after '=' must be 1..%u",
		 (int)(end - tok > 256 ? 256 : end - tok), tok, WEIGHT_MAX);
	set_err(err, errlen, msg);
fail:
	free_entries(e, *n);
	*n = 0;
	return rc;
}

/* The file's contents (NUL-terminated, to be freed), or NULL with err set. */
static char *read_list_file(const char *path, char *err, size_t errlen)
{
	char msg[600];
	FILE *f = fopen(path, "r");
	char *buf;
	size_t got;

	if (!f) {
		snprintf(msg, sizeof(msg), "server list file %s: %s", path, strerror(errno));
		set_err(err, errlen, msg);
		return NULL;
	}
	buf = malloc(FILE_MAX + 1);
	if (!buf) {
		fclose(f);
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	got = fread(buf, 1, FILE_MAX + 1, f);
	fclose(f);
	if (got > FILE_MAX) {
		snprintf(msg, sizeof(msg), "server list file %s: larger than %d bytes", path, FILE_MAX);
		set_err(err, errlen, msg);
		free(buf);
		return NULL;
	}
	buf[got] = '\0';
	return buf;
}

/* ---- members ---------------------------------------------------------------- */

static void fold_stats(struct kvc_stats *acc, const struct kvc_stats *s)
{
	uint64_t *a = (uint64_t *)acc;
	const uint64_t *b = (const uint64_t *)s;

	_Static_assert(sizeof(struct kvc_stats) % sizeof(uint64_t) == 0, "kvc_stats is counters only");
	for (size_t i = 0; i < sizeof(*s) / sizeof(uint64_t); i++)
		a[i] += b[i];
}

static void member_free(kvc_t *h, struct member *m)
{
	if (m->c) {
		struct kvc_stats s;

		kvi_conn_get_stats(m->c, &s);
		fold_stats(&h->gone, &s);
		kvi_conn_destroy(m->c);
	}
	if (m->dial_free)
		m->dial_free(m->dial_arg);
	free(m->d);
	free(m);
}

static int redial_ms(const kvc_t *h)
{
	return h->single ? 0 : (int)REDIAL_CAP_MS;
}

/* Refusals that retrying cannot cure: passed on as they are, where other
 * join failures fail an operation fast with KVC_ESERVERGONE. */
static int incurable(int rc)
{
	return rc == KVC_EAUTH || rc == KVC_ENOAUTH || rc == KVC_EPROTO || rc == KVC_ENOMEM || rc == KVC_EINVAL ||
	       rc == KVC_ENODEV || rc == KVC_ENOTSUP || rc == KVC_ESTALE || rc == KVC_EREPLAY;
}

/* Join m now (c is NULL): 0, or the join's code (one line in err). */
static int join(kvc_t *h, struct member *m, uint64_t now, int timeout_ms, char *err, size_t errlen)
{
	char msg[640];
	int rc;

	if (m->d) {
		m->d->redial_ms = redial_ms(h);
		rc = kvi_dial_open(m->d, &h->o, timeout_ms, &m->c, msg, sizeof(msg));
	} else {
		struct kvi_rmem *rm;

		rc = m->dial ? m->dial(m->dial_arg, timeout_ms, &rm) : KVC_ESERVERGONE;
		if (rc == 0)
			rc = kvi_conn_open(rm, &h->o, &m->c);
		if (rc == 0)
			kvi_conn_set_dial(m->c, m->dial, m->dial_arg, NULL);
		snprintf(msg, sizeof(msg), "server %s: %s", m->name, kvc_strerror(rc));
	}
	if (rc == 0) {
		m->backoff_ms = 0;
		kvi_info("joined server %s", m->name);
		return 0;
	}
	set_err(err, errlen, msg);
	kvi_info("joining server %s: %s", m->name, msg);
	m->backoff_ms = m->backoff_ms ? m->backoff_ms * 2 : JOIN_MIN_MS;
	if (m->backoff_ms > JOIN_MAX_MS)
		m->backoff_ms = JOIN_MAX_MS;
	m->join_at = now + (uint64_t)m->backoff_ms * 1000000u;
	return rc;
}

static void rebuild_ring(kvc_t *h)
{
	kvi_ring_clear(&h->ring);
	h->next_return = UINT64_MAX;
	for (unsigned i = 0; i < h->n; i++) {
		struct member *m = h->m[i];

		if (m->ejected_until) {
			if (m->ejected_until < h->next_return)
				h->next_return = m->ejected_until;
			continue;
		}
		(void)kvi_ring_add(&h->ring, i, m->name_hash, m->weight);
	}
	h->single = h->n == 1 && h->ndrain == 0 && !h->many && !h->list_file && h->o.server_failure_limit == 0 &&
		    h->m[0]->c != NULL;
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		if (h->m[i]->d)
			h->m[i]->d->redial_ms = redial_ms(h);
}

/* Ejected members whose time is up take their keys back. libmemcached's
 * retry_timeout: one more failure ejects the member again. */
static void return_ejected(kvc_t *h, uint64_t now)
{
	if (now < h->next_return)
		return;
	for (unsigned i = 0; i < h->n; i++) {
		struct member *m = h->m[i];

		if (m->ejected_until && m->ejected_until <= now) {
			m->ejected_until = 0;
			m->fails = h->o.server_failure_limit ? h->o.server_failure_limit - 1 : 0;
			kvi_info("server %s takes its keys back (retry after ejection)", member_name(m));
		}
	}
	rebuild_ring(h);
}

/* The outcome of one of m's operations (or joins). */
static void account(kvc_t *h, struct member *m, int status, uint64_t now)
{
	if (status != KVC_ESERVERGONE && status != KVC_EUNREACHABLE && status != KVC_ETIMEDOUT) {
		if (status == 0 || status == KVC_ENOTFOUND)
			m->fails = 0;
		return;
	}
	m->fails++;
	if (h->o.server_failure_limit && m->fails >= h->o.server_failure_limit && !m->ejected_until) {
		m->ejected_until = now + (uint64_t)h->o.retry_timeout_ms * 1000000u;
		kvi_warn("server %s ejected after %u failures in a row: its keys go to the other servers for %d ms",
			 member_name(m), m->fails, h->o.retry_timeout_ms);
		rebuild_ring(h);
	}
}

/* Members that left the list and have nothing in flight are closed. */
static void reap_drained(kvc_t *h)
{
	for (unsigned i = h->n; i < h->n + h->ndrain;) {
		struct member *m = h->m[i];

		if (m->inflight) {
			i++;
			continue;
		}
		member_free(h, m);
		h->m[i] = h->m[h->n + h->ndrain - 1];
		h->ndrain--;
	}
}

/* Make e (parsed, owned by us from now: its dials are taken or freed) the
 * list. New members are joined now; a member kept keeps its connection. */
static int apply_list(kvc_t *h, struct entry *e, unsigned ne)
{
	struct member *next[KVI_RING_MAX];
	uint64_t now = kvi_now_ns();
	unsigned leaving = 0;

	/* h->m holds the list and the members still draining: the new list and
	 * everything that would drain must fit, or nothing changes (a list
	 * changed again and again while servers drain is refused until they
	 * have). */
	reap_drained(h);
	for (unsigned j = 0; j < h->n + h->ndrain; j++) {
		unsigned i = 0;

		while (i < ne && strcmp(h->m[j]->name, e[i].d->name) != 0)
			i++;
		leaving += i == ne;
	}
	if (ne + leaving > sizeof(h->m) / sizeof(h->m[0])) {
		free_entries(e, ne);
		return KVC_EBUSY;
	}
	if (h->single) { /* its count was not kept: start now */
		h->inflight = h->m[0]->inflight = kvi_conn_inflight(h->m[0]->c);
		h->single = 0;
	}
	for (unsigned i = 0; i < ne; i++) {
		struct member *m = NULL;

		for (unsigned j = 0; j < h->n + h->ndrain && !m; j++)
			if (h->m[j] && strcmp(h->m[j]->name, e[i].d->name) == 0) {
				m = h->m[j];
				h->m[j] = NULL; /* taken */
			}
		if (m) {
			free(e[i].d);
		} else {
			m = calloc(1, sizeof(*m));
			if (!m) { /* it stays out of the list: logged, like a bad line */
				kvi_err("out of memory adding server %s", e[i].d->name);
				free(e[i].d);
				next[i] = NULL;
				continue;
			}
			m->d = e[i].d;
			snprintf(m->name, sizeof(m->name), "%s", m->d->name);
			m->name_hash = kvi_ring_name_hash(m->name);
			m->d->redial_ms = (int)REDIAL_CAP_MS;
			if (join(h, m, now, h->o.connect_timeout_ms, NULL, 0) == 0)
				kvi_info("server %s added", m->d->name);
		}
		m->weight = e[i].weight;
		next[i] = m;
	}
	/* What is left of the old list and the draining ones drains. */
	{
		struct member *drain[2 * KVI_RING_MAX];
		unsigned nd = 0, n = 0;

		for (unsigned j = 0; j < h->n + h->ndrain; j++)
			if (h->m[j])
				drain[nd++] = h->m[j];
		for (unsigned i = 0; i < ne; i++)
			if (next[i])
				h->m[n++] = next[i];
		h->n = n;
		for (unsigned j = 0; j < nd; j++) {
			drain[j]->ejected_until = 0;
			h->m[n + j] = drain[j];
		}
		h->ndrain = nd;
	}
	reap_drained(h);
	rebuild_ring(h);
	return 0;
}

int kvc_set_servers(kvc_t *h, const char *servers, char *err, size_t errlen)
{
	struct entry e[KVI_RING_MAX];
	unsigned ne;
	int rc;

	if (!h || !servers) {
		set_err(err, errlen, "invalid argument: no handle or no server list");
		return KVC_EINVAL;
	}
	rc = parse_list(servers, &h->o, e, &ne, err, errlen);
	if (rc)
		return rc;
	rc = apply_list(h, e, ne);
	if (rc)
		set_err(err, errlen, "too many servers of earlier lists still finish their operations: poll, then "
				     "set the list again");
	return rc;
}

/* The list file changed since we last read it? Then apply it (once a second
 * at most: one stat). */
static void check_list_file(kvc_t *h, uint64_t now)
{
	struct entry e[KVI_RING_MAX];
	char err[600], *text;
	struct stat sb;
	unsigned ne;

	if (!h->list_file || now - h->file_checked < FILE_CHECK_NS)
		return;
	h->file_checked = now;
	if (stat(h->list_file, &sb) != 0)
		return; /* being replaced, or gone: keep the list we have */
	if (sb.st_ino == h->file_ino && sb.st_size == h->file_size && sb.st_mtim.tv_sec == h->file_mtime.tv_sec &&
	    sb.st_mtim.tv_nsec == h->file_mtime.tv_nsec)
		return;
	h->file_ino = sb.st_ino;
	h->file_size = sb.st_size;
	h->file_mtime = sb.st_mtim;
	text = read_list_file(h->list_file, err, sizeof(err));
	if (!text) {
		kvi_warn("%s; keeping the current list", err);
		return;
	}
	if (parse_list(text, &h->o, e, &ne, err, sizeof(err)) == 0) {
		kvi_info("server list file %s changed: %u servers", h->list_file, ne);
		if (apply_list(h, e, ne)) {
			kvi_warn("server list file %s: too many servers of earlier lists still draining; "
				 "trying again in a second", h->list_file);
			h->file_ino = 0; /* read it again at the next look */
		}
	} else {
		kvi_warn("server list file %s: %s; keeping the current list", h->list_file, err);
	}
	free(text);
}

/* ---- creating and destroying -------------------------------------------- */

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

int kvc_create(const struct kvc_opts *o, kvc_t **out, char *err, size_t errlen)
{
	struct entry e[KVI_RING_MAX];
	const char *list, *file;
	char *text = NULL, first[640] = "";
	int rc, first_rc = 0;
	unsigned ne, joined = 0;
	uint64_t now = kvi_now_ns();
	kvc_t *h;

	if (!out)
		return KVC_EINVAL;
	*out = NULL;
	if (!o || o->depth == 0 || o->depth > KVI_RMEM_MAX_INFLIGHT || o->connect_timeout_ms <= 0 ||
	    o->op_timeout_ms <= 0) {
		set_err(err, errlen, "invalid options: depth must be 1..64 and timeouts positive");
		return KVC_EINVAL;
	}
	if (o->busy_poll_us < -1 || o->busy_poll_us > 1000000) {
		set_err(err, errlen, "invalid options: busy_poll_us must be -1 (never sleep) or 0..1000000");
		return KVC_EINVAL;
	}
	file = o->servers_file ? o->servers_file : secure_getenv("KVC_SERVERS_FILE");
	if (file && !*file)
		file = NULL;
	list = o->server ? o->server : secure_getenv("KVC_SERVERS");
	if (!list && file) {
		text = read_list_file(file, err, errlen);
		if (!text)
			return KVC_EINVAL;
		list = text;
	}
	if (!list) {
		set_err(err, errlen, "no server given: set kvc_opts.server (or KVC_SERVERS) to HOST[:PORT][,...]");
		return KVC_EINVAL;
	}
	rc = parse_list(list, o, e, &ne, err, errlen);
	free(text);
	if (rc)
		return rc;
	h = handle_new(o, file);
	if (!h) {
		free_entries(e, ne);
		set_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	h->single = ne == 1 && !h->list_file && o->server_failure_limit == 0;
	for (unsigned i = 0; i < ne; i++) {
		struct member *m = calloc(1, sizeof(*m));

		if (!m) {
			free_entries(e + i, ne - i);
			kvc_destroy(h);
			set_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
		m->d = e[i].d;
		m->weight = e[i].weight;
		snprintf(m->name, sizeof(m->name), "%s", m->d->name);
		m->name_hash = kvi_ring_name_hash(m->name);
		h->m[h->n++] = m;
		rc = join(h, m, now, o->connect_timeout_ms, first[0] ? NULL : first, sizeof(first));
		if (rc == 0)
			joined++;
		else if (!first_rc)
			first_rc = rc;
	}
	/* One server: it must answer, as with a single address. Several: one
	 * is enough; the others are joined when their keys are used. */
	if (joined == 0) {
		set_err(err, errlen, first);
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
	rebuild_ring(h);
	*out = h;
	return 0;
}

void kvc_destroy(kvc_t *h)
{
	if (!h)
		return;
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		member_free(h, h->m[i]);
	handle_free(h);
}

/* ---- the asynchronous interface ---------------------------------------- */

int kvc_submit(kvc_t *h, struct kvc_op *op)
{
	struct member *m;
	uint64_t now;
	int i, rc;

	if (!h)
		return KVC_EINVAL;
	if (h->single)
		return kvi_conn_submit(h->m[0]->c, op);
	if (!op || (op->key_len && !op->key))
		return KVC_EINVAL;
	if (op->key_len == 0 || op->key_len > KVI_MAX_KEY)
		return KVC_EKEYSIZE;
	now = kvi_now_ns();
	check_list_file(h, now);
	return_ejected(h, now);
	if (h->inflight >= h->o.depth)
		return KVC_EAGAIN;
	i = kvi_ring_pick(&h->ring, kvi_ring_key_hash(op->key, op->key_len));
	if (i < 0)
		return KVC_ESERVERGONE; /* every server ejected */
	m = h->m[i];
	if (!m->c) {
		rc = now < m->join_at ? KVC_ESERVERGONE : join(h, m, now, (int)REDIAL_CAP_MS, NULL, 0);
		if (rc && !incurable(rc))
			rc = KVC_ESERVERGONE;
		if (rc) {
			account(h, m, rc, now);
			return rc;
		}
	}
	rc = kvi_conn_submit(m->c, op);
	if (rc == 0) {
		m->inflight++;
		h->inflight++;
	} else {
		account(h, m, rc, now);
	}
	return rc;
}

int kvc_submit_many(kvc_t *h, struct kvc_op *const *ops, unsigned n)
{
	unsigned started = 0;
	int why = 0;

	if (!h || (n && !ops))
		return KVC_EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!ops[i])
			return KVC_EINVAL;
	if (h->single) {
		started = kvi_conn_submit_many(h->m[0]->c, ops, n, &why);
	} else {
		/* Each key to its own server: one at a time. */
		while (started < n && (why = kvc_submit(h, ops[started])) == 0)
			started++;
	}
	if (started < n)
		ops[started]->status = why;
	return (int)started;
}

/* Sleep on every member's connection (kvi_conns_block) until the deadline,
 * at most SLEEP_MAX_MS at a time: an operation waiting on a timer (a backoff,
 * a resize) and the leases are looked after between sleeps. */
static int sleep_members(kvc_t *h, uint64_t now, uint64_t deadline)
{
	struct kvi_conn *cs[2 * KVI_RING_MAX];
	unsigned all = h->n + h->ndrain;

	if (now >= deadline)
		return 0;
	for (unsigned k = 0; k < all; k++)
		cs[k] = h->m[k]->c;
	return kvi_conns_block(cs, all, kvi_ms_until(now, deadline, SLEEP_MAX_MS));
}

int kvc_poll(kvc_t *h, struct kvc_op **done, unsigned max, int timeout_ms)
{
	uint64_t now, start, deadline, last_idle;
	unsigned spins = 0;
	int slept = 0;

	if (!h || !done || max == 0)
		return KVC_EINVAL;
	if (h->single)
		return kvi_conn_poll(h->m[0]->c, done, max, timeout_ms);
	now = start = last_idle = kvi_now_ns();
	deadline = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		unsigned got = 0, all = h->n + h->ndrain;

		/* Every connection once, idle ones included (their leases are
		 * renewed from here), starting with a different one each time so
		 * that a small max does not starve the last. */
		for (unsigned k = 0; k < all && got < max; k++) {
			struct member *m = h->m[(h->rr + k) % all];
			int r;

			if (!m->c)
				continue;
			r = kvi_conn_poll(m->c, done + got, max - got, 0);
			for (int j = 0; j < r; j++) {
				account(h, m, done[got + (unsigned)j]->status, now);
				m->inflight--;
				h->inflight--;
			}
			if (r > 0)
				got += (unsigned)r;
		}
		h->rr++;
		if (h->ndrain)
			reap_drained(h);
		if (got > 0 || h->inflight == 0 || now >= deadline) {
			check_list_file(h, now);
			return (int)got;
		}
		if (++spins % 64)
			continue;
		now = kvi_now_ns();
		if (now - last_idle >= IDLE_NS) {
			for (unsigned k = 0; k < all; k++)
				if (h->m[k]->c && h->m[k]->inflight)
					kvi_conn_idle(h->m[k]->c);
			if (!slept) /* polling only: let others run now and then */
				sched_yield();
			last_idle = now;
		}
		/* Polled for busy_poll_us: sleep until a completion, a control
		 * message or a departing peer on any member (as one connection's
		 * wait does, kvi_rmem_wait). */
		slept = h->o.busy_poll_us >= 0 && now - start >= (uint64_t)h->o.busy_poll_us * 1000u &&
			sleep_members(h, now, deadline);
		if (slept)
			now = kvi_now_ns();
	}
}

unsigned kvc_inflight(const kvc_t *h)
{
	return h->single ? kvi_conn_inflight(h->m[0]->c) : h->inflight;
}

size_t kvc_max_value(const kvc_t *h, size_t key_len)
{
	size_t best = 0;
	int any = 0;

	for (unsigned i = 0; i < h->n; i++)
		if (h->m[i]->c) {
			size_t v = kvi_conn_max_value(h->m[i]->c, key_len);

			best = !any || v < best ? v : best;
			any = 1;
		}
	return best;
}

/* ---- statistics and the list ---------------------------------------------- */

void kvc_get_stats(const kvc_t *h, struct kvc_stats *out)
{
	*out = h->gone;
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		if (h->m[i]->c) {
			struct kvc_stats s;

			kvi_conn_get_stats(h->m[i]->c, &s);
			fold_stats(out, &s);
		}
}

void kvc_reset_stats(kvc_t *h)
{
	memset(&h->gone, 0, sizeof(h->gone));
	for (unsigned i = 0; i < h->n + h->ndrain; i++)
		if (h->m[i]->c)
			kvi_conn_reset_stats(h->m[i]->c);
}

int kvc_server_stats_at(kvc_t *h, unsigned i, struct kvc_server_stats *out)
{
	if (!h || !out || i >= h->n)
		return KVC_EINVAL;
	if (!h->m[i]->c)
		return KVC_ESERVERGONE;
	return kvi_conn_server_stats(h->m[i]->c, out);
}

int kvc_server_stats(kvc_t *h, struct kvc_server_stats *out)
{
	int rc = KVC_ESERVERGONE, answered = 0;

	if (!h || !out)
		return KVC_EINVAL;
	if (h->single)
		return kvi_conn_server_stats(h->m[0]->c, out);
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < h->n; i++) {
		struct kvc_server_stats s;
		uint64_t *a = (uint64_t *)out;
		const uint64_t *b = (const uint64_t *)&s;
		uint64_t epoch = out->index_epoch, buckets = out->index_buckets;

		rc = kvc_server_stats_at(h, i, &s);
		if (rc)
			continue;
		answered++;
		for (size_t k = 0; k < sizeof(s) / sizeof(uint64_t); k++)
			a[k] += b[k];
		/* Not quantities: the largest. */
		out->index_epoch = epoch > s.index_epoch ? epoch : s.index_epoch;
		out->index_buckets = buckets > s.index_buckets ? buckets : s.index_buckets;
	}
	return answered ? 0 : rc;
}

unsigned kvc_server_count(const kvc_t *h)
{
	return h ? h->n : 0;
}

int kvc_server_info(const kvc_t *h, unsigned i, struct kvc_server_info *out)
{
	const struct member *m;
	struct kvc_stats s;

	if (!h || !out || i >= h->n)
		return KVC_EINVAL;
	m = h->m[i];
	memset(out, 0, sizeof(*out));
	out->name = member_name(m);
	out->weight = m->weight;
	out->failures = m->fails;
	out->state = m->ejected_until ? KVC_SERVER_EJECTED
		     : !m->c || kvi_conn_broken(m->c) ? KVC_SERVER_DOWN
						       : KVC_SERVER_UP;
	if (m->c) {
		kvi_conn_get_stats(m->c, &s);
		for (int k = 0; k < KVC_STAT_KINDS; k++)
			out->ops += s.ops[k];
	}
	return 0;
}

int kvc_key_server(const kvc_t *h, const void *key, size_t key_len)
{
	int i;

	if (!h || !key || key_len == 0 || key_len > KVI_MAX_KEY)
		return KVC_EINVAL;
	if (h->single)
		return 0;
	i = kvi_ring_pick(&h->ring, kvi_ring_key_hash(key, key_len));
	return i < 0 ? KVC_ESERVERGONE : i;
}

/* ---- handles over given transports (tests, local:// benchmarks) -------- */

int kvi_client_open(struct kvi_rmem *rm, const struct kvc_opts *o, kvc_t **out)
{
	struct member *m;
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
	rebuild_ring(h);
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
	struct member *m;

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
	(void)join(h, m, kvi_now_ns(), h->o.connect_timeout_ms, NULL, 0);
	rebuild_ring(h);
	return 0;
}
