export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
for t in build-asan/tests/integration/test_*; do echo "== $t"; "$t" --jobs 2 2>&1 | grep -E "FAIL|Synthesis|Assert|expected" | head -20; done
