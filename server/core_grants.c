/* The core's clients and their memory: accounts, hosts and quotas (core.h
 * "Quota"), SEG_REQ and SEG_RETURN, and what a client that leaves leaves
 * behind. Reclamation makes the room grants hand out (core_reclaim.c). */
#include "core_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "log.h"

/* The clients connected from one source host (kvs_core_client_host): the
 * quota binds what they hold together. Freed with its last client. */
struct kvs_host {
	struct kvs_host *next;
	uint64_t key;
	uint64_t held;     /* the sum of its clients' held */
	uint32_t nclients; /* clients that name it */
};

/* A client holding an open extent. Created on its first grant (or when its
 * host is told), freed when it leaves. */
struct kvs_client {
	struct kvs_client *next;
	uint32_t id;
	struct kvs_extent x; /* x.owner: its account (account_of) */
	uint64_t held; /* bytes granted and not back (core.h "Quota") */
	struct kvs_host *host; /* NULL: none known (the quota binds the client alone) */
	int counted;           /* in nclients (it asked for memory) */
};


static struct kvs_client **client_slot(struct kvs_core *c, uint32_t id);

/* What memory is charged to (segtab's extent owner): the client's id in the
 * low 32 bits and, above, the number of clients the core had seen when this
 * one got its first grant. kvserver recycles ids (ids.h) while segments
 * granted to an id's earlier holder may wait hours for reclamation: their
 * charges must not count against the id's new holder. */
static uint64_t account_of(struct kvs_core *c, uint32_t id)
{
	return ++c->accounts << 32 | id;
}

/* segtab's accounting (opts.charge), under the core's lock. A client that
 * has left is not counted any more, nor is an earlier holder of its id. */
void kvs_core_charge(void *arg, uint64_t owner, int64_t bytes)
{
	struct kvs_client *cl = *client_slot(arg, (uint32_t)owner);
	uint64_t was;

	if (!cl || cl->x.owner != owner)
		return;
	was = cl->held;
	cl->held = bytes < 0 && (uint64_t)-bytes > cl->held ? 0 : cl->held + (uint64_t)bytes;
	if (cl->host)
		cl->host->held = cl->host->held - was + cl->held; /* it includes was */
}

/* What the quota compares: the client's host's holdings, or its own. */
static uint64_t quota_held(const struct kvs_client *cl)
{
	return cl->host ? cl->host->held : cl->held;
}

static struct kvs_client **client_slot(struct kvs_core *c, uint32_t id)
{
	struct kvs_client **pp = &c->clients[id % KVS_CLIENT_BUCKETS];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* client_id's record, made if it has none (NULL: out of memory). */
static struct kvs_client *client_get(struct kvs_core *c, uint32_t id)
{
	struct kvs_client **pp = client_slot(c, id);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (*pp) {
			(*pp)->id = id;
			(*pp)->x.owner = account_of(c, id);
		}
	}
	return *pp;
}

static struct kvs_host **host_slot(struct kvs_core *c, uint64_t key)
{
	struct kvs_host **pp = &c->hosts[key % KVS_CLIENT_BUCKETS];

	while (*pp && (*pp)->key != key)
		pp = &(*pp)->next;
	return pp;
}

/* cl no longer counts for its host; the host goes with its last client. */
static void host_drop(struct kvs_core *c, struct kvs_client *cl)
{
	struct kvs_host *ho = cl->host, **pp;

	if (!ho)
		return;
	cl->host = NULL;
	ho->held = ho->held > cl->held ? ho->held - cl->held : 0;
	if (--ho->nclients)
		return;
	pp = host_slot(c, ho->key);
	*pp = ho->next;
	free(ho);
}

void kvs_core_clients_free(struct kvs_core *c)
{
	for (unsigned i = 0; i < KVS_CLIENT_BUCKETS; i++) {
		while (c->clients[i]) {
			struct kvs_client *cl = c->clients[i];

			c->clients[i] = cl->next;
			free(cl);
		}
		while (c->hosts[i]) {
			struct kvs_host *ho = c->hosts[i];

			c->hosts[i] = ho->next;
			free(ho);
		}
	}
}

