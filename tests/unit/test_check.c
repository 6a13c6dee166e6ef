/* common/check.h: in a checking build (debug, sanitizers: KV_CHECK_INVARIANTS)
 * a broken invariant aborts; in a release build its condition is not even
 * evaluated. */
#include <criterion/criterion.h>
#include <signal.h>

#include "check.h"

#ifdef KV_CHECK_INVARIANTS
Test(check, a_broken_invariant_aborts, .signal = SIGABRT)
{
	volatile int x = 1;

	KVI_INVARIANT(x == 2, "x is two");
}

Test(check, a_kept_invariant_costs_nothing_more)
{
	volatile int x = 2;

	KVI_INVARIANT(x == 2, "x is two");
}
#else
Test(check, a_release_build_does_not_evaluate_the_condition)
{
	int n = 0;

	KVI_INVARIANT(++n == 5, "never evaluated");
	cr_expect_eq(n, 0);
}
#endif
