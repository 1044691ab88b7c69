#!/usr/bin/env bash
# The studies of docs/scale.md: shoal-sim runs every all_reduce, all_gather and reduce_scatter
# algorithm (and the hierarchical compositions) from 8 to 4,096 ranks on three cluster models,
# plus SWARM's regime, one JSON file per (model, collective, world); bench/sim_report.py turns
# them into the tables and plots.
#   bash bench/sim_studies.sh OUT_DIR [MODEL...]     MODEL: frontier commodity-2x100 commodity-1x10 swarm
# Worlds 8-1,024 run at 64 KiB, 1 MiB, 16 MiB, 256 MiB and 1 GiB; 2,048 (and, on the
# Frontier-like model, 4,096: the rings and Swing take minutes per size there, docs/scale.md "How
# long 4,096 ranks take") at 1 MiB-1 GiB, the Frontier-like model's 2,048 also at 64 KiB (study
# (c)); SWARM's at most 512 peers.
# JOBS simulations at once (default: the number of cores; a 4,096-rank ring or Swing holds
# 2.5-3.6 GB). All of it: about 2.5 hours on 2 cores, 40% of it the Frontier-like 4,096 ranks.
set -eu
OUT=${1:?usage: sim_studies.sh OUT_DIR [MODEL...]}
shift
MODELS=("$@")
((${#MODELS[@]})) || MODELS=(frontier commodity-2x100 commodity-1x10 swarm)
SIM=${SHOAL_SIM:-build/bin/shoal-sim}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
run() {  # MODEL COLLECTIVE WORLD SIZES FLAGS...
  local model=$1 c=$2 p=$3 sizes=$4 algo=all
  shift 4
  local f=$OUT/${model}_${c}_${p}.json
  [[ -s $f ]] && return 0  # resumable
  # The compositions of all_gather and reduce_scatter exchange directly across hosts (H-1 messages
  # per rank) or inside one (L-1 per host block): thousands of flows share a NIC or a memory bus,
  # and the simulator re-rates every flow of a resource each time one starts or ends. For
  # all_gather at 4,096 ranks and both at 2,048 on the commodity models that is hours per size:
  # flat rows only.
  if [[ $c == all_gather && $p -ge 4096 ]] || [[ $c != all_reduce && $model != frontier && $p -ge 2048 ]]; then
    algo=flat
  fi
  "$SIM" run -c "$c" -a "$algo" -p "$p" -s "$sizes" --threads 1 "$@" --json "$f.tmp" >/dev/null && mv "$f.tmp" "$f"
  echo "$(date +%T) $model $c $p"
}
failed=0
spawn() {  # run in the background, at most JOBS at once
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || failed=1; done
  run "$@" &
}
flags_of() {  # MODEL -> the shoal-sim flags in FLAGS
  case $1 in
    frontier) FLAGS=(--frontier) ;;
    # 8 ranks per host; 100 GB/s memory bus, 20 GB/s per local copy; 1 us per message of CPU
    commodity-2x100)
      FLAGS=(--ranks-per-host 8 --nics 2 --nic-gbps 100 --latency-us 5 --intra-gbps 100 --intra-flow-gbps 20
        --intra-latency-us 1 --overhead-us 1 --reduce-gbps 10 --copy-gbps 20) ;;
    commodity-1x10)
      FLAGS=(--ranks-per-host 8 --nics 1 --nic-gbps 10 --latency-us 10 --intra-gbps 100 --intra-flow-gbps 20
        --intra-latency-us 1 --overhead-us 1 --reduce-gbps 10 --copy-gbps 20) ;;
    # SWARM: one peer per host, 200 Mbit/s, 100 ms; all_reduce of a stage's gradients
    swarm) FLAGS=(--ranks-per-host 1 --nics 1 --nic-gbps 0.2 --latency-us 100000) ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}
# Small worlds first (minutes in all), then the large ones.
for large in 0 1; do
  for model in "${MODELS[@]}"; do
    flags_of "$model"
    colls="all_reduce all_gather reduce_scatter"
    if [[ $model == swarm ]]; then
      ((large)) && continue
      for p in 8 16 32 64 128 256 512; do spawn "$model" all_reduce "$p" 1M,16M,256M,1G "${FLAGS[@]}"; done
      continue
    fi
    if ((large)); then
      for p in 4096 2048; do
        [[ $model != frontier && $p == 4096 ]] && continue  # the commodity models end at 2,048
        sizes=1M,16M,256M,1G
        [[ $model == frontier && $p == 2048 ]] && sizes=64K,$sizes
        for c in $colls; do spawn "$model" "$c" "$p" "$sizes" "${FLAGS[@]}"; done
      done
    else
      for p in 8 16 32 64 128 256 512 1024; do
        for c in $colls; do spawn "$model" "$c" "$p" 64K,1M,16M,256M,1G "${FLAGS[@]}"; done
      done
    fi
  done
done
while (($(jobs -rp | wc -l))); do wait -n || failed=1; done
exit $failed
