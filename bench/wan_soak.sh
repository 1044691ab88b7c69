#!/usr/bin/env bash
# wan_soak.sh: a long run over a bad WAN, for false failures and for how soon a dead peer is
# named. On scripts/netcluster.sh's user-space WAN (4 hosts, every path --rtt ± --jitter long
# with --loss), one communicator runs checked all_reduces for --minutes with the default
# heartbeat settings; then, in a second job, one rank is killed (SIGKILL) and the time until
# the others name it is measured against the heartbeat window (SHOAL_HEARTBEAT's auto).
#
#   bench/wan_soak.sh [--minutes 30] [--hosts 4] [--rate 100mbit] [--rtt 200ms] [--jitter 20ms]
#                     [--loss 1%] [--size 256K] [--out wan-soak]
#
# Prints one line per phase and exits non-zero on a false failure, a wrong element, or a kill
# not named within the window. Needs root and a build (make build).
set -Eeuo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
NC=$ROOT/scripts/netcluster.sh
MINUTES=30
HOSTS=4
RATE=100mbit
RTT=200ms
JITTER=20ms
LOSS=1%
SIZE=256K
OUT=wan-soak
PREFIX=ws
die() { echo "wan_soak.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --rtt) RTT=$2; shift 2 ;;
    --jitter) JITTER=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root: the hosts are network namespaces"
[[ -x $BIN/shoal-bench ]] || die "no $BIN/shoal-bench: run make build"
mkdir -p "$OUT"
cleanup() { "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
"$NC" up --prefix "$PREFIX" --hosts "$HOSTS" --rate "$RATE" --rtt "$RTT" --jitter "$JITTER" --loss "$LOSS" >"$OUT/up.log"
NS=$(for ((h = 0; h < HOSTS; h++)); do printf '%s-h%d,' "$PREFIX" "$h"; done)
NS=${NS%,}
job() {  # LOG TIMEOUT BENCH_ARGS...: a shoal-bench all_reduce job over the hosts
  local log=$1 limit=$2
  shift 2
  timeout -s KILL $((limit + 60)) "$BIN/shoal-run" --netns "$NS" -n "$HOSTS" --timeout "$limit" -- \
    "$BIN/shoal-bench" all_reduce -b "$SIZE" -e "$SIZE" -w 1 "$@" >"$log" 2>&1
}
# 1. A call's time here, to size the soak. An iteration is a timed call and its checked re-run:
# 1.7-2.4 calibrated calls' time in two soaks at 200 ms (the calibration is noisy on a busy
# machine), so 1.5 of them are allowed per iteration and the soak runs past --minutes.
job "$OUT/calibrate.log" 600 -n 5 -c 0 || die "the calibration job failed: $OUT/calibrate.log"
per_call=$(awk '$1 ~ /^[0-9]+$/ && NF > 5 { print $6 / 1e6; exit }' "$OUT/calibrate.log")
[[ -n $per_call ]] || die "no time in $OUT/calibrate.log"
iters=$(awk -v m="$MINUTES" -v t="$per_call" 'BEGIN { n = int(m * 60 / (1.5 * t)); print n < 1 ? 1 : n }')
echo "a $SIZE all_reduce takes $(awk -v t="$per_call" 'BEGIN { printf "%.2f", t }') s here; soaking with $iters checked calls"
# 2. The soak: one communicator, every call's result checked; any PeerFailure fails it.
start=$EPOCHREALTIME
if ! job "$OUT/soak.log" $((MINUTES * 60 * 3)) -n "$iters" -c 1; then
  tail -20 "$OUT/soak.log"
  die "the soak failed after $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s: $OUT/soak.log"
fi
grep -q '^# Out of bounds values : 0 OK' "$OUT/soak.log" || die "wrong elements: $OUT/soak.log"
! grep -qi 'PeerFailure\|sent nothing for\|failed' "$OUT/soak.log" || die "a failure was reported: $OUT/soak.log"
soak_s=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
echo "soak: $iters calls of $SIZE, each checked, over $soak_s s ($(awk -v s="$soak_s" 'BEGIN { printf "%.1f", s / 60 }') min): no false failure"
# 3. A kill: the last host's rank dies mid-run; the others must name it within the window. One
# process per host, joined by torchrun's variables (no launcher that would stop the job first).
port=$((29600 + RANDOM % 300))
pids=()
for ((h = 0; h < HOSTS; h++)); do
  ip netns exec "$PREFIX-h$h" env RANK=$h WORLD_SIZE="$HOSTS" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR=198.18.0.1 MASTER_PORT=$port timeout -s KILL 600 "$BIN/shoal-bench" all_reduce \
    -b "$SIZE" -e "$SIZE" -w 1 -n 100000 -c 0 >"$OUT/kill-h$h.log" 2>&1 &
  pids+=($!)
done
for ((i = 0; i < 1200; i++)); do grep -qs "^# rank 0 of $HOSTS" "$OUT/kill-h0.log" && break; sleep 0.1; done
sleep 5
victim=$(ip netns pids "$PREFIX-h$((HOSTS - 1))" | while read -r p; do
  [[ $(cat "/proc/$p/comm" 2>/dev/null) == shoal-bench ]] && echo "$p"; done | head -1)
[[ -n $victim ]] || { kill -KILL "${pids[@]}"; die "no shoal-bench on the last host"; }
t0=$EPOCHREALTIME
kill -KILL "$victim"
# What a surviving rank says: the connection closed or broke, or the
# rank went silent past the heartbeat window.
named="rank $((HOSTS - 1)) (closed the connection|probably died|sent nothing for)"
for ((i = 0; i < 1200; i++)); do grep -qE "$named" "$OUT/kill-h0.log" && break; sleep 0.05; done
t1=$EPOCHREALTIME
kill -KILL "${pids[@]}" 2>/dev/null || true
{ wait; } 2>/dev/null || true
grep -m1 -E "$named" "$OUT/kill-h0.log" || die "rank 0 does not name the killed rank: $OUT/kill-h0.log"
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
# SHOAL_HEARTBEAT=auto: SHOAL_TIMEOUT/2, at most 30 s (the timeout from the job's description)
window=$(grep -o 'timeout [0-9.]* s' "$OUT/kill-h0.log" | head -1 | awk '{ w = $2 / 2; print (w > 30 ? 30 : w) }')
echo "kill: rank $((HOSTS - 1)) named by the others $took s after SIGKILL (heartbeat window ${window:-?} s)"
if [[ -z $window ]] || ! awk -v t="$took" -v w="$window" 'BEGIN { exit !(t <= w) }'; then
  die "not named within the window"
fi
