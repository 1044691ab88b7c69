"""The backend under real launchers (shoal-run, torchrun) and the DDP example against gloo."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import shoal
from ranks import finished

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
# <build>/python/shoal/__init__.py -> <build>
BUILD = pathlib.Path(os.environ.get("SHOAL_BUILD_DIR") or pathlib.Path(shoal.__file__).resolve().parents[2])
SHOAL_RUN = BUILD / "bin" / "shoal-run"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(BUILD / "python"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run(cmd, timeout=60):
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    finished(proc, cmd)
    return proc.stdout


@pytest.mark.skipif(not SHOAL_RUN.exists(), reason="shoal-run not built")
def test_shoal_run():
    out = _run([str(SHOAL_RUN), "-n", "3", sys.executable, str(HERE / "launch_check.py")])
    assert all(f"OK {r}" in out for r in range(3)), out


def test_torchrun():
    out = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "--redirects", "1", "--tee", "1", str(HERE / "launch_check.py")], timeout=90)
    assert "OK 0" in out and "OK 1" in out, out


def _ddp(backend, world, steps, hook="none"):
    cmd = [sys.executable, str(REPO / "examples" / "ddp_train.py"), "--backend", backend, "--steps", str(steps),
           "--hook", hook, "--json", "--quiet"]
    if SHOAL_RUN.exists():
        cmd = [str(SHOAL_RUN), "-n", str(world)] + cmd
    else:
        cmd += ["--nproc", str(world)]
    out = _run(cmd, timeout=120)
    line = next(l for l in out.splitlines() if l.startswith("JSON "))
    return json.loads(line[5:])


def test_ddp_example_matches_gloo():
    steps = 5
    shoal_run = _ddp("shoal", 2, steps)
    gloo_run = _ddp("gloo", 2, steps)
    assert len(shoal_run["losses"]) == len(gloo_run["losses"]) == steps
    for step, (a, b) in enumerate(zip(shoal_run["losses"], gloo_run["losses"])):
        assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: shoal {a} vs gloo {b}"


@pytest.mark.parametrize("hook", ["fp16", "bf16", "powersgd"])
def test_ddp_communication_hooks_match_gloo(hook):
    """DDP's hooks chain on the futures of shoal's Work: the same losses as over gloo (the hooks'
    compression is the same arithmetic on both; what differs is only the collective's), and the
    loss falls as training goes."""
    steps = 6
    shoal_run = _ddp("shoal", 2, steps, hook)
    gloo_run = _ddp("gloo", 2, steps, hook)
    assert shoal_run["hook"] == gloo_run["hook"] == hook
    for step, (a, b) in enumerate(zip(shoal_run["losses"], gloo_run["losses"])):
        assert abs(a - b) <= 1e-3 * abs(b), f"{hook} step {step}: shoal {a} vs gloo {b}"
    assert shoal_run["losses"][-1] < shoal_run["losses"][0]
