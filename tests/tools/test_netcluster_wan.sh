#!/usr/bin/env bash
# End-to-end test of netcluster.sh's WAN mode (shoal-wan, src/wan): bad settings are refused by
# name and leave nothing behind; the round trip between two hosts is the --rtt set, within 5%
# + 0.2 ms, also per pair of regions of the `continents` layout; a NIC's goodput is its rate
# (less TCP/IP headers) within 5%, the slower of an asymmetric pair's up and down; under 1% loss
# BBR keeps most of the link; shoal-bench's all_reduce over the delayed links checks every
# element, on 2 connections per pair at 20 ms; at 500 ms +- 20 ms and 1% loss a 3 s heartbeat
# raises no false failure and names a rank frozen by SIGSTOP within 5 s; down leaves nothing. Exits 77 (ctest: skipped) without root or TUN devices.
# Usage: bash test_netcluster_wan.sh BIN_DIR [CASE...]   (ctest passes the build's bin directory;
#        CASEs, e.g. rtt heartbeat_500ms, run only those)
set -u
BIN=${1:?usage: test_netcluster_wan.sh BIN_DIR [CASE...]}
ONLY=" ${*:2} "
RUN=$BIN/shoal-run
BENCH=$BIN/shoal-bench
export SHOAL_WAN=$BIN/shoal-wan
NC=$(cd "$(dirname "$0")/../../scripts" && pwd)/netcluster.sh
source "$(dirname "$0")/skip.sh"
for f in "$RUN" "$BENCH" "$SHOAL_WAN" "$NC"; do
  [[ -x $f ]] || { echo "FAIL: $f does not exist or is not executable"; exit 1; }
done
[[ $(id -u) == 0 ]] || skip "needs root for network namespaces and TUN devices"
command -v ip >/dev/null || skip "needs iproute2 (ip)"
[[ -c /dev/net/tun ]] || skip "needs /dev/net/tun"
P=w$(($$ % 100000))
ip netns add "$P-probe" 2>/dev/null || skip "cannot create network namespaces (ip netns add failed)"
ip netns del "$P-probe"

