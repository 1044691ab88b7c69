#!/usr/bin/env bash
# Small-message latency against world size (docs/algorithms.md, "Latency against world size"):
# shoal-tune at one small size for every world from 2 to MAX ranks on this host, every
# all_gather and reduce_scatter algorithm interleaved, then the fits of bench/logp_fit.py.
#   bash bench/logp_fit.sh OUT_DIR [MAX_WORLD] [SIZE]      (default 16, 1K)
# Resumable: a world already in OUT_DIR/logp.json is not measured again.
set -eu
OUT=${1:?usage: logp_fit.sh OUT_DIR [MAX_WORLD] [SIZE]}
MAX=${2:-16}
SIZE=${3:-1K}
B=${SHOAL_BIN:-build/bin}
mkdir -p "$OUT"
for ((n = 2; n <= MAX; ++n)); do
  if [[ -s $OUT/logp.json ]] && grep -q "\"world\": $n," "$OUT/logp.json"; then continue; fi
  timeout 600 "$B/shoal-run" -n "$n" "$B/shoal-tune" -o "$OUT/logp.json" --append --sizes "$SIZE" -n 200 -w 20 \
    --rounds 5 >"$OUT/tune_$n.txt" 2>&1 || { echo "FAILED at $n ranks (see $OUT/tune_$n.txt)"; exit 1; }
  echo "$(date +%T) $n ranks, load $(cut -d' ' -f1 /proc/loadavg)"
done
/usr/bin/python3 "$(dirname "$0")/logp_fit.py" "$OUT/logp.json"
