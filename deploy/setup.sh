#!/usr/bin/env bash
# Install every Debian package that building, testing and the Soft-RoCE guest need.
# Idempotent: when everything is present it prints nothing and touches nothing.
# Run as root (or with sudo available) on Debian 12 or newer.
set -euo pipefail

# Real package names only (no virtual packages), so dpkg-query can tell what is missing.
pkgs=(
  # build
  build-essential cmake pkgconf
  libibverbs-dev librdmacm-dev libjemalloc-dev libxxhash-dev libssl-dev libcriterion-dev
  # fuzzing (tests/fuzz): clang and its runtime libraries (libFuzzer, ASan, UBSan)
  clang libclang-rt-dev
  # runtime RDMA userspace: providers (rxe), tools, perftest for comparisons
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
  # Soft-RoCE guest (deploy/softroce-vm)
  qemu-system-x86 busybox-static cpio kmod iproute2
  # kvbench's memcached driver, and the comparison run (deploy/compare)
  libmemcached-dev memcached gnuplot-nox
  # kvproxy's peer suites: memccapable (memcached's text-protocol conformance tests) and
  # pymemcache's integration tests (run with pytest; /usr/bin/python3, Debian's)
  libmemcached-tools python3-pymemcache python3-pytest
  # packaging (tests/package/run): a clean Debian root, the .deb's Depends, manual page checks
  debootstrap dpkg-dev groff-base man-db
  # kvserver --metrics (Prometheus endpoint), and the HTTP client its test scrapes with
  libmicrohttpd-dev curl
)

missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [ "${st:0:2}" = "ii" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]} (run as root or install sudo)" >&2; exit 1; }
  sudo=sudo
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >&2
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
