#!/usr/bin/env bash
# A subset of torch's DistributedTest suite through scripts/torch-suite.sh, the gate, at 2 and 4
# ranks: the all_reduce and broadcast tests over gloo and over shoal must pass it (each world
# size running at least its floor of tests); and the gate must fail when shoal loses one test
# (SHOAL_SUITE_LOSE) and when every selected test skips.
# Usage: bash test_torch_suite_subset.sh BIN_DIR     (ctest passes the build's bin directory)
source "$(dirname "$0")/tool_test.sh" test_torch_suite_subset "${1:-}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$BIN/.." && pwd)
ls "$BUILD"/python/shoal/_C*.so >/dev/null 2>&1 || skip "no torch extension in $BUILD/python"
SUITE=$ROOT/scripts/torch-suite.sh
SUBSET="test_all_reduce_sum or test_broadcast"

# 1. the subset passes at 2 and 4 ranks, each running its floor
if BUILD=$BUILD WORLD_SIZES="2 4" MIN_RAN="2:5 4:5" "$SUITE" "$D/suite" -k "$SUBSET" >"$D/out" 2>&1 &&
  grep -q "PASS at world size 2" "$D/out" && grep -q "PASS at world size 4" "$D/out"; then
  pass
else
  fail "the all_reduce and broadcast subset at 2 and 4 ranks"
fi
# 2. a backend that loses one test fails the gate, naming it (gloo's results of case 1 reused)
if BUILD=$BUILD WORLD_SIZES=2 BACKENDS=shoal SHOAL_SUITE_LOSE=test_broadcast "$SUITE" "$D/suite" -k "$SUBSET" \
  >"$D/out" 2>&1; then
  fail "the gate passed a backend that lost test_broadcast"
elif grep -q "passed over gloo but not over shoal: 1$" "$D/out" && grep -q "^  test_broadcast: shoal failed" "$D/out"; then
  pass
else
  fail "the gate must name the one lost test"
fi
# 3. a floor above what ran fails it (the comparison alone, on case 1's results)
if BUILD=$BUILD WORLD_SIZES=4 BACKENDS="" MIN_RAN="4:1000" "$SUITE" "$D/suite" -k "$SUBSET" >"$D/out" 2>&1; then
  fail "the gate passed with fewer tests than its floor"
elif grep -q "ran (floor 1000)" "$D/out"; then pass; else fail "the floor's failure must say so"; fi
# 4. every test skipped (the CUDA variants, on a machine without a GPU) fails it
if BUILD=$BUILD WORLD_SIZES=2 "$SUITE" "$D/skipped" -k "test_all_reduce_sum_cuda" >"$D/out" 2>&1; then
  fail "the gate passed with every test skipped"
elif grep -q "0 ran (floor 1, every test skipped)" "$D/out"; then pass; else fail "every test skipped must say so"; fi
summary
