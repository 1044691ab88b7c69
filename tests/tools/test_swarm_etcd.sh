#!/usr/bin/env bash
# SWARM on a registry with no single point of failure: a 3-member etcd cluster, one member on
# each of three emulated hosts (scripts/netcluster.sh), and a swarm (shoal-swarm local, peers in
# the root namespace) whose registry and rendezvous live on it. In the middle of training,
#   1. the etcd leader is killed with SIGKILL;
#   2. the new leader's host drops off the network (its NIC goes down: requests hang, not fail).
# Each time every round must complete (rounds.csv holds each one, summary.json says completed)
# and every peer must still be serving at the end. Exits 77 (ctest: skipped) without root,
# network namespaces or shoal-swarm.
# Usage: bash test_swarm_etcd.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
BIN=${1:?usage: test_swarm_etcd.sh BIN_DIR}
SWARM=$BIN/shoal-swarm
NC=$(cd "$(dirname "$0")/../../scripts" && pwd)/netcluster.sh
source "$(dirname "$0")/skip.sh"
[[ -x $SWARM ]] || skip "$SWARM not built (a build without torch)"
[[ $(id -u) == 0 ]] || skip "needs root for network namespaces"
for tool in etcd etcdctl ip; do
  command -v $tool >/dev/null || { echo "FAIL: $tool missing (scripts/install-deps.sh installs it)"; exit 1; }
done
P=e$(($$ % 100000))
ip netns add "$P-probe" 2>/dev/null || skip "cannot create network namespaces"
ip netns del "$P-probe"

D=$(mktemp -d /tmp/test_swarm_etcd.XXXXXX)
cleanup() {
  pkill -KILL -f "data-dir=$D/" 2>/dev/null
  pkill -KILL -f "$D/run" 2>/dev/null
  "$NC" down --prefix "$P" >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT
fails=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

"$NC" up --hosts 3 --nics 1 --rate none --prefix "$P" >"$D/netcluster.log" 2>&1 ||
  { echo "FAIL: netcluster up: $(tail -3 "$D/netcluster.log")"; exit 1; }
addr() { echo "198.18.0.$(($1 + 1))"; }
CLUSTER="m0=http://$(addr 0):2380,m1=http://$(addr 1):2380,m2=http://$(addr 2):2380"
ENDPOINTS="$(addr 0):2379,$(addr 1):2379,$(addr 2):2379"
start_member() {  # HOST STATE
  ip netns exec "$P-h$1" etcd --name "m$1" --data-dir="$D/m$1" \
    --listen-peer-urls "http://$(addr $1):2380" --initial-advertise-peer-urls "http://$(addr $1):2380" \
    --listen-client-urls "http://$(addr $1):2379" --advertise-client-urls "http://$(addr $1):2379" \
    --initial-cluster "$CLUSTER" --initial-cluster-state "$2" --initial-cluster-token "$P" \
    --log-level error >>"$D/m$1.log" 2>&1 &
  disown  # the faults kill members on purpose: no job report for them
}
for h in 0 1 2; do start_member $h new; done
ctl() { ETCDCTL_API=3 etcdctl --endpoints="$ENDPOINTS" --command-timeout=2s "$@"; }
for _ in $(seq 100); do ctl put ready 1 >/dev/null 2>&1 && break; sleep 0.2; done
ctl put ready 1 >/dev/null 2>&1 || { echo "FAIL: the etcd cluster did not form: $(tail -3 "$D/m0.log")"; exit 1; }
leader() {  # the host whose member leads now
  ctl endpoint status -w json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for m in json.load(sys.stdin):
    s = m["Status"]
    if s["header"]["member_id"] == s["leader"]:
        print(int(m["Endpoint"].split(":")[0].split(".")[-1]) - 1)'
}

SMALL=(--stages 2 --d-model 32 --layers 2 --seq-len 16 --micro-batch 4 --device-ms 10)
ROUNDS=16
# Runs a swarm on the cluster; once round 4 is done, does "$@" (the fault); checks the outcome.
run_with_fault() {  # NAME FAULT-COMMAND...
  local name=$1 out=$D/run-$1
  shift
  timeout -s KILL 240 "$SWARM" local "${SMALL[@]}" --registry "etcd://$ENDPOINTS/$name" --peers 4 \
    --trainers 1 --inflight 3 --global-batch 8 --rounds $ROUNDS --out "$out" >"$D/$name.log" 2>&1 &
  local swarm=$!
  for _ in $(seq 600); do
    [[ -f $out/rounds.csv && $(wc -l <"$out/rounds.csv") -ge 5 ]] && break
    kill -0 $swarm 2>/dev/null || break
    sleep 0.1
  done
  local at_round=$(($(wc -l <"$out/rounds.csv" 2>/dev/null || echo 1) - 1))
  "$@"
  wait $swarm
  local rc=$?
  local rounds
  rounds=$(/usr/bin/python3 -c '
import csv, sys
print(sorted(int(r["round"]) for r in csv.DictReader(open(sys.argv[1]))) == list(range(int(sys.argv[2]))))' \
    "$out/rounds.csv" $ROUNDS 2>/dev/null)
  local serving
  serving=$(/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["completed"] and s["rounds_done"] == int(sys.argv[2]) and len(s["final_peers"]) == 4
      and all(p["round"] == int(sys.argv[2]) for p in s["final_peers"]))' "$out/summary.json" $ROUNDS 2>/dev/null)
  if [[ $rc == 0 && $rounds == True && $serving == True && $at_round -ge 4 && $at_round -lt $ROUNDS ]]; then
    pass "$name: fault after round $at_round of $ROUNDS, every round done, all 4 peers serving ($(grep -o 'loss [0-9.]* -> [0-9.]*' "$D/$name.log"))"
  else
    fail "$name (rc $rc, fault after round $at_round, every round: $rounds, peers serving: $serving): $(tail -4 "$D/$name.log")"
    tail -3 "$out"/logs/*.log 2>/dev/null | head -40
  fi
}

# 1. The leader's process dies.
killed=$(leader)
[[ -n $killed ]] || { echo "FAIL: no etcd leader found"; exit 1; }
kill_leader() { pkill -KILL -f "data-dir=$D/m$killed "; echo "killed etcd member m$killed (the leader)"; }
run_with_fault leader-killed kill_leader
# 2. The member comes back and catches up; then the leader's host leaves the network.
start_member "$killed" existing
for _ in $(seq 100); do [[ $(ctl endpoint health 2>&1 | grep -c "is healthy") == 3 ]] && break; sleep 0.2; done
cut=$(leader)
[[ -n $cut ]] || { echo "FAIL: no etcd leader after the restart"; exit 1; }
cut_host() { ip netns exec "$P-h$cut" ip link set eth0 down; echo "host $cut (etcd leader m$cut) is off the network"; }
run_with_fault leader-host-cut cut_host
ip netns exec "$P-h$cut" ip link set eth0 up

if [[ $fails == 0 ]]; then echo "all passed"; exit 0; fi
echo "$fails failed"
exit 1
