#!/usr/bin/env bash
# links_cluster.sh: the ring that follows measured links against the ring in rank order, on
# emulated hosts in two regions (scripts/netcluster.sh --regions 2): fast links inside a region,
# one slow pipe each way between them, hosts alternating between the regions as a launcher that
# knows nothing of them numbers them. shoal-bench all_reduce on every host (one rank each,
# shoal-run --netns), one variant after the other, each in its own job:
#
#   ring          SHOAL_ALGO=all_reduce:ring: rank order, every hop crosses the pipe
#   link_ring     SHOAL_LINKS=measure, SHOAL_ALGO=all_reduce:link_ring: the measured order
#   rabenseifner  SHOAL_ALGO=all_reduce:rabenseifner: halving and doubling, for reference
#   auto          SHOAL_LINKS=measure, no SHOAL_ALGO: the planner prices the rows on the links
#
#   bench/links_cluster.sh [--hosts 6] [--rate 1gbit] [--between 100mbit] [--bytes 16M]
#                          [--iters 5] [--rounds 1] [--variants "ring link_ring ..."]
#                          [--target 1.8] [--out links-cluster] [--doc FILE#ID]
#
# Each run's shoal-bench JSON goes to OUT/<variant>-<round>.json; bench/links_report.py writes
# OUT/report.md and exits non-zero when a run failed or link_ring's bus bandwidth is below
# --target times ring's. Needs root (namespaces) and a build (make build).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SHOAL_BUILD_DIR:-$ROOT/build}
NC=$ROOT/scripts/netcluster.sh
HOSTS=6
RATE=1gbit
BETWEEN=100mbit
BYTES=16M
ITERS=5
ROUNDS=1
TARGET=1.8
VARIANTS="ring link_ring rabenseifner auto"
OUT=links-cluster
DOC=""
PREFIX=lk

die() { echo "links_cluster.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --between) BETWEEN=$2; shift 2 ;;
    --bytes) BYTES=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --target) TARGET=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root: the hosts are network namespaces"
[[ -x $BUILD/bin/shoal-bench && -x $BUILD/bin/shoal-run ]] || die "no $BUILD/bin/shoal-bench: run make build"
[[ -z $DOC ]] || python3 "$ROOT/bench/doc_block.py" check links_report.py "$DOC" || exit 1

mkdir -p "$OUT"
"$NC" up --prefix "$PREFIX" --hosts "$HOSTS" --nics 1 --rate "$RATE" --regions 2 --between "$BETWEEN"
trap '"$NC" down --prefix "$PREFIX"' EXIT
NETNS=$(for ((h = 0; h < HOSTS; h++)); do printf '%s%s' "$([[ $h -gt 0 ]] && echo ,)" "$PREFIX-h$h"; done)

for ((round = 0; round < ROUNDS; round++)); do
  for v in $VARIANTS; do
    env=(SHOAL_DEBUG=INFO)
    case $v in
      ring) env+=(SHOAL_ALGO=all_reduce:ring) ;;
      link_ring) env+=(SHOAL_LINKS=measure SHOAL_ALGO=all_reduce:link_ring) ;;
      rabenseifner) env+=(SHOAL_ALGO=all_reduce:rabenseifner) ;;
      auto) env+=(SHOAL_LINKS=measure) ;;
      *) die "unknown variant '$v' (ring, link_ring, rabenseifner, auto)" ;;
    esac
    echo "== $v (round $round)"
    timeout 900 "$BUILD/bin/shoal-run" -n "$HOSTS" --netns "$NETNS" -- \
      env "${env[@]}" "$BUILD/bin/shoal-bench" all_reduce -b "$BYTES" -e "$BYTES" -n "$ITERS" -w 2 \
      --json "$OUT/$v-$round.json" 2>"$OUT/$v-$round.log" | grep -v '^#' || true
    grep -h "links in use" "$OUT/$v-$round.log" | head -1 || true
  done
done
"$ROOT/.venv/bin/python" "$ROOT/bench/links_report.py" "$OUT" ${DOC:+--doc "$DOC"} --variants "$VARIANTS" \
  --rounds "$ROUNDS" --target "$TARGET" --layout "$HOSTS hosts in 2 alternating regions, $RATE inside, $BETWEEN between"
