#!/usr/bin/env bash
# diloco_cluster.sh: DiLoCo against DDP across emulated hosts with slow links
# (scripts/netcluster.sh), every variant in one run, one worker per host started by torchrun
# (an agent per host inside its network namespace, static rendezvous at host 0).
#
#   bench/diloco_cluster.sh [--hosts 4] [--rate 100mbit] [--steps 160] [--diloco-steps 800]
#                           [--inner-steps 40] [--regions 2 --between 100mbit]
#                           [--wan "--layout continents" | --wan "--rtt 80ms --loss 0.1%"]
#                           [--rounds 1] [--variants "ddp-gloo ddp-shoal diloco ..."]
#                           [--out diloco-cluster] [--doc FILE#ID [--img PNG]]
#                           [-- TRAIN_ARGS...]   (TRAIN_ARGS after the model's)
#
# Variants: ddp-gloo and ddp-shoal (examples/ddp_train.py: an all_reduce of the gradients every
# step, --steps of them), diloco (examples/diloco_train.py over shoal: an outer step every
# --inner-steps, --diloco-steps inner steps: DiLoCo's steps are cheaper), diloco-stream (4
# fragments, the delayed outer step), diloco-int8 (int8 pseudo-gradients with error feedback),
# diloco-stream-int8 (all three); ddp-shoal-ring (ddp-shoal with SHOAL_ALGO=all_reduce:ring);
# torchft-diloco (torchft's DiLoCo over gloo, bench/peers/torchft_diloco.py, with its lighthouse
# on host 0; every host gets its own hostname, its address, as torchft advertises hostnames);
# diloco-elastic (diloco with --elastic: the last worker is killed 30% into the run, the others
# shrink and go on, and a newcomer started in the dead worker's namespace joins at 60%: it
# receives the shared state and trains to the end). --regions R --between RATE puts the hosts in
# R regions (scripts/netcluster.sh: --rate inside a region, RATE between, hosts alternating), and
# the shoal variants measure their links (SHOAL_LINKS=measure); --wan ARGS passes ARGS to
# netcluster.sh up (its user-space WAN: a named layout, or delay, jitter and loss on --rate's
# links), and the shoal variants measure their links there too. Each run's JSON line goes to
# OUT/runs.jsonl; bench/diloco_report.py writes
# OUT/report.md and OUT/loss.png and exits non-zero when a run failed or DiLoCo never reaches
# the loss DDP over gloo ends with; --doc FILE#ID also writes the report between FILE's
# '<!-- diloco_report.py:ID -->' lines and --img the plot (bench/doc_block.py). Needs root
# (namespaces) and a build (make build).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SHOAL_BUILD_DIR:-$ROOT/build}
PY=$ROOT/.venv/bin/python
NC=$ROOT/scripts/netcluster.sh
HOSTS=4
RATE=100mbit
STEPS=160
DILOCO_STEPS=800
INNER=40
# The model and data of every variant: gpt.py's GPT (0.8 M parameters) on Debian's fortunes
MODEL=(--dim 128 --layers 4 --corpus /usr/share/games/fortunes)
ROUNDS=1
VARIANTS="ddp-gloo ddp-shoal diloco diloco-stream diloco-int8 diloco-stream-int8 torchft-diloco"
OUT=diloco-cluster
PREFIX=dl
REGIONS=1
BETWEEN=""
WAN=""
EXTRA=()
DOC=""
IMG=""

die() { echo "diloco_cluster.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --diloco-steps) DILOCO_STEPS=$2; shift 2 ;;
    --inner-steps) INNER=$2; shift 2 ;;
    --regions) REGIONS=$2; shift 2 ;;
    --between) BETWEEN=$2; shift 2 ;;
    --wan) WAN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --img) IMG=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root: the hosts are network namespaces"
[[ -x $PY ]] || die "no $PY: run scripts/install-deps.sh"
[[ -d $BUILD/python/shoal ]] || die "no $BUILD/python/shoal: run make build"
[[ -z $DOC ]] || python3 "$ROOT/bench/doc_block.py" check diloco_report.py "$DOC" || exit 1

