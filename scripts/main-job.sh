#!/usr/bin/env bash
# The main job (`make run`): SWARM training of a small GPT on the fortunes corpus, on this host.
# Three stages served by six peers of two speeds (one 2x slower per stage), two trainers,
# rebalancing every 8 s, and one peer killed at 40 s: training goes on around it. Live progress
# on stdout; swarm-run/ gets progress.csv, rounds.csv, summary.json, swarm.png and the logs.
# The collective benchmark is one command away: `make run-collectives` (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
OUT=${OUT:-swarm-run}
rm -rf "$OUT"
exec "$BIN/shoal-swarm" local --stages 3 --peers 6 --trainers 2 --inflight 6 \
  --d-model 64 --layers 3 --seq-len 32 --micro-batch 4 --global-batch 48 --rounds 25 \
  --device-ms 20 --slowdown 1,1,1,2,2,2 --rebalance-period 8 --kill-at 40 --out "$OUT"
