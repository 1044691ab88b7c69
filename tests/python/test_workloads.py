"""The workloads users run on torch 2.x, each checked against single-process training on the
same data: FSDP2 (1-D and HSDP on a 2-D mesh, fp32 and bf16, over shoal and gloo; a rank killed
mid-step), DeepSpeed ZeRO-3 against gloo, DTensor redistribution and tensor parallelism, and
torch.distributed.pipelining schedules over send/recv (2 and 4 stages). (DDP and its
communication hooks: test_launchers.py.)"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ranks import finished, run_ranks

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD = Path(os.environ.get("SHOAL_BUILD_DIR", REPO / "build"))
SHOAL_RUN = BUILD / "bin" / "shoal-run"
FSDP = REPO / "examples" / "fsdp_train.py"
# SGD: the update is proportional to the gradient, so a summed gradient (instead of the mean
# over ranks) would change the losses from the second step on.
# A small model on the example's default corpus (Debian's fortunes), so that tests stay quick.
COMMON = ["--steps", "4", "--optim", "sgd", "--lr", "0.5", "--layers", "3", "--dim", "64",
          "--seq", "32", "--json", "--quiet"]


def _json(out):
    lines = [line for line in out.splitlines() if line.startswith("JSON ")]
    assert len(lines) == 1, out
    return json.loads(lines[0][5:])


def _run(cmd, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"), OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    finished(p, cmd)
    return _json(p.stdout)


def fsdp(backend, world, *extra):
    assert SHOAL_RUN.exists(), f"{SHOAL_RUN} is built with the project"
    return _run([str(SHOAL_RUN), "-n", str(world), sys.executable, str(FSDP), "--backend", backend,
                 *COMMON, *extra])


def reference(world, *extra):
    return _run([sys.executable, str(FSDP), "--reference", str(world), *COMMON, *extra])


def _close(a, b, rel):
    return all(abs(x - y) <= rel * abs(y) for x, y in zip(a, b)) and len(a) == len(b)


@pytest.mark.parametrize("backend,world,replicate",
                         [("shoal", 2, 1), ("shoal", 4, 1), ("shoal", 4, 2), ("gloo", 4, 1)])
def test_fsdp2_losses_match_single_process_training(backend, world, replicate):
    """fully_shard per block (and HSDP with --replicate): gradients are AVG reduce_scatters
    (and all_reduces across replicas); the data-parallel mean loss of every step equals the
    single-process loss on the ranks' batches at once, over either backend."""
    got = fsdp(backend, world, "--replicate", str(replicate))
    want = reference(world)
    assert got["world"] == world and got["replicate"] == replicate
    assert _close(got["losses"], want["losses"], 1e-5), (got["losses"], want["losses"])
    assert got["losses"][-1] < got["losses"][0]  # it trains
    # the exposed-communication figure is a part of the step, measured on every rank
    assert 0 < got["comm_wait_ms"] <= got["comm_wait_ms_max"] < max(got["step_ms_all"])


@pytest.mark.parametrize("stages,schedule", [(2, "GPipe"), (4, "1F1B")])
def test_pipeline_example_matches_the_unsplit_model(stages, schedule):
    """examples/pipeline_train.py: the GPT cut into as many stages as ranks, trained on a
    pipelining schedule over shoal's send/recv, loses what the unsplit model loses, step by step."""
    script = REPO / "examples" / "pipeline_train.py"
    args = ["--steps", "4", "--layers", "4", "--schedule", schedule, "--json", "--quiet"]
    got = _run([str(SHOAL_RUN), "-n", str(stages), sys.executable, str(script), *args])
    want = _run([sys.executable, str(script), "--reference", *args])
    assert got["stages"] == stages and got["backend"] == "shoal"
    assert _close(got["losses"], want["losses"], 1e-5), (got["losses"], want["losses"])
    assert got["losses"][-1] < got["losses"][0]


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_example_matches_the_unsplit_model(world):
    """examples/tp_train.py: every block's MLP split over the ranks with DTensor (ColwiseParallel,
    RowwiseParallel), its partial sums all_reduced over shoal: the unsplit model's losses."""
    script = REPO / "examples" / "tp_train.py"
    args = ["--steps", "4", "--json", "--quiet"]
    got = _run([str(SHOAL_RUN), "-n", str(world), sys.executable, str(script), *args])
    want = _run([sys.executable, str(script), "--reference", *args])
    assert got["world"] == world and got["backend"] == "shoal"
    assert _close(got["losses"], want["losses"], 1e-5), (got["losses"], want["losses"])
    assert got["losses"][-1] < got["losses"][0]


def test_deepspeed_zero3_matches_gloo():
    """DeepSpeed ZeRO-3 (CPU accelerator) with deepspeed.init_distributed(dist_backend="shoal"):
    its parameter all_gathers and gradient reduce_scatters run on shoal, with the same losses as
    over gloo, and it trains."""
    pytest.importorskip("deepspeed", reason="deepspeed is in python/requirements.txt")
    script = REPO / "examples" / "deepspeed_train.py"
    args = ["--steps", "4", "--dim", "64", "--layers", "2", "--json", "--quiet"]
    runs = {b: _run([str(SHOAL_RUN), "-n", "2", sys.executable, str(script), "--backend", b, *args],
                    timeout=400)
            for b in ("gloo", "shoal")}
    assert runs["shoal"]["backend"] == "shoal" and runs["gloo"]["backend"] == "gloo"
    assert _close(runs["shoal"]["losses"], runs["gloo"]["losses"], 1e-5), runs
    assert runs["shoal"]["losses"][-1] < runs["shoal"]["losses"][0]


