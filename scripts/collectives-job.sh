#!/usr/bin/env bash
# The collective benchmark job (`make run-collectives`): a 4-rank shoal-bench sweep of all_reduce, all_gather and
# reduce_scatter from 8 B to 64 MiB, every element checked against a reference (-c 1).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
RANKS=${RANKS:-4}
status=0
for coll in all_reduce all_gather reduce_scatter; do
  "$BIN/shoal-run" -n "$RANKS" -- "$BIN/shoal-bench" "$coll" -b 8 -e 64M -f 2 -n 10 -w 2 -c 1 || status=1
  echo
done
exit $status
