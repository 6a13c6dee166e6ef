/* The handle's server list: parsing one ("ADDR[=WEIGHT],..."), reading the
 * list file, and making a changed list the handle's while it runs
 * (kvc_set_servers, the list file looked at from kvc_submit and kvc_poll).
 * A member kept keeps its connection; a new one is joined at once; one that
 * left drains (cluster.h) and is closed here once it has nothing in flight. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cluster.h"
#include "cluster_list.h"
#include "cluster_member.h"
#include "cluster_route.h"
#include "dial.h"
#include "engine.h"
#include "log.h"

#define FILE_CHECK_NS 1000000000ull /* the list file is looked at once a second */
#define FILE_MAX 65536       /* bytes of list file read */
#define WEIGHT_MAX 1000u

void kvi_list_free_entries(struct kvi_list_entry *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(e[i].d);
}

/* "ADDR[=WEIGHT]" items separated by commas, blanks or newlines; '#' to the
 * end of the line is a comment. 0 with *n entries, or KVC_EINVAL/KVC_ENOMEM
 * and one line in err (nothing allocated is left). */
int kvi_list_parse(const char *s, const struct kvc_opts *o, struct kvi_list_entry *e, unsigned *n, char *err,
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
			kvi_set_err(err, errlen, msg);
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
				kvi_set_err(err, errlen, msg);
				free(e[*n].d);
				rc = KVC_EINVAL;
				goto fail;
			}
		(*n)++;
	}
	if (*n == 0) {
		kvi_set_err(err, errlen, "invalid server list: no server in it (expected HOST[:PORT][=WEIGHT],...)");
		return KVC_EINVAL;
	}
	return 0;
bad_weight:
	snprintf(msg, sizeof(msg), "invalid server list item '%.*s': the weight after '=' must be 1..%u",
		 (int)(end - tok > 256 ? 256 : end - tok), tok, WEIGHT_MAX);
	kvi_set_err(err, errlen, msg);
fail:
	kvi_list_free_entries(e, *n);
	*n = 0;
	return rc;
}

/* The file's contents (NUL-terminated, to be freed), or NULL with err set. */
char *kvi_list_read_file(const char *path, char *err, size_t errlen)
{
	char msg[600];
	FILE *f = fopen(path, "r");
	char *buf;
	size_t got;

	if (!f) {
		snprintf(msg, sizeof(msg), "server list file %s: %s", path, strerror(errno));
		kvi_set_err(err, errlen, msg);
		return NULL;
	}
	buf = malloc(FILE_MAX + 1);
	if (!buf) {
		fclose(f);
		kvi_set_err(err, errlen, "out of memory");
		return NULL;
	}
	got = fread(buf, 1, FILE_MAX + 1, f);
	fclose(f);
	if (got > FILE_MAX) {
		snprintf(msg, sizeof(msg), "server list file %s: larger than %d bytes", path, FILE_MAX);
		kvi_set_err(err, errlen, msg);
		free(buf);
		return NULL;
	}
	buf[got] = '\0';
	return buf;
}

/* Members that left the list and have nothing in flight are closed. */
void kvi_list_reap_drained(kvc_t *h)
{
	for (unsigned i = h->n; i < h->n + h->ndrain;) {
		struct kvi_member *m = h->m[i];

		if (m->inflight) {
			i++;
			continue;
		}
		kvi_member_free(h, m);
		h->m[i] = h->m[h->n + h->ndrain - 1];
		h->ndrain--;
	}
}

/* Make e (parsed, owned by us from now: its dials are taken or freed) the
 * list. New members are joined now; a member kept keeps its connection. */
static int apply_list(kvc_t *h, struct kvi_list_entry *e, unsigned ne)
{
	struct kvi_member *next[KVI_RING_MAX];
	uint64_t now = kvi_now_ns();
	unsigned leaving = 0;

	/* h->m holds the list and the members still draining: the new list and
	 * everything that would drain must fit, or nothing changes (a list
	 * changed again and again while servers drain is refused until they
	 * have). */
	kvi_list_reap_drained(h);
	for (unsigned j = 0; j < h->n + h->ndrain; j++) {
		unsigned i = 0;

		while (i < ne && strcmp(h->m[j]->name, e[i].d->name) != 0)
			i++;
		leaving += i == ne;
	}
	if (ne + leaving > sizeof(h->m) / sizeof(h->m[0])) {
		kvi_list_free_entries(e, ne);
		return KVC_EBUSY;
	}
	if (h->single) { /* its count was not kept: start now */
		h->inflight = h->m[0]->inflight = kvi_conn_inflight(h->m[0]->c);
		h->single = 0;
	}
	for (unsigned i = 0; i < ne; i++) {
		struct kvi_member *m = NULL;

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
			kvi_info("server %s added", m->d->name);
			(void)kvi_member_join(h, m, now, NULL, 0); /* started: "Joining" */
		}
		m->weight = e[i].weight;
		next[i] = m;
	}
	/* What is left of the old list and the draining ones drains. */
	{
		struct kvi_member *drain[2 * KVI_RING_MAX];
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
	kvi_list_reap_drained(h);
	kvi_route_rebuild(h);
	return 0;
}

int kvc_set_servers(kvc_t *h, const char *servers, char *err, size_t errlen)
{
	struct kvi_list_entry e[KVI_RING_MAX];
	unsigned ne;
	int rc;

	if (!h || !servers) {
		kvi_set_err(err, errlen, "invalid argument: no handle or no server list");
		return KVC_EINVAL;
	}
	rc = kvi_list_parse(servers, &h->o, e, &ne, err, errlen);
	if (rc)
		return rc;
	rc = apply_list(h, e, ne);
	if (rc)
		kvi_set_err(err, errlen, "too many servers of earlier lists still finish their operations: poll, then "
					 "set the list again");
	return rc;
}

/* The list file changed since we last read it? Then apply it (once a second
 * at most: one stat). */
void kvi_list_check_file(kvc_t *h, uint64_t now)
{
	struct kvi_list_entry e[KVI_RING_MAX];
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
	text = kvi_list_read_file(h->list_file, err, sizeof(err));
	if (!text) {
		kvi_warn("%s; keeping the current list", err);
		return;
	}
	if (kvi_list_parse(text, &h->o, e, &ne, err, sizeof(err)) == 0) {
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
