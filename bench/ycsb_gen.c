/* YCSB generators in C; see ycsb_gen.h for what each one reproduces and how
 * CoreWorkload combines them. Written from a reading of YCSB's Java sources. */
#include "ycsb_gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- RNG */

uint64_t kvb_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *x)
{
	return kvb_mix64(*x += 0x9e3779b97f4a7c15ull);
}

void kvb_rng_seed(struct kvb_rng *r, uint64_t seed)
{
	/* Four consecutive splitmix64 outputs are distinct, so the state is never all zero. */
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t kvb_rng_next(struct kvb_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double kvb_rng_double(struct kvb_rng *r)
{
	return (double)(kvb_rng_next(r) >> 11) * 0x1.0p-53;
}

/* --- Key naming */

#define FNV_OFFSET_BASIS_64 0xcbf29ce484222325ull
#define FNV_PRIME_64 1099511628211ull

uint64_t kvb_fnvhash64(uint64_t v)
{
	uint64_t h = FNV_OFFSET_BASIS_64;

	/* Java shifts a signed long (>>), but only the 8 original bytes ever reach the
	 * low octet, so an unsigned shift yields the same octets. Java's long multiply
	 * wraps modulo 2^64 like this unsigned one. */
	for (int i = 0; i < 8; i++) {
		h ^= v & 0xff;
		h *= FNV_PRIME_64;
		v >>= 8;
	}
	/* Math.abs on the signed value: negate when the sign bit is set. Negating
	 * 2^63 gives 2^63 back, as Math.abs(Long.MIN_VALUE) stays negative. */
	if (h >> 63)
		h = 0 - h;
	return h;
}

/* "00" .. "99": a key's digits two at a time (every request formats its key). */
static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
				     "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
				     "8081828384858687888990919293949596979899";

size_t kvb_key_name(uint64_t keynum, int ordered, unsigned zeropad, char *out, size_t cap)
{
	char digits[20], *d = digits + sizeof(digits); /* filled from the end */
	uint64_t v = ordered ? keynum : kvb_fnvhash64(keynum);
	int neg = (int)(v >> 63); /* Long.toString prints the value as signed */
	uint64_t mag = neg ? 0 - v : v;
	size_t nd, vlen, fill, len, o = 0;

	while (mag >= 100) {
		d -= 2;
		memcpy(d, digit_pairs + 2 * (mag % 100), 2);
		mag /= 100;
	}
	if (mag >= 10) {
		d -= 2;
		memcpy(d, digit_pairs + 2 * mag, 2);
	} else {
		*--d = (char)('0' + mag);
	}
	nd = (size_t)(digits + sizeof(digits) - d);
	vlen = nd + (size_t)neg;
	fill = zeropad > vlen ? zeropad - vlen : 0; /* YCSB puts the zeros after "user", before any sign */
	len = 4 + fill + vlen;
	if (len + 1 > cap) {
		if (cap)
			out[0] = '\0';
		return 0;
	}
	memcpy(out, "user", 4);
	o = 4;
	memset(out + o, '0', fill);
	o += fill;
	if (neg)
		out[o++] = '-';
	memcpy(out + o, d, nd);
	out[o + nd] = '\0';
	return len;
}

/* --- Zipfian */

/* Up to ZETA_EXACT_TERMS terms are added one by one (YCSB's zetastatic, to
 * the last bit); a longer range adds its first ZETA_HEAD terms and takes the
 * rest in closed form, so that no count costs more than microseconds. */
#define ZETA_EXACT_TERMS (1u << 16)
#define ZETA_HEAD 1024u

static double zeta_terms(uint64_t first, uint64_t last, double theta, double sum)
{
	for (uint64_t i = first; i <= last; i++)
		sum += 1 / pow((double)i, theta);
	return sum;
}

double kvb_zeta_tail(uint64_t a, uint64_t b, double theta)
{
	/* f(x) = x^-theta. Euler-Maclaurin: the sum over [a, b] is the integral
	 * + (f(a) + f(b)) / 2 + (f'(b) - f'(a)) / 12 - (f3(b) - f3(a)) / 720 + R
	 * with f3 = f''', and |R| <= 2 zeta(5) / (2 pi)^5 * integral of |f5|
	 * = 2.12e-4 * (f4(a) - f4(b)) < 2.12e-4 * 24 * a^-(4 + theta), f4 and f5
	 * being the 4th and 5th derivatives (f4 is decreasing). The integral
	 * (b^(1-theta) - a^(1-theta)) / (1 - theta) is written with expm1 so
	 * that a theta close to 1 does not cancel it away. */
	double da = (double)a, db = (double)b, one = 1 - theta;
	double fa = pow(da, -theta), fb = pow(db, -theta);
	double integral = pow(da, one) * expm1(one * (log(db) - log(da))) / one;
	double d1a = -theta * fa / da, d1b = -theta * fb / db;
	double c3 = -theta * (theta + 1) * (theta + 2);
	double d3a = c3 * fa / (da * da * da), d3b = c3 * fb / (db * db * db);

	return integral + (fa + fb) / 2 + (d1b - d1a) / 12 - (d3b - d3a) / 720;
}

double kvb_zeta(uint64_t st, uint64_t n, double theta, double initialsum)
{
	/* Terms st + 1 .. n of the sum of 1/i^theta. */
	if (n <= st)
		return initialsum;
	if (n - st <= ZETA_EXACT_TERMS)
		return zeta_terms(st + 1, n, theta, initialsum);
	return zeta_terms(st + 1, st + ZETA_HEAD, theta, initialsum) + kvb_zeta_tail(st + ZETA_HEAD + 1, n, theta);
}

/* YCSB evaluates eta with the item count fixed at construction even after zeta
 * has grown for a larger count; kept so draws match its distribution. */
static double zipf_eta(const struct kvb_zipf *z)
{
	return (1 - pow(2.0 / (double)z->items, 1 - z->theta)) / (1 - z->zeta2theta / z->zetan);
}

int kvb_zipf_init_zetan(struct kvb_zipf *z, uint64_t min, uint64_t max, double theta, double zetan)
{
	/* Negated comparisons so NaN fails them too. */
	if (!(theta > 0 && theta < 1) || min > max || max - min + 1 == 0 ||
	    !(zetan > 0 && zetan < INFINITY))
		return -1;
	z->base = min;
	z->items = max - min + 1;
	z->countforzeta = z->items;
	z->theta = theta;
	z->alpha = 1.0 / (1.0 - theta);
	z->zeta2theta = kvb_zeta(0, 2, theta, 0);
	z->zetan = zetan;
	z->eta = zipf_eta(z);
	/* YCSB's constructor also draws once (nextValue()); with a private RNG that
	 * draw would only shift the sequence, so it is left out. */
	return 0;
}

int kvb_zipf_init(struct kvb_zipf *z, uint64_t min, uint64_t max, double theta)
{
	if (!(theta > 0 && theta < 1) || min > max || max - min + 1 == 0)
		return -1;
	return kvb_zipf_init_zetan(z, min, max, theta, kvb_zeta(0, max - min + 1, theta, 0));
}

uint64_t kvb_zipf_next_n(struct kvb_zipf *z, struct kvb_rng *r, uint64_t itemcount)
{
	double u, uz, d;
	uint64_t ret;

	if (itemcount == 0)
		return z->base;
	if (itemcount > z->countforzeta) {
		/* More items than zeta covers: add only the new terms, O(growth). */
		z->zetan = kvb_zeta(z->countforzeta, itemcount, z->theta, z->zetan);
		z->countforzeta = itemcount;
		z->eta = zipf_eta(z);
	}
	u = kvb_rng_double(r);
	uz = u * z->zetan;
	if (uz < 1.0)
		ret = 0;
	else if (uz < 1.0 + pow(0.5, z->theta))
		ret = 1;
	else {
		d = (double)itemcount * pow(z->eta * u - z->eta + 1, z->alpha);
		/* YCSB can land on itemcount itself when pow rounds to 1 (u within a few
		 * 2^-53 of 1) or with the degenerate eta of a 1- or 2-item generator that
		 * later grew; keep to the last item so results stay in range (and the
		 * cast defined). */
		ret = d < (double)itemcount ? (uint64_t)d : itemcount - 1;
	}
	if (ret > itemcount - 1) /* a count shrunk to 1 while zeta kept the larger one */
		ret = itemcount - 1;
	return z->base + ret;
}

uint64_t kvb_zipf_next(struct kvb_zipf *z, struct kvb_rng *r)
{
	return kvb_zipf_next_n(z, r, z->items);
}

/* --- ScrambledZipfian */

int kvb_scrambled_init(struct kvb_scrambled *s, uint64_t min, uint64_t max)
{
	if (min > max || max - min + 1 == 0)
		return -1;
	s->min = min;
	s->itemcount = max - min + 1;
	/* ZipfianGenerator(0, ITEM_COUNT, 0.99, ZETAN): ITEM_COUNT is passed as the
	 * inclusive max, so the inner space has 10^10 + 1 items. */
	return kvb_zipf_init_zetan(&s->zipf, 0, KVB_SCRAMBLED_ITEM_COUNT, KVB_ZIPFIAN_CONSTANT,
				   KVB_SCRAMBLED_ZETAN);
}

uint64_t kvb_scrambled_next(struct kvb_scrambled *s, struct kvb_rng *r)
{
	/* Java's % on a long: the hash is non-negative unless it is the Long.MIN_VALUE
	 * case, which no value in [0, 10^10] reaches, so unsigned % agrees. */
	return s->min + kvb_fnvhash64(kvb_zipf_next(&s->zipf, r)) % s->itemcount;
}

/* --- SkewedLatest */

int kvb_latest_init(struct kvb_latest *l, uint64_t latest)
{
	if (latest < 1)
		return -1;
	return kvb_zipf_init(&l->zipf, 0, latest - 1, KVB_ZIPFIAN_CONSTANT);
}

uint64_t kvb_latest_next(struct kvb_latest *l, struct kvb_rng *r, uint64_t latest)
{
	if (latest == 0) /* no basis yet; YCSB would go negative */
		return 0;
	/* nextLong(latest) lies in [0, latest - 1], so the result is in [1, latest]. */
	return latest - kvb_zipf_next_n(&l->zipf, r, latest);
}

/* --- Uniform */

int kvb_uniform_init(struct kvb_uniform *u, uint64_t lb, uint64_t ub)
{
	if (lb > ub)
		return -1;
	u->lb = lb;
	u->interval = ub - lb + 1;
	return 0;
}

uint64_t kvb_uniform_next(const struct kvb_uniform *u, struct kvb_rng *r)
{
	uint64_t x, threshold;

	if (u->interval == 0)
		return kvb_rng_next(r);
	/* Reject the 2^64 mod interval lowest values so every residue is equally likely. */
	threshold = (0 - u->interval) % u->interval;
	do
		x = kvb_rng_next(r);
	while (x < threshold);
	return u->lb + x % u->interval;
}

/* --- Counters */

void kvb_counter_init(struct kvb_counter *c, uint64_t start)
{
	atomic_init(&c->next, start);
}

uint64_t kvb_counter_next(struct kvb_counter *c)
{
	return atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
}

uint64_t kvb_counter_last(struct kvb_counter *c)
{
	return atomic_load_explicit(&c->next, memory_order_relaxed) - 1;
}

int kvb_ackcounter_init(struct kvb_ackcounter *a, uint64_t start)
{
	if (start < 1)
		return -1;
	a->window = calloc(KVB_ACK_WINDOW, sizeof(*a->window));
	if (!a->window)
		return -1;
	kvb_counter_init(&a->c, start);
	atomic_init(&a->limit, start - 1);
	atomic_flag_clear(&a->lock);
	return 0;
}

void kvb_ackcounter_destroy(struct kvb_ackcounter *a)
{
	free(a->window);
	a->window = NULL;
}

uint64_t kvb_ackcounter_next(struct kvb_ackcounter *a)
{
	return kvb_counter_next(&a->c);
}

int kvb_ackcounter_ack(struct kvb_ackcounter *a, uint64_t v)
{
	const uint64_t mask = KVB_ACK_WINDOW - 1;
	uint64_t limit, idx, n;

	/* Release: whoever slides the limit past v also sees what preceded the ack. */
	if (atomic_exchange_explicit(&a->window[v & mask], 1, memory_order_release))
		return -1;
	/* Only one thread slides; the others leave their flag for it or the next one. */
	if (atomic_flag_test_and_set_explicit(&a->lock, memory_order_acquire))
		return 0;
	limit = atomic_load_explicit(&a->limit, memory_order_relaxed); /* only lock holders write it */
	/* At most one pass over the window, as YCSB intends. */
	for (idx = limit + 1, n = 0; n < KVB_ACK_WINDOW; idx++, n++) {
		atomic_uchar *slot = &a->window[idx & mask];

		if (!atomic_load_explicit(slot, memory_order_acquire))
			break;
		atomic_store_explicit(slot, 0, memory_order_relaxed);
	}
	atomic_store_explicit(&a->limit, idx - 1, memory_order_release);
	atomic_flag_clear_explicit(&a->lock, memory_order_release);
	return 0;
}

uint64_t kvb_ackcounter_last(struct kvb_ackcounter *a)
{
	return atomic_load_explicit(&a->limit, memory_order_acquire);
}

/* --- Key chooser */

int kvb_keychooser_init(struct kvb_keychooser *kc, enum kvb_dist dist, uint64_t recordcount,
			uint64_t operationcount, double insert_proportion)
{
	double newkeys;
	uint64_t expectednewkeys;

	if (recordcount < 1 || !(insert_proportion >= 0 && insert_proportion <= 1))
		return -1;
	kc->dist = dist;
	switch (dist) {
	case KVB_DIST_UNIFORM:
		return kvb_uniform_init(&kc->u.uniform, 0, recordcount - 1);
	case KVB_DIST_ZIPFIAN:
		/* Same expression order as YCSB, truncated like its (int) cast; YCSB's
		 * operationcount is an int, ours is not capped at 2^31 - 1. */
		newkeys = (double)operationcount * insert_proportion * 2.0;
		if (!(newkeys < 0x1p63))
			return -1;
		expectednewkeys = (uint64_t)newkeys;
		if (recordcount + expectednewkeys < recordcount)
			return -1;
		return kvb_scrambled_init(&kc->u.zipfian, 0, recordcount + expectednewkeys);
	case KVB_DIST_LATEST:
		/* The basis is the acknowledged insert counter, started at recordcount:
		 * its last value is recordcount - 1. */
		if (recordcount < 2)
			return -1;
		return kvb_latest_init(&kc->u.latest, recordcount - 1);
	}
	return -1;
}

uint64_t kvb_choose_key(struct kvb_keychooser *kc, struct kvb_rng *r, uint64_t last_inserted)
{
	uint64_t k;

	do {
		switch (kc->dist) {
		case KVB_DIST_UNIFORM:
			k = kvb_uniform_next(&kc->u.uniform, r);
			break;
		case KVB_DIST_ZIPFIAN:
			k = kvb_scrambled_next(&kc->u.zipfian, r);
			break;
		default:
			k = kvb_latest_next(&kc->u.latest, r, last_inserted);
			break;
		}
	} while (k > last_inserted); /* not inserted (or not yet acknowledged): draw again */
	return k;
}

/* --- Workloads */

static const struct kvb_workload workloads[] = {
	{ 'A', 0.5, 0.5, 0, 0, 0, KVB_DIST_ZIPFIAN, "update heavy: 50% read, 50% update, zipfian" },
	{ 'B', 0.95, 0.05, 0, 0, 0, KVB_DIST_ZIPFIAN, "read mostly: 95% read, 5% update, zipfian" },
	{ 'C', 1.0, 0, 0, 0, 0, KVB_DIST_ZIPFIAN, "read only: 100% read, zipfian" },
	{ 'D', 0.95, 0, 0.05, 0, 0, KVB_DIST_LATEST, "read latest: 95% read, 5% insert, latest" },
	{ 'E', 0, 0, 0.05, 0, 0.95, KVB_DIST_ZIPFIAN,
	  "short ranges: 95% scan (length uniform 1..100), 5% insert, zipfian" },
	{ 'F', 0.5, 0, 0, 0.5, 0, KVB_DIST_ZIPFIAN,
	  "read-modify-write: 50% read, 50% read-modify-write, zipfian" },
};

const struct kvb_workload *kvb_workload_find(char name)
{
	if (name >= 'a' && name <= 'z')
		name = (char)(name - 'a' + 'A');
	for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
		if (workloads[i].name == name)
			return &workloads[i];
	return NULL;
}

int kvb_workload_next_op(const struct kvb_workload *w, struct kvb_rng *r)
{
	/* CoreWorkload.createOperationGenerator adds only positive proportions, in this order. */
	const struct {
		double weight;
		int op;
	} v[] = {
		{ w->read, KVB_OP_READ }, { w->update, KVB_OP_UPDATE }, { w->insert, KVB_OP_INSERT },
		{ w->scan, KVB_OP_SCAN }, { w->rmw, KVB_OP_RMW },
	};
	const size_t n = sizeof(v) / sizeof(v[0]);
	double sum = 0, val;
	int last = -1;

	for (size_t i = 0; i < n; i++)
		if (v[i].weight > 0) {
			sum += v[i].weight;
			last = v[i].op;
		}
	if (last < 0)
		return -1;
	/* DiscreteGenerator.nextValue: walk the normalised weights down from one draw. */
	val = kvb_rng_double(r);
	for (size_t i = 0; i < n; i++) {
		double pw;

		if (!(v[i].weight > 0))
			continue;
		pw = v[i].weight / sum;
		if (val < pw)
			return v[i].op;
		val -= pw;
	}
	/* Rounding left val at or above the last weight; YCSB would throw here. */
	return last;
}

const char *kvb_op_name(int op)
{
	switch (op) {
	case KVB_OP_READ:
		return "READ";
	case KVB_OP_UPDATE:
		return "UPDATE";
	case KVB_OP_INSERT:
		return "INSERT";
	case KVB_OP_RMW:
		return "READ-MODIFY-WRITE"; /* YCSB's measurement name */
	case KVB_OP_SCAN:
		return "SCAN";
	}
	return "?";
}
