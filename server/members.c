#include "members.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kvclient_errors.h"
#include "layout.h"
#include "u32map.h"

struct member {
	uint32_t id; /* 0: empty slot */
	uint8_t leased;
	uint8_t expelled;
	uint8_t lapsed;     /* its lease ended while it was idle (kvs_members_lapse) */
	uint8_t probing;    /* its idle word is being read (kvs_members_probe_start) */
	uint64_t lease_end; /* ns */
	uint64_t epoch;     /* index epoch it last said it uses (0: none yet) */
	uint64_t epoch_at;  /* ns: when it first said so */
	uint8_t behind;     /* counted in kvs_members.behind */
	uint16_t reports;   /* lock reports it made since report_win */
	uint64_t report_win; /* ns: start of its current report window */
	uint64_t probe_addr; /* its idle word (kvs_members_set_probe); probe_rkey 0: none */
	uint32_t probe_rkey;
};

struct watch {
	uint64_t bucket, word;
	uint64_t first; /* ns: first report of this word in this bucket */
};

struct kvs_members {
	struct kvi_u32map by_id; /* id -> struct member (malloc'd) */
	uint64_t lease_ns, watch_ns;
	/* No lease ends before this: kept a lower bound (joins and renewals
	 * lower it when they set an earlier end; renewals that move an end
	 * later leave it early, never late). Expiry scans run only once it is
	 * reached, which keeps event-loop work per event independent of the
	 * number of members. */
	uint64_t earliest;
	struct watch watch[KVS_WATCH_MAX];
	unsigned nwatch;
	struct kvs_members_stats st;
	/* Acknowledgements of epoch `target` (0: none awaited): how many live
	 * leased members still use an older one, and when the last of the
	 * others first named it. Counted once when a target is set (one scan
	 * per resize), then kept by acks, leaves and expulsions: no renewal
	 * or lease check looks at every member. */
	uint64_t target, last_ack;
	unsigned behind;
};

/* e stops counting towards the awaited acknowledgements (it left, was
 * expelled, or acknowledged). */
static void not_behind(struct kvs_members *m, struct member *e)
{
	if (e->behind) {
		e->behind = 0;
		m->behind--;
	}
}

static struct member *find(const struct kvs_members *m, uint32_t id)
{
	return kvi_u32map_get(&m->by_id, id);
}

/* The member in slot i of the table, or NULL: for the rare passes over all
 * of them (once per resize, and when the earliest lease may have ended). */
static struct member *member_at(const struct kvs_members *m, uint32_t i)
{
	return m->by_id.t[i].key ? m->by_id.t[i].val : NULL;
}

int kvs_members_create(struct kvs_members **out, uint32_t lease_ms, uint32_t max_op_ms)
{
	struct kvs_members *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return KVC_ENOMEM;
	m->lease_ns = (uint64_t)lease_ms * 1000000u;
	m->watch_ns = ((uint64_t)max_op_ms + KVS_WATCH_MARGIN_MS) * 1000000u;
	m->earliest = UINT64_MAX;
	*out = m;
	return 0;
}

void kvs_members_destroy(struct kvs_members *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->by_id.cap; i++)
		free(member_at(m, i));
	kvi_u32map_free(&m->by_id);
	free(m);
}

int kvs_members_join(struct kvs_members *m, uint32_t id, int leased, uint64_t now)
{
	struct member *e;

	if (id == 0 || find(m, id))
		return 0;
	e = malloc(sizeof(*e));
	if (!e)
		return KVC_ENOMEM;
	*e = (struct member){ .id = id, .leased = leased != 0,
			      .lease_end = now + (m->lease_ns > KVS_FIRST_LEASE_MS * 1000000ull
							  ? m->lease_ns : KVS_FIRST_LEASE_MS * 1000000ull) };
	if (kvi_u32map_put(&m->by_id, id, e)) {
		free(e);
		return KVC_ENOMEM;
	}
	/* A newcomer counts until its first renewal names the epoch it uses. */
	if (leased && m->target) {
		e->behind = 1;
		m->behind++;
	}
	if (leased && e->lease_end < m->earliest)
		m->earliest = e->lease_end;
	return 0;
}

static void unwatch(struct kvs_members *m, struct watch *w);

void kvs_members_leave(struct kvs_members *m, uint32_t id)
{
	struct member *e = id ? find(m, id) : NULL;
	unsigned i;

	if (!e)
		return;
	not_behind(m, e);
	/* Its id may be handed out again (ids.h): a watch on a word naming it
	 * must not condemn the next holder for the time this one held it. */
	for (i = 0; i < m->nwatch;) {
		if (kvi_lock_owner(m->watch[i].word) == id)
			unwatch(m, &m->watch[i]);
		else
			i++;
	}
	kvi_u32map_del(&m->by_id, id);
	free(e);
}

int kvs_members_is_member(const struct kvs_members *m, uint32_t id)
{
	return id && find(m, id) != NULL;
}

unsigned kvs_members_count(const struct kvs_members *m)
{
	return m->by_id.n;
}

