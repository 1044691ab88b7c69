#!/usr/bin/env bash
# End-to-end SWARM runs as real processes (shoal-swarm local): a peer killed with SIGKILL is
# routed around (also with delayed updates) while the static pipeline baseline stops;
# rebalancing moves peers off a crowded stage; bad invocations fail with clear messages. No process is left behind.
# Usage: bash test_swarm_local.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
source "$(dirname "$0")/skip.sh"
BIN=${1:?usage: test_swarm_local.sh BIN_DIR}
SWARM=$BIN/shoal-swarm
if [[ ! -x $SWARM ]]; then
  skip "$SWARM not built (a build without torch)"
fi
if [[ ! -d /usr/share/games/fortunes ]]; then
  echo "FAIL: the fortunes corpus is missing (scripts/install-deps.sh installs it)"
  exit 1
fi
D=$(mktemp -d /tmp/test_swarm.XXXXXX)
trap 'rm -rf "$D"' EXIT
fails=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
# Small and quick: 2 stages, a 10 ms emulated device so runs last a few seconds.
SMALL=(--stages 2 --d-model 32 --layers 2 --seq-len 16 --micro-batch 4 --device-ms 10 --registry 127.0.0.1:0)

# 1. A peer killed mid-run: the swarm finishes every round.
out=$D/kill
if timeout -s KILL 120 "$SWARM" local "${SMALL[@]}" --peers 4 --trainers 1 --inflight 3 --global-batch 8 \
  --rounds 12 --kill-at 2 --out "$out" >"$D/kill.log" 2>&1; then
  if [[ $(field "$out/summary.json" completed) == True && $(field "$out/summary.json" rounds_done) == 12 ]] &&
    grep -q "killed server" "$D/kill.log"; then
    pass "swarm survives a killed peer ($(grep -o 'loss [0-9.]* -> [0-9.]*' "$D/kill.log"))"
  else
    fail "swarm with a killed peer: $(tail -3 "$D/kill.log")"
  fi
else
  fail "swarm with a killed peer exited $?: $(tail -5 "$D/kill.log")"
fi

# 1b. A replica dies inside the averaging of round 2: its stage's survivor shrinks the group and
# goes on.
out=$D/avgkill
if timeout -s KILL 120 "$SWARM" local "${SMALL[@]}" --peers 4 --trainers 1 --inflight 3 --global-batch 8 \
  --rounds 5 --exit-in-averaging server1:2 --out "$out" >"$D/avgkill.log" 2>&1 &&
  [[ $(field "$out/summary.json" rounds_done) == 5 ]] && grep -q "dying inside the averaging" "$out"/logs/server1.log &&
  grep -q "shrinking" "$out"/logs/server3.log; then
  pass "a replica dying mid-averaging: the survivor shrank the group and training finished"
else
  fail "replica dying mid-averaging: $(tail -3 "$D/avgkill.log"); $(grep -h "averag\|shrink" "$out"/logs/server*.log 2>/dev/null | head -5)"
fi

# 1b'. A replica dies between claiming a micro-batch and counting it: the round is full by its
# claims, so it still steps (the count alone would stay one short and stall training).
out=$D/claimkill
if timeout -s KILL 120 "$SWARM" local "${SMALL[@]}" --peers 4 --trainers 1 --inflight 3 --global-batch 8 \
  --rounds 5 --exit-after-claim server1:0 --out "$out" >"$D/claimkill.log" 2>&1 &&
  [[ $(field "$out/summary.json" rounds_done) == 5 ]] && grep -q "dying between claiming" "$out"/logs/server1.log; then
  pass "a replica dying between claim and count: the round filled by its claims"
else
  fail "replica dying between claim and count: $(tail -3 "$D/claimkill.log"); $(grep -h "fault\|full" "$out"/logs/server*.log 2>/dev/null | head -3)"
fi

# 1c. Asynchronous rounds and int8 averaging: with delayed updates, a peer killed and peers moving
# (each mover takes both parameter versions from a live replica), the swarm still finishes
# every round.
out=$D/delayed
if timeout -s KILL 120 "$SWARM" local "${SMALL[@]}" --peers 4 --trainers 1 --inflight 4 --global-batch 8 \
  --rounds 40 --delayed-updates --averaging-codec int8 --placement 0,0,0,1 --rebalance-period 1 --kill-at 3 --out "$out" \
  >"$D/delayed.log" 2>&1 && [[ $(field "$out/summary.json" completed) == True ]] &&
  [[ $(field "$out/summary.json" delayed_updates) == True ]] && grep -q "killed server" "$D/delayed.log" &&
  [[ $(field "$out/summary.json" averaging_codec) == int8 ]]; then
  pass "delayed updates and int8 averaging through a kill and $(field "$out/summary.json" moves) move(s) ($(grep -o 'loss [0-9.]* -> [0-9.]*' "$D/delayed.log"))"
else
  fail "delayed updates with a kill and moves: $(tail -3 "$D/delayed.log")"
fi