mkdir -p "$OUT/logs"
RUNS=$OUT/runs.jsonl
: >"$RUNS"
cleanup() {
  pkill -KILL -f "$ROOT/(examples/(ddp|diloco)_train|bench/peers/torchft_(diloco|lighthouse)).py" 2>/dev/null || true
  "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# variant -> script and its arguments
args_of() {
  case $1 in
    ddp-gloo) echo "ddp_train.py --backend gloo --steps $STEPS" ;;
    ddp-shoal) echo "ddp_train.py --backend shoal --steps $STEPS" ;;
    ddp-shoal-ring) echo "ddp_train.py --backend shoal --steps $STEPS" ;;
    diloco) echo "diloco_train.py --backend shoal --steps $DILOCO_STEPS --inner-steps $INNER" ;;
    diloco-stream) echo "diloco_train.py --backend shoal --steps $DILOCO_STEPS --inner-steps $INNER --fragments 4 --delayed" ;;
    diloco-int8) echo "diloco_train.py --backend shoal --steps $DILOCO_STEPS --inner-steps $INNER --codec int8" ;;
    diloco-stream-int8) echo "diloco_train.py --backend shoal --steps $DILOCO_STEPS --inner-steps $INNER --fragments 4 --delayed --codec int8" ;;
    diloco-elastic) echo "diloco_train.py --backend shoal --steps $DILOCO_STEPS --inner-steps $INNER --elastic --die-at $((DILOCO_STEPS * 3 / 10)) --admit-at $((DILOCO_STEPS * 6 / 10))" ;;
    torchft-diloco) echo "" ;;
    *) die "unknown variant '$1'" ;;
  esac
}

# variant -> settings of its ranks: ddp-shoal-ring forces the ring for every all_reduce
# (and, on regions, every shoal variant measures its links)
env_of() {
  [[ $1 == ddp-shoal-ring ]] && echo "SHOAL_ALGO=all_reduce:ring" || echo "SHOAL_ALGO="
  ((REGIONS > 1)) || [[ -n $WAN ]] && echo "SHOAL_LINKS=measure"
  return 0
}

# torchft's DiLoCo: no torchrun; a lighthouse on host 0, one replica group per host
run_torchft() {  # TAG
  local tag=$1 pids=() h ip rc=0
  ip netns exec "$PREFIX-h0" "$PY" "$ROOT/bench/peers/torchft_lighthouse.py" --bind 0.0.0.0:29510 \
    --min-replicas "$HOSTS" >"$OUT/logs/$tag-lighthouse.log" 2>&1 &
  local lighthouse=$!
  sleep 2
  for ((h = 0; h < HOSTS; h++)); do
    ip=198.18.0.$((h + 1))
    ip netns exec "$PREFIX-h$h" unshare --uts sh -c "hostname $ip && exec env GLOO_SOCKET_IFNAME=eth0 \
      OMP_NUM_THREADS=1 timeout -s KILL 900 $PY $ROOT/bench/peers/torchft_diloco.py --replica $h \
      --replicas $HOSTS --lighthouse http://198.18.0.1:29510 --host $ip --inner-steps $INNER \
      --steps $DILOCO_STEPS ${MODEL[*]} --json --quiet ${EXTRA[*]}" >"$OUT/logs/$tag-host$h.log" 2>&1 &
    pids+=($!)
  done
  for h in "${pids[@]}"; do wait "$h" || rc=1; done
  kill "$lighthouse" 2>/dev/null; wait "$lighthouse" 2>/dev/null || true
  return $rc
}

