#!/usr/bin/env bash
# libmemcached's conformance suite (memccapable, Debian's libmemcached-tools)
# against kvproxy, text protocol only (-a: kvproxy has no binary protocol,
# deprecated upstream). KVPROXY_TARGET names the tier (default local://64: a
# whole server inside kvproxy; tests/proxy/peers-rdma.sh sets rdma://...).
#   tests/proxy/memccapable.sh KVPROXY [PENDING_TEST...]
# PENDING_TEST: a test ("ascii flush") whose library call has not landed;
# its failure is reported, not counted. Exit 0 all passed, 1 a failure,
# 77 memccapable not installed (deploy/setup.sh installs it).
set -uo pipefail
kvproxy=$1
shift
command -v memccapable >/dev/null || { echo "memccapable not installed: skipped"; exit 77; }
. "$(dirname "$0")/start-kvproxy.sh"
start_kvproxy "$kvproxy"
out=$(timeout 60 memccapable -h 127.0.0.1 -p "$port" -a -t 5 2>&1)
echo "$out"
# Each test's part of the output runs from its name to the next one's; it
# passed when "[pass]" is in it (a failure may print the reply it got first).
python3 - "$out" "$@" <<'PY'
import re, sys
out, pending = sys.argv[1], set(sys.argv[2:])
parts = re.split(r"^(ascii [a-z ]*?[a-z]) {2,}", out, flags=re.M)[1:]
tests = list(zip(parts[0::2], parts[1::2]))
failed = [n for n, body in tests if "[pass]" not in body]
for n in failed:
    print(("PENDING %s (its library call has not landed)" if n in pending else "FAIL %s") % n)
bad = [n for n in failed if n not in pending]
print(f"memccapable -a: {len(tests) - len(failed)} passed, {len(bad)} failed, {len(failed) - len(bad)} pending")
sys.exit(1 if bad or not tests else 0)
PY