uint32_t kvs_members_renew(struct kvs_members *m, uint32_t id, uint64_t now)
{
	struct member *e = id ? find(m, id) : NULL;

	/* A lease that ended but whose member was not expelled yet may be
	 * renewed: expiry and renewal both run on the event loop, so whichever
	 * comes first decides, and the client posted nothing meanwhile. */
	if (!e || !e->leased || e->expelled)
		return 0;
	/* Back from idleness (a member again, as if it had just joined), or
	 * renewing while its idle word is read: nothing was done to it yet,
	 * and it posts nothing before this answer; the read's result is then
	 * ignored. Either way it counts for acknowledgements again. */
	if (e->lapsed || e->probing) {
		m->st.readmissions += e->lapsed;
		e->lapsed = e->probing = 0;
		if (m->target && e->epoch < m->target && !e->behind) {
			e->behind = 1;
			m->behind++;
		}
	}
	e->lease_end = now + m->lease_ns;
	if (e->lease_end < m->earliest) /* the first renewal may shorten the first lease */
		m->earliest = e->lease_end;
	m->st.renewals++;
	return (uint32_t)(m->lease_ns / 1000000u);
}

void kvs_members_ack(struct kvs_members *m, uint32_t id, uint64_t epoch, uint64_t now)
{
	struct member *e = id ? find(m, id) : NULL;

	if (!e || !e->leased || e->expelled || epoch == e->epoch)
		return;
	e->epoch = epoch;
	e->epoch_at = now;
	if (!m->target)
		return;
	if (e->behind && epoch >= m->target) {
		not_behind(m, e);
		if (now > m->last_ack)
			m->last_ack = now;
	} else if (!e->behind && epoch < m->target) { /* it went back (a bug): counts again */
		e->behind = 1;
		m->behind++;
	}
}

int kvs_members_acked(struct kvs_members *m, uint64_t epoch, uint64_t now, uint64_t *last)
{
	(void)now;
	if (epoch != m->target) { /* a new resize: count once */
		m->target = epoch;
		m->behind = 0;
		m->last_ack = 0;
		for (uint32_t i = 0; i < m->by_id.cap; i++) {
			struct member *e = member_at(m, i);

			if (!e)
				continue;
			e->behind = 0;
			if (!e->leased || e->expelled || e->lapsed || e->probing)
				continue; /* no lease: a loopback, one on its way out, or an idle one */
			if (e->epoch < epoch) {
				e->behind = 1;
				m->behind++;
			} else if (e->epoch_at > m->last_ack) {
				m->last_ack = e->epoch_at;
			}
		}
	}
	*last = m->last_ack;
	return m->behind == 0;
}

unsigned kvs_members_expired(struct kvs_members *m, uint64_t now, uint32_t *ids, unsigned max)
{
	uint64_t earliest = UINT64_MAX;
	unsigned got = 0;

	if (now < m->earliest || max == 0)
		return 0;
	for (uint32_t i = 0; i < m->by_id.cap; i++) {
		struct member *e = member_at(m, i);

		if (!e || !e->leased || e->expelled || e->probing)
			continue;
		if (e->lease_end <= now && got < max) {
			/* A lapsed member's time to be looked at again (is it still
			 * there?) comes back the same way as a lease's end. */
			e->expelled = 1;
			not_behind(m, e);
			ids[got++] = e->id;
			if (!e->lapsed)
				m->st.lease_expiries++;
		} else if (e->lease_end < earliest) {
			earliest = e->lease_end; /* includes ones left for the next call */
		}
	}
	m->earliest = earliest;
	return got;
}

int kvs_members_next_due(const struct kvs_members *m, uint64_t now, int max_ms)
{
	return m->earliest == UINT64_MAX ? max_ms : kvi_ms_until(now, m->earliest, max_ms);
}

static struct watch *watched(struct kvs_members *m, uint64_t bucket)
{
	for (unsigned i = 0; i < m->nwatch; i++)
		if (m->watch[i].bucket == bucket)
			return &m->watch[i];
	return NULL;
}

static void unwatch(struct kvs_members *m, struct watch *w)
{
	*w = m->watch[--m->nwatch];
}

