#!/bin/sh
# What libkvclient ships, checked on the libraries as built: the shared library
# exports only kvc_ symbols, and neither it nor the static archive carries the
# server's or the tests' code (common/CMakeLists.txt: kvserver_common and
# kvlocal_transport are never linked into libkvclient).
# Usage: libkvclient_symbols.sh NM READELF AR libkvclient.so libkvclient.a
set -u
if [ $# -ne 5 ]; then
	echo "usage: $0 NM READELF AR libkvclient.so libkvclient.a" >&2
	exit 2
fi
nm=$1 readelf=$2 ar=$3 so=$4 archive=$5
fail=0
bad() {
	echo "libkvclient_symbols: $*" >&2
	fail=1
}

# Server-only and test-only sources, and the symbols only they define.
objects='listener.c listener_ctrl.c listener_device.c listener_peer.c auth_admit.c u32map.c rmem_local.c'
symbols='kvi_listener_ kvi_auth_admit kvi_auth_verify kvi_auth_replay_ kvi_u32map_ kvi_rmem_local_'

# 1. The dynamic symbol table: kvc_ names only (KVC_EXPORT), besides the
# markers some linkers define in every shared object.
exports=$("$nm" -D --defined-only "$so" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }')
[ -n "$exports" ] || bad "$so exports nothing"
n=0
for s in $exports; do
	n=$((n + 1))
	case $s in
	kvc_*) ;;
	_init | _fini | _edata | _end | __bss_start) ;;
	*) bad "$so exports $s: only kvc_ symbols are public" ;;
	esac
done

# 2. The whole symbol table, local symbols included: nothing defined by a
# server-only or test-only source. A stripped library would pass vacuously,
# so a symbol every build has must be there.
all=$("$nm" "$so" | awk '{ print $NF }')
echo "$all" | grep -qx kvi_auth_prove || bad "$so has no local symbols to check (stripped?)"
for p in $symbols; do
	hits=$(echo "$all" | grep "^$p" | tr '\n' ' ')
	[ -z "$hits" ] || bad "$so carries $hits"
done

# 3. The source files the shared library was linked from (its FILE symbols)
# and the members of the static archive.
files=$("$readelf" -sW "$so" | awk '$4 == "FILE" { print $8 }')
echo "$files" | grep -qx auth.c || bad "$so names no source files to check (stripped?)"
members=$("$ar" t "$archive")
echo "$members" | grep -qx auth.c.o || bad "$archive lists no members to check"
for o in $objects; do
	echo "$files" | grep -qx "$o" && bad "$so was linked from $o"
	echo "$members" | grep -qx "$o.o" && bad "$archive holds $o.o"
done

[ $fail -eq 0 ] && echo "libkvclient_symbols: $n exported symbols, all kvc_; no server or test objects"
exit $fail
