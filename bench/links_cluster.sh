#!/usr/bin/env bash
# links_cluster.sh: the ring that follows measured links against the ring in rank order (and any
# other all_reduce row), on emulated hosts in regions: by default two (scripts/netcluster.sh
# --regions 2: fast links inside a region, one slow pipe each way between them), or a named WAN
# layout (--layout continents: three regions 70-200 ms apart, shoal-wan's delayed links); hosts
# alternate between the regions as a launcher that knows nothing of them numbers them.
# shoal-bench all_reduce on every host (one rank each, shoal-run --netns), one variant after the
# other, each in its own job:
#
#   ring          SHOAL_ALGO=all_reduce:ring: rank order, every hop crosses the pipe
#   link_ring     SHOAL_LINKS=measure, SHOAL_ALGO=all_reduce:link_ring: the measured order
#   auto          SHOAL_LINKS=measure, no SHOAL_ALGO: the planner prices the rows on the links
#   ROW           any other all_reduce row (rabenseifner, swing, ...): SHOAL_ALGO=all_reduce:ROW
#
# Beside each measured time, what shoal-sim predicts for that row on the same network
# (`netcluster.sh spec` of the same settings, `shoal-sim run --wan-spec`; link_ring in the order
# the model's own links give).
#
#   bench/links_cluster.sh [--hosts 6] [--rate 1gbit] [--between 100mbit] [--layout continents]
#                          [--bytes 16M | --sizes 1M:16M] [--iters 5] [--rounds 1]
#                          [--variants "ring link_ring ..."] [--target 1.8] [--out links-cluster]
#                          [--doc FILE#ID]
#
# Each run's shoal-bench JSON goes to OUT/<variant>-<round>.json, the prediction to
# OUT/predicted.json; bench/links_report.py writes OUT/report.md and exits non-zero when a run
# failed or link_ring's bus bandwidth at the largest size is below --target times ring's. Needs
# root (namespaces) and a build (make build).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SHOAL_BUILD_DIR:-$ROOT/build}
NC=$ROOT/scripts/netcluster.sh
HOSTS=6
RATE=1gbit
BETWEEN=100mbit
BYTES=16M
SIZES=""
LAYOUT=""
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
    --sizes) SIZES=$2; shift 2 ;;
    --layout) LAYOUT=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --target) TARGET=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root: the hosts are network namespaces"
[[ -x $BUILD/bin/shoal-bench && -x $BUILD/bin/shoal-run ]] || die "no $BUILD/bin/shoal-bench: run make build"
[[ -z $DOC ]] || python3 "$ROOT/bench/doc_block.py" check links_report.py "$DOC" || exit 1

MIN=${SIZES%%:*} MAX=${SIZES##*:}
[[ -n $SIZES ]] || MIN=$BYTES MAX=$BYTES
if [[ -n $LAYOUT ]]; then
  cluster=(--hosts "$HOSTS" --layout "$LAYOUT")
  DESCRIPTION="$HOSTS hosts, layout $LAYOUT"
else
  cluster=(--hosts "$HOSTS" --nics 1 --rate "$RATE" --regions 2 --between "$BETWEEN")
  DESCRIPTION="$HOSTS hosts in 2 alternating regions, $RATE inside, $BETWEEN between"
fi
mkdir -p "$OUT"
# The prediction first: it needs no root and checks the settings before anything is made.
"$NC" spec "${cluster[@]}" >"$OUT/network.wan"
"$BUILD/bin/shoal-sim" run --wan-spec "$OUT/network.wan" --ranks-per-host 1 -c all_reduce -a all \
  -p "$HOSTS" -s "$MIN:$MAX:4" --threads 1 --json "$OUT/predicted.json" >/dev/null
"$NC" up --prefix "$PREFIX" "${cluster[@]}"
trap '"$NC" down --prefix "$PREFIX"' EXIT
NETNS=$(for ((h = 0; h < HOSTS; h++)); do printf '%s%s' "$([[ $h -gt 0 ]] && echo ,)" "$PREFIX-h$h"; done)

for ((round = 0; round < ROUNDS; round++)); do
  for v in $VARIANTS; do
    env=(SHOAL_DEBUG=INFO)
    case $v in
      link_ring) env+=(SHOAL_LINKS=measure SHOAL_ALGO=all_reduce:link_ring) ;;
      auto) env+=(SHOAL_LINKS=measure) ;;
      *) env+=("SHOAL_ALGO=all_reduce:$v") ;;  # shoal-bench names a row it does not have
    esac
    echo "== $v (round $round)"
    timeout 900 "$BUILD/bin/shoal-run" -n "$HOSTS" --netns "$NETNS" -- \
      env "${env[@]}" "$BUILD/bin/shoal-bench" all_reduce -b "$MIN" -e "$MAX" -f 4 -n "$ITERS" -w 2 \
      --json "$OUT/$v-$round.json" 2>"$OUT/$v-$round.log" | grep -v '^#' || true
    grep -h "links in use" "$OUT/$v-$round.log" | head -1 || true
  done
done
"$ROOT/.venv/bin/python" "$ROOT/bench/links_report.py" "$OUT" ${DOC:+--doc "$DOC"} --variants "$VARIANTS" \
  --rounds "$ROUNDS" --target "$TARGET" --layout "$DESCRIPTION"