run() {  # VARIANT ROUND
  local variant=$1 round=$2 tag=$1-r$2
  # shellcheck disable=SC2207  # words on purpose
  local words=($(args_of "$variant"))
  local script=$ROOT/examples/${words[0]:-}
  local port=$((29400 + RANDOM % 500)) pids=() h rc=0
  if [[ $variant == torchft-diloco ]]; then run_torchft "$tag" || rc=1; fi
  for ((h = 0; h < HOSTS && ${#words[@]} > 0; h++)); do
    # shellcheck disable=SC2046  # NAME=VALUE words
    ip netns exec "$PREFIX-h$h" env $(env_of "$variant") GLOO_SOCKET_IFNAME=eth0 PYTHONPATH="$BUILD/python" OMP_NUM_THREADS=1 \
      timeout -s KILL 900 "$PY" -m torch.distributed.run --nnodes "$HOSTS" --node_rank "$h" \
      --nproc_per_node 1 --master_addr 198.18.0.1 --master_port "$port" \
      "$script" "${words[@]:1}" "${MODEL[@]}" --json --quiet "${EXTRA[@]}" \
      >"$OUT/logs/$tag-host$h.log" 2>&1 &
    pids+=($!)
  done
  local joiner="" last=$((HOSTS - 1))
  if [[ $variant == diloco-elastic ]]; then
    # The newcomer waits in the store until the workers admit it; it replaces the killed one.
    sleep 5
    # shellcheck disable=SC2046  # NAME=VALUE words
    ip netns exec "$PREFIX-h$last" env $(env_of "$variant") GLOO_SOCKET_IFNAME=eth0 PYTHONPATH="$BUILD/python" \
      OMP_NUM_THREADS=1 MASTER_ADDR=198.18.0.1 MASTER_PORT="$port" timeout -s KILL 900 "$PY" "$script" \
      "${words[@]:1}" "${MODEL[@]}" --json --quiet --join "${EXTRA[@]}" >"$OUT/logs/$tag-joiner.log" 2>&1 &
    joiner=$!
  fi
  for ((h = 0; h < ${#pids[@]}; h++)); do
    # the killed worker's launcher fails, as it should
    wait "${pids[h]}" || [[ -n $joiner && $h == "$last" ]] || rc=1
  done
  if [[ -n $joiner ]]; then wait "$joiner" || rc=1; fi
  local line
  line=$(grep -h '^JSON ' "$OUT"/logs/"$tag"-host*.log | head -1 | cut -c6- || true)
  if [[ -n $joiner && -n $line ]]; then  # the newcomer's end state beside worker 0's
    line=$(grep -h '^JSON ' "$OUT/logs/$tag-joiner.log" | head -1 | cut -c6- |
      "$PY" -c 'import json, sys; j = json.loads(sys.stdin.read() or "{}"); d = json.loads(sys.argv[1]); d.update(joiner={k: j.get(k) for k in ("outer_steps", "state_hash", "members", "world")}); print(json.dumps(d))' "$line")
  fi
  if [[ -z $line || $rc != 0 ]]; then
    echo "  $tag FAILED (logs: $OUT/logs/$tag-host*.log)"
    echo "{\"variant\": \"$variant\", \"round\": $round, \"failed\": true}" >>"$RUNS"
    return
  fi
  echo "$line" | "$PY" -c 'import json, sys; d = json.loads(sys.stdin.read()); d.update(variant=sys.argv[1], round=int(sys.argv[2]), hosts=int(sys.argv[3]), rate=sys.argv[4], regions=int(sys.argv[5]), between=sys.argv[6], wan=sys.argv[7], links=sys.argv[8]); print(json.dumps(d))' \
    "$variant" "$round" "$HOSTS" "$RATE" "$REGIONS" "$BETWEEN" "$WAN" "$LINKS" >>"$RUNS"
  echo "  $tag done"
}

"$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
REGION_ARGS=()
((REGIONS > 1)) && REGION_ARGS=(--regions "$REGIONS" --between "$BETWEEN")
# shellcheck disable=SC2206  # netcluster.sh's words
[[ -n $WAN ]] && REGION_ARGS+=($WAN)
UP_LINE=$("$NC" up --prefix "$PREFIX" --hosts "$HOSTS" --nics 1 --rate "$RATE" "${REGION_ARGS[@]}")
# The WAN's links as netcluster.sh states them ("40mbit up, 200mbit down, loss 0.5%; ...")
LINKS=$(sed -n 's/.* NICs, \(.*\); root namespace address.*/\1/p' <<<"$UP_LINE")
echo "$HOSTS hosts, a worker each, 1 NIC of $RATE$( ((REGIONS > 1)) && echo ", $REGIONS regions, $BETWEEN between")${WAN:+, WAN $WAN}; DDP $STEPS steps, DiLoCo $DILOCO_STEPS, H = $INNER"
for ((round = 1; round <= ROUNDS; round++)); do
  for variant in $VARIANTS; do run "$variant" "$round"; done
done
/usr/bin/python3 "$ROOT/bench/diloco_report.py" "$OUT" ${DOC:+--doc "$DOC"} ${IMG:+--img "$IMG"}  # Debian's python: matplotlib
