/* lincheck: check history files and, when a key's history is not
 * linearizable, print the shortest prefix of it (by invocation) that already
 * is not, so that the culprit is near its end.
 *
 *   lincheck FILE...      exit 0 linearizable, 1 not, 2 bad input or budget
 *
 * One operation per line (lincheck.h lc_format):
 *
 *   c=CLIENT k=KEY op=KIND r=RESULT v=VALUE ttl=TTL_NS inv=NS cmp=NS [u=UNIQ] [cas=EXPECT]
 *   [d=DELTA [m=MODE [n=INITIAL]]]
 *
 *   op  P store (set), D delete, G get, A add, R replace, C cas, I incr,
 *       E decr (v: the new value told), T touch (ttl: the new TTL, 0 never),
 *       K gat (G and T in one)
 *   r   0 ok; 1 absent (G miss, D of no live item, C on no live item,
 *       I / E / T / K on no live item);
 *       2 not stored (A on a live item, R on none); 3 exists (C: another unique)
 *   cmp -1: the outcome is unknown (it may or may not have taken effect)
 *   u   stores, I and E: the unique the client was told; G, K: the unique read (absent or
 *       0: not recorded, the value alone is checked)
 *   cas C only: the unique the item had to have
 *   d   I and E only: the delta
 *   m   I and E: 1 vivify (a miss stores n= with ttl=), 2 touch (a hit gets
 *       ttl=), 3 both; absent: 0
 *
 * Lines without u= and cas= are the histories of plain PUT / DELETE / GET,
 * checked as they always were. A history whose uniques conflict across keys
 * (two stores told one unique, or a GET returning another key's) is reported
 * by its first line; the prefix shown is then that key's whole history. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

static int check_copy(const struct lc_op *ops, size_t n, struct lc_report *rep)
{
	struct lc_op *c = malloc(sizeof(*c) * (n ? n : 1));
	int r;

	if (!c)
		return -1;
	memcpy(c, ops, sizeof(*c) * n);
	r = lc_check(c, n, 20000000, rep);
	free(c);
	return r;
}

int main(int argc, char **argv)
{
	struct lc_op *ops = NULL, *k = NULL;
	size_t n = 0, cap = 0, m = 0, lo, hi;
	struct lc_report rep;
	char line[LC_LINE_MAX];
	int r;

	for (int a = 1; a < argc; a++) {
		FILE *f = fopen(argv[a], "r");

		if (!f) {
			perror(argv[a]);
			return 2;
		}
		while (fgets(line, sizeof(line), f)) {
			if (n == cap) {
				cap = cap ? 2 * cap : 1024;
				ops = realloc(ops, sizeof(*ops) * cap);
				if (!ops)
					return 2;
			}
			if (lc_parse(line, &ops[n])) {
				fprintf(stderr, "lincheck: %s: bad line: %s", argv[a], line);
				return 2;
			}
			n++;
		}
		fclose(f);
	}
	r = lc_check(ops, n, 20000000, &rep);
	printf("%zu operations, %lu keys, %lu states: %s\n", n, (unsigned long)rep.keys, (unsigned long)rep.states,
	       r == 1 ? "linearizable" : rep.why);
	if (r != 0)
		return r == 1 ? 0 : 2;
	/* ops are sorted by key, then invocation: take the bad key's */
	k = malloc(sizeof(*k) * n);
	for (size_t i = 0; k && i < n; i++)
		if (ops[i].key == rep.bad_key)
			k[m++] = ops[i];
	/* shortest failing prefix: [0, hi) fails, [0, lo) passes */
	lo = 0;
	hi = m;
	while (k && hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		struct lc_report r2;

		if (check_copy(k, mid, &r2) == 0)
			hi = mid;
		else
			lo = mid;
	}
	printf("shortest failing prefix of key %u: %zu operations; its last 12:\n", rep.bad_key, hi);
	for (size_t i = hi > 12 ? hi - 12 : 0; k && i < hi; i++) {
		lc_format(&k[i], line, sizeof(line));
		fputs(line, stdout);
	}
	return 1;
}
