#!/usr/bin/env bash
# make test: ctest over the build, then, as the last lines, every test left out and why: the
# skips of this run (tests/tools/skip.sh, tests/support/test_main.cpp, tests/python/skip_gate.py
# write them to $SHOAL_SKIP_LOG) and the test groups the build could not register. Under
# SHOAL_TEST_NO_SKIP=1 (.ci/run) there are none: each would have failed its test or the configure
# step (docs/reliability.md).
#   scripts/run-tests.sh BUILD_DIR [JOBS] [ctest args...]
set -u
build=$(cd "${1:?usage: run-tests.sh BUILD_DIR [JOBS] [ctest args...]}" && pwd)
jobs=${2:-$(nproc)}
shift $(($# >= 2 ? 2 : 1))
mkdir -p "$build/Testing"
skips=$build/Testing/skips.log
unregistered=$build/Testing/unregistered.txt
rm -f "$skips"
(cd "$build" && SHOAL_SKIP_LOG=$skips ctest --output-on-failure --timeout 600 -j "$jobs" "$@")
rc=$?
if [[ -s $unregistered || -s $skips ]]; then
  echo
  echo "make test: left out here (SHOAL_TEST_NO_SKIP=1, as in CI, fails on each):"
  cat "$unregistered" "$skips" 2>/dev/null | sed 's/^/  /'
fi
exit $rc
