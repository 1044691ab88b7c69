#!/usr/bin/env bash
# The peer shoal-swarm is measured against works here: bench/peers/hivemind_swarm.py trains the
# same GPT in stages on hivemind servers (DHT, ModuleBackend, hivemind.Optimizer), its trainer
# routes and retries, and what it reports is what happened:
#   - every micro-batch of every round completes and the loss falls;
#   - the bytes between stages per sample equal the payload its requests carry, worked out from
#     the tensor shapes (3 stages: tokens, activations, gradients, targets, the loss);
#   - with a replica killed (its whole process group) mid-run, the trainer retries on the other
#     replica and completes every round.
# Usage: bash test_hivemind_swarm.sh BIN_DIR     (ctest passes the build's bin directory)
source "$(dirname "$0")/tool_test.sh" test_hivemind_swarm "${1:-}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [[ ! -x $TORCH_PY ]] || ! "$TORCH_PY" -c "import hivemind" 2>/dev/null; then
  skip "hivemind (python/requirements.txt) is not in $TORCH_PY's environment: scripts/install-deps.sh"
fi
if [[ ! -d /usr/share/games/fortunes ]]; then
  skip "no corpus (Debian package fortunes)"
fi
HM=("$TORCH_PY" "$ROOT/bench/peers/hivemind_swarm.py" local --d-model 64 --layers 3 --heads 4 --seq-len 32
  --micro-batch 4 --device-ms 5 --time-limit 270)

# 1. three stages, one replica each: all rounds, falling loss, the payload to the byte. Six
# rounds: hivemind's optimizer may take its first steps a round or two late (its progress goes
# through the DHT; once, over 4 rounds, the loss stayed flat for 3 and fell 0.09 in all).
if timeout 300 "${HM[@]}" --stages 3 --peers 3 --trainers 1 --inflight 4 --global-batch 8 --rounds 6 \
  --out "$D/plain" >"$D/out" 2>&1 &&
  "$PY" - "$D/plain/summary.json" >>"$D/out" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
B, T, D = 4, 32, 64
tokens, hidden, per_sample = B * T * 8, B * T * D * 4, B * 4
# forward 0 (tokens -> h), forward 1 (h -> h), backward 2 (h, targets, dL/dloss -> dh, loss),
# backward 1 (h, dh -> dh), backward 0 (tokens, dh -> zeros like tokens)
payload = (tokens + hidden) + 2 * hidden + (hidden + tokens + per_sample + hidden + per_sample) \
    + 3 * hidden + (tokens + hidden + tokens)
assert s["completed"] and s["samples"] == 6 * 8 * B, s
assert s["bytes_between_stages_per_sample"] == payload / B, (s["bytes_between_stages_per_sample"], payload / B)
loss = s["round_loss"]
assert len(loss) == 6 and loss[-1] < loss[0] - 0.1, loss
print("ok", loss)
EOF
then pass; else fail "a hivemind swarm of 3 stages completes its rounds with the payload worked out"; fi

# 2. two stages of 3 and 2 replicas, server2 (a replica of stage 0) killed at 5 s. (A stage left
# with one replica stalls each synchronous round for averaging_timeout: hivemind's averager needs
# a group of two; so stage 0 keeps two, and the timeouts are short.)
if timeout 300 "${HM[@]}" --stages 2 --peers 5 --trainers 1 --inflight 4 --global-batch 8 --rounds 8 \
  --matchmaking-time 2 --averaging-timeout 15 --kill-at 5 --kill-peers server2 --out "$D/kill" >"$D/out" 2>&1 &&
  "$PY" - "$D/kill/summary.json" >>"$D/out" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["kills"] and s["kills"][0]["peer"] == "server2", s["kills"]
assert s["completed"] and s["rounds_done"] == 8 and s["trainer_failures"] == 0, s
print("ok", s["kills"], s["elapsed_s"])
EOF
then pass; else fail "a hivemind swarm completes every round through a killed replica"; fi
summary
