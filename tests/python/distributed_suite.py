"""torch's own DistributedTest suite (torch/testing/_internal/distributed/distributed_test.py,
shipped in the wheel) with BACKEND=shoal or BACKEND=gloo, as torch's test_distributed_spawn.py
runs it. Run through scripts/torch-suite.sh, which runs both and compares them.

The suite's gloo paths are shoal's too: for BACKEND=shoal, every check of the suite that names
gloo (`BACKEND == "gloo"`, `BACKEND != "gloo"`, `require_backend_is_available({"gloo"})`, the
feature sets of DistTestCases) also admits shoal, so that each test runs the same code for both
backends; nothing else of the suite is changed. Not collected by ctest (the name does not start
with test_): the suite takes tens of minutes per backend.
"""

import os
import sys
import types

import torch
from torch.testing._internal import common_distributed
from torch.testing._internal.common_utils import run_tests

BACKEND = os.environ.get("BACKEND", "")
if BACKEND not in ("shoal", "gloo"):
    sys.exit("distributed_suite.py: set BACKEND=shoal or BACKEND=gloo (and WORLD_SIZE, TEMP_DIR)")

if BACKEND == "shoal":
    import shoal.torch  # noqa: F401  registers the backend (in every spawned rank too)

    cases = common_distributed.DistTestCases
    cases.backend_feature["plugin"].add("shoal")
    for backends in list(cases.backend_feature.values()) + list(cases.skip_collective.values()):
        if "gloo" in backends:
            backends.add("shoal")

    import torch.testing._internal.distributed as package

    path = os.path.join(os.path.dirname(package.__file__), "distributed_test.py")
    with open(path) as f:
        source = f.read()
    for gloo_only, also_shoal in [
        ('BACKEND != "gloo"', 'BACKEND not in ("gloo", "shoal")'),
        ('BACKEND == "gloo"', 'BACKEND in ("gloo", "shoal")'),
        ('require_backend_is_available({"gloo"})', 'require_backend_is_available({"gloo", "shoal"})'),
    ]:
        source = source.replace(gloo_only, also_shoal)
    name = "torch.testing._internal.distributed.distributed_test"
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


# SHOAL_SUITE_LOSE=NAME (scripts/torch-suite.sh's own test): the test NAME fails over shoal, as if
# the backend had lost it, so that the gate's failing path is exercised.
_lose = os.environ.get("SHOAL_SUITE_LOSE") if BACKEND == "shoal" else None
if _lose:
    if not hasattr(TestDistBackendWithSpawn, _lose):
        sys.exit(f"distributed_suite.py: SHOAL_SUITE_LOSE={_lose}: no such test")

    def _lost(self):
        self.fail(f"SHOAL_SUITE_LOSE={_lose}")

    setattr(TestDistBackendWithSpawn, _lose, _lost)


if __name__ == "__main__":
    run_tests()
