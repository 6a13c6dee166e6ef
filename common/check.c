#include "check.h"

#ifdef KV_CHECK_INVARIANTS
#include <stdio.h>
#include <stdlib.h>

void kvi_invariant_failed(const char *cond, const char *what, const char *file, int line)
{
	/* The one place the library may print: a broken invariant of its own
	 * (check.h), in a checking build only, just before aborting. */
	fprintf(stderr, "%s:%d: invariant broken: %s (%s)\n", file, line, what, cond);
	abort();
}
#else
typedef int kvi_check_unused; /* ISO C wants a translation unit to declare something */
#endif
