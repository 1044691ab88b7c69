#!/usr/bin/env bash
# A short chaos soak (issue 8): 8 worker processes run random collectives and verify every
# result while shoal-chaos kills (SIGKILL), freezes (SIGSTOP) and cuts (ss -K) them; survivors
# shrink and continue, restarted workers grow the group back. Asserts that every fault of each
# kind was survived, no operation was lost or corrupt, nothing leaked (fds, threads, /dev/shm
# segments, processes) and no worker hung. A long local soak: shoal-chaos run --duration 600.
# Usage: bash test_chaos.sh BIN_DIR     (ctest passes the build's bin directory)
# Exits 77 (skip) without root or without `ss -K` (kernel INET_DIAG_DESTROY), which `cut` needs.
set -u
source "$(dirname "$0")/skip.sh"
BIN=${1:?usage: test_chaos.sh BIN_DIR}
CHAOS=$BIN/shoal-chaos
PY=$(command -v python3 || true)
if [[ ! -x $CHAOS ]]; then
  echo "FAIL: $CHAOS not built"
  exit 1
fi
if [[ -z $PY ]]; then
  skip "python3 is needed to check ss -K and summary.json"
fi
if [[ $(id -u) != 0 ]]; then
  skip "the cut fault needs root (ss -K closes another process's TCP connection)"
fi
# Can ss -K kill a connection here? One loopback connection, destroyed from outside: the other
# end must see a reset.
if ! "$PY" - <<'EOF' >/dev/null 2>&1; then
import socket, subprocess, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", ":%d" % l.getsockname()[1],
                "src", "127.0.0.1", "sport", "=", ":%d" % c.getsockname()[1]], capture_output=True, timeout=10)
s.settimeout(3)
try:
    data = s.recv(1)
    sys.exit(0 if data == b"" else 1)
except ConnectionResetError:
    sys.exit(0)
except Exception:
    sys.exit(1)
EOF
  skip "ss -K cannot destroy sockets here (needs iproute2 ss and a kernel with CONFIG_INET_DIAG_DESTROY)"
fi

D=$(mktemp -d /tmp/test_chaos.XXXXXX)
keep=0
trap '[[ $keep == 1 ]] || rm -rf "$D"' EXIT
fails=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); keep=1; }

# 45 s of faults, one every ~4 s after the previous one recovered: about 8 faults, every kind
# at least once (the driver goes through the kinds in shuffled rounds). SHOAL_TIMEOUT 4 s and
# SHOAL_SHRINK_WAIT 2 s keep a freeze's detection within the run.
SEED=${SHOAL_CHAOS_SEED:-$((RANDOM % 1000 + 1))}
out=$D/run
start=$(date +%s)
timeout -s KILL 150 "$CHAOS" run --ranks 8 --duration 45 --seed "$SEED" --faults kill,freeze,cut --fault-every 4 \
  --timeout 4 --shrink-wait 2 --restart-delay 2 --out "$out" >"$D/chaos.log" 2>&1
rc=$?
wall=$(($(date +%s) - start))
cat "$D/chaos.log"
if [[ $rc == 0 ]]; then
  pass "shoal-chaos run exited 0 in ${wall} s (seed $SEED)"
else
  fail "shoal-chaos run exited $rc after ${wall} s (seed $SEED; output kept in $D)"
fi

if [[ -f $out/summary.json ]]; then
  if problems=$("$PY" - "$out/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
p = []
if not s["ok"]: p.append("ok is false")
for k in ("kill", "freeze", "cut"):
    b = s["faults_by_kind"].get(k, {})
    if b.get("injected", 0) < 1: p.append("no %s fault was injected" % k)
    if b.get("survived", -1) != b.get("injected", 0): p.append("%s: %s of %s survived" % (k, b.get("survived"), b.get("injected")))
if s["faults_survived"] != s["faults_injected"]: p.append("faults survived %d of %d" % (s["faults_survived"], s["faults_injected"]))
if s["ops_verified"] <= 0: p.append("no operation was verified")
if s["ops_lost"] != 0: p.append("%d operations lost" % s["ops_lost"])
if s["ops_corrupt"] != 0: p.append("%d operations corrupt" % s["ops_corrupt"])
if s["leaks"]: p.append("fd/thread leaks: %s" % s["leaks"])
if s["shm_segments_left"]: p.append("shared-memory segments left: %s" % s["shm_segments_left"])
if s["hung_workers"]: p.append("hung workers: %s" % s["hung_workers"])
if s["leftover_processes"]: p.append("processes left: %s" % s["leftover_processes"])
if not s["regrown_to_full_size"]: p.append("the group did not grow back to 8")
if s["detect_ms"].get("n", 0) < 1: p.append("no detection was timed")
print("; ".join(p) if p else
      "%d faults (kill %d, freeze %d, cut %d) all survived; detect median %.0f ms max %.0f ms; shrink median %.0f ms; "
      "%d ops verified, %d re-issued, 0 lost; live workers a shrink left out: %d" % (
          s["faults_injected"], s["faults_by_kind"]["kill"]["injected"], s["faults_by_kind"]["freeze"]["injected"],
          s["faults_by_kind"]["cut"]["injected"], s["detect_ms"]["median"], s["detect_ms"]["max"],
          s["shrink_ms"].get("median", 0), s["ops_verified"], s["ops_reissued"], len(s["live_workers_dropped"])))
sys.exit(1 if p else 0)
EOF
  ); then
    pass "summary: $problems"
  else
    fail "summary: $problems"
  fi
else
  fail "no summary.json"
fi

# Nothing of the job is left running.
if pgrep -f "shoal-chaos worker .*--out $out( |$)" >/dev/null; then
  fail "worker processes left: $(pgrep -f "shoal-chaos worker .*--out $out( |$)" | tr '\n' ' ')"
  pkill -KILL -f "shoal-chaos worker .*--out $out( |$)"
else
  pass "no worker process left"
fi

if [[ $fails -gt 0 ]]; then
  echo "$fails check(s) failed; logs in $D"
  exit 1
fi
echo "all chaos checks passed"
