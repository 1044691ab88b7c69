#!/usr/bin/env bash
# torch's DistributedTest suite over gloo and over shoal, one after the other, at each world size,
# and the comparison: how many tests each passes, every test gloo passes that shoal does not,
# every skip with its reason (docs/torch.md quotes the result). A gate: exits 1 when shoal loses
# a test that gloo passes, fails or errors any test, or runs (passes or fails, not skips) fewer
# tests than the floor of MIN_RAN, at any world size.
#
#   scripts/torch-suite.sh [OUT_DIR] [pytest args...]     # e.g. -k all_reduce
#
# WORLD_SIZES (default "2 4") ranks per test; BUILD (default build) holds the extension; BACKENDS
# (default "gloo shoal"; empty: none, only the comparison) the runs to make (the comparison reads
# OUT_DIR/<backend>-<world>.xml of both). MIN_RAN ("WORLD:N ...", default "2:88 4:91" for the whole suite, "1" per world size
# when pytest args select a subset) is the least number of tests shoal must run. The whole suite
# takes 22-25 minutes per backend and world size on 2 cores. SHOAL_SUITE_LOSE=NAME (tests only)
# makes the test NAME fail over shoal: tests/tools/test_torch_suite_subset.sh shows the gate fails.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/torch-suite}
shift || true
build=${BUILD:-build}
python=${SHOAL_PYTHON:-.venv/bin/python}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$PWD
case $build in /*) ;; *) build=$root/$build ;; esac
worlds=${WORLD_SIZES:-2 4}
if (($# > 0)); then floors=${MIN_RAN:-}; else floors=${MIN_RAN:-2:88 4:91}; fi
for world in $worlds; do
  for backend in ${BACKENDS-gloo shoal}; do
    tmp=$(mktemp -d)
    echo "torch-suite: BACKEND=$backend WORLD_SIZE=$world -> $out/$backend-$world.xml" >&2
    # pytest's own exit status says only that some test failed: the comparison below decides.
    # torch's suite skips by design (CUDA, NCCL- and MPI-only tests): its gate is the comparison
    # and the floors below, not the harness's skip switch.
    (cd tests/python && unset SHOAL_TEST_NO_SKIP SHOAL_SKIP_LOG &&
      BACKEND=$backend WORLD_SIZE=$world TEMP_DIR=$tmp OMP_NUM_THREADS=1 \
        PYTHONPATH="$build/python" PYTORCH_PRINT_REPRO_ON_FAILURE=0 \
        "$root/$python" -m pytest -q -p no:cacheprovider -rs distributed_suite.py \
        --junitxml="$out/$backend-$world.xml" "$@" >"$out/$backend-$world.log" 2>&1) || true
    rm -rf "$tmp"
    tail -1 "$out/$backend-$world.log" >&2
  done
done
status=0
for world in $worlds; do
  echo "== world size $world"
  floor=1
  for f in $floors; do [[ $f == "$world":* ]] && floor=${f#*:}; done
  "$python" - "$out" "$world" "$floor" <<'EOF' || status=1
import sys
import xml.etree.ElementTree as ET
from collections import Counter

out, world, floor = sys.argv[1], sys.argv[2], int(sys.argv[3])


def outcomes(backend):
    result = {}
    path = f"{out}/{backend}-{world}.xml"
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit(f"torch-suite: no results of {backend} at world size {world} ({e})")
    for case in root.iter("testcase"):
        name = case.get("name")
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            result[name] = ("failed", "")
        elif skipped is not None:
            result[name] = ("skipped", (skipped.get("message") or "").strip().splitlines()[0][:100])
        else:
            result[name] = ("passed", "")
    return result


gloo, shoal = outcomes("gloo"), outcomes("shoal")
for backend, res in (("gloo", gloo), ("shoal", shoal)):
    counts = Counter(status for status, _ in res.values())
    print(f"{backend}: {len(res)} tests, {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
lost = sorted(n for n, (s, _) in gloo.items() if s == "passed" and shoal.get(n, ("missing",))[0] != "passed")
gained = sorted(n for n, (s, _) in shoal.items() if s == "passed" and gloo.get(n, ("missing",))[0] != "passed")
print(f"passed over gloo but not over shoal: {len(lost)}")
for n in lost:
    print(f"  {n}: shoal {shoal.get(n, ('missing',))[0]}")
print(f"passed over shoal but not over gloo: {len(gained)}")
for n in gained:
    print(f"  {n}: gloo {gloo.get(n, ('missing',))[0]}")
reasons = Counter(reason for status, reason in shoal.values() if status == "skipped")
print("shoal's skips by reason:")
for reason, n in reasons.most_common():
    print(f"  {n:4d}  {reason}")
failed = sorted(n for n, (s, _) in shoal.items() if s == "failed")
ran = sum(1 for s, _ in shoal.values() if s != "skipped")
if lost or failed or ran < floor:
    print(f"FAIL at world size {world}: {len(lost)} lost to gloo, {len(failed)} failed or errored over shoal, "
          f"{ran} ran (floor {floor}{', every test skipped' if shoal and not ran else ''})")
    sys.exit(1)
print(f"PASS at world size {world}: {ran} ran over shoal (floor {floor})")
EOF
done
exit $status
