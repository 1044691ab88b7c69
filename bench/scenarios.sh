#!/usr/bin/env bash
# The benchmark scenarios: shoal against its peers on one host, over TCP on loopback, and across
# an emulated cluster, for all_reduce, all_gather and reduce_scatter. Each (scenario, ranks,
# collective) is one bench/compare.sh run, whose libraries run interleaved, round after round.
#
#   bench/scenarios.sh [--quick] [--only local,tcp,cluster,cluster8] [--out FILE.md]
#                      [--img-dir DIR] [--prefix pbs] [--rounds N] [--collectives LIST]
#                      [--no-build] [--dry-run] [--doc FILE#ID [--doc-style tables|summary]]
#
# Scenarios (--only picks some; all by default):
#   local     one host, 2, 4 and 8 ranks: shoal (shared memory) vs Open MPI (vader), MPICH (as
#             installed: UCX shared memory), Gloo, torch gloo
#   tcp       TCP forced on loopback, 2 and 4 ranks: shoal (SHOAL_TRANSPORT=tcp) vs Open MPI (tcp
#             btl), MPICH (UCX tcp, MPIR_CVAR_NOLOCAL=1), Gloo, torch gloo
#   cluster   4 emulated hosts x 2 ranks, 1 NIC and then 2 NICs of 1 Gbit/s each (netcluster.sh):
#             shoal vs Open MPI (vader inside a host + tcp), MPICH (tcp), Gloo, torch gloo
#   cluster8  8 emulated hosts x 1 rank, 1 NIC of 200 Mbit/s: shoal vs Open MPI (tcp), MPICH
#             (tcp), Gloo, torch gloo
#
# Output: one markdown file (default build/scenarios/<date>/scenarios.md) with every table and
# the figures' paths, the CSV of all chosen rounds next to it (scenarios.csv), and PNGs
# IMG_DIR/<scenario>-<collective>-{busbw,time}.png (default docs/img; with --quick the run's
# folder, so that smoke-test noise never lands in docs/). Scenario names: local-2r, local-4r,
# local-8r, tcp-2r, tcp-4r, cluster-4x2-1nic, cluster-4x2-2nic, cluster-8x1-200mbit.
#
# --quick: three sizes, one round, 3 iterations (a smoke test of the whole pipeline, minutes).
# The cluster scenarios need root; the cluster is created under --prefix (default pbs) and always
# torn down on exit (scripts/netcluster.sh down --prefix pbs). --dry-run prints the compare.sh
# command lines only. --doc FILE#ID writes the run's tables (bench/scenarios_report.py: one per
# scenario and collective, or with --doc-style summary one line each against the targets) between
# FILE's '<!-- scenarios_report.py:ID -->' lines. Environment: BUILD (as compare.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD:-build}"
[[ "$build" = /* ]] || build="$root/$build"
export BUILD="$build"

quick=0 only="local,tcp,cluster,cluster8" out="" img_dir="" prefix=pbs rounds="" build_peers=1
collectives="all_reduce,all_gather,reduce_scatter" dry=0 doc="" doc_style=tables
usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --only) only="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --img-dir) img_dir="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --collectives) collectives="$2"; shift 2 ;;
    --no-build) build_peers=0; shift ;;
    --dry-run) dry=1; shift ;;
    --doc) doc="$2"; shift 2 ;;
    --doc-style) doc_style="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "scenarios.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for s in ${only//,/ }; do
  case "$s" in local|tcp|cluster|cluster8) ;; *) echo "scenarios.sh: --only: unknown scenario '$s'" >&2; exit 2 ;; esac
done
want() { [[ ",$only," == *",$1,"* ]]; }
[[ -z $doc ]] || python3 "$here/doc_block.py" check scenarios_report.py "$doc" || exit 2

ts="$(date +%Y%m%d-%H%M%S)"
rundir="$build/scenarios/$ts$(if [ $quick = 1 ]; then echo -quick; fi)"
out="${out:-$rundir/scenarios.md}"
if [ $dry = 1 ]; then out=/dev/null; else mkdir -p "$rundir" "$(dirname "$out")"; fi
csv="$rundir/scenarios.csv"
if [ -z "$img_dir" ]; then
  if [ $quick = 1 ]; then img_dir="$rundir/img"; else img_dir="$root/docs/img"; fi
fi

# Sizes, rounds, iterations: full runs sweep wide on one host and stop earlier on the slow
# emulated links (a 16 MiB all_reduce over 8 ranks at 1 Gbit/s takes about 0.25 s a call).
if [ $quick = 1 ]; then
  local_sizes=1K:1M:32 net_sizes=1K:256K:16 slow_sizes=1K:256K:16
  common=(--rounds "${rounds:-1}" --iters 3 --warmup 1 --check 1)
  net_common=("${common[@]}")
else
  local_sizes=8:64M:4 net_sizes=1K:16M:4 slow_sizes=1K:4M:4
  common=(--rounds "${rounds:-3}" --iters 20 --warmup 5 --check 1)
  net_common=(--rounds "${rounds:-3}" --iters 10 --warmup 2 --check 1)
fi

if [ $build_peers = 1 ] && [ $dry = 0 ]; then
  "$here/peers/build.sh" >&2 || echo "scenarios.sh: bench/peers/build.sh failed; running what exists" >&2
fi

cluster_up=0
teardown() {
  if [ $cluster_up = 1 ]; then
    "$root/scripts/netcluster.sh" down --prefix "$prefix" >&2 || true
    cluster_up=0
  fi
}
trap teardown EXIT
trap 'exit 130' INT TERM

failed=()
figures=()
start=$(date +%s)
{
  echo "# Scenarios ($(date '+%Y-%m-%d %H:%M %Z')$([ $quick = 1 ] && echo ', --quick: smoke test, numbers are noise'))"
  echo
  echo "- command: \`bench/scenarios.sh$(printf ' %q' "$@")\`"
  echo "- CSV of every chosen round: $csv; figures in $img_dir"
  echo
} >"$out"

# run SCENARIO [compare.sh args...]: one compare.sh run per collective
run() {
  local scen="$1" coll rc
  shift
  for coll in ${collectives//,/ }; do
    local cmd=("$here/compare.sh" --collective "$coll" --scenario "$scen" --no-build --out "$out"
               --csv "$csv" --plot "$scen" --img-dir "$img_dir" --logs "$rundir/$scen-$coll" "$@")
    if [ $dry = 1 ]; then
      printf '%q ' "${cmd[@]}"; echo
      continue
    fi
    echo "scenarios.sh: $scen $coll ($(( $(date +%s) - start )) s so far)" >&2
    rc=0
    "${cmd[@]}" >/dev/null || rc=$?
    [ $rc = 0 ] || failed+=("$scen $coll: compare.sh exit $rc (see $rundir/$scen-$coll)")
    figures+=("$img_dir/$scen-$coll-busbw.png" "$img_dir/$scen-$coll-time.png")
  done
}

if want local; then
  for n in 2 4 8; do
    run "local-${n}r" --ranks "$n" --sizes "$local_sizes" --peers mpi-vader,mpich,gloo,torch-gloo "${common[@]}"
  done
fi
if want tcp; then
  for n in 2 4; do
    run "tcp-${n}r" --ranks "$n" --sizes "$local_sizes" --transport tcp --peers mpi-tcp,mpich-tcp,gloo,torch-gloo "${common[@]}"
  done
fi
need_cluster() {
  if [ "$(id -u)" != 0 ]; then
    echo "scenarios.sh: $1 skipped: emulated hosts need root" >&2
    echo "- $1 skipped: needs root (network namespaces)" >>"$out"
    return 1
  fi
}
hosts_of() { local h out=""; for ((h = 0; h < $1; h++)); do out="$out${out:+,}$prefix-h$h"; done; echo "$out"; }
if want cluster && need_cluster cluster; then
  for k in 1 2; do
    if [ $dry = 0 ]; then
      cluster_up=1
      "$root/scripts/netcluster.sh" up --hosts 4 --nics "$k" --rate 1gbit --prefix "$prefix" >&2
    fi
    run "cluster-4x2-${k}nic" --ranks 8 --netns "$(hosts_of 4)" --sizes "$net_sizes" \
        --peers mpi-vader,mpich-tcp,gloo,torch-gloo "${net_common[@]}"
  done
  teardown
fi
if want cluster8 && need_cluster cluster8; then
  if [ $dry = 0 ]; then
    cluster_up=1
    "$root/scripts/netcluster.sh" up --hosts 8 --nics 1 --rate 200mbit --prefix "$prefix" >&2
  fi
  run "cluster-8x1-200mbit" --ranks 8 --netns "$(hosts_of 8)" --sizes "$slow_sizes" \
      --peers mpi-tcp,mpich-tcp,gloo,torch-gloo "${net_common[@]}"
  teardown
fi

[ $dry = 1 ] && exit 0
elapsed=$(( $(date +%s) - start ))
{
  echo "## Figures"
  echo
  for f in "${figures[@]}"; do [ -f "$f" ] && echo "- $f"; done
  echo
  echo "Total time: $((elapsed / 60)) min $((elapsed % 60)) s."
  for f in "${failed[@]}"; do echo "- failed: $f"; done
} >>"$out"
echo "scenarios.sh: wrote $out ($((elapsed / 60)) min $((elapsed % 60)) s)" >&2
if [[ -n $doc ]]; then
  python3 "$here/scenarios_report.py" "$csv" --style "$doc_style" --doc "$doc" >&2 || failed+=("scenarios_report.py")
fi
[ ${#failed[@]} -eq 0 ]
