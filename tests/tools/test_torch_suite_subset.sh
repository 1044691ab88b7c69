#!/usr/bin/env bash
# A short subset of torch's DistributedTest suite through scripts/torch-suite.sh, the gate: the
# all_reduce and broadcast tests at 2 ranks over gloo and over shoal; fails when shoal loses one
# that gloo passes or fails any. Exits 77 (ctest: skipped) without the torch extension.
# Usage: bash test_torch_suite_subset.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
BIN=${1:?usage: test_torch_suite_subset.sh BIN_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$BIN/.." && pwd)
ls "$BUILD"/python/shoal/_C*.so >/dev/null 2>&1 || { echo "SKIP: no torch extension in $BUILD/python"; exit 77; }
D=$(mktemp -d /tmp/test_torch_suite.XXXXXX)
trap 'rm -rf "$D"' EXIT
BUILD=$BUILD WORLD_SIZES=2 "$ROOT/scripts/torch-suite.sh" "$D" -k "test_all_reduce_sum or test_broadcast"