enum kvi_report_verdict kvs_members_report(struct kvs_members *m, uint32_t reporter, uint64_t bucket,
					   uint64_t reported, uint64_t current, uint64_t now, uint32_t *owner)
{
	uint32_t who = kvi_lock_owner(current);
	struct member *e;
	struct watch *w;

	m->st.reports++;
	*owner = 0;
	/* A working client reports a bucket at most every quarter deadline,
	 * one report at a time: more than KVS_REPORTS_PER_WINDOW in one
	 * watch window is a flood, answered without being judged. */
	e = find(m, reporter);
	if (e) {
		if (now - e->report_win >= m->watch_ns) {
			e->report_win = now;
			e->reports = 0;
		}
		if (++e->reports > KVS_REPORTS_PER_WINDOW) {
			e->reports = KVS_REPORTS_PER_WINDOW + 1;
			m->st.reports_limited++;
			return KVI_REPORT_CHANGED;
		}
	}
	w = watched(m, bucket);
	/* A resize mark (layout.h "Resize") is nobody's lock: the migrator
	 * clears it; so is a word that changed or is the reporter's own. */
	if (current != reported || !(current & KVI_LOCK_LOCKED) || (current & KVI_LOCK_MOVED) || who == reporter) {
		if (w && w->word != current)
			unwatch(m, w);
		return KVI_REPORT_CHANGED;
	}
	e = who ? find(m, who) : NULL;
	if (!e || e->lapsed) { /* an idle member holds no lock (kvs_members_lapse) */
		if (w)
			unwatch(m, w);
		m->st.reports_cleared++;
		return KVI_REPORT_CLEARING;
	}
	if (w && w->word == current && now - w->first >= m->watch_ns && e->leased && !e->expelled) {
		unwatch(m, w);
		e->expelled = 1;
		not_behind(m, e);
		*owner = who;
		m->st.reports_fenced++;
		return KVI_REPORT_FENCING;
	}
	if (w && w->word != current)
		unwatch(m, w), w = NULL;
	if (!w) {
		if (m->nwatch == KVS_WATCH_MAX) { /* forget the oldest */
			unsigned old = 0;

			for (unsigned i = 1; i < m->nwatch; i++)
				if (m->watch[i].first < m->watch[old].first)
					old = i;
			unwatch(m, &m->watch[old]);
		}
		m->watch[m->nwatch++] = (struct watch){ .bucket = bucket, .word = current, .first = now };
	}
	return KVI_REPORT_WATCHING;
}

void kvs_members_judge(struct kvs_members *m, uint32_t reporter, uint64_t bucket, uint64_t reported, uint64_t current,
		       int stable, uint64_t now, struct kvs_report_action *a)
{
	*a = (struct kvs_report_action){ .verdict = KVI_REPORT_CHANGED };
	if (kvi_lock_is_mark(current))
		return; /* the reporter follows it (it knows, or fetches, the other index) */
	if (!kvi_lock_legal(current)) {
		/* While a resize migrates, the migrator's progress says what the
		 * word must be: the report waits for the migration to end. */
		if (current != reported || !stable) {
			a->verdict = current == reported ? KVI_REPORT_WATCHING : KVI_REPORT_CHANGED;
			return;
		}
		m->st.reports++;
		m->st.reports_repaired++;
		*a = (struct kvs_report_action){ .verdict = KVI_REPORT_CLEARING, .set = 1, .set_from = current };
		return;
	}
	a->verdict = kvs_members_report(m, reporter, bucket, reported, current, now, &a->fence_owner);
	if (a->verdict == KVI_REPORT_CLEARING) {
		a->set = 1;
		a->set_from = current;
		a->set_to = current & KVI_LOCK_MOVED;
	}
}

void kvs_members_set_probe(struct kvs_members *m, uint32_t id, uint64_t addr, uint32_t rkey)
{
	struct member *e = id ? find(m, id) : NULL;

	if (e) {
		e->probe_addr = addr;
		e->probe_rkey = rkey;
	}
}

int kvs_members_probe(const struct kvs_members *m, uint32_t id, uint64_t *addr, uint32_t *rkey)
{
	const struct member *e = id ? find(m, id) : NULL;

	if (!e || !e->leased || (!e->probe_rkey && !e->probe_addr))
		return 0;
	*addr = e->probe_addr;
	*rkey = e->probe_rkey;
	return 1;
}

int kvs_members_probe_start(struct kvs_members *m, uint32_t id)
{
	struct member *e = id ? find(m, id) : NULL;

	if (!e || !e->leased || !e->expelled)
		return KVC_EINVAL;
	e->expelled = 0;
	e->probing = 1;
	return 0;
}

int kvs_members_is_probing(const struct kvs_members *m, uint32_t id)
{
	const struct member *e = id ? find(m, id) : NULL;

	return e && e->probing;
}

int kvs_members_lapse(struct kvs_members *m, uint32_t id, uint64_t now)
{
	struct member *e = id ? find(m, id) : NULL;
	int was;

	if (!e || !e->leased || !e->probing)
		return KVC_EINVAL;
	was = e->lapsed;
	e->probing = 0;
	e->lapsed = 1;
	/* Looked at again later: a client that died without a word (its host
	 * gone) is found out then, by a READ that fails. */
	e->lease_end = now + m->lease_ns * KVS_LAPSED_RECHECK_LEASES;
	if (e->lease_end < m->earliest)
		m->earliest = e->lease_end;
	m->st.lapses += !was;
	return !was;
}

int kvs_members_expel(struct kvs_members *m, uint32_t id)
{
	struct member *e = id ? find(m, id) : NULL;

	if (!e)
		return KVC_EINVAL;
	e->probing = 0;
	e->expelled = 1;
	not_behind(m, e);
	return 0;
}

int kvs_members_is_lapsed(const struct kvs_members *m, uint32_t id)
{
	const struct member *e = id ? find(m, id) : NULL;

	return e && e->lapsed;
}

void kvs_members_stats(const struct kvs_members *m, struct kvs_members_stats *out)
{
	*out = m->st;
}
