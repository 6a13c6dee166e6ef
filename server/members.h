/* Membership: which clients are alive, by lease, and what to do about a lock
 * word that a waiting client reports.
 *
 * Leases. Every client the server admits is a member with a lease: it ends
 * lease_ms after admission and each renewal moves it to lease_ms after the
 * server received the renewal. A member whose lease ended is expelled: its QP
 * is fenced (no late WRITE of it can land), its locks released, its open
 * extent sealed -- exactly as if it had disconnected. The client counts its
 * own lease from when it SENT the renewal, which is earlier, so it believes
 * in its lease no longer than the server does; it posts nothing once its
 * lease ended (client/lease.c "Lease"). Clients renew every renew_ms, a
 * fraction of the lease, while their application calls into the library.
 * The server's own loopback connections (fencing, reclamation) are members
 * without a lease: they never expire.
 *
 * Idleness. A handle its application leaves alone renews nothing (the library
 * has no thread). When its lease ends the server reads the client's idle
 * word (one RDMA READ of the client's memory: 0 means nothing in flight and
 * nothing will be posted before the client has renewed, client/lease.c
 * "Idle word"): 0 keeps it connected as a lapsed member -- its open extent
 * is sealed, a resize does not wait for it, a lock word naming it is
 * nobody's, and its next renewal readmits it with the same id and
 * connection; anything else, a failed READ, or no idle word at all expels it
 * as above. So an idle handle costs no rejoin, while a stalled writer is
 * still fenced when its lease ends.
 *
 * Lock reports. A writer that keeps finding a bucket locked by the same word
 * reports (bucket, word). Nothing in a report is trusted beyond what the
 * server checks itself: the word must still be in the bucket (read now), and
 *  - if it names no member, nobody can ever release it (a departed client
 *    the fence missed, or garbage a buggy client wrote): the caller clears
 *    it (through the NIC: fence.h);
 *  - if it names a member, a lock is held at most one operation deadline
 *    (max_op_ms) by a working client, so the word is watched: when a report
 *    finds the same word still there at least max_op_ms + margin after the
 *    first report of it, its owner is expelled. (A false alarm needs the same
 *    owner to take the same bucket again at both reports, with a waiter
 *    losing every attempt in between for a whole deadline; it costs that
 *    owner a reconnect, never a wrong result.)
 * The watch list is small and bounded (KVS_WATCH_MAX); a full list forgets
 * its oldest entry, so a report flood costs a bounded table, and a real
 * stuck lock is reported again.
 *
 * Single-threaded: used by the event loop only (and by tests). Times are
 * CLOCK_MONOTONIC nanoseconds passed in by the caller. */
#ifndef KVS_MEMBERS_H
#define KVS_MEMBERS_H

#include <stdint.h>

#include "wire.h"

#define KVS_DEFAULT_LEASE_MS 1000u
#define KVS_DEFAULT_RENEW_MS 250u
#define KVS_MIN_LEASE_MS 50u
#define KVS_MAX_LEASE_MS 600000u
#define KVS_WATCH_MAX 64u
/* A member's first lease lasts at least this long: the client renews as soon
 * as it has set itself up (registering its buffers can take a while on a
 * loaded host), and it posts nothing to the region before that renewal. */
#define KVS_FIRST_LEASE_MS 5000u
/* Slack on top of max_op_ms before a watched lock word condemns its owner. */
#define KVS_WATCH_MARGIN_MS 50u
/* Lock reports judged per reporter per watch window (max_op_ms + margin);
 * more are answered KVI_REPORT_CHANGED unjudged (a flood costs nothing). */
#define KVS_REPORTS_PER_WINDOW 16u

struct kvs_members;

/* 0 or KVC_ENOMEM. lease_ms: lease length; max_op_ms: how long a working
 * client may hold a lock (the servers's operation deadline). */
int kvs_members_create(struct kvs_members **out, uint32_t lease_ms, uint32_t max_op_ms);
void kvs_members_destroy(struct kvs_members *m);

/* A member joins (leased: its lease starts now) or leaves. Joining an id
 * twice, or leaving an unknown one, changes nothing. */
int kvs_members_join(struct kvs_members *m, uint32_t id, int leased, uint64_t now);
void kvs_members_leave(struct kvs_members *m, uint32_t id);
int kvs_members_is_member(const struct kvs_members *m, uint32_t id);
unsigned kvs_members_count(const struct kvs_members *m);

/* Renew id's lease (from now); returns the lease in ms, or 0 when id is not
 * a leased member. */
uint32_t kvs_members_renew(struct kvs_members *m, uint32_t id, uint64_t now);

/* Acknowledgements (layout.h "Resize"): id renewed its lease naming the
 * index epoch it uses; the time it first named it is kept. */
void kvs_members_ack(struct kvs_members *m, uint32_t id, uint64_t epoch, uint64_t now);
/* Does every leased member not yet expelled use epoch or later? 1 with
 * *last the latest time one of them first said so (0: no such member), else
 * 0. The first call for an epoch counts the members once; after that acks,
 * leaves and expulsions keep the count, so a call costs O(1) (now unused). */
