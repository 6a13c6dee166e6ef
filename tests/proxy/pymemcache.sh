#!/usr/bin/env bash
# pymemcache's integration tests (Debian's python3-pymemcache ships them:
# pymemcache/test/test_integration.py), run with pytest against kvproxy.
#   tests/proxy/pymemcache.sh KVPROXY
# KVPROXY_TARGET names the tier (default local://64: a whole server inside
# kvproxy; tests/proxy/peers-rdma.sh sets rdma://ADDR:PORT). test_tls is
# left out: it needs a TLS listener, and kvproxy, like a memcached built
# without TLS, has none. Exit 0 all passed, 1 a failure, 77 pymemcache or
# pytest not installed (deploy/setup.sh installs both).
set -uo pipefail
kvproxy=$1
target=${KVPROXY_TARGET:-local://64}
py=/usr/bin/python3 # Debian's, where python3-pymemcache and python3-pytest live
tests=$("$py" -c 'import os, pymemcache.test as t; print(os.path.dirname(t.__file__))' 2>/dev/null)/test_integration.py
if [ ! -f "$tests" ] || ! "$py" -c 'import pytest' 2>/dev/null; then
  echo "pymemcache's tests or pytest not installed: skipped"
  exit 77
fi
. "$(dirname "$0")/start-kvproxy.sh"
start_kvproxy "$kvproxy"
# Their own directory holds the conftest.py with --server/--port; nothing is
# written there (no cache, no bytecode).
cd "$(dirname "$tests")" || exit 1
PYTHONDONTWRITEBYTECODE=1 timeout 120 "$py" -m pytest -p no:cacheprovider -q -rs \
  -W ignore::pytest.PytestUnknownMarkWarning -m integration -k "not test_tls" \
  --server 127.0.0.1 --port "$port" test_integration.py
rc=$?
echo "pymemcache integration tests against kvproxy $target: pytest exit $rc (test_tls left out: no TLS listener)"
[ $rc = 0 ]
