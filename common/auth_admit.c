#include "auth_admit.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

int kvi_auth_verify(const struct kvi_hello *h, const void *key, size_t key_len, const struct sockaddr *local_addr,
		    uint64_t now_ms)
{
	uint8_t want[KVI_AUTH_MAC_LEN], any = 0;
	struct kvi_auth_server srv;
	uint64_t ts = h->proof.timestamp_ms;
	int same;

	if (!h->has_proof)
		return KVI_REJECT_NOAUTH;
	/* Fail closed: no server address, no MAC of our own, or a MAC of all
	 * zeros (what a failed computation leaves, on either end) is a wrong
	 * proof, never a match. */
	for (size_t i = 0; i < sizeof(h->proof.mac); i++)
		any |= h->proof.mac[i];
	if (!any || kvi_auth_server_of(local_addr, &srv) ||
	    kvi_auth_mac(key, key_len, h->role, ts, h->proof.nonce, &srv, want))
		return KVI_REJECT_AUTH;
	/* Constant time: how many leading bytes matched must not show in how
	 * long the refusal took. */
	same = CRYPTO_memcmp(want, h->proof.mac, sizeof(want)) == 0;
	kvi_auth_wipe(want, sizeof(want));
	if (!same)
		return KVI_REJECT_AUTH;
	if ((ts > now_ms ? ts - now_ms : now_ms - ts) > KVI_AUTH_WINDOW_MS)
		return KVI_REJECT_STALE;
	return 0;
}

/* The replay cache. Entries live in one array (index + 1 in the links, 0 =
 * none), each on two singly linked lists: a hash chain (found by nonce) and
 * the wheel bucket of the tick in which its proof goes stale (dropped whole
 * once that tick is past). The wheel spans more ticks than the 2 windows a
 * proof can be accepted across, so every live bucket has its own slot. A
 * dropped entry goes on a free list (through its wheel link). */
#define REPLAY_WHEEL 64u
_Static_assert(REPLAY_WHEEL * KVI_AUTH_REPLAY_TICK_MS > 2 * KVI_AUTH_WINDOW_MS + KVI_AUTH_REPLAY_TICK_MS,
	       "every tick a remembered proof can go stale in has a wheel slot");
#define REPLAY_FIRST_CAP 1024u

struct replay_entry {
	uint8_t nonce[KVI_AUTH_NONCE_LEN];
	uint32_t hash;  /* of nonce, kept for rehashing on growth */
	uint32_t hnext; /* hash chain */
	uint32_t wnext; /* wheel bucket, or free list */
};

struct kvi_auth_replay {
	uint64_t sip[2];        /* hash key: random per cache */
	struct replay_entry *e; /* cap entries, used of them ever handed out */
	uint32_t cap, used, max, count;
	uint32_t free;          /* free list head */
	uint32_t *heads;        /* hash chains: heads_mask + 1 of them, >= cap */
	uint32_t heads_mask;
	uint64_t next_tick;            /* first tick whose bucket may hold entries */
	uint32_t wheel[REPLAY_WHEEL]; /* by tick % REPLAY_WHEEL */
};

/* SipHash-2-4 of a 16-byte nonce: nonces are chosen by whoever proves, so the
 * chain a nonce lands on must be unpredictable without the cache's key. */
static inline uint64_t rotl(uint64_t x, unsigned b)
{
	return (x << b) | (x >> (64 - b));
}

static void sipround(uint64_t v[4])
{
	v[0] += v[1], v[1] = rotl(v[1], 13), v[1] ^= v[0], v[0] = rotl(v[0], 32);
	v[2] += v[3], v[3] = rotl(v[3], 16), v[3] ^= v[2];
	v[0] += v[3], v[3] = rotl(v[3], 21), v[3] ^= v[0];
	v[2] += v[1], v[1] = rotl(v[1], 17), v[1] ^= v[2], v[2] = rotl(v[2], 32);
}

