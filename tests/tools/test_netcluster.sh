#!/usr/bin/env bash
# End-to-end test of the emulated cluster (scripts/netcluster.sh) and of multi-host launch
# (shoal-run --netns): 4 hosts x 2 NICs at 1 Gbit/s; the NICs are shaped (a shaped stream is
# near 1 Gbit/s, two rails near twice that, loopback much faster); shoal-run gives each rank its
# host's namespace and torchrun's per-host variables; shoal-bench all_reduce and all_gather
# over 8 ranks check every element and see 4 hosts of 2 ranks; a host cut off in the middle of a
# collective is declared failed by heartbeats (SHOAL_HEARTBEAT). Everything is torn down at the
# end, also on failure. Exits 77 (ctest: skipped) without root or network namespaces.
# Usage: bash test_netcluster.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
BIN=${1:?usage: test_netcluster.sh BIN_DIR}
RUN=$BIN/shoal-run
BENCH=$BIN/shoal-bench
NC=$(cd "$(dirname "$0")/../../scripts" && pwd)/netcluster.sh
source "$(dirname "$0")/skip.sh"
for f in "$RUN" "$BENCH" "$NC"; do
  [[ -x $f ]] || { echo "FAIL: $f does not exist or is not executable"; exit 1; }
done

[[ $(id -u) == 0 ]] || skip "needs root for network namespaces, veth, bridges and tc"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs iproute2 (ip, tc)"
[[ -x /usr/bin/python3 ]] || command -v python3 >/dev/null || skip "needs python3 for the throughput probe"
# A prefix of this run's own, so that a developer's cluster (prefix shoal) is left alone.
P=t$(($$ % 100000))
probe=$P-probe
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces (ip netns add failed)"
ip netns del "$probe"
ip link add "$P-pbr" type bridge 2>/dev/null || skip "cannot create bridges"
ip link del "$P-pbr"

