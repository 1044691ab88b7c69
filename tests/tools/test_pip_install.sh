#!/usr/bin/env bash
# `pip install .` as a PyTorch user does it: into a fresh virtual environment that reuses the
# project's pinned torch (a .pth file onto .venv's site-packages: no second download), without
# build isolation (pyproject.toml says why); then, from a directory outside the repository and
# without PYTHONPATH, a 2-rank torchrun job of a script that never imports shoal runs on the
# "shoal" backend (torch's entry-point autoload), and the tools are on the environment's PATH.
# Then `python -m build --wheel` (the same build directory) makes a wheel that holds the module,
# the tools and the entry point, and installs and runs in a second fresh environment.
# The build directory build/pip/ survives between runs, so a second run only relinks.
# Exits 77 (ctest: skipped) without the project's .venv.
# Usage: bash test_pip_install.sh
set -u
source "$(dirname "$0")/skip.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BASE=$ROOT/.venv/bin/python
[[ -x $BASE ]] || skip "no $BASE (scripts/install-deps.sh)"
site=$("$BASE" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
D=$(mktemp -d /tmp/test_pip_install.XXXXXX)
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Without a pip of its own: the project's pip and setuptools (torch needs a newer setuptools than
# a new environment's) come through the .pth file with torch.
/usr/bin/python3 -m venv --without-pip "$D/env" || fail "python3 -m venv"
env_site=$("$D/env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" >"$env_site/project-venv.pth"  # torch, scikit-build-core: the pinned ones

unset PYTHONPATH
start=$EPOCHREALTIME
if ! (cd "$ROOT" && timeout 1200 "$D/env/bin/python" -m pip install --disable-pip-version-check --no-index \
      --no-build-isolation . >"$D/pip.log" 2>&1); then
  tail -40 "$D/pip.log"
  fail "pip install --no-build-isolation . failed"
fi
echo "PASS: pip install . ($(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s)"
grep -qi "collecting torch\|downloading" "$D/pip.log" && fail "pip fetched something: $(grep -i 'downloading' "$D/pip.log" | head -3)"

# Installed into the fresh environment, not found in the source tree or the build tree.
cd "$D" || fail "cd $D"
where=$("$D/env/bin/python" -c 'import shoal, os; print(os.path.dirname(shoal.__file__))') || fail "import shoal"
[[ $where == "$env_site/shoal" ]] || fail "shoal imported from $where, not from $env_site/shoal"
for tool in shoal-run shoal-info shoal-bench shoal-tune shoal-sim; do
  [[ -x $D/env/bin/$tool ]] || fail "$tool is not in the environment's bin/"
done
"$D/env/bin/shoal-info" >/dev/null || fail "shoal-info does not run"
# shoal.torch imported before torch: torch's autoload meets the half-imported module
"$D/env/bin/python" -c 'from shoal.torch.diloco import DiLoCo' || fail "from shoal.torch.diloco import DiLoCo (before torch)"
echo "PASS: shoal and the tools are installed in the environment"

cat >"$D/job.py" <<'EOF'
# Never imports shoal: torch loads the backend through its "torch.backends" entry point.
import sys

import torch
import torch.distributed as dist

assert "shoal" not in sys.modules or sys.modules["shoal"].__file__.startswith(sys.prefix), sys.modules["shoal"]
dist.init_process_group("shoal")
assert dist.get_backend() == "shoal", dist.get_backend()
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert t[0].item() == sum(range(1, world + 1)), t[0].item()
dist.destroy_process_group()
print(f"OK {rank}", flush=True)
EOF
out=$(timeout 120 "$D/env/bin/python" -m torch.distributed.run --standalone --nproc_per_node 2 \
      "$D/job.py" 2>&1) || { echo "$out" | tail -20; fail "torchrun of a script that never imports shoal"; }
# Each rank's word, wherever it lands: the ranks share one stdout, and two writes can meet on
# one line ("OK 0OK 1").
[[ $(grep -o 'OK [01]' <<<"$out" | sort -u | wc -l) == 2 ]] || { echo "$out" | tail -20; fail "not every rank printed OK"; }
echo "PASS: torchrun --nproc_per_node 2, dist.init_process_group(\"shoal\") without importing shoal"

# A wheel (python -m build), through the same build directory: what it holds, and that it runs.
if ! (cd "$ROOT" && timeout 1200 "$D/env/bin/python" -m build --wheel --no-isolation --outdir "$D/dist" \
      >"$D/build.log" 2>&1); then
  tail -40 "$D/build.log"
  fail "python -m build --wheel --no-isolation failed"
fi
wheel=$(ls "$D"/dist/shoal-*.whl 2>/dev/null | head -1)
[[ -n $wheel ]] || fail "python -m build made no shoal-*.whl in $D/dist"
"$BASE" - "$wheel" <<'EOF' || fail "the wheel lacks what pip install . installs"
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
names = wheel.namelist()
missing = [n for n in ["shoal/__init__.py", "shoal/torch/__init__.py", "shoal/torch/diloco.py"] if n not in names]
if not any(n.startswith("shoal/_C") and n.endswith(".so") for n in names):
    missing.append("shoal/_C*.so")
for tool in ["shoal-run", "shoal-info", "shoal-bench", "shoal-tune", "shoal-sim"]:
    if not any(n.endswith("/scripts/" + tool) for n in names):
        missing.append(tool)
entry = [n for n in names if n.endswith("entry_points.txt")]
text = wheel.read(entry[0]).decode() if entry else ""
if "[torch.backends]" not in text or "shoal.torch:_autoload" not in text:
    missing.append("entry point torch.backends = shoal.torch:_autoload")
if missing:
    sys.exit("missing: " + ", ".join(missing))
EOF
/usr/bin/python3 -m venv --without-pip "$D/env2" || fail "python3 -m venv (second)"
env2_site=$("$D/env2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" >"$env2_site/project-venv.pth"
"$D/env2/bin/python" -m pip install --disable-pip-version-check --no-index --no-deps "$wheel" \
  >"$D/wheel.log" 2>&1 || { tail -20 "$D/wheel.log"; fail "pip install of the wheel"; }
"$D/env2/bin/shoal-info" >/dev/null || fail "shoal-info from the wheel does not run"
(cd "$D" && "$D/env2/bin/python" -c 'import torch.distributed as dist, shoal.torch; assert dist.is_backend_available("shoal")') \
  || fail "the wheel's backend does not register"
echo "PASS: python -m build --wheel: $(basename "$wheel") holds the module, the tools and the entry point, and runs"
