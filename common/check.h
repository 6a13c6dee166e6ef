/* Invariant checks.
 *
 * KVI_INVARIANT(cond, what) asserts one of the invariants common/layout.h
 * states (or a module's own, stated next to it) where checking is cheap: O(1),
 * no I/O, no allocation. On in debug builds and in the sanitizer builds CI
 * runs (CMake: KV_CHECK_INVARIANTS, on by default there); compiled out in
 * release builds, where the condition is not evaluated.
 *
 * Only for our own state: what this process decided, posted or holds. Never
 * for a byte read from the region or a message from a peer -- any client may
 * write any byte of the region, so those are validated and answered
 * (docs/operations.md "Trust model"), never asserted. A failed check prints the invariant
 * and aborts (a bug of ours, found under test). */
#ifndef KVI_CHECK_H
#define KVI_CHECK_H

#ifdef KV_CHECK_INVARIANTS
void kvi_invariant_failed(const char *cond, const char *what, const char *file, int line)
	__attribute__((noreturn, cold));
#define KVI_INVARIANT(cond, what) \
	((cond) ? (void)0 : kvi_invariant_failed(#cond, (what), __FILE__, __LINE__))
#else
#define KVI_INVARIANT(cond, what) ((void)sizeof(!(cond)))
#endif

#endif