D=$(mktemp -d /tmp/test_netcluster_wan.XXXXXX)
cleanup() {
  "$NC" down --prefix "$P" >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
t_start=$EPOCHREALTIME
passed=0
failed=()
check() {  # check NAME: runs the case function, which prints why it fails
  local out
  [[ $ONLY == "  " || $ONLY == *" ${1#case_} "* ]] || return 0
  if out=$("$@" 2>&1); then
    echo "PASS: ${1#case_}${out:+ ($out)}"
    passed=$((passed + 1))
  else
    echo "FAIL: ${1#case_}"
    echo "$out" | sed 's/^/    /'
    failed+=("${1#case_}")
  fi
}
# within VALUE WANT REL ABS: |VALUE - WANT| <= REL * WANT + ABS
within() { awk -v v="$1" -v w="$2" -v r="$3" -v a="$4" 'BEGIN { d = v - w; if (d < 0) d = -d; exit !(d <= r * w + a) }'; }
left_behind() { (ip netns list; ip -o link show) | grep -E "$P-(h[0-9]|w0)"; }
up() { "$NC" up --prefix "$P" "$@" >"$D/up" 2>&1 || { echo "up $* failed:"; cat "$D/up"; return 1; }; }
# rtt FROM TO: the probe's round trip in ms
rtt() {
  "$NC" bw "$1" "$2" --seconds 0.2 --prefix "$P" >"$D/bw" 2>&1 || { cat "$D/bw"; return 1; }
  awk '/^rtt to/ { print $4 }' "$D/bw"
}
# goodput FROM TO SECONDS [CC]: the stream's Mbit/s
goodput() {
  "$NC" bw "$1" "$2" --seconds "$3" ${4:+--cc "$4"} --prefix "$P" >"$D/bw" 2>&1 || { cat "$D/bw"; return 1; }
  awk '/^total:/ { printf "%.2f", $2 * 1000 }' "$D/bw"
}
# Payload a 1,500-byte packet carries: 20 B of IP, 20 of TCP, 12 of timestamps.
payload() { awk -v r="$1" 'BEGIN { printf "%.2f", r * 1448 / 1500 }'; }

case_refused() {
  local out
  for bad in "--rtt 10ms --jitter 20ms:jitter is at most the delay" "--loss 150%:loss must be below 100%" \
    "--layout mars:--layout takes continents or home" "--rtt 80:a duration looks like"; do
    # shellcheck disable=SC2086
    if out=$("$NC" up --prefix "$P" --hosts 2 --rate 100mbit ${bad%%:*} 2>&1); then
      echo "up ${bad%%:*} succeeded"; return 1
    fi
    grep -qF -- "${bad#*:}" <<<"$out" || { echo "up ${bad%%:*} said: $out"; return 1; }
    [[ -z $(left_behind) ]] || { echo "up ${bad%%:*} left behind: $(left_behind)"; return 1; }
  done
}

case_rtt() {
  up --hosts 2 --rate 100mbit --rtt 80ms || return 1
  local r
  r=$(rtt 0 1) || return 1
  within "$r" 80 0.05 0.2 || { echo "RTT $r ms for --rtt 80ms"; return 1; }
  printf 'RTT %s ms for 80; ' "$r"
  up --hosts 2 --rate 100mbit --wan || return 1
  r=$(rtt 0 1) || return 1
  within "$r" 0 0 0.5 || { echo "RTT $r ms without delay"; return 1; }
  printf 'RTT %s ms without delay' "$r"
}

case_shaping() {
  up --hosts 2 --rate 100mbit --wan || return 1
  local g want
  g=$(goodput 0 1 3) || return 1
  want=$(payload 100)
  within "$g" "$want" 0.05 0 || { echo "goodput $g Mbit/s at 100mbit, want $want +-5%"; return 1; }
  printf '100mbit: %s Mbit/s (payload %s); ' "$g" "$want"
  up --hosts 2 --up 20mbit --down 100mbit || return 1
  g=$(goodput 0 1 3) || return 1
  want=$(payload 20)
  within "$g" "$want" 0.05 0 || { echo "goodput $g Mbit/s from a 20mbit uplink, want $want +-5%"; return 1; }
  printf '20mbit up / 100mbit down: %s Mbit/s' "$g"
}

case_loss_bbr() {
  up --hosts 2 --rate 50mbit --rtt 20ms --loss 1% || return 1
  local g floor
  g=$(goodput 0 1 6 bbr) || return 1
  floor=$(awk -v p="$(payload 50)" 'BEGIN { printf "%.2f", 0.8 * p }')
  awk -v g="$g" -v f="$floor" 'BEGIN { exit !(g >= f) }' ||
    { echo "BBR at 1% loss: $g Mbit/s, want at least $floor (0.8 of the payload rate)"; return 1; }
  printf 'BBR, 50mbit, 20 ms, 1%% loss: %s Mbit/s' "$g"
}

case_continents() {
  up --layout continents --hosts 4 || return 1
  grep -q "3 regions" "$D/up" || { cat "$D/up"; return 1; }
  local pair want r out=""
  # host h is in region h mod 3: 0-1 70 ms, 0-2 140 ms, 1-2 200 ms; 0-3 inside region 0, 1 ms
  for pair in 0:1:70 0:2:140 1:2:200 0:3:1; do
    IFS=: read -r a b want <<<"$pair"
    r=$(rtt "$a" "$b") || return 1
    within "$r" "$want" 0.05 0.2 || { echo "hosts $a-$b: RTT $r ms, want $want"; return 1; }
    out+="$a-$b $r ms "
  done
  echo "$out"
}

case_all_reduce() {
  up --hosts 4 --rate 200mbit --rtt 20ms --loss 0.1% || return 1
  timeout -s KILL 60 "$RUN" --netns "$P-h0,$P-h1,$P-h2,$P-h3" -n 4 --timeout 50 -- "$BENCH" all_reduce \
    -b 1K -e 4M -f 16 -n 3 -w 1 -c 1 >"$D/ar.out" 2>&1 ||
    { echo "exit status $?:"; tail -30 "$D/ar.out"; return 1; }
  grep -q '^# Out of bounds values : 0 OK' "$D/ar.out" || { cat "$D/ar.out"; return 1; }
  # 20 ms measured by each pair's handshake: SHOAL_SOCKET_STREAMS=auto opens 2 connections.
  grep -q 'striped over up to 2 connections' "$D/ar.out" ||
    { echo "not 2 streams per pair at 20 ms:"; head -5 "$D/ar.out"; return 1; }
  awk '$1 == 4194304 { printf "4 MiB at 20 ms, 0.1%% loss: busbw %s GB/s", $8 }' "$D/ar.out"
}

# 500 ms +- 20 ms round trips and 1% loss with a 3 s heartbeat window: all_reduce runs without a
# false PeerFailure; then a rank frozen by SIGSTOP is named by the other within the window
# (+ 2 s for the last bytes in flight, the check's period and the exit).
case_heartbeat_500ms() {
  up --hosts 2 --rate 100mbit --rtt 500ms --jitter 20ms --loss 1% || return 1
  local ns="$P-h0,$P-h1"
  SHOAL_HEARTBEAT=3 timeout -s KILL 200 "$RUN" --netns "$ns" -n 2 --timeout 180 -- "$BENCH" all_reduce \
    -b 64K -e 256K -f 4 -n 3 -w 1 -c 1 >"$D/hb.out" 2>&1 ||
    { echo "false failure? exit status $?:"; tail -20 "$D/hb.out"; return 1; }
  grep -q '^# Out of bounds values : 0 OK' "$D/hb.out" || { cat "$D/hb.out"; return 1; }
  SHOAL_HEARTBEAT=3 timeout -s KILL 120 "$RUN" --netns "$ns" -n 2 --timeout 100 -- "$BENCH" all_reduce \
    -b 64K -e 64K -n 100000 -w 1 -c 0 >"$D/stop.out" 2>&1 &
  local job=$! frozen="" t0 t1 i
  # Once the communicator is up (its description printed), and a few calls later.
  for ((i = 0; i < 600; i++)); do grep -q '^# rank 0 of 2' "$D/stop.out" && break; sleep 0.1; done
  sleep 3
  frozen=$(ip netns pids "$P-h1" | while read -r pid; do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == shoal-bench ]] && echo "$pid"; done | head -1)
  [[ -n $frozen ]] || { kill -KILL "$job"; echo "no shoal-bench in host 1"; cat "$D/stop.out"; return 1; }
  t0=$EPOCHREALTIME
  kill -STOP "$frozen"
  for ((i = 0; i < 300; i++)); do grep -q 'rank 1 sent nothing for' "$D/stop.out" && break; sleep 0.05; done
  t1=$EPOCHREALTIME
  wait "$job"
  kill -KILL "$frozen" 2>/dev/null
  grep -q 'rank 1 sent nothing for' "$D/stop.out" ||
    { echo "the frozen rank is not named:"; tail -20 "$D/stop.out"; return 1; }
  local took
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  awk -v t="$took" 'BEGIN { exit !(t <= 5) }' ||
    { echo "named $took s after SIGSTOP, want within 5 s"; tail -5 "$D/stop.out"; return 1; }
  printf 'no false failure at 500 ms, 1%% loss; a frozen rank named after %s s' "$took"
}

case_down() {
  "$NC" down --prefix "$P" >"$D/down" 2>&1 || { cat "$D/down"; return 1; }
  [[ -z $(left_behind) ]] || { echo "left behind: $(left_behind)"; return 1; }
  ! pgrep -f "shoal-wan --spec /run/shoal-netcluster/$P.wan" >/dev/null || { echo "shoal-wan still runs"; return 1; }
}

check case_refused
check case_rtt
check case_shaping
check case_loss_bbr
check case_continents
check case_all_reduce
check case_heartbeat_500ms
check case_down
echo "$passed passed, ${#failed[@]} failed in $(awk -v a="$t_start" -v b="$EPOCHREALTIME" \
  'BEGIN { printf "%.1f", b - a }') s${failed[*]:+: ${failed[*]}}"
((${#failed[@]} == 0))
