#!/usr/bin/env python3
"""Trains the GPT of gpt.py with DiLoCo (shoal.torch.diloco): every worker runs --inner-steps
AdamW steps on its own batches, then the workers average their pseudo-gradients and take an
outer Nesterov step (docs/diloco.md).

    .venv/bin/torchrun --standalone --nproc_per_node 4 examples/diloco_train.py --inner-steps 20
    .venv/bin/python examples/diloco_train.py --nproc 4 --inner-steps 20 --fragments 2 --delayed --codec int8
    .venv/bin/python examples/diloco_train.py --nproc 4 --replicas-per-host 2    # 2 workers of 2 ranks

Rank 0 prints "step N loss X" (its own worker's training loss) and, with --json, one line
`JSON {...}`: losses (one per inner step), times_s (wall-clock seconds at the end of each inner
step), params, wall_s, bytes_sent (what this host's network interfaces sent during training,
read from the kernel's counters: a worker per emulated host, scripts/netcluster.sh; null on a
host without interfaces other than loopback), bytes_averaged (what the averaging sent by its own
count), compute_s (time in inner steps), compute_utilisation (compute_s / wall_s) and
outer_steps. Needs PYTHONPATH=<build>/python for --backend shoal (docs/torch.md).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from gpt import FORTUNES, add_common_args, batch, host_tx_bytes, launch, make_model, parse_args


def train(args):
    from shoal.torch.diloco import DiLoCo

    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model(args)  # the same initial weights on every worker
    forward, local, aligned = model, None, None
    if args.replicas_per_host > 1:  # a worker = a DDP group of a host's consecutive ranks
        per_host = args.replicas_per_host
        if world % per_host:
            sys.exit(f"diloco_train.py: --replicas-per-host {per_host} does not divide {world} ranks")
        locals_ = [dist.new_group(list(range(h * per_host, (h + 1) * per_host))) for h in range(world // per_host)]
        aligned_ = [dist.new_group(list(range(i, world, per_host))) for i in range(per_host)]
        local, aligned = locals_[rank // per_host], aligned_[rank % per_host]
        forward = DDP(model, process_group=local)
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr)
    diloco = DiLoCo(model, inner_steps=args.inner_steps, outer_lr=args.outer_lr,
                    outer_momentum=args.outer_momentum, codec=args.codec, fragments=args.fragments,
                    delayed=args.delayed, group=aligned, local_group=local)
    dist.barrier()
    tx0, start = host_tx_bytes(), time.perf_counter()
    losses, times, compute = [], [], 0.0
    for step in range(args.steps):
        x, y = batch(args, rank, step)
        t0 = time.perf_counter()
        inner.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        inner.step()
        compute += time.perf_counter() - t0
        diloco.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
        if rank == 0 and not args.quiet:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    diloco.finish()
    wall = time.perf_counter() - start
    tx1 = host_tx_bytes()
    result = {"method": "diloco", "backend": args.backend, "world": world, "inner_steps": args.inner_steps,
              "fragments": args.fragments, "delayed": args.delayed, "codec": args.codec,
              "replicas_per_host": args.replicas_per_host, "losses": losses,
              "times_s": times, "params": sum(p.numel() for p in model.parameters()), "wall_s": wall,
              "bytes_sent": None if tx0 is None or tx1 is None else tx1 - tx0,
              "bytes_averaged": diloco.bytes_sent, "compute_s": compute, "compute_utilisation": compute / wall,
              "outer_steps": diloco.outer_steps}
    if rank == 0 and args.json:
        print("JSON " + json.dumps(result), flush=True)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, layers=2, corpus=FORTUNES if os.path.isdir(FORTUNES) else "synthetic")
    p.add_argument("--inner-steps", type=int, default=20, help="H: inner steps between outer steps")
    p.add_argument("--fragments", type=int, default=1, help="F: streaming fragments (1: the whole model at once)")
    p.add_argument("--delayed", action="store_true", help="apply each outer step one outer step late, "
                   "its averaging overlapping the next inner steps")
    p.add_argument("--codec", default="none", choices=["none", "bf16", "fp16", "int8", "int4"],
                   help="pseudo-gradient compression (with error feedback)")
    p.add_argument("--replicas-per-host", type=int, default=1,
                   help="ranks a worker is made of: a DDP group on one host; the outer average runs among "
                        "rank-aligned peers across hosts, each rank its share")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    args = parse_args(p)
    return launch(train, args, "diloco_train.py")


if __name__ == "__main__":
    sys.exit(main())
