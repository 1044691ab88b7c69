#!/usr/bin/env bash
# Side-by-side: shoal-bench against Open MPI (TCP and shared memory) and Gloo, interleaved in
# one run so that all four see the same machine weather, then one markdown table.
#
#   bench/compare.sh [--collective all_reduce] [--ranks 2] [--sizes 8:64M[:2]] [--rounds 3]
#                    [--iters 20] [--warmup 5] [--check 1] [--transport tcp] [--out FILE.md]
#                    [--stat best|median] [--place out|in] [--peers mpi-tcp,mpi-vader,gloo]
#                    [--timeout 900] [--logs DIR] [--no-build]
#
# Each round runs, in an order rotated by one every round: shoal-bench (via shoal-run),
# mpi_bench over Open MPI's vader (shared memory) BTL, mpi_bench over the TCP BTL on loopback,
# and gloo_bench (TCP, loopback). Every harness prints nccl-tests' table; per size we keep the
# best round (--stat best, the default: interference on a shared machine only ever slows a run
# down, so the fastest round is the closest to what the code can do) or the median round
# (--stat median: steadier when rounds disagree both ways). busbw is recomputed from the time
# column (full precision; the printed busbw has two decimals) and the ratio is
# shoal busbw / best peer busbw at that size (> 1: shoal is faster).
#
# Environment: BUILD (default build). Binaries: $BUILD/bin/shoal-run, $BUILD/bin/shoal-bench,
# $BUILD/peers/{mpi_bench,gloo_bench}, which bench/peers/build.sh (re)builds first unless
# --no-build. A missing binary is skipped with a note.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD:-build}"
[[ "$build" = /* ]] || build="$root/$build"

cmdline="bench/compare.sh$(printf ' %q' "$@")"
coll=all_reduce ranks=2 sizes=8:64M rounds=3 iters=20 warmup=5 check=1 transport="" out=""
stat=best place=out peers="mpi-tcp,mpi-vader,gloo" timeout_s=900 logs="" build_peers=1

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --collective) coll="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --check) check="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --stat) stat="$2"; shift 2 ;;
    --place) place="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --no-build) build_peers=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

die() { echo "compare.sh: $*" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || die "--ranks must be a positive integer"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ "$iters" =~ ^[1-9][0-9]*$ ]] || die "--iters must be a positive integer"
[[ "$warmup" =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
case "$stat" in best|median) ;; *) die "--stat takes best or median" ;; esac
case "$place" in out|in) ;; *) die "--place takes out or in" ;; esac
case "$coll" in
  all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all) ;;
  *) die "--collective: all_reduce all_gather reduce_scatter broadcast reduce all_to_all" ;;
esac
IFS=: read -r min_b max_b factor <<<"$sizes"
if [ -z "$min_b" ] || [ -z "$max_b" ]; then die "--sizes takes MIN:MAX[:FACTOR], e.g. 8:64M"; fi
factor="${factor:-2}"
bench_args=("$coll" -b "$min_b" -e "$max_b" -f "$factor" -n "$iters" -w "$warmup" -c "$check")

shoal_run="$build/bin/shoal-run"
shoal_bench="$build/bin/shoal-bench"
mpi_bench="$build/peers/mpi_bench"
gloo_bench="$build/peers/gloo_bench"

ts="$(date +%Y%m%d-%H%M%S)"
logs="${logs:-$build/compare/$ts-$coll-${ranks}r}"
mkdir -p "$logs"

mpirun_base=(mpirun --oversubscribe --bind-to none -np "$ranks")
[ "$(id -u)" = 0 ] && mpirun_base+=(--allow-run-as-root)
# ob1 named explicitly, so that a UCX install cannot take over the "vader" column
# shellcheck disable=SC2054  # the commas are MCA lists
mpi_vader=(--mca pml ob1 --mca btl vader,self)
# shellcheck disable=SC2054
mpi_tcp=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)

if [ $build_peers = 1 ]; then
  BUILD="$build" "$here/peers/build.sh" >&2 || echo "compare.sh: bench/peers/build.sh failed; running what exists" >&2
fi

# Harnesses in table order, and which are runnable.
names=(shoal mpi-tcp mpi-vader gloo)
declare -A title=([shoal]="shoal busbw" [mpi-tcp]="Open MPI (tcp)" [mpi-vader]="Open MPI (vader)" [gloo]="Gloo")
declare -A enabled=()
notes=()
if [ -x "$shoal_run" ] && [ -x "$shoal_bench" ]; then
  enabled[shoal]=1
else
  notes+=("shoal-bench or shoal-run not built ($shoal_bench, $shoal_run): shoal column empty")
fi
for p in mpi-tcp mpi-vader gloo; do
  [[ ",$peers," == *",$p,"* ]] || continue
  case "$p" in
    mpi-*) bin="$mpi_bench" ;;
    gloo) bin="$gloo_bench" ;;
  esac
  if [ ! -x "$bin" ]; then
    notes+=("$bin not built (run bench/peers/build.sh): ${title[$p]} column empty")
  elif [[ "$p" == mpi-* ]] && ! command -v mpirun >/dev/null; then
    notes+=("no mpirun on PATH: ${title[$p]} column empty")
  else
    enabled[$p]=1
  fi
done
[ ${#enabled[@]} -gt 0 ] || { printf 'compare.sh: %s\n' "${notes[@]}" >&2; die "nothing to run"; }
for n in "${notes[@]}"; do echo "compare.sh: note: $n" >&2; done

# run_one NAME LOG: one harness, one sweep; its stdout (rank 0's table) goes to LOG.
run_one() {
  local name="$1" log="$2" rc=0
  case "$name" in
    shoal)
      if [ -n "$transport" ]; then
        SHOAL_TRANSPORT="$transport" timeout "$timeout_s" "$shoal_run" -n "$ranks" "$shoal_bench" \
          "${bench_args[@]}" >"$log" 2>&1 || rc=$?
      else
        timeout "$timeout_s" "$shoal_run" -n "$ranks" "$shoal_bench" "${bench_args[@]}" >"$log" 2>&1 || rc=$?
      fi ;;
    mpi-vader)
      timeout "$timeout_s" "${mpirun_base[@]}" "${mpi_vader[@]}" "$mpi_bench" "${bench_args[@]}" >"$log" 2>&1 || rc=$? ;;
    mpi-tcp)
      timeout "$timeout_s" "${mpirun_base[@]}" "${mpi_tcp[@]}" "$mpi_bench" "${bench_args[@]}" >"$log" 2>&1 || rc=$? ;;
    gloo)
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
    if ! run_one "$name" "$log"; then
      failures+=("round $round $name: exit status nonzero, see $log")
      echo "compare.sh: $name failed in round $round (see $log)" >&2
    fi
    # data rows of nccl-tests' table: size count type redop root time algbw busbw #wrong x2
    awk -v h="$name" -v r="$round" '
      $1 ~ /^[0-9]+$/ && NF >= 13 { print h "\t" r "\t" $1 "\t" $6 "\t" $10 "\t" $9 "\t" $13 }
    ' "$log" >>"$rows" || true
  done
  # The ceiling, measured in the same run: single-core memcpy of 64 MiB (bench_kernels counts
  # bytes read + written, so the payload rate is half its bytes_per_second).
  if [ -x "$build/bin/bench_kernels" ]; then
    "$build/bin/bench_kernels" --benchmark_filter='BM_Memcpy/67108864$' --benchmark_min_time=0.2 \
        --benchmark_format=csv 2>/dev/null |
      awk -F, '/BM_Memcpy/ { printf "%.4f\n", $6 / 2 / 1e9 }' >>"$logs/memcpy.txt" || true
  fi
done
# best memcpy payload rate over the rounds, GB/s (0 when not measured)
memcpy_gbs="$(sort -g "$logs/memcpy.txt" 2>/dev/null | tail -1)"
memcpy_gbs="${memcpy_gbs:-0}"

# The table.
table="$logs/table.md"
awk -F'\t' -v coll="$coll" -v n="$ranks" -v stat="$stat" -v place="$place" -v memcpy="$memcpy_gbs" \
    -v order="shoal mpi-tcp mpi-vader gloo" \
    -v titles="shoal busbw|Open MPI (tcp)|Open MPI (vader)|Gloo" '
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
          bw[h] = s * f / (pick(times[h, s]) * 1e-6) / 1e9
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

cpu="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
ompi="$(mpirun --version 2>/dev/null | head -1 || true)"
gloo="$(dpkg-query -W -f='libgloo ${Version}' libgloo-dev 2>/dev/null || true)"
rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'no commit')"
{
  echo "## $coll, $ranks ranks, $min_b to $max_b ($(date '+%Y-%m-%d %H:%M %Z'))"
  echo
  echo "- command: \`$cmdline\`"
  echo "- machine: $(hostname), nproc $(nproc), ${cpu:-unknown CPU}, Linux $(uname -r), load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- software: shoal $rev; ${ompi:-no Open MPI}; ${gloo:-no libgloo}"
  echo "- busbw in GB/s, $([ "$place" = out ] && echo out-of-place || echo in-place), $([ "$stat" = best ] && echo "best (fastest) of $rounds interleaved rounds" || echo "median of $rounds interleaved rounds") per size; $iters iterations after $warmup warmup, check $check${transport:+; SHOAL_TRANSPORT=$transport}"
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
[ ${#failures[@]} -eq 0 ] || exit 1
