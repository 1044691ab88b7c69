#!/usr/bin/env python3
"""Trains the GPT of gpt.py sharded with FSDP2 (`fully_shard` per transformer block), on CPU.

    shoal-run -n 2 .venv/bin/python examples/fsdp_train.py --backend shoal
    .venv/bin/torchrun --standalone --nproc_per_node 4 examples/fsdp_train.py --replicate 2
    .venv/bin/python examples/fsdp_train.py --nproc 2 --backend gloo      # starts its own ranks
    .venv/bin/python examples/fsdp_train.py --reference 2                 # one process, no FSDP

Each block, and then the whole model, is a `fully_shard` unit: parameters are all_gathered
before a unit's forward and backward and freed after, gradients reduce_scattered (an AVG) after
its backward. The next block's all_gather is issued while the current one computes (explicit
forward and backward prefetch). `--replicate R` makes it HSDP: a 2-D mesh (R, world / R) that
shards inside each group of world / R ranks and all_reduces the gradient shards across groups.
`--mixed bf16` computes in bfloat16 with fp32 gradient reduction.

Rank r trains on batch(seed, r, step): windows of Debian's fortunes (bytes as tokens) by default;
`--reference N` trains the same model in one process on the N ranks' batches at once (their mean
loss: what data parallelism computes), so the losses of a sharded run can be checked step by
step against it. Rank 0 prints "step N loss X" and, with --json, one JSON line with every loss,
the median step time, tokens/s and the time a step waited on communication (every Work.wait()
of the training thread: the communication prefetching left exposed).
Ranks come from torchrun's variables (torchrun, shoal-run), srun's or mpirun's.
Needs PYTHONPATH=<build>/python for --backend shoal (docs/torch.md).
"""

import argparse
import functools
import inspect
import json
import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gpt import FORTUNES, add_common_args, batch, launch, make_model, parse_args


def make_optimizer(args, params):
    if args.optim == "sgd":  # gradient scale shows in the update (a summed gradient would too)
        return torch.optim.SGD(params, lr=args.lr)
    return torch.optim.AdamW(params, lr=args.lr)


def shard(args, model, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if args.replicate > 1:
        if world % args.replicate:
            sys.exit(f"fsdp_train.py: --replicate {args.replicate} does not divide {world} ranks")
        mesh = init_device_mesh("cpu", (args.replicate, world // args.replicate),
                                mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("shard",))
    policy = MixedPrecisionPolicy()
    if args.mixed == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    blocks = list(model.blocks)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    # Issue the next unit's all_gather before the current one computes.
    for current, following in zip(blocks, blocks[1:]):
        current.set_modules_to_forward_prefetch([following])
    for current, previous in zip(blocks[1:], blocks):
        current.set_modules_to_backward_prefetch([previous])
    if args.async_unshard:
        # On CPU there are no streams to overlap on: FSDP2 all_gathers with async_op=False unless
        # told otherwise, and every prefetch would block the thread that computes.
        for module in blocks + [model]:
            module._set_unshard_async_op(True)
    return model


class CommWait:
    """Seconds the training thread spends blocked on communication: every Work.wait() it makes
    (an async collective's, and the one each blocking collective makes inside torch.distributed),
    whatever the backend. What a step spends here is its exposed communication: the part that
    prefetching did not hide behind compute.

    With `trace`, it also records each collective the thread issues while `recording`: its kind,
    nccl-tests size, group and when it was issued and waited for (seconds from `origin`), which
    bench/fsdp_sim.py replays at other scales through shoal-sim."""

    COLLECTIVES = {"all_gather_single": ("all_gather", "output_tensor"),
                   "all_gather_into_tensor": ("all_gather", "output_tensor"),
                   "reduce_scatter_single": ("reduce_scatter", "input"),
                   "reduce_scatter_tensor": ("reduce_scatter", "input"),
                   "all_reduce": ("all_reduce", "tensor")}

    def __init__(self, trace=False):
        self.seconds = 0.0
        self.thread = threading.get_ident()
        self.recording, self.events, self.origin, self.issuing = False, [], 0.0, None
        self.work_event = {}
        work = dist.distributed_c10d.Work
        original = work.wait

        def timed_wait(work_self, *a, **kw):
            if threading.get_ident() != self.thread:
                return original(work_self, *a, **kw)
            start = time.perf_counter()
            try:
                return original(work_self, *a, **kw)
            finally:
                end = time.perf_counter()
                self.seconds += end - start
                event = self.issuing if self.issuing is not None else self.work_event.pop(id(work_self), None)
                if event is not None:
                    event.setdefault("wait", [start - self.origin, end - self.origin])

        work.wait = timed_wait
        if trace:
            for name, (kind, sized) in self.COLLECTIVES.items():
                setattr(dist, name, self._traced(getattr(dist, name), kind, sized))

    def _traced(self, fn, kind, sized):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def traced(*a, **kw):
            if not self.recording or threading.get_ident() != self.thread:
                return fn(*a, **kw)
            bound = signature.bind(*a, **kw)
            tensor, group = bound.arguments[sized], bound.arguments.get("group")
            ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
            event = {"op": kind, "bytes": tensor.numel() * tensor.element_size(), "ranks": ranks,
                     "async": bool(bound.arguments.get("async_op", False))}
            self.events.append(event)
            start = time.perf_counter()
            self.issuing = None if event["async"] else event
            try:
                work = fn(*a, **kw)
            finally:
                self.issuing = None
                event["issue"] = [start - self.origin, time.perf_counter() - self.origin]
            if work is not None:
                self.work_event[id(work)] = event
            return work

        return traced

    def start_step(self, record):
        self.seconds = 0.0
        self.recording, self.events, self.work_event = record, [], {}
        self.origin = time.perf_counter()


def train_step(args, model, opt, x, y):
    """One optimizer step; returns the loss and the step's seconds."""
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x).reshape(-1, args.vocab).float(), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.detach(), time.perf_counter() - start


def train(args):
    rank, world = dist.get_rank(), dist.get_world_size()
    model = shard(args, make_model(args), world)
    opt = make_optimizer(args, model.parameters())
    losses, times, waits, traces = [], [], [], []
    comm = CommWait(trace=bool(args.trace))
    for step in range(args.steps):
        x, y = batch(args, rank, step)
        comm.start_step(record=bool(args.trace) and step >= args.warmup)
        loss, seconds = train_step(args, model, opt, x, y)
        times.append(seconds)
        waits.append(comm.seconds)
        if comm.recording:
            traces.append({"step": step, "step_s": seconds, "events": comm.events})
            comm.recording = False
        mean = loss.clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # the data-parallel loss, as the reference's
        losses.append(mean.item())
        if rank == 0 and not args.quiet:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    # Every rank's median wait, so the report can show the mean and the worst rank's.
    warm = waits[args.warmup:] or waits
    per_rank = torch.tensor([statistics.median(warm)], dtype=torch.float64)
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, per_rank)
    if args.trace and rank == 0:
        with open(args.trace, "w") as f:
            json.dump({"world": world, "local_world": int(os.environ.get("LOCAL_WORLD_SIZE", world)),
                       "backend": args.backend, "replicate": args.replicate,
                       "params": sum(p.numel() for p in model.parameters()), "steps": traces}, f)
    return report(args, world, losses, times, model, waits=[g.item() for g in gathered])


