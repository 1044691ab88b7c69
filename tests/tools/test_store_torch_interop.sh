#!/usr/bin/env bash
# Interop of shoal's TcpStore with torch.distributed.TCPStore (torch 1.13), both ways, and
# shoal ranks rendezvousing under a real torchrun (through the agent's store, and with rank 0
# hosting). Needs the project's torch 2.x (.venv, scripts/install-deps.sh): without it, it fails.
# Usage: bash test_store_torch_interop.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
BIN=${1:?usage: test_store_torch_interop.sh BIN_DIR}
TOOL=$BIN/shoal_store_interop
PY=${SHOAL_TEST_PYTHON:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}

if [[ ! -x $TOOL ]]; then
  echo "FAIL: $TOOL does not exist (build the shoal_store_interop target)"
  exit 1
fi
version=$($PY -c 'import torch, torch.distributed; print(torch.__version__)' 2>/dev/null)
if [[ $version != 2.* ]]; then
  echo "FAIL: $PY cannot import torch 2.x (got '${version}'; scripts/install-deps.sh installs it)"
  exit 1
fi

D=$(mktemp -d /tmp/test_store_interop.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$D"
}
trap cleanup EXIT
GUARD=(timeout -s KILL 60)

passed=0
failed=()
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed+=("$1"); for f in "$D"/*.log; do [[ -s $f ]] && { echo "--- $f"; tail -30 "$f"; }; done; }

wait_for_file() {  # path, seconds
  local end=$((SECONDS + $2))
  while [[ ! -s $1 ]]; do
    ((SECONDS >= end)) && return 1
    sleep 0.05
  done
}

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- 1. shoal hosts, torch's client talks to it ----
rm -f "$D"/*.log "$D/port"
"${GUARD[@]}" "$TOOL" serve "$D/port" >"$D/shoal_server.log" 2>&1 &
server=$!
pids+=("$server")
if wait_for_file "$D/port" 20; then
  port=$(cat "$D/port")
  "${GUARD[@]}" "$PY" - "$port" >"$D/torch_client.log" 2>&1 <<'EOF'
import sys
from datetime import timedelta
import torch.distributed as dist

port = int(sys.argv[1])
# world_size=2 makes torch's constructor ADD the raw key "init/", as real workers do.
s = dist.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=30))
s.set("from_torch", "hello shoal")
assert s.get("from_shoal") == b"hi torch", "get of a key shoal sets later"
assert s.add("counter", 1) == 11, "add after shoal's add of 10"
s.wait(["from_shoal", "counter"])
assert s.compare_set("cas", "", "v1") == b"v1"
assert s.compare_set("cas", "v1", "v2") == b"v2"
assert s.compare_set("cas", "zz", "v3") == b"v2"
assert s.get("cas") == b"v2"
assert s.delete_key("cas") is True
assert s.delete_key("cas") is False
n = s.num_keys()  # init/, /from_torch, /counter, /from_shoal
assert n == 4, f"num_keys {n}"
s.set("binary", bytes([0, 1, 0, 255]))
assert s.get("binary") == bytes([0, 1, 0, 255])
s.append("appended", "ab")
s.append("appended", "cd")
assert s.get("appended") == b"abcd"
s.multi_set(["m1", "m2"], ["x", "yz"])
assert s.multi_get(["m2", "m1"]) == [b"yz", b"x"]
try:
    s.wait(["never"], timedelta(milliseconds=300))
    raise AssertionError("wait on a missing key returned")
except RuntimeError as e:
    assert "imeout" in str(e), str(e)
s.set("torch_done", "1")
print("torch client OK")
EOF
  torch_rc=$?
  wait "$server"
  server_rc=$?
  if [[ $torch_rc == 0 && $server_rc == 0 ]] && grep -q "torch client OK" "$D/torch_client.log"; then
    ok "torch TCPStore client <-> shoal TcpStore server"
  else
    bad "torch TCPStore client <-> shoal TcpStore server (torch rc $torch_rc, shoal rc $server_rc)"
  fi
else
  bad "shoal server did not start"
fi

# ---- 1b. shoal hosts with SHOAL_AUTH_KEY: torch's client cannot authenticate and is dropped ----
rm -f "$D"/*.log "$D/port"
SHOAL_AUTH_KEY=interop-secret "${GUARD[@]}" "$TOOL" serve "$D/port" >"$D/shoal_server.log" 2>&1 &
server=$!
pids+=("$server")
if wait_for_file "$D/port" 20; then
  "${GUARD[@]}" "$PY" - "$(cat "$D/port")" >"$D/torch_client.log" 2>&1 <<'EOF'
import sys
from datetime import timedelta
import torch.distributed as dist

try:
    s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, False, timedelta(seconds=10))
    s.set("from_torch", "hello shoal")
    print("torch client got in:", s.get("from_torch"))
except RuntimeError as e:
    print("torch client refused:", e)
EOF
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  if grep -q "torch client refused" "$D/torch_client.log" &&
     grep -q "without authenticating" "$D/shoal_server.log"; then
    ok "shoal TcpStore server with SHOAL_AUTH_KEY drops torch's unauthenticated client, saying why"
  else
    bad "shoal TcpStore server with SHOAL_AUTH_KEY and a torch client"
  fi
else
  bad "shoal server (keyed) did not start"
fi

# ---- 2. torch hosts, shoal's client talks to it ----
rm -f "$D"/*.log "$D/port"
"${GUARD[@]}" "$PY" - "$D/port" >"$D/torch_server.log" 2>&1 <<'EOF' &
import os, sys, time
from datetime import timedelta
import torch.distributed as dist

s = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30), wait_for_workers=False)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{s.port}\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.set("from_torch", "hello shoal")
assert s.add("counter", 7) == 7
s.wait(["want_late"])
time.sleep(0.2)
s.set("late", "L")
s.wait(["shoal_done"])
assert s.get("from_shoal") == b"hi torch"
assert s.get("counter") == b"12"
assert s.get("after_timeout") == b"ok"
assert s.get("binary") == bytes([0, 1, 0, 255])
print("torch server OK")
EOF
tserver=$!
pids+=("$tserver")
if wait_for_file "$D/port" 30; then
  "${GUARD[@]}" "$TOOL" client 127.0.0.1 "$(cat "$D/port")" >"$D/shoal_client.log" 2>&1
  client_rc=$?
  wait "$tserver"
  tserver_rc=$?
  if [[ $client_rc == 0 && $tserver_rc == 0 ]] && grep -q "torch server OK" "$D/torch_server.log"; then
    ok "shoal TcpStore client <-> torch TCPStore server"
  else
    bad "shoal TcpStore client <-> torch TCPStore server (shoal rc $client_rc, torch rc $tserver_rc)"
  fi
else
  bad "torch server did not start"
fi

# ---- 3. shoal ranks under torchrun ----
TORCHRUN=("$PY" -m torch.distributed.run --log_dir "$D/torchrun_logs" --no_python)
run_torchrun() {  # name, expected "external=" value, torchrun arguments...
  local name=$1 external=$2
  shift 2
  rm -rf "$D"/*.log "$D/torchrun_logs"
  "${GUARD[@]}" "${TORCHRUN[@]}" "$@" "$TOOL" rank >"$D/torchrun.log" 2>&1
  local rc=$?
  local oks
  oks=$(grep -c "rank [0-9] OK" "$D/torchrun.log")
  if [[ $rc == 0 && $oks == 2 ]] && grep -q "launcher=torchrun external=$external" "$D/torchrun.log"; then
    ok "$name"
  else
    bad "$name (torchrun rc $rc, $oks ranks OK)"
  fi
}
run_torchrun "torchrun (static rendezvous): ranks join the agent's store" 1 \
  --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(free_port)"
# torch 2.x's --standalone runs a c10d rendezvous whose store the agent hosts, and says so
# (TORCHELASTIC_USE_AGENT_STORE=True): the ranks join it as well.
run_torchrun "torchrun --standalone: ranks join the agent's store" 1 --standalone --nproc_per_node 2
# With SHOAL_AUTH_KEY: the agent's torch store cannot authenticate, so the ranks join it openly
# and say so (their mesh connections still authenticate).
SHOAL_AUTH_KEY=interop-secret run_torchrun "torchrun with SHOAL_AUTH_KEY: the agent's store joined openly" 1 \
  --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(free_port)"
if ! grep -q "torchrun's agent store (torch's TCPStore), which cannot authenticate" "$D/torchrun.log"; then
  bad "torchrun with SHOAL_AUTH_KEY: no warning that the agent's store is open"
fi

echo "$passed passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
