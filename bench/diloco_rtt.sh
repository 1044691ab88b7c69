#!/usr/bin/env bash
# diloco_rtt.sh: compute utilisation against round-trip time, DiLoCo against DDP, on 4 emulated
# hosts (scripts/netcluster.sh's user-space WAN: every path RTT ms long, --loss LOSS), one
# bench/diloco_cluster.sh run per RTT:
#
#   bench/diloco_rtt.sh [--rtts "0ms 20ms 80ms 200ms"] [--rate 100mbit] [--loss ""]
#                       [--variants "ddp-gloo ddp-shoal diloco diloco-stream-int8"]
#                       [--steps 60] [--out diloco-rtt] [--doc FILE#ID [--img PNG]]
#
# DDP runs --steps steps (its utilisation, not its loss curve, is wanted here); DiLoCo 800 inner
# steps, H = 40. OUT/rtt-<RTT>/ holds each run's files; bench/diloco_rtt_report.py writes
# OUT/report.md and OUT/utilisation.png and exits non-zero when a run failed. Needs root.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RTTS="0ms 20ms 80ms 200ms"
RATE=100mbit
LOSS=""
VARIANTS="ddp-gloo ddp-shoal diloco diloco-stream-int8"
STEPS=60
OUT=diloco-rtt
DOC=""
IMG=""
die() { echo "diloco_rtt.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --rtts) RTTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --img) IMG=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ -z $DOC ]] || python3 "$ROOT/bench/doc_block.py" check diloco_rtt_report.py "$DOC" || exit 1
mkdir -p "$OUT"
for rtt in $RTTS; do
  # a failed run is recorded in its runs.jsonl; the report says so and exits non-zero
  bash "$ROOT/bench/diloco_cluster.sh" --rate "$RATE" --steps "$STEPS" --variants "$VARIANTS" \
    --wan "--rtt $rtt${LOSS:+ --loss $LOSS}" --out "$OUT/rtt-$rtt" >"$OUT/rtt-$rtt.log" 2>&1 || true
  echo "RTT $rtt: $(grep -c '"failed"' "$OUT/rtt-$rtt/runs.jsonl" 2>/dev/null || true) run(s) failed"
done
/usr/bin/python3 "$ROOT/bench/diloco_rtt_report.py" "$OUT" ${DOC:+--doc "$DOC"} ${IMG:+--img "$IMG"}
