#!/usr/bin/env bash
# Runs the fuzz targets for a bounded time each, from the seeds in tests/fuzz/corpus/<target>
# plus what earlier runs learned (<build>/fuzz-work/<target>; SHOAL_FUZZ_WORK to move it).
#   tests/fuzz/run.sh [SECONDS [BIN_DIR [TARGET...]]]     default: 60 s, build-asan/bin, all
# A crash, hang (>10 s per input), leak or sanitizer report fails the run; the input that
# caused it is left in <build>/fuzz-work/artifacts/ (reproduce: BIN_DIR/fuzz_<target> FILE).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
seconds="${1:-60}"
bin="${2:-$here/../../build-asan/bin}"
shift 2 2>/dev/null || shift $#
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(connection store hello swarm)
work="${SHOAL_FUZZ_WORK:-$bin/../fuzz-work}"
mkdir -p "$work/artifacts"
status=0
for t in "${targets[@]}"; do
  exe="$bin/fuzz_$t"
  [ -x "$exe" ] || { echo "fuzz: $exe not built (cmake -DSHOAL_FUZZ=ON with clang)"; exit 1; }
  mkdir -p "$work/$t"
  log="$work/$t.log"
  start=$(date +%s)
  # The learned corpus first (new inputs land there), the seeds read-only after it.
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -artifact_prefix="$work/artifacts/${t}-" -print_final_stats=1 \
    "$work/$t" "$here/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  echo "fuzz_$t: exit $rc, ${runs:-?} inputs in $(( $(date +%s) - start )) s, corpus $(ls "$work/$t" | wc -l) files"
  if [ $rc -ne 0 ]; then
    status=1
    grep -v '^\[shoal WARN' "$log" | tail -60
  fi
done
exit $status
