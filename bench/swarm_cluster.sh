#!/usr/bin/env bash
# swarm_cluster.sh: SWARM across emulated hosts with slow links (scripts/netcluster.sh): a model
# of 12.8 M parameters (d_model 512, 4 blocks, 64 tokens) in 4 stages, 2 replicas a stage spread
# over the hosts, 2 trainers, one `shoal-swarm local --netns` run per configuration:
#
#   sync        float32 activations and averaging, synchronous rounds
#   async       the same with delayed parameter updates (asynchronous rounds)
#   int8        int8 activations and gradients between stages, int8 averaging with error
#               feedback, synchronous rounds
#   async-int8  both
#
#   bench/swarm_cluster.sh [--hosts 4] [--rate 200mbit] [--rounds 8] [--configs "sync async int8 async-int8"]
#                          [--out swarm-cluster] [--doc FILE#ID] [-- SWARM_ARGS...]
#
# Each run's summary.json goes to OUT/<config>/; bench/swarm_cluster_report.py writes
# OUT/report.md and exits non-zero when a run did not complete its rounds. Needs root and a
# build with torch (build/bin/shoal-swarm). About 2-4 minutes a configuration on 2 cores.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
NC=$ROOT/scripts/netcluster.sh
HOSTS=4
RATE=200mbit
ROUNDS=8
CONFIGS="sync async int8 async-int8"
OUT=swarm-cluster
DOC=""
PREFIX=sw
EXTRA=()
MODEL=(--stages 4 --d-model 512 --layers 4 --heads 8 --seq-len 64 --micro-batch 4)
SWARM=(--peers 8 --trainers 2 --inflight 6 --global-batch 16 --request-timeout 60)

die() { echo "swarm_cluster.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root: the hosts are network namespaces"
[[ -x $BIN/shoal-swarm ]] || die "no $BIN/shoal-swarm: a build with torch (make build)"
[[ -z $DOC ]] || python3 "$ROOT/bench/doc_block.py" check swarm_cluster_report.py "$DOC" || exit 1

mkdir -p "$OUT"
"$NC" up --prefix "$PREFIX" --hosts "$HOSTS" --nics 1 --rate "$RATE" >/dev/null
trap '"$NC" down --prefix "$PREFIX" >/dev/null 2>&1' EXIT
NETNS=$(for ((h = 0; h < HOSTS; h++)); do printf '%s%s' "$([[ $h -gt 0 ]] && echo ,)" "$PREFIX-h$h"; done)
echo "$HOSTS hosts, 1 NIC of $RATE each; ${MODEL[*]} ${SWARM[*]}, $ROUNDS rounds"
for config in $CONFIGS; do
  case $config in
    sync) opts=() ;;
    async) opts=(--delayed-updates) ;;
    int8) opts=(--codec int8 --averaging-codec int8) ;;
    async-int8) opts=(--codec int8 --averaging-codec int8 --delayed-updates) ;;
    *) die "unknown configuration '$config' (sync, async, int8, async-int8)" ;;
  esac
  rm -rf "${OUT:?}/$config"
  echo "== $config"
  timeout 1200 "$BIN/shoal-swarm" local --registry 198.18.0.254:0 --netns "$NETNS" "${MODEL[@]}" \
    "${SWARM[@]}" --rounds "$ROUNDS" "${opts[@]}" --out "$OUT/$config" "${EXTRA[@]}" | tail -2 || true
done
"$ROOT/.venv/bin/python" "$ROOT/bench/swarm_cluster_report.py" "$OUT" ${DOC:+--doc "$DOC"} --configs "$CONFIGS" \
  --layout "$HOSTS hosts, 1 NIC of $RATE each"
