#!/usr/bin/env bash
# torch's DistributedTest suite over gloo and over shoal, one after the other, and the comparison:
# how many tests each passes, every test gloo passes that shoal does not, every skip with its
# reason (docs/torch.md quotes the result).
#
#   scripts/torch-suite.sh [OUT_DIR] [pytest args...]     # e.g. -k all_reduce
#
# WORLD_SIZE (default 2) ranks per test; BUILD (default build) holds the extension; BACKENDS
# (default "gloo shoal") the runs to make (the comparison reads OUT_DIR/<backend>.xml of both).
# The whole suite takes 22-24 minutes per backend on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/torch-suite}
shift || true
build=${BUILD:-build}
python=${SHOAL_PYTHON:-.venv/bin/python}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$PWD
for backend in ${BACKENDS:-gloo shoal}; do
  tmp=$(mktemp -d)
  echo "torch-suite: BACKEND=$backend WORLD_SIZE=${WORLD_SIZE:-2} -> $out/$backend.xml" >&2
  (cd tests/python &&
    BACKEND=$backend WORLD_SIZE=${WORLD_SIZE:-2} TEMP_DIR=$tmp OMP_NUM_THREADS=1 \
      PYTHONPATH="$root/$build/python" PYTORCH_PRINT_REPRO_ON_FAILURE=0 \
      "$root/$python" -m pytest -q -p no:cacheprovider -rs distributed_suite.py \
      --junitxml="$out/$backend.xml" "$@" >"$out/$backend.log" 2>&1) || true
  rm -rf "$tmp"
  tail -1 "$out/$backend.log" >&2
done
"$python" - "$out" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from collections import Counter

out = sys.argv[1]


def outcomes(backend):
    result = {}
    for case in ET.parse(f"{out}/{backend}.xml").getroot().iter("testcase"):
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
EOF
