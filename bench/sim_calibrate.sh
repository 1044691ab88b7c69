#!/usr/bin/env bash
# Measurements for `shoal-sim calibrate` (docs/scale.md, "Calibration on this machine"): every
# all_reduce, all_gather and reduce_scatter algorithm, forced with --algo, over shared memory and
# over loopback TCP, at the given world sizes, 1 KiB to 16 MiB, 100 timed calls per size (with 20
# the first calls after a size change, slower, weigh on the mean); then the fit.
#   bash bench/sim_calibrate.sh OUT_DIR [WORLDS] [REPEATS]   (default "2 4", 3)
# Each sweep runs REPEATS times, interleaved; calibrate keeps each point's least time. Run it on
# a quiet machine: every other job shows up as error.
set -u
OUT=${1:?usage: sim_calibrate.sh OUT_DIR [WORLDS]}
WORLDS=${2:-2 4}
REPEATS=${3:-3}
B=${SHOAL_BIN:-build/bin}
mkdir -p "$OUT"
declare -A ALGOS=(
  [all_reduce]="ring rabenseifner swing recursive_doubling binomial"
  [all_gather]="ring recursive_doubling bruck swing"
  [reduce_scatter]="ring recursive_halving swing"
)
files=()
for ((rep = 1; rep <= REPEATS; ++rep)); do
  for t in shm tcp; do
    for n in $WORLDS; do
      for c in all_reduce all_gather reduce_scatter; do
        for a in ${ALGOS[$c]}; do
          f=$OUT/${t}_${n}_${c}_${a}_r$rep.json
          if [[ ! -s $f ]]; then
            SHOAL_TRANSPORT=$t timeout 300 "$B/shoal-run" -n "$n" "$B/shoal-bench" "$c" -b 1K -e 16M -f 4 -n 100 -w 20 \
              -c 0 --algo "$a" --json "$f" >"${f%.json}.txt" 2>&1 || echo "FAILED: $t $n $c $a (see ${f%.json}.txt)"
            echo "$(date +%T) round $rep: $t $n $c $a, load $(cut -d' ' -f1 /proc/loadavg)"
          fi
          [[ -s $f ]] && files+=("$f@$a")
        done
      done
    done
  done
done
"$B/shoal-sim" calibrate -o "$OUT/model.json" "${files[@]}" >"$OUT/calibrate.out"
tail -4 "$OUT/calibrate.out"