def reference(args):
    """One process, the same model unsharded, the batches of `args.reference` ranks at once."""
    torch.set_num_threads(args.threads)
    model = make_model(args)
    if args.mixed == "bf16":
        sys.exit("fsdp_train.py: --reference computes in fp32 only")
    opt = make_optimizer(args, model.parameters())
    losses, times = [], []
    for step in range(args.steps):
        parts = [batch(args, r, step) for r in range(args.reference)]
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        loss, seconds = train_step(args, model, opt, x, y)
        times.append(seconds)
        losses.append(loss.item())
        if not args.quiet:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return report(args, 1, losses, times, model, rank=0)


def report(args, world, losses, times, model, rank=None, waits=None):
    """Rank 0's JSON line: losses, the median step after --warmup, global tokens/s, and the
    median time a step waited on communication (mean over ranks and the worst rank's)."""
    rank = dist.get_rank() if rank is None else rank
    warm = times[args.warmup:] or times
    step_ms = 1000 * statistics.median(warm)
    ranks = world if not args.reference else args.reference
    result = {"backend": "none" if args.reference else args.backend, "world": world,
              "replicate": args.replicate, "mixed": args.mixed, "losses": losses,
              "step_ms": step_ms, "step_ms_all": [1000 * t for t in times],
              "tokens_per_s": ranks * args.batch * args.seq / (step_ms / 1000),
              "params": sum(p.numel() for p in model.parameters()),
              "dim": args.dim, "layers": args.layers, "batch": args.batch, "seq": args.seq}
    if waits is not None:
        result["comm_wait_ms"] = 1000 * statistics.mean(waits)
        result["comm_wait_ms_max"] = 1000 * max(waits)
    if rank == 0 and args.json:
        print("JSON " + json.dumps(result), flush=True)
    return result


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # The default model: 3.3 M parameters, at which communication is more than half of an FSDP2
    # step over gloo on 4 emulated hosts x 2 ranks with 1 Gbit/s NICs (docs/training.md).
    add_common_args(p, layers=4, corpus=FORTUNES, dim=256, batch=8, seq=32)
    p.add_argument("--optim", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--replicate", type=int, default=1, help="HSDP: replica groups (2-D mesh)")
    p.add_argument("--mixed", default="none", choices=["none", "bf16"], help="compute dtype")
    p.add_argument("--reference", type=int, default=0, metavar="N",
                   help="no distribution: one process on the batches of N ranks")
    p.add_argument("--async-unshard", action=argparse.BooleanOptionalAction, default=True,
                   help="issue the all_gathers (prefetches included) asynchronously, so that they "
                        "run while the thread computes (FSDP2 on CPU blocks on each otherwise)")
    p.add_argument("--trace", metavar="FILE",
                   help="rank 0 writes every step after --warmup as a trace of its collectives "
                        "(kind, size, group, issue and wait times) for bench/fsdp_sim.py")
    return p


def main():
    args = parse_args(parser())
    if args.reference:
        reference(args)
        return 0
    return launch(train, args, "fsdp_train.py")


if __name__ == "__main__":
    sys.exit(main())
