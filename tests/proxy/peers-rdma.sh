#!/usr/bin/env bash
# kvproxy's peer suites over real RDMA: a kvserver on the RDMA device and
# kvproxy in front of it (rdma://), then the three suites that otherwise run
# against `kvproxy local://64` in the unit run:
#   - memccapable -a (libmemcached's text-protocol conformance tests),
#   - pymemcache's integration tests (pytest),
#   - compare.py (the same sessions to memcached 1.6.18 and to kvproxy).
# Run inside deploy/rdma-env (RDMA_ADDR names the device's address); deploy/test
# runs it in the same guest as the verbs suites.
#   tests/proxy/peers-rdma.sh [BUILD_DIR]      (default: build)
# A suite whose tool is not installed is reported as skipped (exit 77 of its
# runner) and fails the run only when KV_REQUIRE_PEERS=1. Exit 0 all ran and
# passed, 1 a failure (named), 2 usage.
set -uo pipefail
prog=peers-rdma
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
server_bin=$build/server/kvserver proxy_bin=$build/proxy/kvproxy
[ -x "$server_bin" ] && [ -x "$proxy_bin" ] || { echo "$prog: $server_bin or $proxy_bin missing: build first" >&2; exit 2; }
[ -n "${RDMA_ADDR:-}" ] || { echo "$prog: RDMA_ADDR is not set: run it through deploy/rdma-env" >&2; exit 2; }
port=${KV_PEERS_PORT:-7581}
log=$(mktemp /tmp/kv-peers-server.XXXXXX)
srv=""
cleanup() { [ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }; rm -f "$log"; }
trap cleanup EXIT

# 256 MiB: compare.py stores values up to 500 KiB and memccapable fills a few MiB.
"$server_bin" -l "$RDMA_ADDR" -p "$port" -m 256 >"$log" 2>&1 &
srv=$!
for _ in $(seq 600); do
  grep -q "listening on" "$log" && break
  kill -0 "$srv" 2>/dev/null || break
  sleep 0.1
done
grep -q "listening on" "$log" || { echo "$prog: FAIL: kvserver did not start:" >&2; sed 's/^/  kvserver: /' "$log" >&2; exit 1; }
export KVPROXY_TARGET="rdma://$RDMA_ADDR:$port"
echo "$prog: kvproxy $KVPROXY_TARGET ($RDMA_ENV, device $RDMA_DEV)"

bad="" skipped=""
suite() { # name, command...
  local name=$1 rc
  shift
  echo "== $prog: $name"
  "$@"
  rc=$?
  case $rc in
    0) ;;
    77) skipped="$skipped $name" ;;
    *) bad="$bad $name" ;;
  esac
}
suite memccapable bash "$here/memccapable.sh" "$proxy_bin"
suite pymemcache bash "$here/pymemcache.sh" "$proxy_bin"
suite compare /usr/bin/python3 "$here/compare.py" "$proxy_bin"
kill -0 "$srv" 2>/dev/null || bad="$bad kvserver-died"

[ -z "$skipped" ] || echo "$prog: skipped (not installed):$skipped"
if [ -n "${KV_REQUIRE_PEERS:-}" ] && [ -n "$skipped" ]; then bad="$bad$skipped"; fi
if [ -n "$bad" ]; then
  echo "$prog: FAIL:$bad" >&2
  sed 's/^/  kvserver: /' "$log" | tail -20 >&2
  exit 1
fi
echo "$prog: all peer suites passed against kvproxy over $RDMA_ENV"
