/* YCSB's key choosers, key naming and core workloads, re-implemented in C from
 * YCSB's Java (site.ycsb.generator.*, site.ycsb.Utils, site.ycsb.workloads.CoreWorkload)
 * so kvbench's numbers compare with published YCSB results.
 *
 * No global state: every generator draws from an explicit struct kvb_rng, so a
 * run is reproducible from its seed and threads never contend on an RNG (YCSB
 * uses ThreadLocalRandom, so the same sequences are not reproducible there; the
 * distributions are). The structs are public plain values with no pointers
 * (except kvb_ackcounter, which is shared): build one generator, then copy the
 * struct into each thread, which skips recomputing zeta per thread.
 *
 * How YCSB's CoreWorkload picks the key of a read/update/scan/read-modify-write
 * (CoreWorkload.init and nextKeynum; insertstart = 0 and insertcount = recordcount
 * by default, which is what kvb_keychooser_init assumes):
 *   - inserts during the run take numbers from an AcknowledgedCounterGenerator
 *     started at recordcount; its lastValue() is the highest number below which
 *     every insert has been acknowledged (recordcount - 1 before any);
 *   - uniform: UniformLongGenerator over [insertstart, insertstart + recordcount - 1];
 *     keys inserted during the run are never read;
 *   - zipfian: ScrambledZipfianGenerator over [insertstart, insertstart + recordcount
 *     + expectednewkeys] (that upper bound is inclusive, so one more item than
 *     records + new keys), expectednewkeys = (int)(operationcount * insertproportion
 *     * 2.0), the 2 being YCSB's fudge factor. The key space is sized up front so
 *     that inserts do not change the modulus and hence which keys are hot;
 *   - latest: SkewedLatestGenerator on the acknowledged counter: latest - zipf(latest);
 *   - then, for every distribution, a number above the last acknowledged insert
 *     is thrown away and drawn again (do { ... } while (keynum > lastValue())).
 *   The number becomes a key with buildKeyName (kvb_key_name): "user" followed by
 *   fnvhash64(keynum) in decimal unless insertorder=ordered.
 */
#ifndef KVB_YCSB_GEN_H
#define KVB_YCSB_GEN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* --- RNG: xoshiro256** (Blackman & Vigna), state seeded through splitmix64 so any
 * 64-bit seed (0 included) gives a well-mixed, never all-zero state. Give thread i
 * the seed base + i: splitmix64 decorrelates neighbouring seeds. */
struct kvb_rng {
	uint64_t s[4];
};

void kvb_rng_seed(struct kvb_rng *r, uint64_t seed);
uint64_t kvb_rng_next(struct kvb_rng *r);
/* Uniform in [0, 1) with 53 random bits, like Java's nextDouble. */
double kvb_rng_double(struct kvb_rng *r);
/* splitmix64's finalizer, a bijection of 64-bit words: a key number to a
 * random-looking word (distinct in, distinct out). */
uint64_t kvb_mix64(uint64_t x);

/* --- Key naming (site.ycsb.Utils.fnvhash64, CoreWorkload.buildKeyName) */

/* YCSB's fnvhash64: FNV-1a over the 8 little-endian bytes of v, then Math.abs of the
 * result read as a Java long. Math.abs(Long.MIN_VALUE) is Long.MIN_VALUE, so that one
 * hash comes back as 0x8000000000000000 (no input below 2^40 hashes to it). */
uint64_t kvb_fnvhash64(uint64_t v);

#define KVB_KEY_NAME_CAP 32 /* "user" + 20 chars + NUL, with room for zeropad <= 27 */
#define KVB_KEY_NAME_MAX 24 /* longest name with zeropad <= 1: "user" + a sign and 19 digits */
/* "user" + the decimal of keynum (of kvb_fnvhash64(keynum) when ordered == 0),
 * zero-filled after "user" to zeropad digits (YCSB's default zeropadding is 1, i.e.
 * none). The number is printed as a Java long, as YCSB's Long.toString does.
 * Returns the length without the NUL, or 0 (out = "" if cap > 0) when cap is too small. */
size_t kvb_key_name(uint64_t keynum, int ordered, unsigned zeropad, char *out, size_t cap);

