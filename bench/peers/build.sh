#!/usr/bin/env bash
# Builds the peer harnesses into $BUILD/peers/ (default build/peers/):
#   mpi_bench   over the MPI found by mpicc (Open MPI, Debian's default mpicc)
#   mpich_bench the same mpi_bench.c over MPICH, built with MPICH's own wrapper mpicc.mpich
#               (run it with mpiexec.mpich; the mpicc/mpirun alternatives stay Open MPI's)
#   gloo_bench  over Debian's libgloo (tcp transport)
# Idempotent: a binary newer than its sources is left alone. Without --only, a missing MPICH
# is a note (mpich_bench is skipped), not an error.
#
#   bench/peers/build.sh [--only mpi|mpich|gloo] [--force]
# Environment: BUILD (build folder, default build), MPICC (default mpicc), MPICH_CC (default
# mpicc.mpich), CXX (default g++).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-build}"
[[ "$build" = /* ]] || build="$root/$build"
out="$build/peers"
only=""
force=0

while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="${2:?--only needs mpi, mpich or gloo}"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$only" in ""|mpi|mpich|gloo) ;; *) echo "build.sh: --only takes mpi, mpich or gloo, not '$only'" >&2; exit 2 ;; esac

want_mpi=1; want_gloo=1; want_mpich=1
[ -n "$only" ] && [ "$only" != mpi ] && want_mpi=0
[ -n "$only" ] && [ "$only" != gloo ] && want_gloo=0
[ -n "$only" ] && [ "$only" != mpich ] && want_mpich=0

mpicc="${MPICC:-mpicc}"
mpich_cc="${MPICH_CC:-mpicc.mpich}"
cxx="${CXX:-g++}"
missing=()
if [ $want_mpi = 1 ]; then
  command -v "$mpicc" >/dev/null 2>&1 || missing+=("openmpi-bin libopenmpi-dev (no '$mpicc' on PATH)")
  command -v mpirun >/dev/null 2>&1 || missing+=("openmpi-bin (no 'mpirun' on PATH)")
fi
if [ $want_mpich = 1 ]; then
  mpich_missing=""
  command -v "$mpich_cc" >/dev/null 2>&1 || mpich_missing="libmpich-dev (no '$mpich_cc' on PATH)"
  command -v mpiexec.mpich >/dev/null 2>&1 || mpich_missing="${mpich_missing:+$mpich_missing, }mpich (no 'mpiexec.mpich' on PATH)"
  if [ -n "$mpich_missing" ]; then
    if [ "$only" = mpich ]; then
      missing+=("$mpich_missing")
    else
      echo "build.sh: note: skipping mpich_bench: missing $mpich_missing" >&2
      want_mpich=0
    fi
  fi
fi
if [ $want_gloo = 1 ]; then
  if ! command -v "$cxx" >/dev/null 2>&1; then
    missing+=("g++ (no '$cxx' on PATH)")
  else
    # Gloo ships no pkg-config file: look for the header and ask the linker for the library.
    echo '#include <gloo/allreduce.h>' | "$cxx" -std=c++20 -x c++ -fsyntax-only - >/dev/null 2>&1 ||
      missing+=("libgloo-dev (no <gloo/allreduce.h>)")
    lib="$("$cxx" -print-file-name=libgloo.so)"
    [[ "$lib" = /* && -e "$lib" ]] || missing+=("libgloo-dev (no libgloo.so)")
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "build.sh: missing packages:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  echo "build.sh: install them with scripts/install-deps.sh (or apt-get install the names above)" >&2
  exit 1
fi

mkdir -p "$out"
# the measurement itself, shared with shoal-bench
driver_dir="$root/tools/bench"
common=("$driver_dir/nccl_tests_driver.h" "$driver_dir/nccl_tests_driver.c" "$driver_dir/nccl_tests_args.c")

# up_to_date TARGET SOURCES...: true when TARGET exists and is newer than every source
up_to_date() {
  local target="$1"; shift
  [ $force = 0 ] && [ -x "$target" ] || return 1
  local s
  for s in "$@"; do [ "$target" -nt "$s" ] || return 1; done
}

if [ $want_mpi = 1 ]; then
  if up_to_date "$out/mpi_bench" "$here/mpi_bench.c" "${common[@]}"; then
    echo "build.sh: $out/mpi_bench is up to date"
  else
    echo "build.sh: building $out/mpi_bench ($(mpirun --version 2>/dev/null | head -1))"
    "$mpicc" -std=c99 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -I "$driver_dir" \
      -o "$out/mpi_bench.tmp" "$here/mpi_bench.c" "$driver_dir/nccl_tests_driver.c" "$driver_dir/nccl_tests_args.c"
    mv -f "$out/mpi_bench.tmp" "$out/mpi_bench"
  fi
fi

if [ $want_mpich = 1 ]; then
  if up_to_date "$out/mpich_bench" "$here/mpi_bench.c" "${common[@]}"; then
    echo "build.sh: $out/mpich_bench is up to date"
  else
    echo "build.sh: building $out/mpich_bench (MPICH $(mpichversion 2>/dev/null | awk -F'\t' '/^MPICH Version/ { print $2 }'))"
    "$mpich_cc" -std=c99 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -I "$driver_dir" \
      -o "$out/mpich_bench.tmp" "$here/mpi_bench.c" "$driver_dir/nccl_tests_driver.c" "$driver_dir/nccl_tests_args.c"
    mv -f "$out/mpich_bench.tmp" "$out/mpich_bench"
  fi
fi

if [ $want_gloo = 1 ]; then
  if up_to_date "$out/gloo_bench" "$here/gloo_bench.cpp" "${common[@]}"; then
    echo "build.sh: $out/gloo_bench is up to date"
  else
    echo "build.sh: building $out/gloo_bench (libgloo $(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null || echo '?'))"
    "$cxx" -std=c++20 -O2 -Wall -Wextra -I "$driver_dir" -o "$out/gloo_bench.tmp" \
      "$here/gloo_bench.cpp" -x c++ "$driver_dir/nccl_tests_driver.c" "$driver_dir/nccl_tests_args.c" -x none -lgloo -pthread
    mv -f "$out/gloo_bench.tmp" "$out/gloo_bench"
  fi
fi
