#!/usr/bin/env bash
# The studies of docs/scale.md: shoal-sim runs every all_reduce, all_gather and reduce_scatter
# algorithm (and the hierarchical compositions) from 8 to 2,048 ranks on three cluster models,
# plus SWARM's regime, one JSON file per (model, collective, world); bench/sim_report.py turns
# them into the tables and plots.
#   bash bench/sim_studies.sh OUT_DIR [MODEL...]     MODEL: frontier commodity-2x100 commodity-1x10 swarm
# The Frontier-like model runs 8-1,024 ranks at every size and 2,048 at 64 KiB-16 MiB (~7 min on
# one core; 4,096 ranks: docs/scale.md "How long 4,096 ranks take"); the commodity models stop
# at 1,024 ranks, SWARM's at 512 (~8 min together).
set -eu
OUT=${1:?usage: sim_studies.sh OUT_DIR [MODEL...]}
shift
MODELS=("$@")
((${#MODELS[@]})) || MODELS=(frontier commodity-2x100 commodity-1x10 swarm)
SIM=${SHOAL_SIM:-build/bin/shoal-sim}
mkdir -p "$OUT"
run() {  # MODEL COLLECTIVE WORLD SIZES FLAGS...
  local model=$1 c=$2 p=$3 sizes=$4
  shift 4
  local f=$OUT/${model}_${c}_${p}.json
  [[ -s $f ]] && return 0  # resumable
  "$SIM" run -c "$c" -a all -p "$p" -s "$sizes" --threads 1 "$@" --json "$f.tmp" >/dev/null && mv "$f.tmp" "$f"
  echo "$(date +%T) $model $c $p"
}
for model in "${MODELS[@]}"; do
  case $model in
    frontier) flags=(--frontier) worlds="8 16 32 64 128 256 512 1024" sizes=64K,1M,16M,256M,1G ;;
    # 8 ranks per host; 100 GB/s memory bus, 20 GB/s per local copy; 1 us per message of CPU
    commodity-2x100)
      flags=(--ranks-per-host 8 --nics 2 --nic-gbps 100 --latency-us 5 --intra-gbps 100 --intra-flow-gbps 20
        --intra-latency-us 1 --overhead-us 1 --reduce-gbps 10 --copy-gbps 20)
      worlds="8 16 32 64 128 256 512 1024" sizes=64K,1M,16M,256M,1G ;;
    commodity-1x10)
      flags=(--ranks-per-host 8 --nics 1 --nic-gbps 10 --latency-us 10 --intra-gbps 100 --intra-flow-gbps 20
        --intra-latency-us 1 --overhead-us 1 --reduce-gbps 10 --copy-gbps 20)
      worlds="8 16 32 64 128 256 512 1024" sizes=64K,1M,16M,256M,1G ;;
    # SWARM: one peer per host, 200 Mbit/s, 100 ms; all_reduce of a stage's gradients
    swarm) flags=(--ranks-per-host 1 --nics 1 --nic-gbps 0.2 --latency-us 100000)
      worlds="8 16 32 64 128 256 512" sizes=1M,16M,256M,1G ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  colls="all_reduce all_gather reduce_scatter"
  [[ $model == swarm ]] && colls=all_reduce
  for p in $worlds; do
    for c in $colls; do run "$model" "$c" "$p" "$sizes" "${flags[@]}"; done
  done
  if [[ $model == frontier ]]; then
    for c in $colls; do run "$model" "$c" 2048 64K,1M,16M "${flags[@]}"; done
  fi
done
