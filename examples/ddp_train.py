#!/usr/bin/env python3
"""Trains a small GPT-style transformer on synthetic data with DistributedDataParallel (CPU).

    shoal-run -n 2 .venv/bin/python examples/ddp_train.py --backend shoal
    .venv/bin/torchrun --standalone --nproc_per_node 2 examples/ddp_train.py --backend gloo
    .venv/bin/python examples/ddp_train.py --nproc 2 --backend shoal     # starts its own ranks

Every rank draws its own batches from a generator seeded with (seed, rank, step), so a run is
reproducible and the losses of two backends can be compared step by step. Rank 0 prints
"step N loss X" and, with --json, one JSON line with every loss, the median step time, the
wall-clock time at the end of each step (times_s) and what the host's interfaces sent
(bytes_sent; examples/gpt.py's host_tx_bytes).
Needs PYTHONPATH=<build>/python for --backend shoal (docs/torch.md).
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from gpt import add_common_args, batch, host_tx_bytes, launch, make_model, parse_args


def register_hook(ddp, hook):
    """DDP's communication hooks: gradients compressed to fp16/bf16 for the all_reduce, or
    PowerSGD's rank-1 approximation (vanilla all_reduce for the first 2 steps; fixed seed)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=2, min_compression_rate=0.5, random_seed=0)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def train(args):
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model(args)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    register_hook(ddp, args.hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    losses, times, ends = [], [], []
    dist.barrier()
    tx0, begin = host_tx_bytes(), time.perf_counter()
    for step in range(args.steps):
        x, y = batch(args, rank, step)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        ends.append(time.perf_counter() - begin)
        losses.append(loss.item())
        if rank == 0 and not args.quiet:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    wall, tx1 = time.perf_counter() - begin, host_tx_bytes()
    warm = times[args.warmup:] or times
    result = {"backend": args.backend, "hook": args.hook, "world": world, "losses": losses,
              "step_ms": 1000 * statistics.median(warm), "params": sum(p.numel() for p in model.parameters()),
              "times_s": ends, "wall_s": wall, "bytes_sent": None if tx0 is None or tx1 is None else tx1 - tx0}
    if rank == 0 and args.json:
        print("JSON " + json.dumps(result), flush=True)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, layers=2)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--hook", default="none", choices=["none", "fp16", "bf16", "powersgd"],
                   help="DDP communication hook")
    args = parse_args(p)
    return launch(train, args, "ddp_train.py")


if __name__ == "__main__":
    sys.exit(main())