def _fsdp_rank_dies_mid_step(rank, world):
    """FSDP2 steps until the last rank SIGKILLs itself inside a backward (between the blocks'
    reduce_scatters and the prefetched all_gathers); every survivor must raise, naming it."""
    sys.path.insert(0, str(REPO / "examples"))
    import fsdp_train
    from gpt import batch, parse_args

    args = parse_args(fsdp_train.parser(), COMMON[:-2])
    model = fsdp_train.shard(args, fsdp_train.make_model(args), world)
    opt = fsdp_train.make_optimizer(args, model.parameters())
    dead = world - 1
    if rank == dead:
        def die(*_):
            if die.armed:
                os.kill(os.getpid(), signal.SIGKILL)
        die.armed = False
        model.blocks[1].register_full_backward_pre_hook(die)
    start = None
    with pytest.raises(RuntimeError, match=f"rank {dead}"):
        for step in range(100):
            if step == 2:
                start = time.monotonic()
                if rank == dead:
                    die.armed = True
            fsdp_train.train_step(args, model, opt, *batch(args, rank, step))
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"the death surfaced after {elapsed:.1f} s"
    return True


def test_fsdp2_dead_rank_mid_step_raises_on_every_survivor():
    world = 4
    results = run_ranks(_fsdp_rank_dies_mid_step, world, timeout_s=40, expect_exit=(world - 1,))
    assert results == {r: True for r in range(world - 1)}


def test_fsdp2_bf16_mixed_precision_matches_gloo():
    """bf16 compute with fp32 reduction: the same arithmetic over both backends (the reference
    computes in fp32, so the comparison is with gloo's run)."""
    got = fsdp("shoal", 2, "--mixed", "bf16")
    gloo = fsdp("gloo", 2, "--mixed", "bf16")
    assert _close(got["losses"], gloo["losses"], 1e-3), (got["losses"], gloo["losses"])
    assert _close(got["losses"], reference(2)["losses"], 2e-2)


def _dtensor(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    x = torch.arange((3 * world + 1) * 5, dtype=torch.float32).reshape(3 * world + 1, 5)  # uneven
    d = distribute_tensor(x, mesh, [Shard(0)])
    assert torch.equal(d.full_tensor(), x)                                       # all_gather
    assert torch.equal(d.redistribute(mesh, [Replicate()]).to_local(), x)
    assert torch.equal(d.redistribute(mesh, [Shard(1)]).full_tensor(), x)        # all_to_all
    mine = torch.full((4, 6), float(rank + 1))
    p = DTensor.from_local(mine, mesh, [Partial()])
    total = float(sum(range(1, world + 1)))
    assert torch.equal(p.redistribute(mesh, [Replicate()]).to_local(), torch.full((4, 6), total))
    rs = p.redistribute(mesh, [Shard(1)])                                         # reduce_scatter
    assert torch.equal(rs.full_tensor(), torch.full((4, 6), total))
    # A sharded matmul: column-sharded weight, replicated input, gathered result.
    torch.manual_seed(0)
    a, w = torch.randn(3, 8), torch.randn(8, 2 * world)
    y = distribute_tensor(a, mesh, [Replicate()]) @ distribute_tensor(w, mesh, [Shard(1)])
    assert torch.allclose(y.full_tensor(), a @ w, atol=1e-6)
    if world % 2 == 0:  # a 2-D mesh: both dimensions sharded
        mesh2 = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        z = torch.arange(8 * world, dtype=torch.float64).reshape(2 * world, 4)
        d2 = distribute_tensor(z, mesh2, [Shard(0), Shard(1)])
        assert torch.equal(d2.full_tensor(), z)
        assert torch.equal(d2.redistribute(mesh2, [Replicate(), Shard(0)]).full_tensor(), z)
    return True


@pytest.mark.parametrize("world", [3, 4])
def test_dtensor_redistribute(world):
    assert run_ranks(_dtensor, world, timeout_s=60) == {r: True for r in range(world)}


def _stages(seed=0):
    torch.manual_seed(seed)
    return [torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh()),
            torch.nn.Sequential(torch.nn.Linear(16, 4))]


def _pipeline(rank, world, schedule_name):
    from torch.distributed import pipelining

    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    target = torch.randn(8, 4, generator=torch.Generator().manual_seed(2))
    loss_fn = torch.nn.functional.mse_loss
    # The reference: the whole model in this process, on the whole batch.
    ref = _stages()
    loss_ref = loss_fn(ref[1](ref[0](x)), target)
    loss_ref.backward()
    # The pipeline: stage `rank` here, 4 microbatches, activations and gradients over send/recv.
    module = _stages()[rank]
    stage = pipelining.PipelineStage(module, rank, world, torch.device("cpu"))
    schedule = getattr(pipelining, schedule_name)(stage, n_microbatches=4, loss_fn=loss_fn)
    losses = []
    if rank == 0:
        schedule.step(x)
    else:
        out = schedule.step(target=target, losses=losses)
        assert torch.allclose(out, ref[1](ref[0](x)), atol=1e-6)
        assert torch.allclose(torch.stack(losses).mean(), loss_ref.detach(), atol=1e-6)
    for mine, want in zip(module.parameters(), ref[rank].parameters()):
        assert torch.allclose(mine.grad, want.grad, atol=1e-6), (mine.grad, want.grad)
    return True


@pytest.mark.parametrize("schedule_name", ["ScheduleGPipe", "Schedule1F1B"])
def test_pipelining_two_stages_match_the_unsplit_model(schedule_name):
    assert run_ranks(_pipeline, 2, schedule_name, timeout_s=60) == {0: True, 1: True}
