#!/usr/bin/env bash
# One command on any Linux node: shoal against the node's Open MPI (shared memory, vader) and
# MPICH where installed, at 2, 4, 8, 16 ranks and as many ranks as the node has cores, one rank
# per core (bound), all_reduce, all_gather, reduce_scatter and broadcast from 8 B to 64 MiB, out
# of place and in place, several rounds interleaved (bench/compare.sh), the median round per cell,
# every iteration timed too for p50 and p99 (the harnesses' -p 1).
#
#   bench/manycore.sh [--ranks "2 4 8 16"] [--collectives "all_reduce all_gather reduce_scatter broadcast"]
#                     [--sizes 8:64M] [--rounds 3] [--iters 20] [--out manycore]
#                     [--oversubscribe] [--no-build] [--build-dir DIR]
#
# First it names every prerequisite it cannot find, all at once, with the packages that bring
# them (exit 2): a C++20 compiler, CMake, make, pkg-config, Open MPI (mpicc, mpirun), the headers
# of CLI11, nlohmann-json and libsodium, python3 (with --no-build, where DIR has the binaries
# already: mpirun and python3 only). Then it builds shoal without torch (shoal-run,
# shoal-bench; DIR, default build-manycore) and the MPI harnesses (bench/peers/build.sh), runs
# the sweep (rank counts above the node's cores are left out unless --oversubscribe, which also
# unbinds), and writes OUT/sections.md (compare.sh's tables, out of place), OUT/logs/COLL-RANKS/
# (every round's raw output and rows.tsv) and OUT/report.md (bench/manycore_report.py: shoal /
# best MPI per cell out of place and in place, the median round; in place against out of place;
# p99 / p50 of shoal and the best MPI; the targets at 8 ranks and more), with OUT/manycore.png
# where matplotlib is installed. Exits 1 when a run failed or a target is missed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cores=$(nproc)
ranks_list="2 4 8 16 $cores"
collectives="all_reduce all_gather reduce_scatter broadcast"
sizes=8:64M rounds=3 iters=20 out=manycore oversubscribe=0 build=1
cmdline="bench/manycore.sh$(printf ' %q' "$@")"
build_dir="$root/build-manycore"

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks_list="$2"; shift 2 ;;
    --collectives) collectives="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --oversubscribe) oversubscribe=1; shift ;;
    --no-build) build=0; shift ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "manycore.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$build_dir" = /* ]] || build_dir="$PWD/$build_dir"

# ---- prerequisites, all named up front ----
missing=()
need() {  # need WHAT PACKAGES COMMAND...
  local what=$1 pkgs=$2
  shift 2
  "$@" >/dev/null 2>&1 || missing+=("$what (Debian/Ubuntu: $pkgs)")
}
cxx=${CXX:-$(command -v g++ || command -v clang++ || echo c++)}
if ((build)); then  # with --no-build only what runs the sweep
  need "a C++20 compiler ($cxx)" "g++ or clang" sh -c "echo 'int main(){return 0;}' | $cxx -std=c++20 -x c++ - -o /dev/null"
  need "cmake >= 3.20" "cmake" sh -c 'v=$(cmake --version | head -1 | grep -oE "[0-9]+\.[0-9]+"); [ "$(printf "%s\n3.20\n" "$v" | sort -V | head -1)" = 3.20 ]'
  need "make" "make" command -v make
  need "pkg-config" "pkg-config" command -v pkg-config
  need "Open MPI's mpicc" "openmpi-bin libopenmpi-dev" command -v mpicc
  for h in "CLI/CLI.hpp:libcli11-dev" "nlohmann/json.hpp:nlohmann-json3-dev" "sodium.h:libsodium-dev"; do
    need "the header ${h%%:*}" "${h#*:}" sh -c "echo '#include <${h%%:*}>' | $cxx -std=c++20 -x c++ -fsyntax-only -"
  done
fi
need "Open MPI's mpirun" "openmpi-bin" command -v mpirun
need "python3" "python3" command -v python3
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3  # the distribution's, where python3-matplotlib installs
if [ ${#missing[@]} -gt 0 ]; then
  echo "manycore.sh: missing prerequisites:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 2
fi

# ---- the rank counts this node runs ----
picked=()
for r in $(printf '%s\n' $ranks_list | sort -n | uniq); do
  [[ $r =~ ^[1-9][0-9]*$ ]] || { echo "manycore.sh: --ranks takes positive integers, not '$r'" >&2; exit 2; }
  if ((r > cores && !oversubscribe)); then
    echo "manycore.sh: $r ranks left out: this node has $cores cores (--oversubscribe runs them)" >&2
    continue
  fi
  picked+=("$r")
done
[ ${#picked[@]} -gt 0 ] || { echo "manycore.sh: no rank count to run" >&2; exit 2; }

# ---- build ----
if ((build)); then
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSHOAL_TORCH=OFF -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
  cmake --build "$build_dir" -j "$cores" --target shoal-run shoal-bench >/dev/null
  BUILD="$build_dir" "$here/peers/build.sh" --only mpi
  if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
    BUILD="$build_dir" "$here/peers/build.sh" --only mpich
  fi
fi
[ -x "$build_dir/bin/shoal-bench" ] || { echo "manycore.sh: no $build_dir/bin/shoal-bench (drop --no-build)" >&2; exit 2; }
peers=mpi-vader
[ -x "$build_dir/peers/mpich_bench" ] && command -v mpiexec.mpich >/dev/null && peers=mpi-vader,mpich

# ---- the sweep ----
# One compare.sh run per collective and rank count: every harness times both out of place and in
# place in the same run (nccl-tests' two columns), so both come from the same rounds.
mkdir -p "$out/logs"
: >"$out/sections.md"
failed=0
for r in "${picked[@]}"; do
  bind=core
  ((r > cores)) && bind=none
  for c in $collectives; do
    echo "== $c, $r ranks" >&2
    rm -rf "$out/logs/$c-$r"
    BUILD="$build_dir" "$here/compare.sh" --collective "$c" --ranks "$r" --sizes "$sizes" --rounds "$rounds" \
      --iters "$iters" --stat median --bind "$bind" --peers "$peers" --no-build --scenario manycore --percentiles \
      --out "$out/sections.md" --logs "$out/logs/$c-$r" >/dev/null || failed=1
  done
done
"$py" "$here/manycore_report.py" "$out/logs" --cores "$cores" --cmdline "$cmdline" --plot "$out/manycore.png" \
  >"$out/report.md" || failed=1
cat "$out/report.md"
exit $failed