static uint32_t nonce_hash(const struct kvi_auth_replay *r, const uint8_t nonce[KVI_AUTH_NONCE_LEN])
{
	uint64_t v[4] = { r->sip[0] ^ 0x736f6d6570736575ull, r->sip[1] ^ 0x646f72616e646f6dull,
			  r->sip[0] ^ 0x6c7967656e657261ull, r->sip[1] ^ 0x7465646279746573ull };
	uint64_t m[3];

	memcpy(&m[0], nonce, 8);
	memcpy(&m[1], nonce + 8, 8);
	m[0] = le64toh(m[0]);
	m[1] = le64toh(m[1]);
	m[2] = (uint64_t)KVI_AUTH_NONCE_LEN << 56;
	for (unsigned i = 0; i < 3; i++) {
		v[3] ^= m[i];
		sipround(v);
		sipround(v);
		v[0] ^= m[i];
	}
	v[2] ^= 0xff;
	for (unsigned i = 0; i < 4; i++)
		sipround(v);
	return (uint32_t)(v[0] ^ v[1] ^ v[2] ^ v[3]);
}

static struct replay_entry *ent(const struct kvi_auth_replay *r, uint32_t i)
{
	return &r->e[i - 1];
}

struct kvi_auth_replay *kvi_auth_replay_create(unsigned max)
{
	struct kvi_auth_replay *r = calloc(1, sizeof(*r));
	uint32_t nheads = 1;

	if (!r)
		return NULL;
	r->max = max && max < KVI_AUTH_REPLAY_MAX ? max : KVI_AUTH_REPLAY_MAX;
	r->cap = r->max < REPLAY_FIRST_CAP ? r->max : REPLAY_FIRST_CAP;
	while (nheads < r->cap)
		nheads <<= 1;
	r->heads = calloc(nheads, sizeof(*r->heads));
	r->heads_mask = nheads - 1;
	r->e = calloc(r->cap, sizeof(*r->e));
	if (!r->heads || !r->e || kvi_auth_random(r->sip, sizeof(r->sip))) {
		kvi_auth_replay_destroy(r);
		return NULL;
	}
	return r;
}

void kvi_auth_replay_destroy(struct kvi_auth_replay *r)
{
	if (!r)
		return;
	free(r->heads);
	free(r->e);
	free(r);
}

static void unhash(struct kvi_auth_replay *r, uint32_t i)
{
	uint32_t *link = &r->heads[ent(r, i)->hash & r->heads_mask];

	/* Chains average under one entry (heads >= entries) and no peer can
	 * lengthen one on purpose (keyed hash). */
	while (*link != i)
		link = &ent(r, *link)->hnext;
	*link = ent(r, i)->hnext;
}

/* Forget every proof stale by now: whole buckets of past ticks. Each entry is
 * dropped once and at most REPLAY_WHEEL buckets are looked at, so however the
 * clock jumps this is amortised O(1) per admission. */
static void expire(struct kvi_auth_replay *r, uint64_t now_ms)
{
	for (unsigned n = 0; n < REPLAY_WHEEL && (r->next_tick + 1) * KVI_AUTH_REPLAY_TICK_MS <= now_ms; n++) {
		uint32_t *bucket = &r->wheel[r->next_tick % REPLAY_WHEEL];

		while (*bucket) {
			uint32_t i = *bucket;

			*bucket = ent(r, i)->wnext;
			unhash(r, i);
			ent(r, i)->wnext = r->free;
			r->free = i;
			r->count--;
		}
		r->next_tick++;
	}
	/* A jump past the whole wheel: every bucket was just emptied. */
	if ((r->next_tick + 1) * KVI_AUTH_REPLAY_TICK_MS <= now_ms)
		r->next_tick = now_ms / KVI_AUTH_REPLAY_TICK_MS;
}

/* Twice the entries (up to max) and a hash table to match, rehashed from the
 * wheel (which holds every live entry): O(entries) once per doubling. */
static int grow(struct kvi_auth_replay *r)
{
	uint32_t cap = r->cap > r->max / 2 ? r->max : r->cap * 2, mask = r->heads_mask;
	struct replay_entry *e;
	uint32_t *heads;

	if (cap <= r->cap)
		return -1;
	e = realloc(r->e, (size_t)cap * sizeof(*e));
	if (!e)
		return -1;
	r->e = e;
	while (mask + 1 < cap)
		mask = mask * 2 + 1;
	if (mask != r->heads_mask) {
		heads = calloc((size_t)mask + 1, sizeof(*heads));
		if (!heads)
			return -1; /* the larger array is kept; cap unchanged */
		free(r->heads);
		r->heads = heads;
		r->heads_mask = mask;
		for (unsigned b = 0; b < REPLAY_WHEEL; b++)
			for (uint32_t i = r->wheel[b]; i; i = ent(r, i)->wnext) {
				uint32_t *head = &r->heads[ent(r, i)->hash & mask];

				ent(r, i)->hnext = *head;
				*head = i;
			}
	}
	r->cap = cap;
	return 0;
}

