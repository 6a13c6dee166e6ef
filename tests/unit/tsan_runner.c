/* Runs the threaded scenarios without Criterion, for ThreadSanitizer builds
 * (Criterion's runner cannot start under TSan). Any TSan report fails the run
 * through TSAN_OPTIONS=halt_on_error=1 (set by deploy/test). */
#include <stdio.h>

#include "scenarios.h"

int main(void)
{
	int passed = 0, failed = 0;

#define X(name, what)                                                   \
	do {                                                            \
		const char *why = name();                               \
		printf("[%s] %s (%s)%s%s\n", why ? "FAIL" : "PASS", #name, what, \
		       why ? ": " : "", why ? why : "");                \
		why ? failed++ : passed++;                              \
	} while (0);
	KVT_THREAD_SCENARIOS(X)
	KVT_DPATH_SCENARIOS(X)
#undef X
	printf("tsan: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
