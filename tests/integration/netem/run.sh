#!/usr/bin/env bash
# Wire faults: tc netem on the RoCE traffic between kvserver and a verifying client.
#
#   tests/integration/netem/run.sh [BUILD_DIR]      (default: build)
#
# Runs inside the QEMU Soft-RoCE guest (deploy/softroce-vm; deploy/test calls it there). It
# changes the machine's routing, so anywhere else it only says why it skips, unless
# KV_NETEM_HOST=1 (a throw-away root machine with rdma_rxe, veth and sch_netem).
#
# The network: one veth cable, kvnA (client side, 10.77.0.1) <-> kvnB (server side, 10.77.0.2),
# an rxe device on each end, and netem on both ends' egress, so every RoCE packet (rdma_cm
# handshakes, control messages, one-sided READ/WRITE/atomics and their ACKs) crosses it.
# Why not two network namespaces: the guest's kernel (Debian 6.1) opens rxe's UDP
# socket (port 4791) and routes rxe's packets in the initial namespace only, so an rxe device
# on an interface in another namespace never receives (tested: rping gets ETIMEDOUT and not one
# packet crosses the veth). Both ends therefore stay in the initial namespace, and policy rules
# (below) make the kernel send A <-> B over the cable rather than through lo. (A VRF on the
# server's end does not do: rxe then sees packets arrive on the VRF device, not on its own.)
#
# Phases (KV_NETEM_SECS seconds each, default 3): base, then per fault the fault, and
# after-<fault> and later-<fault> with the fault removed. Faults: loss 1 %, loss 5 %, delay 5 ms +- 2 ms,
# duplicate 1 %, reorder 25 % (of packets sent at once, the others 5 ms late).
# Round 2: a second kvserver with a small heap and a 4-bucket index that
# must grow while a checker inserts 256 keys under 5 % loss, so that inserts wait for resizes and
# their commits go out late and retransmitted; it must lose no acknowledged write, fail only with
# the codes a fault explains, and grow at least once.
# Round 3: joins whose first handshake loses its packets (the request, or only the reply) end
# within 4 s by a second attempt, and leave no connection behind on the server.
# Passes when: the checker saw no wrong data and only the failures a fault explains
# (KVC_ETIMEDOUT, KVC_ESERVERGONE, KVC_EUNKNOWN; see netem_check.c), and after every fault
# one healed phase after it (after-, later-, and up to two retry- phases that run only when
# those fall short) reaches KV_NETEM_RECOVER percent (default 80) of a healthy throughput:
# base's, the best healed phase of the fault before it (the rate next to it in time: on a
# shared machine the load can change within the minute the phases take, either way), or
# the median of all healed phases of the run (the run's typical rate; the first healed
# phase also runs on a heap the slowed fault let the reclaimer empty, so rates fall a
# little within a fault's healed phases). A fault that leaves something broken falls
# short of all three.
set -uo pipefail
prog=netem

build=${1:-build}
secs=${KV_NETEM_SECS:-3}
recover=${KV_NETEM_RECOVER:-80}
port=${KV_NETEM_PORT:-7491}
server_bin=$build/server/kvserver
check_bin=$build/tests/integration/netem/netem_check
cli_bin=$build/client/kvcli
shim=$build/tests/integration/netem/libnetem_bind_src.so

say()  { echo "$prog: $*"; }
fail() { echo "$prog: FAIL: $*" >&2; exit 1; }

if [ "${SOFTROCE_VM:-}" != 1 ] && [ "${KV_NETEM_HOST:-}" != 1 ]; then
  say "skipped: it rewires routing, so it runs only in the QEMU guest (deploy/rdma-env with KV_RDMA_ENV=guest, or deploy/test there); KV_NETEM_HOST=1 runs it on this machine anyway"
  exit 0
fi
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -ge 1 ] || fail "KV_NETEM_SECS must be a whole number of seconds >= 1 (got '$secs')"
[[ $recover =~ ^[0-9]+$ ]] && [ "$recover" -le 100 ] || fail "KV_NETEM_RECOVER must be a percentage 0..100 (got '$recover')"
[ -x "$server_bin" ] && [ -x "$check_bin" ] && [ -x "$cli_bin" ] && [ -f "$shim" ] ||
  fail "$server_bin, $check_bin, $cli_bin or $shim missing: build first (cmake --build $build)"
