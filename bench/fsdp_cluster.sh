#!/usr/bin/env bash
# fsdp_cluster.sh: examples/fsdp_train.py across emulated hosts (scripts/netcluster.sh), the same
# job over shoal and over gloo in one run, each rank started by torchrun (one agent per host,
# inside the host's network namespace, static rendezvous at host 0).
#
#   bench/fsdp_cluster.sh [--hosts "2 4"] [--nics "1 2"] [--rate 1gbit] [--ranks-per-host 2]
#                         [--configs "fsdp hsdp"] [--ablations] [--rounds 2] [--steps 12]
#                         [--out fsdp-cluster] [--doc FILE#ID] [-- FSDP_TRAIN_ARGS...]
#
# For every hosts x NICs cluster and every configuration (fsdp: one shard group of all ranks;
# hsdp: shard inside a host, replicate across hosts) it runs, interleaved round by round: gloo
# (GLOO_SOCKET_IFNAME=eth0: gloo uses one NIC), shoal, and with --ablations shoal with one of its
# parts off: the hierarchy (SHOAL_HIERARCHICAL=off), every NIC but eth0 (SHOAL_SOCKET_IFNAME=eth0),
# the dispatcher (SHOAL_DISPATCH=off: every call on the default row). Each run's JSON line goes to
# OUT/runs.jsonl, rank 0's trace of its collectives to OUT/traces/ (bench/fsdp_sim.py replays
# them); bench/fsdp_report.py then writes OUT/report.md and OUT/*.png and exits non-zero when a
# shoal run's losses differ from gloo's. Needs root (namespaces) and a build (make build).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SHOAL_BUILD_DIR:-$ROOT/build}
PY=$ROOT/.venv/bin/python
NC=$ROOT/scripts/netcluster.sh
HOSTS_LIST="2 4"
NICS_LIST="1 2"
RATE=1gbit
PER_HOST=2
CONFIGS="fsdp hsdp"
ABLATIONS=0
ROUNDS=2
STEPS=12
OUT=fsdp-cluster
DOC=""
PREFIX=fc
EXTRA=()

die() { echo "fsdp_cluster.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) HOSTS_LIST=$2; shift 2 ;;
    --nics) NICS_LIST=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --ranks-per-host) PER_HOST=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --ablations) ABLATIONS=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root: the hosts are network namespaces"
[[ -x $PY ]] || die "no $PY: run scripts/install-deps.sh"
[[ -d $BUILD/python/shoal ]] || die "no $BUILD/python/shoal: run make build"
[[ -z $DOC ]] || python3 "$ROOT/bench/doc_block.py" check fsdp_report.py "$DOC" || exit 1
for c in $CONFIGS; do [[ $c == fsdp || $c == hsdp ]] || die "--configs: fsdp or hsdp, not '$c'"; done

mkdir -p "$OUT/logs" "$OUT/traces"
RUNS=$OUT/runs.jsonl
: >"$RUNS"
cleanup() {
  pkill -KILL -f "$ROOT/examples/fsdp_train.py" 2>/dev/null || true
  "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# variant name -> environment of its ranks
declare -A VENV=(
  [gloo]="GLOO_SOCKET_IFNAME=eth0"
  [shoal]=""
  [shoal-no-hierarchy]="SHOAL_HIERARCHICAL=off"
  [shoal-one-nic]="SHOAL_SOCKET_IFNAME=eth0"
  [shoal-no-dispatcher]="SHOAL_DISPATCH=off"
)

# run HOSTS NICS CONFIG VARIANT ROUND: one job, one torchrun agent per host
run() {
  local hosts=$1 nics=$2 config=$3 variant=$4 round=$5
  local backend=shoal; [[ $variant == gloo ]] && backend=gloo
  local tag=h${hosts}n${nics}-$config-$variant-r$round
  local args=(--backend "$backend" --steps "$STEPS" --json --quiet
    --trace "$OUT/traces/$tag.json" "${EXTRA[@]}")
  [[ $config == hsdp ]] && args+=(--replicate "$hosts")
  local port=$((29400 + RANDOM % 500))
  local pids=() h
  for ((h = 0; h < hosts; h++)); do
    # shellcheck disable=SC2086  # VENV holds NAME=VALUE words
    ip netns exec "$PREFIX-h$h" env ${VENV[$variant]} PYTHONPATH="$BUILD/python" OMP_NUM_THREADS=1 \
      timeout -s KILL 300 "$PY" -m torch.distributed.run --nnodes "$hosts" --node_rank "$h" \
      --nproc_per_node "$PER_HOST" --master_addr 198.18.0.1 --master_port "$port" \
      "$ROOT/examples/fsdp_train.py" "${args[@]}" >"$OUT/logs/$tag-host$h.log" 2>&1 &
    pids+=($!)
  done
  # A host whose job fails makes the others stop at once: gloo's ranks would wait for their dead
  # peers until the process group's timeout.
  local ok=1 live=("${pids[@]}") finished rc
  while ((${#live[@]} > 0)); do
    rc=0
    wait -n -p finished "${live[@]}" || rc=$?
    [[ -z ${finished:-} ]] && break  # nothing left to wait for
    local rest=() q
    for q in "${live[@]}"; do [[ $q == "$finished" ]] || rest+=("$q"); done
    live=("${rest[@]}")
    if ((rc != 0)) && ((ok == 1)); then
      ok=0
      pkill -KILL -f "$ROOT/examples/fsdp_train.py" 2>/dev/null || true
    fi
    finished=""
  done
  local line
  line=$(grep -h '^JSON ' "$OUT"/logs/"$tag"-host*.log | head -1 | cut -c6-)
  if [[ -z $line ]]; then
    echo "  $tag FAILED (logs: $OUT/logs/$tag-host*.log)"
    echo "{\"hosts\": $hosts, \"nics\": $nics, \"config\": \"$config\", \"variant\": \"$variant\", \"round\": $round, \"failed\": true}" >>"$RUNS"
    return
  fi
  # Rank 0 reports after every step and a barrier: a rank that fails after that failed in
  # destroy_process_group (gloo's ranks abort there now and then: "terminate called without an
  # active exception"). The run counts; the report lists the teardowns that failed.
  echo "$line" | /usr/bin/python3 "$ROOT/bench/fsdp_report.py" --append "$RUNS" hosts="$hosts" \
    nics="$nics" config="$config" variant="$variant" round="$round" rate="$RATE" \
    teardown_failed="$((1 - ok))"
}

variants=(gloo shoal)
[[ $ABLATIONS == 1 ]] && variants+=(shoal-no-hierarchy shoal-one-nic shoal-no-dispatcher)
for hosts in $HOSTS_LIST; do
  for nics in $NICS_LIST; do
    "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
    "$NC" up --prefix "$PREFIX" --hosts "$hosts" --nics "$nics" --rate "$RATE" >/dev/null
    echo "$hosts hosts x $PER_HOST ranks, $nics NIC(s) of $RATE"
    for ((round = 1; round <= ROUNDS; round++)); do
      for config in $CONFIGS; do
        for variant in "${variants[@]}"; do
          [[ $nics == 1 && $variant == shoal-one-nic ]] && continue  # the same as shoal there
          run "$hosts" "$nics" "$config" "$variant" "$round"
        done
      done
    done
  done
done
"$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
/usr/bin/python3 "$ROOT/bench/fsdp_report.py" "$OUT" ${DOC:+--doc "$DOC"}  # Debian's, which has matplotlib