/* --- ZipfianGenerator: Gray et al.'s method ("Quickly Generating Billion-Record
 * Synthetic Databases", SIGMOD 1994). Item min is the most popular, min + 1 next...
 * It is exact for the first two items only (see the tests). */
#define KVB_ZIPFIAN_CONSTANT 0.99

struct kvb_zipf {
	uint64_t base;         /* min */
	uint64_t items;        /* max - min + 1, fixed at init; eta is always computed with it */
	uint64_t countforzeta; /* item count zetan currently covers */
	double theta, alpha, zetan, eta, zeta2theta;
};

/* zetastatic(st, n, theta, initialsum): initialsum + sum over i in [st, n) of 1/(i+1)^theta.
 * YCSB adds every term: seconds from 10^8 terms on, hours at 2^40. Up to 2^16 terms
 * are added here one by one as YCSB does (equal to the last bit); a longer range adds
 * its first 1024 terms and the rest with kvb_zeta_tail, so any count costs microseconds. */
double kvb_zeta(uint64_t st, uint64_t n, double theta, double initialsum);
/* The sum over i in [a, b] of 1/i^theta in closed form (Euler-Maclaurin to the B4
 * term), 1 <= a <= b, theta in (0, 1). Off by less than 5.1e-3 * a^-(4 + theta):
 * under 1e-17 for a > 1024, i.e. below double rounding of the sum. */
double kvb_zeta_tail(uint64_t a, uint64_t b, double theta);

/* Items in [min, max], theta in (0, 1); O(1) for any count (see kvb_zeta). -1 on bad parameters. */
int kvb_zipf_init(struct kvb_zipf *z, uint64_t min, uint64_t max, double theta);
/* Same with zeta(max - min + 1, theta) supplied, e.g. computed once with kvb_zeta. */
int kvb_zipf_init_zetan(struct kvb_zipf *z, uint64_t min, uint64_t max, double theta, double zetan);
/* nextValue(): a draw over the item count given at init. */
uint64_t kvb_zipf_next(struct kvb_zipf *z, struct kvb_rng *r);
/* nextLong(itemcount): a draw over [min, min + itemcount - 1]. A count above the one
 * zeta covers extends zeta incrementally (the added terms only); a smaller count keeps
 * the larger zeta, as YCSB does by default (allowitemcountdecrease = false). */
uint64_t kvb_zipf_next_n(struct kvb_zipf *z, struct kvb_rng *r, uint64_t itemcount);

/* --- ScrambledZipfianGenerator: a zipfian draw over a fixed space of 10^10 items,
 * hashed into [min, max], so the popular keys are scattered and do not depend on
 * max. YCSB builds the inner generator as ZipfianGenerator(0, ITEM_COUNT), i.e.
 * 10^10 + 1 items, with the precomputed zeta below (for theta 0.99 only). */
#define KVB_SCRAMBLED_ITEM_COUNT 10000000000ull
#define KVB_SCRAMBLED_ZETAN 26.46902820178302

struct kvb_scrambled {
	struct kvb_zipf zipf;
	uint64_t min, itemcount;
};

int kvb_scrambled_init(struct kvb_scrambled *s, uint64_t min, uint64_t max);
/* min + fnvhash64(zipf draw) % (max - min + 1) */
uint64_t kvb_scrambled_next(struct kvb_scrambled *s, struct kvb_rng *r);

/* --- SkewedLatestGenerator: favours the most recently inserted keys. YCSB builds
 * its zipfian over basis.lastValue() items (latest at init, latest >= 1) and returns
 * latest - nextLong(latest), so results lie in [1, latest]: key 0 is never chosen
 * and latest is the most popular. */
struct kvb_latest {
	struct kvb_zipf zipf;
};

int kvb_latest_init(struct kvb_latest *l, uint64_t latest);
/* latest: the last acknowledged insert now; it may only grow between calls. */
uint64_t kvb_latest_next(struct kvb_latest *l, struct kvb_rng *r, uint64_t latest);

/* --- UniformLongGenerator over [lb, ub] inclusive. Unbiased (YCSB's
 * abs(nextLong()) % interval carries a bias below interval / 2^63). */