case "$shim" in /*) ;; *) shim=$PWD/$shim;; esac
# The checks must catch what they are for before they are trusted with a verdict.
"$check_bin" --self-test >/dev/null 2>&1 || fail "netem_check --self-test: its checks miss wrong values"
[ "$(id -u)" -eq 0 ] || fail "needs root (it adds interfaces, rxe devices and qdiscs)"
for m in veth sch_netem rdma_rxe; do
  [ -d "/sys/module/$m" ] || modprobe -q "$m" 2>/dev/null ||
    fail "kernel module $m is not loaded (the guest loads it at boot: delete the softroce-vm cache to rebuild it with deploy/softroce-vm's current recipe)"
done
command -v tc >/dev/null || fail "tc not found (install iproute2)"

work=$(mktemp -d "${TMPDIR:-/tmp}/netem.XXXXXX")
srv_pid="" chk_pid=""
cleanup() {
  [ -z "$chk_pid" ] || kill "$chk_pid" 2>/dev/null
  [ -z "$srv_pid" ] || kill "$srv_pid" 2>/dev/null
  wait 2>/dev/null
  rdma link delete kvnrxeA 2>/dev/null; rdma link delete kvnrxeB 2>/dev/null
  ip link delete kvnA 2>/dev/null
  for p in 5 6 7 8; do ip rule del pref $p 2>/dev/null; done
  if [ -n "${rules_moved:-}" ]; then ip rule add pref 0 lookup local; ip rule del pref 100 lookup local; fi
  # KV_NETEM_KEEP=DIR keeps the server's and the checker's logs there (debugging).
  [ -z "${KV_NETEM_KEEP:-}" ] || cp "$work"/*.log "$work"/*.out "$work"/*.err "$KV_NETEM_KEEP"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the network ----------------------------------------------------------------------------
# Both addresses are local to this kernel, which would normally short-cut A <-> B through lo.
# Policy rules send them over the cable instead, before the local table is consulted:
#   "from A to B iif lo": the client's traffic (rdma_cm resolution, rxe's packets). The client
#     binds source A (bind_src.c) so that kvserver's own loopback connection to B, which has
#     no source address, stays on the server's device as the server requires;
#   "to A iif lo": the server's answers;
#   "to A oif kvnB" / "to B oif kvnA": rdma_cm's check, on accepting a connection, that the way
#     back to the client leaves through the rxe device's own interface (else it rejects, 28).
# Arriving packets match none of these and are delivered locally; their source is one of our
# own addresses, which accept_local permits.
A=10.77.0.1 B=10.77.0.2 ta=177 tb=178
ip link add kvnA type veth peer name kvnB || fail "cannot create a veth pair"
ip addr add $A/32 dev kvnA && ip addr add $B/32 dev kvnB || fail "cannot address the veth pair"
for d in all kvnA kvnB; do
  echo 1 > /proc/sys/net/ipv4/conf/$d/accept_local; echo 0 > /proc/sys/net/ipv4/conf/$d/rp_filter
done
ip link set kvnA up && ip link set kvnB up
ip route add $B dev kvnA src $A table $ta && ip route add $A dev kvnB src $B table $tb ||
  fail "cannot add the veth routes"
ip rule add pref 5 to $A oif kvnB lookup $tb && ip rule add pref 6 to $B oif kvnA lookup $ta &&
  ip rule add pref 7 from $A to $B iif lo lookup $ta && ip rule add pref 8 to $A iif lo lookup $tb &&
  ip rule add pref 100 lookup local && ip rule del pref 0 lookup local && rules_moved=1 ||
  fail "cannot add the policy rules"
# Static neighbours: the scenario is about RoCE packets, not about ARP losing its answers.
ip neigh replace $B lladdr "$(cat /sys/class/net/kvnB/address)" dev kvnA nud permanent &&
  ip neigh replace $A lladdr "$(cat /sys/class/net/kvnA/address)" dev kvnB nud permanent ||
  fail "cannot add static neighbours"
rdma link add kvnrxeA type rxe netdev kvnA && rdma link add kvnrxeB type rxe netdev kvnB ||
  fail "cannot add rxe devices on the veth pair"
for _ in $(seq 50); do
  grep -q ACTIVE /sys/class/infiniband/kvnrxeB/ports/1/state 2>/dev/null &&
    grep -q ACTIVE /sys/class/infiniband/kvnrxeA/ports/1/state 2>/dev/null && break
  sleep 0.1
done

# Netem on both ends' egress: both directions see the fault.
fault_on()  { local d; for d in kvnA kvnB; do tc qdisc replace dev $d root netem "$@" || return 1; done; }
fault_off() { local d; for d in kvnA kvnB; do tc qdisc del dev $d root 2>/dev/null; done; return 0; }
# What each side sent and received, for a run that went wrong.
diag() {
  local d c
  for d in kvnrxeA kvnrxeB; do
    printf '%s:' "$d"
    for c in sent_pkts rcvd_pkts rcvd_seq_err duplicate_request out_of_seq_request retry_exceeded_err \
             rcvd_rnr_err send_rnr_err completer_retry_err; do
      printf ' %s=%s' "$c" "$(cat /sys/class/infiniband/$d/ports/1/hw_counters/$c 2>/dev/null)"
    done
    echo
  done
  ip -s -o link show kvnA; ip -s -o link show kvnB
  grep '^Udp:' /proc/net/snmp
}
sent_pkts() { tc -s qdisc show dev "$1" | awk '/Sent/ {print $4; exit}'; }

# --- server and checker -----------------------------------------------------------------------
# start_server LOG PORT ARGS...: kvserver on B, waited for.
start_server() {
  local log=$1 p=$2; shift 2
  "$server_bin" -l $B -p "$p" "$@" -v > "$work/$log" 2>&1 &
  srv_pid=$!
  for _ in $(seq 600); do
    grep -q "listening on" "$work/$log" && break
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "listening on" "$work/$log" || { cat "$work/$log" >&2; fail "kvserver did not start on $B"; }
}
# start_checker NAME PORT ARGS...: netem_check reading phase names from fd 7, output in NAME.out/.err.
start_checker() {
  local name=$1 p=$2; shift 2
  rm -f "$work/phases"
  mkfifo "$work/phases"
  # The shim comes before ASan's runtime in the library list of an ASan build: allow that.
  KV_NETEM_SRC=$A LD_PRELOAD=$shim ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    "$check_bin" -s "$B:$p" "$@" < "$work/phases" > "$work/$name.out" 2> "$work/$name.err" &
  chk_pid=$!
  exec 7> "$work/phases"
  for _ in $(seq 600); do
    grep -q READY "$work/$name.out" && break
    kill -0 "$chk_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q READY "$work/$name.out" || { cat "$work/$name.err" >&2; diag >&2; fail "netem_check could not connect to $B:$p"; }
}
# stop_pair: end the checker (its exit status is returned) and the server.
stop_pair() {
  local rc
  echo end >&7
  exec 7>&-
  wait "$chk_pid"; rc=$?
  chk_pid=""
  kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; srv_pid=""
  return $rc
}
start_server server.log "$port" -m 64
start_checker check "$port"

# Prove the path: with a pass-through netem on the client's side, the traffic must show there.
fault_on delay 0ms || fail "tc netem refused a qdisc on kvnA/kvnB"
phase() { echo "$1" >&7; sleep "$secs"; }
phase base
[ "$(sent_pkts kvnA)" -gt 100 ] 2>/dev/null ||
  fail "the RoCE traffic does not cross the veth (kvnA sent $(sent_pkts kvnA) packets): netem would test nothing"
fault_off

faults=("loss1:loss 1%" "loss5:loss 5%" "delay:delay 5ms 2ms" "dup1:duplicate 1%" "reorder:delay 5ms reorder 25% 50%")
# A phase's PHASE line is printed when the next phase begins: wait_rate waits for it.
rate() { awk -v p="$1" '$1 == "PHASE" && $2 == p { for (i = 3; i <= NF; i++) if ($i ~ /^ops_per_s=/) { sub(/.*=/, "", $i); print $i } }' "$work/check.out"; }
wait_rate() { local _; for _ in $(seq 50); do [ -n "$(rate "$1")" ] && break; sleep 0.1; done; rate "$1"; }
best() { local m=0 v; for v in "$@"; do [ "${v:-0}" -le "$m" ] || m=$v; done; echo "$m"; }
base="" ref=""
for f in "${faults[@]}"; do
  name=${f%%:*}
  # shellcheck disable=SC2086  # the netem arguments are words
  fault_on ${f#*:} || fail "tc netem ${f#*:} failed"
  phase "$name"
  fault_off
  phase "after-$name"
  phase "later-$name"
  # Recovered in a healed phase after the fault? One 1 s timeout (the server's deadline) or
  # a burst of host load can sink a phase or two; a fault that leaves something broken sinks
  # them all. So up to two more healed phases before that verdict. retry1 always starts (its
  # start ends later-$name) and is cut short when it is not needed.
  echo "retry1-$name" >&7
  [ -n "$base" ] || base=$(wait_rate base)
  [ -n "$ref" ] || ref=$base
  for n in 1 2; do
    r=$(best "$(wait_rate "after-$name")" "$(wait_rate "later-$name")" "$(rate "retry1-$name")")
    low=$(( ref < base ? ref : base ))
    [ "${low:-0}" -gt 0 ] && [ $(( r * 100 / low )) -lt "$recover" ] || break
    say "after '${f#*:}': at best $r ops/s so far, $(( r * 100 / low )) % of $low: one more healed phase"
    sleep "$secs"
    [ "$n" = 2 ] || { echo "retry2-$name" >&7; wait_rate "retry1-$name" >/dev/null; }
  done
  ref=$(best "$r" "$(rate "retry1-$name")" "$(rate "retry2-$name")")
done
stop_pair; st=$?

# --- verdict ----------------------------------------------------------------------------------
cat "$work/check.out"
if [ -s "$work/check.err" ]; then
  echo "$prog: checker messages (first 60):"; head -n 60 "$work/check.err"
fi
bad=0
case $st in
  0) ;;
  3) echo "$prog: FAIL: wrong data under faults (see VIOLATION lines)" >&2; bad=1;;
  4) echo "$prog: FAIL: a failure with a code no network fault explains (see 'unexpected' lines)" >&2; bad=1;;
  *) echo "$prog: FAIL: netem_check exited with status $st" >&2; bad=1;;
esac
if [ -z "$base" ] || [ "$base" -le 0 ]; then
  echo "$prog: FAIL: no operation succeeded in the base phase" >&2; bad=1
else
  # The run's typical healthy rate: the median of every healed phase. Host load that
  # changes during the run moves it with the phases; a fault that breaks something
  # for good sinks only the phases after that fault, which stay below it.
  healed=$(awk '$1 == "PHASE" && $2 ~ /^(after|later|retry[12])-/ { sub(/.*=/, "", $5); print $5 }' "$work/check.out" | sort -n)
  n=$(echo "$healed" | grep -c .)
  median=$(echo "$healed" | sed -n "$(( (n + 1) / 2 ))p")
  ref=$base what="base"
  for f in "${faults[@]}"; do
    name=${f%%:*}
    r=$(best "$(rate "after-$name")" "$(rate "later-$name")" "$(rate "retry1-$name")" "$(rate "retry2-$name")")
    pct=$(( ref > 0 ? r * 100 / ref : 0 )) pctb=$(( r * 100 / base )) pctm=$(( ${median:-0} > 0 ? r * 100 / median : 0 ))
    if [ "$pct" -lt "$recover" ] && [ "$pctb" -lt "$recover" ] && [ "$pctm" -lt "$recover" ]; then
      echo "$prog: FAIL: throughput after removing '${f#*:}' is at best $r ops/s, $pctb % of base $base ops/s, $pct % of $ref ops/s ($what) before it and $pctm % of the run's median healed phase $median ops/s (want >= $recover % of one)" >&2
      bad=1
    else
      echo "$prog: after '${f#*:}': ${r} ops/s = $pctb % of base $base ops/s, $pct % of $ref ops/s ($what) before it, $pctm % of the median healed phase ($median ops/s)"
    fi
    ref=$r what="after '${f#*:}'"
  done
fi
# --- round 2: loss while inserts wait for resizes -------------------------------------------
# A PUT that waited (for a new index, or for memory) posts its commit late in its deadline,
# and lost packets delay it by retransmissions: an acknowledged PUT must still never be lost
# nor its key left unreadable. A small heap of small segments, an index of 4 buckets that
# must grow while 256 keys go in, and 5 % loss from the start.
start_server server2.log $(( port + 1 )) -m 8 --buckets 4 --segment-size 64
start_checker grow $(( port + 1 )) --keys 256
fault_on loss 5% || fail "tc netem loss 5% failed"
echo loss5-grow >&7; sleep $(( 2 * secs ))
fault_off
echo after-grow >&7; sleep "$secs"
stop_pair; st=$?
cat "$work/grow.out"
resizes=$(grep -c "event=resize_end" "$work/server2.log")
[ -s "$work/grow.err" ] && { echo "$prog: round 2 checker messages (first 30):"; head -n 30 "$work/grow.err"; }
case $st in
  0) echo "$prog: round 2: $resizes resizes under 5 % loss, no acknowledged write lost";;
  3) echo "$prog: FAIL: round 2 (resizes under loss): wrong data (see VIOLATION lines)" >&2; bad=1;;
  4) echo "$prog: FAIL: round 2 (resizes under loss): a failure no network fault explains" >&2; bad=1;;
  *) echo "$prog: FAIL: round 2: netem_check exited with status $st" >&2; bad=1;;
esac
if [ "$resizes" -lt 1 ]; then
  echo "$prog: FAIL: round 2: the index never grew, so no insert waited for a resize" >&2; bad=1
fi

# --- round 3: joins whose handshake packets are lost ----------------------------------------
# The kernel's CM sends a lost connect request (or reply) again only after ~6 s, longer than a
# whole default join (5 s); the join itself makes a second attempt after 1 s of silence
# (common/rmem_verbs_join.c "Attempts"). Each case drops every packet for 0.3 s from the join's
# start: both ways (the request is lost), or only the server's (its reply is lost: the server
# set up a connection that the losing attempt's reject must take down). The join must end within
# 4 s, and the server serve on with no leftover client.
start_server server3.log $(( port + 2 )) -m 8
for c in "both:kvnA kvnB" "reply:kvnB"; do
  for d in ${c#*:}; do tc qdisc replace dev "$d" root netem loss 100% || fail "tc netem loss 100% failed"; done
  ( sleep 0.3; fault_off ) &
  t0=$(date +%s%N)
  KV_NETEM_SRC=$A LD_PRELOAD=$shim ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    "$cli_bin" -s "$B:$(( port + 2 ))" -t 5000 put "join-${c%%:*}" v > "$work/join.err" 2>&1; jrc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  wait $!
  if [ "$jrc" != 0 ] || [ "$ms" -gt 4000 ]; then
    echo "$prog: FAIL: round 3: a join whose first handshake lost its ${c%%:*} packets: exit $jrc after $ms ms (want 0 within 4000 ms): $(cat "$work/join.err")" >&2; bad=1
  else
    echo "$prog: round 3: a join whose first handshake lost its ${c%%:*} packets ended in $ms ms"
  fi
done
# The abandoned attempts' connections are gone: only kvserver's own clients stay.
sleep 0.5
left=$(grep -c "event=client_joined" "$work/server3.log") gone=$(grep -c "event=client_left" "$work/server3.log")
own=$(grep "event=client_joined" "$work/server3.log" | grep -vc "role=client")
if [ $(( left - gone - own )) -ne 0 ]; then
  echo "$prog: FAIL: round 3: $left clients joined, $gone left, $own are kvserver's own: an abandoned handshake's connection stayed" >&2; bad=1
else
  echo "$prog: round 3: $left joins (abandoned handshakes included), $gone left, $own kvserver's own: none stayed"
fi
kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; srv_pid=""

echo "$prog: rxe counters at the end:"; diag
if [ "$bad" = 0 ]; then
  echo "$prog: passed"
else
  echo "$prog: kvserver's log (last 40 lines):"; tail -n 40 "$work/server.log"
  [ ! -f "$work/server2.log" ] || { echo "$prog: round 2 kvserver's log (last 40 lines):"; tail -n 40 "$work/server2.log"; }
fi
exit "$bad"
