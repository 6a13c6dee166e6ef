/* Clocks as one 64-bit count of nanoseconds, and the small conversions every
 * timer needs; defined once so that no file rounds its own way. Deadlines,
 * leases and timers use CLOCK_BOOTTIME, which counts a system suspend (a
 * client machine that sleeps through its operation's deadline or its lease
 * must find them over when it wakes, not go on posting into memory the
 * server has reused meanwhile); expiries CLOCK_REALTIME (layout.h
 * "Expiry"); CPU accounting a thread's CPU clock. Waits on condition
 * variables are relative (kvi_abstime_in names its own clock). */
#ifndef KVI_CLOCK_H
#define KVI_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

static inline uint64_t kvi_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define KVI_CLOCK_DEADLINE CLOCK_BOOTTIME

static inline uint64_t kvi_mono_ns(void)
{
	return kvi_clock_ns(KVI_CLOCK_DEADLINE);
}

/* The same, in seconds (the benches' rates and durations). */
static inline double kvi_mono_s(void)
{
	return (double)kvi_mono_ns() / 1e9;
}

/* A cheap, steadily rising count for timing short stretches of a thread's
 * own work (the CPU's time-stamp counter where there is one: a third of a
 * clock_gettime in a VM); its unit is not a nanosecond: convert by a ratio
 * measured against kvi_mono_ns over a longer stretch. */
static inline uint64_t kvi_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __rdtsc();
#else
	return kvi_mono_ns();
#endif
}

/* Whole milliseconds from now to `due` (ns of the same clock), rounded up
 * so that a sleep of that long does not wake just before it; 0 when due,
 * at most cap_ms. */
static inline int kvi_ms_until(uint64_t now, uint64_t due, int cap_ms)
{
	uint64_t left, ms;

	if (due <= now)
		return 0;
	left = due - now; /* may be "never" (UINT64_MAX): no rounding overflow */
	ms = left / 1000000u + (left % 1000000u != 0);
	return ms < (uint64_t)cap_ms ? (int)ms : cap_ms;
}

/* The absolute time ms from now on clock id, for pthread_cond_timedwait. */
static inline struct timespec kvi_abstime_in(clockid_t id, int ms)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

#endif
