#!/usr/bin/env bash
# The skip gate of the scripts, of pytest and of the configure step (docs/reliability.md):
#   - skip.sh: `skip` exits 77 and logs "NAME: REASON" to $SHOAL_SKIP_LOG; under
#     SHOAL_TEST_NO_SKIP=1 it exits 1 naming what was lacking; `skip_case` goes on;
#   - tests/python/skip_gate.py: a skipped pytest test fails the session under the switch, is
#     logged otherwise;
#   - configure: a test source without a target, and under the switch a test group the build
#     cannot register (no torch), stop cmake with a line that says so.
# (GoogleTest's side: test_harness.)
# Usage: bash test_skip_gate.sh BIN_DIR     (ctest passes the build's bin directory)
source "$(dirname "$0")/tool_test.sh" test_skip_gate "${1:-}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
unset SHOAL_TEST_NO_SKIP SHOAL_SKIP_LOG

# 1. skip.sh
cat >"$D/probe.sh" <<PROBE
source "$ROOT/tests/tools/skip.sh"
skip_case "one case lacks a gizmo"
echo "went on"
skip "the probe lacks a widget"
echo "not reached"
PROBE
SHOAL_SKIP_LOG=$D/skips bash "$D/probe.sh" >"$D/out" 2>&1
rc=$?
if [[ $rc == 77 ]] && grep -q "went on" "$D/out" && ! grep -q "not reached" "$D/out" &&
  [[ $(cat "$D/skips") == $'probe: one case lacks a gizmo\nprobe: the probe lacks a widget' ]]; then
  pass
else
  fail "skip.sh without the switch (exit $rc, log: $(cat "$D/skips" 2>/dev/null))"
fi
SHOAL_TEST_NO_SKIP=1 bash "$D/probe.sh" >"$D/out" 2>&1
rc=$?
if [[ $rc == 1 ]] && grep -q "FAIL: probe would skip, and SHOAL_TEST_NO_SKIP=1 allows none: one case lacks a gizmo" "$D/out" &&
  ! grep -q "went on" "$D/out"; then
  pass
else
  fail "skip.sh under SHOAL_TEST_NO_SKIP=1 (exit $rc)"
fi

# 2. pytest (the project's interpreter, as ctest's torch_* tests)
mkdir -p "$D/py"
cat >"$D/py/test_probe.py" <<'PROBE'
import pytest
def test_runs():
    assert True
def test_skips():
    pytest.skip("the probe lacks a widget")
PROBE
pytest_run() { (cd "$D/py" && PYTHONPATH="$ROOT/tests/python" "$TORCH_PY" -m pytest -q -p no:cacheprovider -p skip_gate test_probe.py); }
rm -f "$D/skips"
SHOAL_SKIP_LOG=$D/skips pytest_run >"$D/out" 2>&1
rc=$?
if [[ $rc == 0 ]] && [[ $(cat "$D/skips") == "test_probe.py::test_skips: the probe lacks a widget" ]]; then pass
else fail "pytest without the switch (exit $rc, log: $(cat "$D/skips" 2>/dev/null))"; fi
SHOAL_TEST_NO_SKIP=1 pytest_run >"$D/out" 2>&1
rc=$?
if [[ $rc == 1 ]] && grep -q "FAIL: test_probe.py::test_skips would skip, and SHOAL_TEST_NO_SKIP=1 allows none: the probe lacks a widget" "$D/out"
then pass; else fail "pytest under SHOAL_TEST_NO_SKIP=1 (exit $rc)"; fi

# 3. configure: a copy of the tree (sources only, no torch) with a test source nobody registered
mkdir -p "$D/tree"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$D/tree" 2>/dev/null)
configure() { cmake -S "$D/tree" -B "$D/tree/build-$1" -DCMAKE_BUILD_TYPE=Release "${@:2}" >"$D/out" 2>&1; }
if configure plain -DSHOAL_TORCH=ON -DSHOAL_PYTHON=/nonexistent && grep -q "tests/unit/test_swarm_model.cpp: not registered" "$D/tree/build-plain/Testing/unregistered.txt"
then pass; else fail "a build without torch names what it leaves out"; fi
if ! configure strict -DSHOAL_TORCH=ON -DSHOAL_PYTHON=/nonexistent -DSHOAL_TEST_NO_SKIP=ON &&
  tr -s ' \n' '  ' <"$D/out" | grep -q "SHOAL_TEST_NO_SKIP: tests/unit/test_swarm_model.cpp, .* would not be registered: no libtorch"
then pass; else fail "SHOAL_TEST_NO_SKIP=ON without torch must stop the configure step"; fi
echo 'int main() {}' >"$D/tree/tests/unit/test_orphan.cpp"
if ! configure orphan -DSHOAL_TORCH=OFF && tr -s ' \n' '  ' <"$D/out" | grep -q "tests/unit/test_orphan.cpp has no test target"
then pass; else fail "a test source without a target must stop the configure step"; fi
summary
