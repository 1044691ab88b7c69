#!/usr/bin/env bash
# The seven SWARM experiments of docs/swarm.md, one `shoal-swarm local` run each, into OUT
# (default swarm-evidence/); then bench/swarm_report.py prints the tables and draws the figures
# into docs/img/. About 21 minutes on the 2-core machine; run it on a quiet machine. Names after
# OUT run only the experiments whose run names start with one of them (e.g. `rounds`).
#   bench/swarm_evidence.sh [OUT [NAME...]]          (BIN=build/bin by default)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
OUT=${1:-swarm-evidence}
shift $(($# > 0 ? 1 : 0))
ONLY=("$@")
mkdir -p "$OUT"
MODEL=(--d-model 64 --layers 3 --seq-len 32 --micro-batch 4)
# 9 peers over 3 stages, every stage with one peer of each speed (1x, 2x, 4x slower), a 20 ms
# emulated accelerator per forward (40 ms per backward) so the 2 shared cores are not the limit.
SWARM9=(--stages 3 --peers 9 --trainers 2 --inflight 8 --device-ms 20 --slowdown 1,2,4,2,4,1,4,1,2)
run() {
  local name=$1
  shift
  if ((${#ONLY[@]})); then
    local wanted=0 prefix
    for prefix in "${ONLY[@]}"; do [[ $name == "$prefix"* ]] && wanted=1; done
    ((wanted)) || return 0
  fi
  echo "== $name: shoal-swarm local ${MODEL[*]} $*"
  "$BIN/shoal-swarm" local "${MODEL[@]}" --out "$OUT/$name" "$@" | tail -2
}
# 1. correctness: one replica per stage, no compression, against single-process training
run correctness --stages 3 --peers 3 --trainers 1 --inflight 1 --global-batch 8 --rounds 30 --check-reference
# 2. heterogeneity: SWARM against the static pipeline over the same peers
run het-swarm "${SWARM9[@]}" --global-batch 144 --rounds 6
run het-static "${SWARM9[@]}" --global-batch 144 --rounds 3 --routing static
# 3. failures: 3 of the 9 peers (33 %) killed at 25, 45 and 65 s; rebalancing every 8 s
run fail-swarm "${SWARM9[@]}" --global-batch 96 --rounds 22 --kill-at 25,45,65 --rebalance-period 8 --check-reference
run fail-static "${SWARM9[@]}" --global-batch 96 --rounds 10 --kill-at 25 --routing static
# 4. rebalancing: 7 of 9 equal peers piled on stage 0
run rebalance --stages 3 --peers 9 --trainers 2 --inflight 8 --device-ms 20 --global-batch 48 \
  --placement 0,0,0,0,0,0,0,1,2 --rebalance-period 5 --rounds 25
# 5. compression of activations and gradients between stages
for codec in none fp16 int8; do
  run codec-$codec --stages 3 --peers 3 --trainers 1 --inflight 4 --global-batch 16 --rounds 40 --codec $codec
done
# 6. asynchronous rounds: delayed parameter updates against synchronous rounds, same batches (each
# against single-process training on its own schedule)
for gb in 24 48; do
  run rounds-sync-$gb "${SWARM9[@]}" --global-batch $gb --rounds $((1440 / gb)) --check-reference
  run rounds-delayed-$gb "${SWARM9[@]}" --global-batch $gb --rounds $((1440 / gb)) --delayed-updates --check-reference
done
# 7. compressed averaging inside the stages (3 replicas each), against float32 averaging
for codec in none fp16 int8; do
  run averaging-$codec "${SWARM9[@]}" --global-batch 48 --rounds 30 --averaging-codec $codec
done
/usr/bin/python3 bench/swarm_report.py "$OUT" docs/img --doc docs/swarm.md
