#!/usr/bin/env bash
# Side-by-side: shoal-bench against Open MPI (TCP and shared memory), MPICH, Gloo and torch's
# gloo backend, interleaved in one run so that all see the same machine weather, then one
# markdown table (and, on request, a CSV and plots).
#
#   bench/compare.sh [--collective all_reduce] [--ranks 2] [--sizes 8:64M[:2]] [--rounds 3]
#                    [--iters 20] [--warmup 5] [--warmup-each 0] [--check 1] [--transport tcp]
#                    [--out FILE.md]
#                    [--stat best|median] [--place out|in] [--peers mpi-tcp,mpi-vader,gloo]
#                    [--timeout 900] [--logs DIR] [--no-build] [--netns NS0,NS1,...]
#                    [--scenario NAME] [--csv FILE.csv] [--plot PREFIX] [--img-dir docs/img]
#                    [--load N] [--bind none|core|launcher] [--shoal-launcher shoal-run|torchrun]
#                    [--percentiles] [--doc FILE#ID]
#
# Peers (--peers, a comma list, or "all"; default mpi-tcp,mpi-vader,gloo):
#   mpi-vader   Open MPI, btl vader,self (shared memory)   with --netns: vader,tcp,self
#   mpi-tcp     Open MPI, btl tcp,self (loopback)          with --netns: tcp,self over the NICs
#   mpich       MPICH (mpiexec.mpich) as installed: Debian's ch4:ucx moves even the messages
#               of one host through UCX, whose shared memory (sysv, posix, cma) it uses there.
#               Not with --netns: UCX's shared memory reaches across namespaces (skipped, noted)
#   mpich-tcp   MPICH forced onto TCP: MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo
#               (with --netns: UCX_NET_DEVICES = the hosts' NICs)
#   gloo        gloo_bench (libgloo, tcp)
#   torch-gloo  bench/peers/torch_gloo_bench.py, torch.distributed's gloo backend (the project's .venv)
# --netns runs every harness across emulated hosts (scripts/netcluster.sh), --ranks split evenly
# in contiguous blocks: shoal, gloo and torch-gloo through shoal-run --netns; Open MPI and MPICH
# from inside the first namespace, their daemons started in each host by bench/peers/netns_rsh.sh.
# --scenario labels the section and the CSV rows; --csv appends the chosen rounds' numbers
# (scenario,collective,ranks,library,bytes,time_us,busbw_gbs); --plot PREFIX writes
# IMG_DIR/PREFIX-COLLECTIVE-busbw.png and -time.png with bench/plot.py.
#
# --load N keeps N busy processes (plain busy loops, unbound) running through the whole run: the
# collectives measured while other work holds the cores. --bind sets the binding of every
# launcher: none or core for all, launcher for each one's own default (shoal-run --bind-to auto,
# mpirun's core for up to 2 ranks); without it shoal-run binds by its default and mpirun none.
# --shoal-launcher torchrun starts shoal-bench with torchrun (--no_python, the project's .venv),
# which binds nothing: what SHOAL_BIND (exported to this script) makes of unbound ranks. Not
# with --netns. --percentiles has every harness time each iteration too (-p 1: p50 and p99 over
# the iterations, each the slowest rank's time), kept in LOGS/rows.tsv beside the loop's mean.
# --warmup-each N has every harness run N untimed calls at each size before timing it (-W):
# across hosts shoal learns per size bucket (its first calls of a size try the ring beside the
# cost model's pick, docs/algorithms.md), and a table then times what it settled on.
# --doc FILE#ID replaces what stands between <!-- compare.sh:ID --> and <!-- /compare.sh:ID -->
# in FILE (a page of docs/) with this run's section, so that a re-run rewrites its table there;
# a FILE without that pair of lines is an error (nothing is written).
#
# Each round runs, in an order rotated by one every round: shoal-bench (via shoal-run) and each
# peer. Every harness prints nccl-tests' table; per size we keep the best round (--stat best,
# the default: interference on a shared machine only ever slows a run down, so the fastest
# round is the closest to what the code can do) or the median round
# (--stat median: steadier when rounds disagree both ways). busbw is recomputed from the time
# column (full precision; the printed busbw has two decimals) and the ratio is
# shoal busbw / best peer busbw at that size (> 1: shoal is faster).
#
# Environment: BUILD (default build). Binaries: $BUILD/bin/shoal-run, $BUILD/bin/shoal-bench,
# $BUILD/peers/{mpi_bench,mpich_bench,gloo_bench}, which bench/peers/build.sh (re)builds first
# unless --no-build. A missing binary (or launcher) is skipped with a note.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD:-build}"
[[ "$build" = /* ]] || build="$root/$build"

cmdline="bench/compare.sh$(printf ' %q' "$@")"
coll=all_reduce ranks=2 sizes=8:64M rounds=3 iters=20 warmup=5 warmup_each=0 check=1 transport="" out=""
stat=best place=out peers="mpi-tcp,mpi-vader,gloo" timeout_s=900 logs="" build_peers=1
netns="" scenario="" csv="" plot="" img_dir="$root/docs/img" load=0 bind="" shoal_launcher=shoal-run
percentiles=0
doc=""

usage() { sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --collective) coll="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --warmup-each) warmup_each="$2"; shift 2 ;;
    --check) check="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --doc) doc="$2"; shift 2 ;;
    --stat) stat="$2"; shift 2 ;;
    --place) place="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --no-build) build_peers=0; shift ;;
    --netns) netns="$2"; shift 2 ;;
    --scenario) scenario="$2"; shift 2 ;;
    --csv) csv="$2"; shift 2 ;;
    --plot) plot="$2"; shift 2 ;;
    --img-dir) img_dir="$2"; shift 2 ;;
    --load) load="$2"; shift 2 ;;
    --bind) bind="$2"; shift 2 ;;
    --shoal-launcher) shoal_launcher="$2"; shift 2 ;;
    --percentiles) percentiles=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

die() { echo "compare.sh: $*" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || die "--ranks must be a positive integer"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ "$iters" =~ ^[1-9][0-9]*$ ]] || die "--iters must be a positive integer"
[[ "$warmup" =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
[[ "$warmup_each" =~ ^[0-9]+$ ]] || die "--warmup-each must be a non-negative integer"
case "$stat" in best|median) ;; *) die "--stat takes best or median" ;; esac
if [ -n "$doc" ]; then  # checked before the run, which may take long
  python3 "$here/doc_block.py" check compare.sh "$doc" || exit 2
fi
case "$place" in out|in) ;; *) die "--place takes out or in" ;; esac
case "$coll" in
  all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all) ;;
  *) die "--collective: all_reduce all_gather reduce_scatter broadcast reduce all_to_all" ;;
esac
IFS=: read -r min_b max_b factor <<<"$sizes"
if [ -z "$min_b" ] || [ -z "$max_b" ]; then die "--sizes takes MIN:MAX[:FACTOR], e.g. 8:64M"; fi
factor="${factor:-2}"
bench_args=("$coll" -b "$min_b" -e "$max_b" -f "$factor" -n "$iters" -w "$warmup" -c "$check")
# Every library warms up at each size too: shoal learns per size bucket across hosts (its first
# calls of a size try the ring beside the model's pick), the peers get the same calls untimed.
((warmup_each)) && bench_args+=(-W "$warmup_each")
((percentiles)) && bench_args+=(-p 1)
all_peers="mpi-tcp,mpi-vader,mpich,mpich-tcp,gloo,torch-gloo"
[ "$peers" = all ] && peers="$all_peers"
for p in ${peers//,/ }; do
  [[ ",$all_peers," == *",$p,"* ]] || die "--peers: unknown peer '$p' (known: $all_peers, or all)"
done
case "$shoal_launcher" in shoal-run|torchrun) ;; *) die "--shoal-launcher takes shoal-run or torchrun" ;; esac
[[ "$shoal_launcher" = torchrun && -n "$netns" ]] && die "--shoal-launcher torchrun: not with --netns"
[[ -z "$scenario" || "$scenario" =~ ^[A-Za-z0-9._-]+$ ]] || die "--scenario takes letters, digits, . _ -"
[[ -z "$plot" || "$plot" =~ ^[A-Za-z0-9._-]+$ ]] || die "--plot takes a file-name prefix (letters, digits, . _ -)"

# --netns: the emulated hosts, ranks per host, and the NICs (eth*) the first host has.
hosts=() per_host=0 nics=""
if [ -n "$netns" ]; then
  IFS=, read -r -a hosts <<<"$netns"
  [ ${#hosts[@]} -ge 1 ] || die "--netns takes a comma list of network namespaces"
  (( ranks % ${#hosts[@]} == 0 )) || die "--netns: --ranks ($ranks) must be a multiple of the number of hosts (${#hosts[@]})"
  per_host=$(( ranks / ${#hosts[@]} ))
  [ "$(id -u)" = 0 ] || die "--netns needs root"
  for h in "${hosts[@]}"; do
    [[ "$h" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--netns: '$h' is not a namespace name (NS:K forms are not supported here)"
    ip netns list | awk '{print $1}' | grep -qx -- "$h" || die "--netns: no network namespace '$h' (scripts/netcluster.sh up)"
  done
  nics="$(ip -n "${hosts[0]}" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^eth[0-9]+$' | sort -V | paste -sd, -)"
  [ -n "$nics" ] || die "--netns: host ${hosts[0]} has no eth* interface"
fi
host_list() { local h out=""; for h in "${hosts[@]}"; do out="$out${out:+,}$h:$per_host"; done; echo "$out"; }

shoal_run="$build/bin/shoal-run"
shoal_bench="$build/bin/shoal-bench"
mpi_bench="$build/peers/mpi_bench"
gloo_bench="$build/peers/gloo_bench"
mpich_bench="$build/peers/mpich_bench"
torch_gloo_bench="$here/peers/torch_gloo_bench.py"
netns_rsh="$here/peers/netns_rsh.sh"
python="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"  # the project's torch (scripts/install-deps.sh)

ts="$(date +%Y%m%d-%H%M%S)"
logs="${logs:-$build/compare/$ts-${scenario:+$scenario-}$coll-${ranks}r}"
mkdir -p "$logs"

[[ "$load" =~ ^[0-9]+$ ]] || die "--load takes a count of busy processes"
case "$bind" in
  ""|none|core) mpirun_base=(mpirun --oversubscribe --bind-to "${bind:-none}" -np "$ranks") ;;
  launcher) mpirun_base=(mpirun -np "$ranks") ;;
  *) die "--bind takes none, core or launcher" ;;
esac
[ "$(id -u)" = 0 ] && mpirun_base+=(--allow-run-as-root)
# ob1 named explicitly, so that a UCX install cannot take over the "vader" column
# shellcheck disable=SC2054  # the commas are MCA lists
mpi_vader=(--mca pml ob1 --mca btl vader,self)
# shellcheck disable=SC2054
mpi_tcp=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
if [ -n "$netns" ]; then
  # across hosts: mpirun runs inside the first host and starts its daemons in each host through
  # netns_rsh.sh (an "ssh" that enters the namespace); TCP over every NIC of the hosts
  # shellcheck disable=SC2054
  mpi_net=(--host "$(host_list)" --mca plm_rsh_agent "$netns_rsh" --mca oob_tcp_if_include eth0
           --mca btl_tcp_if_include "$nics")
  # shellcheck disable=SC2054
  mpi_vader=(--mca pml ob1 --mca btl vader,tcp,self "${mpi_net[@]}")
  # shellcheck disable=SC2054
  mpi_tcp=(--mca pml ob1 --mca btl tcp,self "${mpi_net[@]}")
fi
# MPICH (Debian 12: 4.0.2, ch4:ucx): every message goes through UCX, which uses its shared
# memory transports inside a host by default. TCP everywhere: UCX held to tcp, and
# MPIR_CVAR_NOLOCAL=1 (every rank "on another node": no node-aware collectives either)
mpich_shm_env=(-u UCX_TLS -u UCX_NET_DEVICES -u MPIR_CVAR_NOLOCAL)
# shellcheck disable=SC2054  # tcp,self is a UCX list
mpich_tcp_env=(MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES="${nics:-lo}")
mpich_net=()
[ -n "$netns" ] && mpich_net=(-launcher ssh -launcher-exec "$netns_rsh" -iface eth0 -hosts "$(host_list)")

if [ $build_peers = 1 ]; then
  BUILD="$build" "$here/peers/build.sh" >&2 || echo "compare.sh: bench/peers/build.sh failed; running what exists" >&2
fi

# Harnesses in table order, and which are runnable.
names=(shoal)
for p in mpi-tcp mpi-vader mpich mpich-tcp gloo torch-gloo; do
  [[ ",$peers," == *",$p,"* ]] && names+=("$p")
done
declare -A title=([shoal]="shoal busbw" [mpi-tcp]="Open MPI (tcp)" [mpi-vader]="Open MPI (vader)"
                  [mpich]="MPICH (shm)" [mpich-tcp]="MPICH (tcp)" [gloo]="Gloo" [torch-gloo]="torch gloo")
[ -n "$netns" ] && title[mpi-vader]="Open MPI (vader+tcp)"
# torch 1.13's gloo has no reduce_scatter: torch_gloo_bench emulates it with all_reduce
[ "$coll" = reduce_scatter ] && title[torch-gloo]="torch gloo (all_reduce+copy)"
declare -A enabled=()
notes=()
if [ -x "$shoal_run" ] && [ -x "$shoal_bench" ]; then
  enabled[shoal]=1
else
  notes+=("shoal-bench or shoal-run not built ($shoal_bench, $shoal_run): shoal column empty")
fi
for p in "${names[@]:1}"; do
  case "$p" in
    mpi-*) bin="$mpi_bench" ;;
    mpich*) bin="$mpich_bench" ;;
    gloo) bin="$gloo_bench" ;;
    torch-gloo) bin="$torch_gloo_bench" ;;
  esac
  if [ ! -x "$bin" ]; then
    notes+=("$bin not built (run bench/peers/build.sh): ${title[$p]} column empty")
  elif [[ "$p" == mpi-* ]] && ! command -v mpirun >/dev/null; then
    notes+=("no mpirun on PATH: ${title[$p]} column empty")
  elif [[ "$p" == mpich* ]] && ! command -v mpiexec.mpich >/dev/null; then
    notes+=("no mpiexec.mpich on PATH (apt-get install mpich): ${title[$p]} column empty")
  elif [ "$p" = torch-gloo ] && ! "$python" -c 'import torch.distributed' 2>/dev/null; then
    notes+=("$python cannot import torch.distributed (scripts/install-deps.sh installs the project's torch): ${title[$p]} column empty")
  elif [[ -n "$netns" && "$p" == mpich ]]; then
    notes+=("MPICH (shm) is not run across namespaces: this MPICH (ch4:ucx) would use UCX's shared memory between emulated hosts too (one machine, one IPC namespace); see MPICH (tcp)")
  elif [[ -n "$netns" && ( "$p" == gloo || "$p" == torch-gloo ) && ! -x "$shoal_run" ]]; then
    notes+=("--netns starts ${title[$p]} with shoal-run, which is not built: column empty")
  else
    enabled[$p]=1
  fi
done
[ ${#enabled[@]} -gt 0 ] || { printf 'compare.sh: %s\n' "${notes[@]}" >&2; die "nothing to run"; }
for n in "${notes[@]}"; do echo "compare.sh: note: $n" >&2; done

# finalize_watch LOG CMD...: runs CMD (stdout and stderr to LOG) and returns its status; but
# once LOG holds the table's last line, CMD gets $finalize_grace s more to exit, then is
# stopped and counts as a success. For MPICH over UCX's tcp transport, whose MPI_Finalize
# sometimes never returns after a complete run (UCX 1.13, openucx/ucx#8738: tcp stops
# progressing its endpoints before MPI flushes them).
finalize_grace=10
finalize_hangs=0
finalize_watch() {
  local log="$1" pid rc=0 seen=0
  shift
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^# Avg bus bandwidth' "$log" 2>/dev/null; then
      seen=$((seen + 1))
      if [ $seen -gt $((finalize_grace * 2)) ]; then
        kill "$pid" 2>/dev/null || true  # timeout(1) passes it on to the launcher
        wait "$pid" 2>/dev/null || true
        echo "compare.sh: stopped after a complete table: MPI_Finalize did not return in ${finalize_grace} s" >>"$log"
        finalize_hangs=$((finalize_hangs + 1))
        return 0
      fi
    fi
    sleep 0.5
  done
  wait "$pid" || rc=$?
  return $rc
}

# run_one NAME LOG: one harness, one sweep; its stdout (rank 0's table) goes to LOG.
run_one() {
  local name="$1" log="$2" rc=0
  case "$name" in
    shoal)
      if [ "$shoal_launcher" = torchrun ]; then
        SHOAL_TRANSPORT="${transport:-${SHOAL_TRANSPORT:-auto}}" timeout "$timeout_s" "$python" \
          -m torch.distributed.run --no_python --nproc_per_node "$ranks" --master_port "$((29600 + RANDOM % 300))" \
          "$shoal_bench" "${bench_args[@]}" >"$log" 2>&1 || rc=$?
      elif [ -n "$transport" ]; then
        SHOAL_TRANSPORT="$transport" timeout "$timeout_s" "$shoal_run" "${shoal_run_net[@]}" -n "$ranks" \
          "$shoal_bench" "${bench_args[@]}" >"$log" 2>&1 || rc=$?
      else
        timeout "$timeout_s" "$shoal_run" "${shoal_run_net[@]}" -n "$ranks" "$shoal_bench" \
          "${bench_args[@]}" >"$log" 2>&1 || rc=$?
      fi ;;
    mpi-vader)
      timeout "$timeout_s" "${in_first_host[@]}" "${mpirun_base[@]}" "${mpi_vader[@]}" "$mpi_bench" \
        "${bench_args[@]}" >"$log" 2>&1 || rc=$? ;;
    mpi-tcp)
      timeout "$timeout_s" "${in_first_host[@]}" "${mpirun_base[@]}" "${mpi_tcp[@]}" "$mpi_bench" \
        "${bench_args[@]}" >"$log" 2>&1 || rc=$? ;;
    mpich)
      finalize_watch "$log" timeout "$timeout_s" "${in_first_host[@]}" env "${mpich_shm_env[@]}" \
        mpiexec.mpich "${mpich_net[@]}" -n "$ranks" "$mpich_bench" "${bench_args[@]}" || rc=$? ;;
    mpich-tcp)
      finalize_watch "$log" timeout "$timeout_s" "${in_first_host[@]}" env "${mpich_tcp_env[@]}" \
        mpiexec.mpich "${mpich_net[@]}" -n "$ranks" "$mpich_bench" "${bench_args[@]}" || rc=$? ;;
    gloo|torch-gloo)
      if [ -n "$netns" ] || [ "$name" = torch-gloo ]; then
        # through shoal-run (it hosts the store torch connects to; gloo_bench keys its
        # FileStore on MASTER_ADDR/MASTER_PORT and the run id); torch-gloo without shoal-run
        # on one host: one process per rank with MASTER_ADDR/MASTER_PORT, rank 0 hosts the store
        local ifn="${nics:-lo}" cmd
        [ "$name" = gloo ] && ifn="${ifn%%,*}"  # gloo_bench takes one interface
        if [ "$name" = gloo ]; then cmd=("$gloo_bench"); else cmd=("$python" "$torch_gloo_bench"); fi
        if [ -x "$shoal_run" ]; then
          timeout "$timeout_s" "$shoal_run" "${shoal_run_net[@]}" -n "$ranks" env GLOO_SOCKET_IFNAME="$ifn" \
            "${cmd[@]}" "${bench_args[@]}" >"$log" 2>&1 || rc=$?
        else
          local port pids=() r st
          port=$(( 20000 + RANDOM % 20000 ))
          for ((r = 0; r < ranks; r++)); do
            RANK=$r WORLD_SIZE="$ranks" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo \
              timeout "$timeout_s" "${cmd[@]}" "${bench_args[@]}" >"$log.rank$r" 2>&1 &
            pids+=($!)
          done
          for r in "${!pids[@]}"; do
            st=0; wait "${pids[$r]}" || st=$?
            [ $rc != 0 ] || rc=$st
          done
          mv -f "$log.rank0" "$log"
          for ((r = 1; r < ranks; r++)); do
            [ -s "$log.rank$r" ] && { echo "--- rank $r:"; cat "$log.rank$r"; } >>"$log"
            rm -f "$log.rank$r"
          done
        fi
        return $rc
      fi

      # one process per rank with RANK/WORLD_SIZE, rendezvous in a fresh FileStore directory
      local store pids=() r
      store="$(mktemp -d "${TMPDIR:-/tmp}/gloo_bench.XXXXXX")"
      for ((r = 0; r < ranks; r++)); do
        if [ $r = 0 ]; then
          env -u MASTER_ADDR RANK=$r WORLD_SIZE="$ranks" GLOO_BENCH_STORE="$store" \
            timeout "$timeout_s" "$gloo_bench" "${bench_args[@]}" >"$log" 2>&1 &
        else
          env -u MASTER_ADDR RANK=$r WORLD_SIZE="$ranks" GLOO_BENCH_STORE="$store" \
            timeout "$timeout_s" "$gloo_bench" "${bench_args[@]}" >"$log.rank$r" 2>&1 &
        fi
        pids+=($!)
      done
      local st
      for r in "${!pids[@]}"; do
        st=0; wait "${pids[$r]}" || st=$?
        [ $rc != 0 ] || rc=$st
      done
      for ((r = 1; r < ranks; r++)); do
        [ -s "$log.rank$r" ] && { echo "--- rank $r:"; cat "$log.rank$r"; } >>"$log"
        rm -f "$log.rank$r"
      done
      rm -rf "$store" ;;
  esac
  return $rc
}

shoal_run_net=() in_first_host=()
if [ -n "$netns" ]; then
  shoal_run_net=(--netns "$netns")
  in_first_host=(ip netns exec "${hosts[0]}")
fi
# (every shoal-run invocation carries shoal_run_net)
case "$bind" in none|core) shoal_run_net+=(--bind-to "$bind") ;; esac
# netns_rsh.sh's per-host directories (Open MPI's session directory and vader segments)
cleanup_rsh() {
  local h
  for h in "${hosts[@]}"; do rm -rf "${TMPDIR:-/tmp}/netns_rsh.$h" "/dev/shm/netns_rsh.$h"; done
}
load_pids=()
cleanup() {
  [ ${#load_pids[@]} -eq 0 ] || kill "${load_pids[@]}" 2>/dev/null || true
  [ -z "$netns" ] || cleanup_rsh
}
trap cleanup EXIT
for ((i = 0; i < load; i++)); do
  bash -c 'while :; do :; done' &
  load_pids+=($!)
done

# Interleaved rounds; the order rotates so that no harness always runs first or last.
order=()
for n in "${names[@]}"; do [ -n "${enabled[$n]:-}" ] && order+=("$n"); done
rows="$logs/rows.tsv"
: >"$rows"
failures=()
for ((round = 1; round <= rounds; round++)); do
  k=$(( (round - 1) % ${#order[@]} ))
  this=("${order[@]:$k}" "${order[@]:0:$k}")
  for name in "${this[@]}"; do
    log="$logs/round$round-$name.txt"
    echo "compare.sh: round $round/$rounds: $name" >&2
    hangs_before=$finalize_hangs
    if ! run_one "$name" "$log"; then
      failures+=("round $round $name: exit status nonzero, see $log")
      echo "compare.sh: $name failed in round $round (see $log)" >&2
    fi
    if [ "$finalize_hangs" != "$hangs_before" ]; then
      notes+=("round $round ${title[$name]}: MPI_Finalize hung after a complete table and was stopped (UCX tcp cleanup, openucx/ucx#8738)")
      echo "compare.sh: $name: MPI_Finalize hung after a complete table; stopped it" >&2
    fi
    # data rows of nccl-tests' table: size count type redop root time algbw busbw #wrong x2,
    # then (-p 1) p50 p99 out of place, p50 p99 in place
    awk -v h="$name" -v r="$round" '
      $1 ~ /^[0-9]+$/ && NF >= 13 {
        pct = NF >= 17 ? "\t" $14 "\t" $15 "\t" $16 "\t" $17 : ""
        print h "\t" r "\t" $1 "\t" $6 "\t" $10 "\t" $9 "\t" $13 pct
      }
    ' "$log" >>"$rows" || true
  done
  # The ceiling, measured in the same run: single-core memcpy of 64 MiB (bench_kernels counts
  # bytes read + written, so the payload rate is half its bytes_per_second).
  # (one host, shared memory only: over TCP or emulated NICs memcpy is not the ceiling)
  if [ -x "$build/bin/bench_kernels" ] && [ -z "$netns" ] && [ -z "$transport" ]; then
    "$build/bin/bench_kernels" --benchmark_filter='BM_Memcpy/67108864$' --benchmark_min_time=0.2 \
        --benchmark_format=csv 2>/dev/null |
      awk -F, '/BM_Memcpy/ { printf "%.4f\n", $6 / 2 / 1e9 }' >>"$logs/memcpy.txt" || true
  fi
done
# best memcpy payload rate over the rounds, GB/s (0 when not measured)
memcpy_gbs="$(sort -g "$logs/memcpy.txt" 2>/dev/null | tail -1 || true)"
memcpy_gbs="${memcpy_gbs:-0}"

# The table.
table="$logs/table.md"
awk -F'\t' -v coll="$coll" -v n="$ranks" -v stat="$stat" -v place="$place" -v memcpy="$memcpy_gbs" \
    -v order="${names[*]}" -v titles="$(for n in "${names[@]}"; do printf '%s|' "${title[$n]}"; done)" \
    -v csv="$logs/picked.csv" -v scen="${scenario:-default}" '
  function busfactor() {
    if (coll == "all_reduce") return 2.0 * (n - 1) / n
    if (coll == "broadcast" || coll == "reduce") return 1.0
    return (n - 1.0) / n
  }
  function human(b) {
    if (b >= 1073741824 && b % 1073741824 == 0) return (b / 1073741824) " GiB"
    if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
    if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
    return b " B"
  }
  function fmt(v,   d) {
    if (v >= 0.995) return sprintf("%.2f", v)
    if (v <= 0) return "0"
    d = 2 - int(log(v) / log(10) - (v < 1 ? 1 : 0))   # three significant digits
    return sprintf("%." d "f", v)
  }
  function pick(list,   a, m, i, j, t) {   # best = smallest time; median of the rounds
    m = split(list, a, " ")
    for (i = 2; i <= m; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (stat == "best") return a[1] + 0
    return (m % 2) ? a[(m + 1) / 2] + 0 : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  {
    h = $1; size = $3 + 0; t = (place == "out") ? $4 : $5; w = (place == "out") ? $6 : $7
    if (!(size in seen)) { seen[size] = 1; sizes[++ns] = size }
    if (t == "N/A" || t + 0 <= 0) next
    times[h, size] = times[h, size] " " t
    if (w != "N/A" && w + 0 != 0) wrong[h, size] = 1
  }
  END {
    nh = split(order, hs, " "); split(titles, tt, "|")
    for (i = 2; i <= ns; i++) { s = sizes[i]; for (j = i - 1; j >= 1 && sizes[j] > s; j--) sizes[j + 1] = sizes[j]; sizes[j + 1] = s }
    printf "| size |"; for (k = 1; k <= nh; k++) printf " %s |", tt[k]; printf " shoal ÷ best peer |"
    print (memcpy > 0 ? " shoal ÷ memcpy |" : "")
    printf "|---:|"; for (k = 1; k <= nh; k++) printf "---:|"; print "---:|" (memcpy > 0 ? "---:|" : "")
    f = busfactor(); logsum = 0; nlog = 0
    for (i = 1; i <= ns; i++) {
      s = sizes[i]; line = "| " human(s) " |"; best = 0
      for (k = 1; k <= nh; k++) {
        h = hs[k]
        if ((h, s) in times) {
          tp = pick(times[h, s]); bw[h] = s * f / (tp * 1e-6) / 1e9
          printf "%s,%s,%d,%s,%d,%.6g,%.6g\n", scen, coll, n, h, s, tp, bw[h] >> csv
          line = line " " fmt(bw[h]) (((h, s) in wrong) ? " (wrong!)" : "") " |"
          if (h != "shoal" && bw[h] > best) best = bw[h]
        } else { bw[h] = -1; line = line " — |" }
      }
      if (bw["shoal"] > 0 && best > 0) {
        r = bw["shoal"] / best; line = line " " sprintf("%.2f", r) " |"; logsum += log(r); nlog++
      } else line = line " — |"
      if (memcpy > 0) line = line " " (bw["shoal"] > 0 ? sprintf("%.2f", bw["shoal"] / memcpy) : "—") " |"
      print line
    }
    if (nlog) printf "\nGeometric mean of shoal ÷ best peer over %d sizes: %.2f\n", nlog, exp(logsum / nlog)
  }
' "$rows" >"$table"
[ -f "$logs/picked.csv" ] || : >"$logs/picked.csv"

cpu="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
ompi="$(mpirun --version 2>/dev/null | head -1 || true)"
gloo="$(dpkg-query -W -f='libgloo ${Version}' libgloo-dev 2>/dev/null || true)"
extra_sw=""
[[ -n "${enabled[mpich]:-}${enabled[mpich-tcp]:-}" ]] &&
  extra_sw="$extra_sw; MPICH $(mpichversion 2>/dev/null | awk -F'\t' '/^MPICH Version/ { print $2 }') ($(mpichversion 2>/dev/null | awk -F'\t' '/^MPICH Device/ { print $2 }'))"
[ -n "${enabled[torch-gloo]:-}" ] &&
  extra_sw="$extra_sw; torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
where="on one host"
[ -n "$netns" ] && where="on ${#hosts[@]} emulated hosts x $per_host ($netns; NICs $nics)"
rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'no commit')"
{
  echo "## ${scenario:+$scenario: }$coll, $ranks ranks $where, $min_b to $max_b ($(date '+%Y-%m-%d %H:%M %Z'))"
  echo
  echo "- command: \`$cmdline\`"
  echo "- machine: $(hostname), nproc $(nproc), ${cpu:-unknown CPU}, Linux $(uname -r), load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- software: shoal $rev; ${ompi:-no Open MPI}; ${gloo:-no libgloo}$extra_sw"
  echo "- busbw in GB/s, $([ "$place" = out ] && echo out-of-place || echo in-place), $([ "$stat" = best ] && echo "best (fastest) of $rounds interleaved rounds" || echo "median of $rounds interleaved rounds") per size; $iters iterations after $warmup warmup$( ((warmup_each)) && echo " (and $warmup_each at each size)"), check $check${transport:+; SHOAL_TRANSPORT=$transport}"
  [ "$load" = 0 ] || echo "- under load: $load busy process(es) (busy loops, unbound) running throughout"
  [ "$shoal_launcher" = shoal-run ] || echo "- shoal-bench launched by torchrun (binds nothing), SHOAL_BIND=${SHOAL_BIND:-auto}"
  [ -z "$bind" ] || echo "- binding (--bind $bind): shoal-run $(case $bind in launcher) echo "--bind-to auto" ;; *) echo "--bind-to $bind" ;; esac), mpirun $(case $bind in launcher) echo "its default" ;; *) echo "--bind-to $bind" ;; esac)"
  [ "$memcpy_gbs" != 0 ] && echo "- single-core memcpy in this run (64 MiB, best round): $memcpy_gbs GB/s of payload; the last column is shoal's busbw as a fraction of it"
  echo "- raw output: $logs"
  for n in "${notes[@]}"; do echo "- note: $n"; done
  for f in "${failures[@]}"; do echo "- failed: $f"; done
  echo
  cat "$table"
  echo
} >"$logs/section.md"

cat "$logs/section.md"
if [ -n "$out" ]; then
  mkdir -p "$(dirname "$out")"
  cat "$logs/section.md" >>"$out"
  echo "compare.sh: appended to $out" >&2
fi
if [ -n "$doc" ]; then
  PYTHONPATH="$here" python3 - "${doc%%#*}" "${doc#*#}" "$logs/section.md" <<'EOF' || exit 1
import sys
import doc_block
path, name, section = sys.argv[1:]
# The section's headings sit under the page's own.
body = open(section).read().strip("\n").replace("\n## ", "\n#### ")
body = "#### " + body[3:] if body.startswith("## ") else body
doc_block.replace(path, "compare.sh", name, body)
print(f"compare.sh: rewrote {name} in {path}", file=sys.stderr)
EOF
fi
if [ -n "$csv" ]; then
  mkdir -p "$(dirname "$csv")"
  [ -s "$csv" ] || echo "scenario,collective,ranks,library,bytes,time_us,busbw_gbs" >"$csv"
  cat "$logs/picked.csv" >>"$csv"
  echo "compare.sh: appended to $csv" >&2
fi
if [ -n "$plot" ]; then
  { echo "scenario,collective,ranks,library,bytes,time_us,busbw_gbs"; cat "$logs/picked.csv"; } >"$logs/plot.csv"
  labels=""
  for n in "${names[@]}"; do labels="$labels${labels:+;}$n=${title[$n]}"; done
  labels="${labels//shoal busbw/shoal}"
  /usr/bin/python3 "$here/plot.py" --csv "$logs/plot.csv" --out-dir "$img_dir" --prefix "$plot" --labels "$labels" \
      --title "${scenario:+$scenario, }$where" >&2 ||
    failures+=("bench/plot.py failed (python3-matplotlib installed?)")
fi
[ ${#failures[@]} -eq 0 ] || exit 1
