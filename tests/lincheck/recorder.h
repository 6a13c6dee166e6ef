/* Recording histories of memcached items for the checker (lincheck.h): a
 * client's operations -- kvc_get_item, SET, DELETE, ADD, REPLACE, CAS
 * read-modify-write loops and, with counters, incr / decr (blocking and
 * through kvc_run_batch, with the vivify and touch modes), touch and gat --
 * made on a handle and recorded with their invoke and complete times. The
 * unit histories (tests/unit/test_lincheck.c, in-process transport) and the
 * verbs ones (tests/integration/lin_worker.c, real kvservers) share it, so
 * both check the same mix. Uses only the public API (kvclient.h). */
#ifndef KVT_RECORDER_H
#define KVT_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include "kvclient.h"
#include "lincheck.h"

#define LC_REC_RMW_TRIES 4 /* CAS read-modify-write loops: tries */
#define LC_REC_DEPTH 2     /* a handle's depth for the counter mix (batches of two) */

/* what a client's operations met */
struct lc_rec_counts {
	uint64_t add[2], repl[2], cas[3]; /* [0] stored; add, repl: [1] not stored; cas: [1] exists, [2] not found */
	uint64_t arith[2], touch[2], gat[2]; /* incr and decr, touch, gat: [0] done, [1] not found */
	uint64_t arith_uniq;         /* incrs and decrs told their new unique */
	uint64_t pairs;              /* batches of two of them on one key */
	uint64_t arith_modes;        /* of them with vivify or touch */
	uint64_t rmw_unknown;        /* incrs, decrs, touches and gats with unknown outcomes */
	uint64_t unknown, failed, rmw_retries;
};

/* One client's recorder. Who owns what: the client's thread. */
struct lc_rec {
	uint16_t id;       /* the client's id in the history */
	struct lc_op *ops; /* the history so far: n of cap */
	size_t n, cap;
	struct lc_rec_counts c;
	uint32_t stores;   /* values: (id << 32) | stores, distinct in a history */
	int counters;      /* values are decimal numbers; incr, decr, touch and gat join in */
	int broken;        /* an outcome was unknown or a call failed: replace the handle */
	const char *why;   /* set when the client saw what no correct tier answers */
};

/* Record o (invoked at o->inv) with outcome rc; cas: the unique a GET read or
 * a store was told. */
void lc_rec_record(struct lc_rec *w, struct lc_op *o, int rc, uint64_t cas);
/* kvc_get_item into the history; 0 with *cas the unique read */
int lc_rec_get(struct lc_rec *w, kvc_t *h, unsigned key, const char *k, uint64_t *cas);
/* A store of mode (expect: CAS's unique), its value unique to this client */
int lc_rec_store(struct lc_rec *w, kvc_t *h, uint64_t *rng, unsigned key, const char *k, int mode, uint64_t expect);
/* An incr, decr, touch or gat (counters) */
void lc_rec_rmw(struct lc_rec *w, kvc_t *h, uint64_t *rng, unsigned key, const char *k);
/* One step of the mix on key k (its id key): a read, a store, a delete, a
 * conditional store, a CAS loop or (counters) a read-modify-write. Leaves
 * room: call it while n + 2 * LC_REC_RMW_TRIES <= cap. */
void lc_rec_step(struct lc_rec *w, kvc_t *h, uint64_t *rng, unsigned key, const char *k);

#endif