int kvi_auth_replay_admit(struct kvi_auth_replay *r, const struct kvi_proof *p, uint64_t now_ms)
{
	uint64_t ts = p->timestamp_ms, tick;
	uint32_t h = nonce_hash(r, p->nonce), i;

	/* Only a proof acceptable now is remembered, until it never is again;
	 * this also keeps its tick within the wheel. */
	if ((ts > now_ms ? ts - now_ms : now_ms - ts) > KVI_AUTH_WINDOW_MS)
		return KVI_REJECT_STALE;
	expire(r, now_ms);
	/* A nonce is random per proof: the same one is the same proof (a
	 * different timestamp under it would need the key anyway). */
	for (i = r->heads[h & r->heads_mask]; i; i = ent(r, i)->hnext)
		if (ent(r, i)->hash == h && memcmp(ent(r, i)->nonce, p->nonce, KVI_AUTH_NONCE_LEN) == 0)
			return KVI_REJECT_REPLAY;
	if (r->count >= r->max)
		return KVI_REJECT_FULL;
	if (r->free) {
		i = r->free;
		r->free = ent(r, i)->wnext;
	} else {
		if (r->used == r->cap && grow(r))
			return KVI_REJECT_FULL; /* out of memory: refuse rather than forget */
		i = ++r->used;
	}
	memcpy(ent(r, i)->nonce, p->nonce, KVI_AUTH_NONCE_LEN);
	ent(r, i)->hash = h;
	ent(r, i)->hnext = r->heads[h & r->heads_mask];
	r->heads[h & r->heads_mask] = i;
	/* Stale once the clock is past ts + window: dropped after that tick
	 * (the window check above keeps it below next_tick + REPLAY_WHEEL). A
	 * clock set back since an earlier admission may put it behind the
	 * wheel's start: then the first live tick, i.e. longer, never shorter
	 * (and still within max). */
	tick = (ts + KVI_AUTH_WINDOW_MS) / KVI_AUTH_REPLAY_TICK_MS;
	if (tick < r->next_tick)
		tick = r->next_tick;
	ent(r, i)->wnext = r->wheel[tick % REPLAY_WHEEL];
	r->wheel[tick % REPLAY_WHEEL] = i;
	r->count++;
	return 0;
}

unsigned kvi_auth_replay_live(struct kvi_auth_replay *r, uint64_t now_ms)
{
	expire(r, now_ms);
	return r->count;
}

int kvi_auth_admit(struct kvi_auth_gate *g, const struct kvi_hello *h, const struct sockaddr *local_addr,
		   uint64_t now_ms, uint16_t *role)
{
	struct kvi_auth_replay *replay;
	int why;

	if (h->role == KVI_ROLE_LOOPBACK) {
		/* Only this process knows the loopback key: a claim without a
		 * valid proof under it is a lie, whatever else the hello holds. */
		if (!g->loopback_key)
			return KVI_REJECT_AUTH;
		why = kvi_auth_verify(h, g->loopback_key, KVI_AUTH_LOOPBACK_KEY_LEN, local_addr, now_ms);
		if (why == KVI_REJECT_NOAUTH)
			why = KVI_REJECT_AUTH;
		replay = g->loop_replay;
	} else if (g->secret) {
		why = kvi_auth_verify(h, g->secret, g->secret_len, local_addr, now_ms);
		replay = g->replay;
	} else {
		/* No secret: anyone may join as a client (the server warned). */
		*role = KVI_ROLE_CLIENT;
		return 0;
	}
	if (why)
		return why;
	/* Only proofs that verified are remembered: strangers cannot fill a
	 * cache, and a full cache refuses rather than forgets. */
	why = replay ? kvi_auth_replay_admit(replay, &h->proof, now_ms) : KVI_REJECT_FULL;
	if (why)
		return why;
	*role = h->role;
	return 0;
}