D=$(mktemp -d /tmp/test_netcluster.XXXXXX)
MARK=netclustertest_$$_$RANDOM
cleanup() {
  local pids
  pids=$(pgrep -f "$MARK")
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  "$NC" down --prefix "$P" >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # through the EXIT trap
GUARD=(timeout -s KILL 40)
t_start=$EPOCHREALTIME
passed=0
failed=()
check() {  # check NAME COMMAND...: runs the case function, which prints why it fails
  local out
  if out=$("$@" 2>&1); then
    echo "PASS: ${1#case_}${out:+ ($out)}"
    passed=$((passed + 1))
  else
    echo "FAIL: ${1#case_}"
    echo "$out" | sed 's/^/    /'
    failed+=("${1#case_}")
  fi
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }  # a >= b, for decimals

HOSTS=$P-h0,$P-h1,$P-h2,$P-h3

case_up() {
  "$NC" up --hosts 4 --nics 2 --rate 1gbit --prefix "$P" >"$D/up" 2>&1 || { cat "$D/up"; return 1; }
  # Idempotent: a second `up` recreates the same cluster.
  "$NC" up --hosts 4 --nics 2 --rate 1gbit --prefix "$P" >"$D/up" 2>&1 || { cat "$D/up"; return 1; }
  "$NC" status --prefix "$P" >"$D/status" 2>&1 || { cat "$D/status"; return 1; }
  local shaped
  shaped=$(grep -cE '^  eth[01] +198\.18\.[01]\.[1-4]/24 +out 1Gbit +in 1Gbit' "$D/status")
  [[ $shaped == 8 ]] || { echo "expected 8 NICs shaped to 1Gbit both ways, status says:"; cat "$D/status"; return 1; }
  [[ $(ip netns list | grep -c "^$P-h[0-3]\b") == 4 ]] || { echo "expected 4 namespaces"; ip netns list; return 1; }
}

case_shaping() {
  # One 1 s stream per probe: loopback (unshaped), host 0 -> host 1 on rail 0, then on both rails.
  local lo one two
  "$NC" bw --loopback 0 --seconds 1 --prefix "$P" >"$D/bw.lo" 2>&1 &&
    "$NC" bw 0 1 --rails 0 --seconds 1 --prefix "$P" >"$D/bw.one" 2>&1 &&
    "$NC" bw 0 1 --rails 0,1 --seconds 1 --prefix "$P" >"$D/bw.two" 2>&1 ||
    { echo "a throughput probe failed:"; cat "$D"/bw.*; return 1; }
  lo=$(awk '/^total:/ { print $2 }' "$D/bw.lo")
  one=$(awk '/^total:/ { print $2 }' "$D/bw.one")
  two=$(awk '/^total:/ { print $2 }' "$D/bw.two")
  echo "loopback $lo, one 1gbit NIC $one, two NICs $two Gbit/s"
  [[ -n $lo && -n $one && -n $two ]] || { cat "$D"/bw.*; return 1; }
  ge 1.10 "$one" || { echo "one NIC at $one Gbit/s is above its 1 Gbit/s limit"; return 1; }
  ge "$one" 0.5 || { echo "one NIC at $one Gbit/s: far below 1 Gbit/s"; return 1; }
  ge "$lo" "$(awk -v x="$one" 'BEGIN { print 2 * x }')" ||
    { echo "loopback ($lo) is not clearly faster than a shaped NIC ($one)"; return 1; }
  ge 2.20 "$two" && ge "$two" "$(awk -v x="$one" 'BEGIN { print 1.5 * x }')" ||
    { echo "two NICs give $two Gbit/s, one gives $one: want about twice, at most 2.2"; return 1; }
}

case_environment() {
  # Every rank is in its host's namespace and has that host's torchrun variables.
  "${GUARD[@]}" "$RUN" --netns "$HOSTS" -n 8 -- bash -c \
    'echo "$RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $(readlink /proc/self/ns/net) $MASTER_ADDR $(ip -4 -o addr show dev eth1 | awk "{print \$4}")" > "$1/env.$RANK"' \
    "$MARK" "$D" 2>"$D/env.err" || { echo "shoal-run failed:"; cat "$D/env.err"; return 1; }
  local r want f
  for r in 0 1 2 3 4 5 6 7; do
    read -r -a f <"$D/env.$r" || { echo "rank $r did not run"; return 1; }
    want="$r $((r % 2)) 2 $((r / 2)) 4"
    [[ ${f[*]:0:5} == "$want" ]] || { echo "rank $r: RANK LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE = ${f[*]:0:5}, want $want"; return 1; }
    [[ ${f[6]} == 198.18.0.1 ]] || { echo "rank $r: MASTER_ADDR=${f[6]}, want host 0's 198.18.0.1"; return 1; }
    [[ ${f[7]} == "198.18.1.$((r / 2 + 1))/24" ]] || { echo "rank $r: eth1 is ${f[7]}, want host $((r / 2))'s"; return 1; }
    [[ ${f[5]} == "net:[$(stat -L -c %i "/var/run/netns/$P-h$((r / 2))")]" ]] ||
      { echo "rank $r is in ${f[5]}, not in $P-h$((r / 2))"; return 1; }
  done
  # The store in the root namespace at the rail-0 bridge's address (when no other cluster
  # holds that address too), and an uneven split given by NS:K.
  if [[ $(ip -o -4 addr show dev "$P-br0" to 198.18.0.254/32 | wc -l) == 1 ]]; then
    "${GUARD[@]}" "$RUN" --netns "$P-h1:3,$P-h2:1" -n 4 --master-addr 198.18.0.254 -- bash -c \
      'exec 3<>/dev/tcp/$MASTER_ADDR/$MASTER_PORT && echo "$LOCAL_RANK/$LOCAL_WORLD_SIZE $GROUP_RANK" > "$1/root.$RANK"' \
      "$MARK" "$D" 2>"$D/root.err" || { echo "ranks could not reach a store at 198.18.0.254:"; cat "$D/root.err"; return 1; }
    [[ "$(cat "$D"/root.{0,1,2,3} | tr '\n' ' ')" == "0/3 0 1/3 0 2/3 0 0/1 1 " ]] ||
      { echo "NS:K split: $(cat "$D"/root.* | tr '\n' ' ')"; return 1; }
  else
    echo "root-namespace store not tried: another cluster holds 198.18.0.254"
  fi
}

bench_case() {  # bench_case COLLECTIVE
  local rc
  "${GUARD[@]}" "$RUN" --netns "$HOSTS" -n 8 --timeout 35 -- "$BENCH" "$1" -b 32 -e 1M -f 32 \
    -n 3 -w 1 -c 1 >"$D/$1.out" 2>&1
  rc=$?
  [[ $rc == 0 ]] || { echo "exit status $rc:"; tail -30 "$D/$1.out"; return 1; }
  grep -q '^# topology: num_hosts 4, local_size 2 ' "$D/$1.out" ||
    { echo "shoal does not see 4 hosts of 2 ranks:"; head -5 "$D/$1.out"; return 1; }
  grep -q '^# Out of bounds values : 0 OK' "$D/$1.out" || { cat "$D/$1.out"; return 1; }
  # Each pair of hosts shares two NICs: the TCP peers are striped over both.
  grep -q 'striped over up to 2 connections' "$D/$1.out" ||
    { echo "the ranks do not stripe over both NICs:"; head -5 "$D/$1.out"; return 1; }
  # The 1 MiB row: algbw (GB/s) out of place, for the record.
  awk '$1 == 1048576 { printf "1 MiB: algbw %s GB/s", $7 }' "$D/$1.out"
}
case_all_reduce() { bench_case all_reduce; }
case_all_gather() { bench_case all_gather; }

case_partition() {
  # Host 3 loses both NICs in the middle of a long all_reduce: its TCP connections neither
  # close nor reset, they fall silent. The other hosts' ranks must declare a rank of host 3
  # failed after SHOAL_HEARTBEAT (2 s), far inside SHOAL_TIMEOUT (60 s), and the job end.
  SHOAL_TIMEOUT=60 SHOAL_HEARTBEAT=2 "${GUARD[@]}" "$RUN" --netns "$HOSTS" -n 8 --grace 1 -- "$BENCH" all_reduce \
    -b 1M -e 1M -n 1000000 -w 0 -c 0 >"$D/part.out" 2>&1 &
  local pid=$! start rc took
  for _ in $(seq 150); do grep -q "^# minBytes" "$D/part.out" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  start=$EPOCHREALTIME
  ip netns exec "$P-h3" ip link set eth0 down && ip netns exec "$P-h3" ip link set eth1 down ||
    { echo "could not take host 3's NICs down"; return 1; }
  wait "$pid"
  rc=$?
  took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  ip netns exec "$P-h3" ip link set eth0 up
  ip netns exec "$P-h3" ip link set eth1 up
  [[ $rc != 0 && $rc != 124 && $rc != 137 ]] || { echo "exit status $rc after $took s:"; tail -20 "$D/part.out"; return 1; }
  # Named by its rank in the job, also when a sub-communicator of the hierarchy saw it.
  # Either side of the cut may speak first: host 3's ranks name a rank of another host (in a
  # sub-communicator, "this is its rank N, rank 6" gives the speaker's rank in the job).
  grep -qE "rank [67] sent nothing for [0-9.]+ s .*SHOAL_HEARTBEAT|sent nothing for [0-9.]+ s .*SHOAL_HEARTBEAT.*(cut off from rank [67] |: its rank [0-9]+ is rank [67][];]|this is its rank [0-9]+, rank [67]\])" "$D/part.out" ||
    { echo "no rank declared the other side of the cut silent:"; grep -i "shoal-bench: rank" "$D/part.out" | head; return 1; }
  ge 15 "$took" || { echo "the job took $took s to end after the partition"; return 1; }
  echo "the job ended $took s after host 3 was cut off: $(grep -oE "rank [0-9]+ sent nothing for [0-9.]+ s|its rank [0-9]+ is rank [0-9]+" "$D/part.out" | head -2 | tr '\n' ' ')"
}

case_down() {
  "$NC" down --prefix "$P" >"$D/down" 2>&1 || { cat "$D/down"; return 1; }
  "$NC" down --prefix "$P" >"$D/down" 2>&1 || { echo "a second down failed:"; cat "$D/down"; return 1; }
  local left
  left=$( (ip netns list; ip -o link show) | grep -E "$P-(h[0-9]|br[0-9])")
  [[ -z $left ]] || { echo "left behind:"; echo "$left"; return 1; }
}

check case_up
if ((${#failed[@]} == 0)); then
  check case_shaping
  check case_environment
  check case_all_reduce
  check case_all_gather
  check case_partition
fi
check case_down
echo "$passed passed, ${#failed[@]} failed in $(awk -v a="$t_start" -v b="$EPOCHREALTIME" \
  'BEGIN { printf "%.1f", b - a }') s${failed[*]:+: ${failed[*]}}"
((${#failed[@]} == 0))