# 2. The static pipeline over the same peers stops at the kill, with a message naming the peer.
out=$D/static
if timeout -s KILL 120 "$SWARM" local "${SMALL[@]}" --peers 4 --trainers 1 --inflight 3 --global-batch 8 \
  --rounds 12 --kill-at 2 --routing static --out "$out" >"$D/static.log" 2>&1; then
  fail "the static pipeline reported success after losing a peer"
elif [[ $(field "$out/summary.json" completed) == False && $(field "$out/summary.json" trainer_failures) == 1 ]] &&
  grep -q "static pipeline: stage .* failed" "$out"/logs/trainer0.log; then
  pass "static pipeline stops when a peer dies: $(grep -o 'static pipeline: stage [0-9]* replica [a-z0-9]*' "$out"/logs/trainer0.log | head -1)"
else
  fail "static pipeline with a killed peer: $(tail -3 "$D/static.log")"
fi

# 3. Rebalancing: three of four peers start on stage 0; one moves to stage 1.
out=$D/rebalance
if timeout -s KILL 120 "$SWARM" local "${SMALL[@]}" --peers 4 --trainers 1 --inflight 4 --global-batch 8 \
  --rounds 25 --placement 0,0,0,1 --rebalance-period 1 --rebalance-threshold 0.1 --out "$out" \
  >"$D/rebalance.log" 2>&1 && [[ $(field "$out/summary.json" moves) -ge 1 ]] &&
  grep -q "rebalancing: stage 0 -> 1" "$out"/logs/server*.log; then
  pass "rebalancing moved $(field "$out/summary.json" moves) peer(s) from stage 0 to stage 1"
else
  fail "rebalancing: $(tail -3 "$D/rebalance.log"); $(grep -h rebalancing "$out"/logs/*.log 2>/dev/null)"
fi

# 3b. Across emulated hosts (--netns, root only): every server announces its host's address, a
# stage's two replicas on different hosts, and every round completes over the veths.
NC=$(cd "$(dirname "$0")/../../scripts" && pwd)/netcluster.sh
P=s$(($$ % 100000))
if [[ $(id -u) == 0 ]] && ip netns add "$P-probe" 2>/dev/null; then
  ip netns del "$P-probe"
  trap '"$NC" down --prefix "$P" >/dev/null 2>&1; rm -rf "$D"' EXIT
  if "$NC" up --prefix "$P" --hosts 2 --nics 1 --rate 1gbit >"$D/nc.log" 2>&1; then
    out=$D/netns
    # The launcher and its registry in host 0 (the root namespace's address may belong to
    # another cluster up at the same time).
    if timeout -s KILL 120 ip netns exec "$P-h0" "$SWARM" local "${SMALL[@]:0:${#SMALL[@]}-2}" \
      --registry 198.18.0.1:0 --netns "$P-h0,$P-h1" --peers 4 --trainers 1 --inflight 3 \
      --global-batch 8 --rounds 4 --out "$out" >"$D/netns.log" 2>&1 &&
      [[ $(field "$out/summary.json" completed) == True ]] &&
      [[ $(grep -h "serving stage 0 at" "$out"/logs/server*.log | grep -o '198\.18\.0\.[0-9]*' | sort -u | wc -l) == 2 ]]; then
      pass "a swarm across 2 emulated hosts: $(grep -h 'serving stage' "$out"/logs/server*.log | grep -o 'at [0-9.]*' | sort | uniq -c | tr -s ' ' | paste -sd,)"
    else
      fail "a swarm across emulated hosts: $(tail -3 "$D/netns.log")"
    fi
    "$NC" down --prefix "$P" >/dev/null 2>&1
  else
    fail "netcluster up: $(tail -2 "$D/nc.log")"
  fi
else
  skip_case "a swarm across emulated hosts (needs root and network namespaces)"
fi

# 4. Bad invocations: clear errors, non-zero exit.
msg=$("$SWARM" local "${SMALL[@]}" --peers 1 --out "$D/bad" 2>&1)
if [[ $? -ne 0 && $msg == *"cannot cover 2 stages"* ]]; then pass "too few peers: $msg"; else fail "too few peers: $msg"; fi
msg=$(timeout 60 "$SWARM" reference --stages 2 --d-model 32 --layers 2 --seq-len 16 --rounds 1 --corpus /nonexistent 2>&1)
if [[ $? -ne 0 && $msg == *"/nonexistent"* && $msg == *fortunes* ]]; then pass "missing corpus: $msg"
else fail "missing corpus: $msg"; fi
msg=$("$SWARM" local --codec int4 2>&1)
if [[ $? -ne 0 && $msg == *codec* ]]; then pass "unknown codec rejected"; else fail "unknown codec: $msg"; fi

# Nothing left running (servers and trainers also die with their launcher: PR_SET_PDEATHSIG).
sleep 0.5
if pgrep -f "shoal-swarm (serve|train)" >/dev/null; then
  fail "processes left behind: $(pgrep -af "shoal-swarm (serve|train)")"
fi
[[ $fails -eq 0 ]] && echo "all swarm end-to-end cases passed"
exit $((fails > 0))