int kvs_core_seg_request_locked(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_client *cl;
	uint64_t now = kvi_mono_ns();
	int rc, over;

	if (req->seg_req.need > c->geo.segment_size) {
		kvs_core_reply_error(req, resp, KVC_EINVAL);
		return 0;
	}
	cl = client_get(c, id);
	if (!cl) {
		kvs_core_reply_error(req, resp, KVC_ENOMEM);
		return 0;
	}
	if (!cl->counted) {
		cl->counted = 1;
		c->nclients++;
	}
	/* core.h "Quota". */
	over = quota_held(cl) + req->seg_req.need > c->quota;
	if (over && c->starving_at && now - c->starving_at < c->starving_ns && c->starving_id != id) {
		uint64_t used = req->seg_req.used < cl->x.len ? req->seg_req.used : cl->x.len;

		if (cl->x.off && used < cl->x.len / 2) {
			/* Asks for more while it has not used what it has: its
			 * extent stays open (the client did not get a new one and
			 * may go on filling it; only EAGAIN says it is gone). */
			c->grants_refused++;
			c->over_quota++;
			kvs_core_reply_error(req, resp, KVC_EQUOTA);
			kvi_ev_dbg("grant_refused", "client=%u reason=quota held=%" PRIu64 " quota=%" PRIu64, id,
				   quota_held(cl), c->quota);
			return 0;
		}
		/* A writer that fills what it gets waits its turn. */
		kvs_segtab_release(c->segs, &cl->x, req->seg_req.used, now);
		c->throttled++;
		kvs_core_reply_error(req, resp, KVC_EAGAIN);
		return 0;
	}
	/* Uniques are never given twice (layout.h "CAS uniques"): a counter
	 * that could wrap with this grant stops the grants instead (at 100
	 * GB/s of grants, after 23 years). */
	if (c->cas_next > UINT64_MAX - c->geo.segment_size / KVI_OBJ_ALIGN) {
		c->grants_refused++;
		kvs_core_reply_error(req, resp, KVC_ENOMEM);
		return 0;
	}
	kvs_segtab_tick(c->segs, now);
	rc = kvs_segtab_grant(c->segs, &cl->x, req->seg_req.need, req->seg_req.used,
			      over ? KVS_GRANT_OVER_QUOTA : KVS_GRANT_CLIENT, now);
	if (rc == KVC_EAGAIN && quota_held(cl) < c->quota / 2) {
		c->starving_at = now;
		c->starving_id = id;
	}
	if (rc) {
		/* Nothing free right now. With eviction (or garbage left to
		 * compact) the reclaimer will make room: the client asks again. */
		kvs_core_poke_locked(c);
		if (rc == KVC_EAGAIN && (!c->has_reclaimer || (c->o.no_evict && kvs_core_full_locked(c)))) {
			c->grants_refused++;
			rc = KVC_ENOMEM;
		}
		kvs_core_reply_error(req, resp, rc);
		kvi_ev_dbg("grant_refused", "client=%u reason=no_free_segment error=%s", id, kvc_err_name(rc));
		return 0;
	}
	kvs_core_poke_locked(c);
	resp->type = KVI_CTRL_SEG_GRANT;
	resp->seq = req->seq;
	resp->seg_grant.off = cl->x.off;
	resp->seg_grant.len = cl->x.len;
	resp->seg_grant.cas_base = c->cas_next;
	c->cas_next += cl->x.len / KVI_OBJ_ALIGN;
	kvi_ev_dbg("granted", "client=%u bytes=%" PRIu64 " offset=%#" PRIx64, id, cl->x.len, cl->x.off);
	return 0;
}

int kvs_core_seg_return_locked(struct kvs_core *c, uint32_t id, const struct kvi_ctrl *req, struct kvi_ctrl *resp)
{
	struct kvs_client *cl = *client_slot(c, id);

	if (cl)
		kvs_segtab_release(c->segs, &cl->x, req->seg_return.used, kvi_mono_ns());
	resp->type = KVI_CTRL_SEG_RETURNED;
	resp->seq = req->seq;
	return 0;
}

/* What client_id holds, alone (host 0) or with its host's other clients. */
static uint64_t held_of(struct kvs_core *c, uint32_t client_id, int host)
{
	struct kvs_client *cl;
	uint64_t held;

	pthread_mutex_lock(&c->mu);
	cl = *client_slot(c, client_id);
	held = !cl ? 0 : host ? quota_held(cl) : cl->held;
	pthread_mutex_unlock(&c->mu);
	return held;
}

uint64_t kvs_core_client_held(struct kvs_core *c, uint32_t client_id)
{
	return held_of(c, client_id, 0);
}

int kvs_core_client_host(struct kvs_core *c, uint32_t client_id, const char *host)
{
	struct kvs_client *cl;
	struct kvs_host **hp;
	uint64_t key = 0xcbf29ce484222325ull; /* FNV-1a: the table is per server, its keys are no secret */
	int rc = 0;

	if (!host || !*host || strcmp(host, "?") == 0)
		return 0; /* no address: the client alone */
	for (const char *p = host; *p; p++)
		key = (key ^ (unsigned char)*p) * 0x100000001b3ull;
	pthread_mutex_lock(&c->mu);
	cl = client_get(c, client_id);
	if (!cl) {
		rc = KVC_ENOMEM;
		goto out;
	}
	if (cl->host) {
		if (cl->host->key == key)
			goto out;
		host_drop(c, cl);
	}
	hp = host_slot(c, key);
	if (!*hp) {
		*hp = calloc(1, sizeof(**hp));
		if (!*hp) {
			rc = KVC_ENOMEM;
			goto out;
		}
		(*hp)->key = key;
	}
	cl->host = *hp;
	cl->host->nclients++;
	cl->host->held += cl->held;
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

uint64_t kvs_core_host_held(struct kvs_core *c, uint32_t client_id)
{
	return held_of(c, client_id, 1);
}

void kvs_core_client_left(struct kvs_core *c, uint32_t client_id)
{
	struct kvs_client **pp, *cl;

	pthread_mutex_lock(&c->mu);
	pp = client_slot(c, client_id);
	cl = *pp;
	if (cl) {
		/* Whatever it used is unknown: keep the whole extent. */
		kvs_segtab_release(c->segs, &cl->x, cl->x.len, kvi_mono_ns());
		*pp = cl->next;
		host_drop(c, cl);
		if (cl->counted)
			c->nclients--;
		free(cl);
		c->full_at = 0;
		kvs_core_poke_locked(c);
	}
	pthread_mutex_unlock(&c->mu);
}
