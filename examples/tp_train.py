#!/usr/bin/env python3
"""Trains the GPT of gpt.py with tensor parallelism on DTensor, on CPU: every block's MLP is
split over the ranks (its first Linear by output columns, ColwiseParallel; its second by input
rows, RowwiseParallel), so that each rank holds 1/world of the MLP weights and an all_reduce
joins the partial sums after each MLP in the forward and another the input gradients in the
backward; the rest of the model is replicated and sees the same data on every rank.

    shoal-run -n 2 .venv/bin/python examples/tp_train.py
    .venv/bin/torchrun --standalone --nproc_per_node 4 examples/tp_train.py --dim 128
    .venv/bin/python examples/tp_train.py --reference     # one process, the unsplit model

Every rank trains on batch(seed, 0, step); rank 0 prints "step N loss X" and, with --json, one
JSON line; `--reference` trains the unsplit model on the same batches. The MLP's hidden width
(4 x --dim) must divide by the ranks. Needs PYTHONPATH=<build>/python for --backend shoal.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gpt import FORTUNES, add_common_args, batch, launch, make_model, parse_args


def run(args, model, rank):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses, times = [], []
    for step in range(args.steps):
        x, y = batch(args, 0, step)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        if rank == 0 and not args.quiet:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    if rank == 0 and args.json:
        warm = times[args.warmup:] or times
        print("JSON " + json.dumps({"backend": "none" if args.reference else args.backend,
                                    "world": 1 if args.reference else dist.get_world_size(),
                                    "losses": losses, "step_ms": 1000 * statistics.median(warm)}), flush=True)


def train(args):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    world = dist.get_world_size()
    if (4 * args.dim) % world:
        sys.exit(f"tp_train.py: the MLP's {4 * args.dim} hidden units do not divide over {world} ranks")
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    model = make_model(args)
    for block in model.blocks:
        parallelize_module(block.mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    run(args, model, dist.get_rank())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, layers=2, corpus=FORTUNES, dim=64, batch=8, seq=32)
    p.add_argument("--reference", action="store_true", help="no parallelism: the unsplit model here")
    args = parse_args(p)
    if args.reference:
        torch.set_num_threads(args.threads)
        run(args, make_model(args), 0)
        return 0
    return launch(train, args, "tp_train.py")


if __name__ == "__main__":
    sys.exit(main())
