#!/usr/bin/env bash
# Measurements for `shoal-sim calibrate` (docs/scale.md, "Calibration on this machine" and "on
# the emulated cluster"): every all_reduce, all_gather and reduce_scatter algorithm, forced with
# --algo, 1 KiB to 16 MiB by x4, then the fit.
#   bash bench/sim_calibrate.sh OUT_DIR [WORLDS] [REPEATS] [TRANSPORTS]
#     (defaults "2 4", 3, "shm tcp")
# shm and tcp run WORLDS ranks on this host (SHOAL_TRANSPORT forced), 100 timed calls per size
# (with 20, the first calls after a size change, slower, weigh on the mean). net runs across
# the emulated cluster (scripts/netcluster.sh up first; its hosts shoal-h0, shoal-h1, ...):
# WORLDS are then HOSTSxRANKS, e.g. "2x1 4x1 8x1 8x2", and sizes from 1 MiB up get 10 timed
# calls (a 16 MiB call takes ~0.1 s on 1 Gbit/s links). The fit's token bucket is the cluster's
# own, read from shoal-h0's tbf: it lets its burst through at the veths' speed (~3 GB/s here)
# before it shapes (docs/scale.md).
# Each sweep runs REPEATS times, interleaved; calibrate keeps each point's least time. Run it on
# a quiet machine: every other job shows up as error.
set -u
OUT=${1:?usage: sim_calibrate.sh OUT_DIR [WORLDS] [REPEATS] [TRANSPORTS]}
WORLDS=${2:-2 4}
REPEATS=${3:-3}
TRANSPORTS=${4:-shm tcp}
B=${SHOAL_BIN:-build/bin}
mkdir -p "$OUT"
declare -A ALGOS=(
  [all_reduce]="ring rabenseifner swing recursive_doubling binomial"
  [all_gather]="ring recursive_doubling bruck swing"
  [reduce_scatter]="ring recursive_halving swing"
)
files=()
# bench FILE_STEM ALGO SHOAL_TRANSPORT LAUNCH... -- shoal-bench arguments: runs once, unless done.
bench() {
  local f=$1.json a=$2 t=$3
  shift 3
  if [[ ! -s $f ]]; then
    SHOAL_TRANSPORT=$t timeout 300 "$@" --algo "$a" --json "$f" >"${f%.json}.txt" 2>&1 ||
      echo "FAILED: ${f##*/} (see ${f%.json}.txt)"
  fi
  [[ -s $f ]] && files+=("$f@$a")
}
for ((rep = 1; rep <= REPEATS; ++rep)); do
  for t in $TRANSPORTS; do
    for n in $WORLDS; do
      for c in all_reduce all_gather reduce_scatter; do
        for a in ${ALGOS[$c]}; do
          stem=$OUT/${t}_${n}_${c}_${a}_r$rep
          if [[ $t == net ]]; then
            hosts=${n%x*} per_host=${n#*x} ns=()
            for ((h = 0; h < hosts; ++h)); do ns+=("shoal-h$h"); done
            run=("$B/shoal-run" --netns "$(IFS=,; echo "${ns[*]}")" -n $((hosts * per_host)) "$B/shoal-bench" "$c")
            bench "${stem}_small" "$a" auto "${run[@]}" -b 1K -e 256K -f 4 -n 100 -w 20 -c 0
            bench "${stem}_large" "$a" auto "${run[@]}" -b 1M -e 16M -f 4 -n 10 -w 2 -c 0
          else
            bench "$stem" "$a" "$t" "$B/shoal-run" -n "$n" "$B/shoal-bench" "$c" -b 1K -e 16M -f 4 -n 100 -w 20 -c 0
          fi
          echo "$(date +%T) round $rep: $t $n $c $a, load $(cut -d' ' -f1 /proc/loadavg)"
        done
      done
    done
  done
done
echo '{}' >"$OUT/base.json"
if [[ " $TRANSPORTS " == *" net "* ]]; then
  ip netns exec shoal-h0 tc -j qdisc show dev eth0 root | /usr/bin/python3 -c '
import json, sys
burst = next(q["options"]["burst"] for q in json.load(sys.stdin) if q["kind"] == "tbf")
print(json.dumps({"nic_burst_bytes": burst, "nic_burst_bw": 3e9}))' >"$OUT/base.json"
fi
"$B/shoal-sim" calibrate --cores "$(nproc)" --model "$OUT/base.json" -o "$OUT/model.json" "${files[@]}" \
  >"$OUT/calibrate.out"
tail -4 "$OUT/calibrate.out"