struct kvb_uniform {
	uint64_t lb, interval; /* interval 0 means all 2^64 values */
};

int kvb_uniform_init(struct kvb_uniform *u, uint64_t lb, uint64_t ub);
uint64_t kvb_uniform_next(const struct kvb_uniform *u, struct kvb_rng *r);

/* --- CounterGenerator: the insert sequence, shared by all threads. */
struct kvb_counter {
	_Atomic uint64_t next;
};

void kvb_counter_init(struct kvb_counter *c, uint64_t start);
uint64_t kvb_counter_next(struct kvb_counter *c);
/* Last number handed out (start - 1 before the first; wraps when start is 0). */
uint64_t kvb_counter_last(struct kvb_counter *c);

/* --- AcknowledgedCounterGenerator: like the counter, but last() only moves past a
 * number once it and every number before it have been acknowledged (the insert
 * completed), so reads never pick a key whose insert is still in flight. Pending
 * acknowledgements sit in a window of 2^20 slots; whoever wins a try-lock slides
 * last() over the acknowledged prefix, so an acknowledgement that arrives while
 * another thread slides may wait for the next one to be counted, as in YCSB. */
#define KVB_ACK_WINDOW (1u << 20)

struct kvb_ackcounter {
	struct kvb_counter c;
	_Atomic uint64_t limit;
	atomic_flag lock;
	atomic_uchar *window; /* KVB_ACK_WINDOW flags */
};

/* start >= 1 (last() is start - 1 until the first acknowledgement). -1 on a bad
 * start or no memory. */
int kvb_ackcounter_init(struct kvb_ackcounter *a, uint64_t start);
void kvb_ackcounter_destroy(struct kvb_ackcounter *a);
uint64_t kvb_ackcounter_next(struct kvb_ackcounter *a);
/* -1 when v's slot still holds an acknowledgement: more than KVB_ACK_WINDOW
 * numbers outstanding (YCSB throws "Too many unacknowledged insertion keys"). */
int kvb_ackcounter_ack(struct kvb_ackcounter *a, uint64_t v);
uint64_t kvb_ackcounter_last(struct kvb_ackcounter *a);

/* --- Request distributions and the key chooser (CoreWorkload.nextKeynum) */
enum kvb_dist { KVB_DIST_UNIFORM, KVB_DIST_ZIPFIAN, KVB_DIST_LATEST };

struct kvb_keychooser {
	enum kvb_dist dist;
	union {
		struct kvb_uniform uniform;
		struct kvb_scrambled zipfian;
		struct kvb_latest latest;
	} u;
};

/* insertstart 0, insertcount recordcount, as YCSB's defaults. recordcount >= 1
 * (>= 2 for latest, whose basis is recordcount - 1), insert_proportion in [0, 1].
 * -1 on bad parameters. Copy the initialised struct to give each thread its own. */
int kvb_keychooser_init(struct kvb_keychooser *kc, enum kvb_dist dist, uint64_t recordcount,
			uint64_t operationcount, double insert_proportion);
/* A key number in [0, last_inserted], redrawing any above it. last_inserted is the
 * last acknowledged insert (kvb_ackcounter_last of a counter started at
 * recordcount), so it is never below recordcount - 1. */
uint64_t kvb_choose_key(struct kvb_keychooser *kc, struct kvb_rng *r, uint64_t last_inserted);

/* --- Core workloads (YCSB's workloads/workload[a-f]) and the operation chooser */
enum kvb_op { KVB_OP_READ, KVB_OP_UPDATE, KVB_OP_INSERT, KVB_OP_RMW, KVB_OP_SCAN };

struct kvb_workload {
	char name;
	double read, update, insert, rmw, scan;
	enum kvb_dist dist;
	const char *desc;
};

/* 'A'..'F' (lower case accepted); E is listed so callers can refuse it by name.
 * NULL when unknown. */
const struct kvb_workload *kvb_workload_find(char name);
/* An enum kvb_op drawn like YCSB's DiscreteGenerator over the positive proportions;
 * -1 when none is positive. */
int kvb_workload_next_op(const struct kvb_workload *w, struct kvb_rng *r);
const char *kvb_op_name(int op);

#endif