int kvs_members_acked(struct kvs_members *m, uint64_t epoch, uint64_t now, uint64_t *last);

/* Leased members whose lease ended by now, up to max, into ids; each is
 * returned once (it stays a member, marked expelled, until it leaves -- or
 * until kvs_members_lapse keeps it). */
unsigned kvs_members_expired(struct kvs_members *m, uint64_t now, uint32_t *ids, unsigned max);
/* Idle members ("Idleness" above). A member may name a word of its own
 * memory that the server can RDMA-READ (its idle word: 0 while it has nothing
 * in flight and posts nothing before renewing; kvs_members_set_probe, from
 * its renewals); kvs_members_probe gives it (1) or says there is none (0).
 * kvs_members_lapse keeps a member whose lease ended (one being probed,
 * below) whose idle word read 0: it is no longer counted for
 * acknowledgements, names no lock (a report naming it clears the word), and
 * its next renewal readmits it (kvs_members_is_lapsed says so before).
 * KVS_LAPSED_RECHECK_LEASES leases later kvs_members_expired returns it
 * again, to be read again (a dead host's READ fails: it is expelled then). 0,
 * or KVC_EINVAL when id is not such a member. */
#define KVS_LAPSED_RECHECK_LEASES 10u
void kvs_members_set_probe(struct kvs_members *m, uint32_t id, uint64_t addr, uint32_t rkey);
int kvs_members_probe(const struct kvs_members *m, uint32_t id, uint64_t *addr, uint32_t *rkey);
int kvs_members_lapse(struct kvs_members *m, uint32_t id, uint64_t now);
int kvs_members_is_lapsed(const struct kvs_members *m, uint32_t id);
/* Reading a member's idle word takes a round trip: kvs_members_probe_start
 * (on a member kvs_members_expired just returned) keeps it undecided -- a
 * renewal arriving meanwhile simply renews it (nothing was done to it yet,
 * and it posts nothing before that answer), and kvs_members_is_probing then
 * says 0, so the read's result is ignored. Then kvs_members_lapse (the word
 * read 0; it returns 1 the first time, 0 when a lapsed member is confirmed
 * idle again) or kvs_members_expel (renewals refused from now on). 0 or
 * KVC_EINVAL. */
int kvs_members_probe_start(struct kvs_members *m, uint32_t id);
int kvs_members_is_probing(const struct kvs_members *m, uint32_t id);
int kvs_members_expel(struct kvs_members *m, uint32_t id);

/* Milliseconds until the next lease ends (at most max_ms; 0 if one ended). */
int kvs_members_next_due(const struct kvs_members *m, uint64_t now, int max_ms);

/* Judge a lock report from reporter about bucket (any name of the lock word:
 * kvserver passes its region offset): `reported` is the word it
 * found, `current` what the bucket holds now (read by the caller). Returns
 * the verdict; with KVI_REPORT_FENCING *owner is the member to expel. */
enum kvi_report_verdict kvs_members_report(struct kvs_members *m, uint32_t reporter, uint64_t bucket,
					   uint64_t reported, uint64_t current, uint64_t now, uint32_t *owner);

/* A lock report judged as a whole (what kvserver and the tests' in-process
 * server both do with one): `current` is the word the caller read in the
 * bucket now; `stable` says the bucket's index is the only one (no resize
 * migrating into or out of it). Resize marks are nobody's (CHANGED); a word
 * that is no lock word at all (!kvi_lock_legal: a stray WRITE's junk) is
 * repaired to 0 when the reporter saw it too and the index is stable
 * (CLEARING), else waited on (WATCHING); a lock word goes to
 * kvs_members_report. The caller then CASes set_from -> set_to through the
 * NIC when `set` says so, and expels fence_owner when it is not 0. */
struct kvs_report_action {
	enum kvi_report_verdict verdict;
	int set;                 /* CAS the word set_from -> set_to */
	uint64_t set_from, set_to;
	uint32_t fence_owner;    /* expel this member (0: nobody) */
};
void kvs_members_judge(struct kvs_members *m, uint32_t reporter, uint64_t bucket, uint64_t reported, uint64_t current,
		       int stable, uint64_t now, struct kvs_report_action *a);

struct kvs_members_stats {
	uint64_t lease_expiries;  /* members expelled because their lease ended */
	uint64_t renewals;
	uint64_t reports;         /* lock reports judged */
	uint64_t reports_cleared; /* ... naming no member: the word is released */
	uint64_t reports_fenced;  /* ... whose owner was expelled */
	uint64_t reports_limited; /* reports not judged: their reporter sent too many (KVS_REPORTS_PER_WINDOW) */
	uint64_t reports_repaired; /* ... of junk, no lock word at all: repaired (kvs_members_judge) */
	uint64_t lapses;          /* leases that ended on an idle member: kept, not expelled */
	uint64_t readmissions;    /* ... of those, renewed again */
};
void kvs_members_stats(const struct kvs_members *m, struct kvs_members_stats *out);

#endif
