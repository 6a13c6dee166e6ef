/* common/clock.h: the conversions every timer of client and server uses. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "clock.h"

Test(clock, ms_until_rounds_up_caps_and_is_zero_when_due)
{
	cr_expect_eq(kvi_ms_until(5000000, 5000000, 100), 0, "due now");
	cr_expect_eq(kvi_ms_until(5000000, 1000, 100), 0, "past");
	cr_expect_eq(kvi_ms_until(0, 1, 100), 1, "1 ns left is a 1 ms sleep, not 0 (a spin)");
	cr_expect_eq(kvi_ms_until(0, 1000000, 100), 1);
	cr_expect_eq(kvi_ms_until(0, 1000001, 100), 2);
	cr_expect_eq(kvi_ms_until(0, 250000000, 100), 100, "capped");
}

/* "Never" is UINT64_MAX to several callers (kvs_core_tick's next due time):
 * rounding it up overflowed to a 0 ms sleep, and the reclaimer thread woke
 * in a loop (15 % of a core). */
Test(clock, ms_until_never_is_the_cap_not_zero)
{
	cr_expect_eq(kvi_ms_until(0, UINT64_MAX, 1000), 1000);
	cr_expect_eq(kvi_ms_until(12345, UINT64_MAX, 1000), 1000);
	cr_expect_eq(kvi_ms_until(0, UINT64_MAX - 1, 7), 7);
}

Test(clock, abstime_in_normalises_nanoseconds)
{
	for (int ms = 0; ms < 3000; ms += 137) {
		struct timespec ts = kvi_abstime_in(CLOCK_MONOTONIC, ms);

		cr_expect(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L, "ms %d: tv_nsec %ld", ms, ts.tv_nsec);
	}
}
