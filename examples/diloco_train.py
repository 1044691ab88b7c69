#!/usr/bin/env python3
"""Trains the GPT of gpt.py with DiLoCo (shoal.torch.diloco): every worker runs --inner-steps
AdamW steps on its own batches, then the workers average their pseudo-gradients and take an
outer Nesterov step (docs/diloco.md).

    .venv/bin/torchrun --standalone --nproc_per_node 4 examples/diloco_train.py --inner-steps 20
    .venv/bin/python examples/diloco_train.py --nproc 4 --inner-steps 20 --fragments 2 --delayed --codec int8
    .venv/bin/python examples/diloco_train.py --nproc 4 --replicas-per-host 2    # 2 workers of 2 ranks

Elastic (--elastic, over shoal): --die-at S kills the last worker (SIGKILL) as step S begins, and
the others shrink and go on; --admit-at S makes the workers admit --joiners new ones before step
S, each started apart with --join (the same flags, and torchrun's MASTER_ADDR and MASTER_PORT:
it joins the job's store), which receive the shared state and train from there to --steps.

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


JOIN_NAME = "diloco-join"


def options_of(args, aligned=None, local=None):
    return dict(inner_steps=args.inner_steps, outer_lr=args.outer_lr, outer_momentum=args.outer_momentum,
                codec=args.codec, fragments=args.fragments, delayed=args.delayed, group=aligned,
                local_group=local, elastic=args.elastic)


def job_store():
    """torchrun's store, as its workers' init_process_group holds it (the agent's TCPStore under
    the prefix of the first attempt)."""
    tcp = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                        timeout=__import__("datetime").timedelta(minutes=5))
    return dist.PrefixStore("/worker/attempt_0", tcp)


def train(args):
    from shoal.torch.diloco import DiLoCo

    if args.join:  # a newcomer: the shared state first, then the steps that are left
        model = make_model(args)
        inner = torch.optim.AdamW(model.parameters(), lr=args.lr)
        diloco = DiLoCo.join(model, job_store(), JOIN_NAME, **{k: v for k, v in options_of(args).items()
                                                               if k not in ("group", "elastic")})
        return loop(args, model, model, inner, diloco, first=diloco.step_count)
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
    diloco = DiLoCo(model, **options_of(args, aligned, local))
    dist.barrier()
    return loop(args, model, forward, inner, diloco, first=0)


def loop(args, model, forward, inner, diloco, first):
    tx0, start = host_tx_bytes(), time.perf_counter()
    losses, times, compute, members = [], [], 0.0, [[first, diloco.world]]
    last = diloco.world - 1  # --die-at: the last worker of the start
    for step in range(first, args.steps):
        if step == args.die_at and diloco.rank == last and not args.join:
            os.kill(os.getpid(), 9)
        if step == args.admit_at and not args.join:
            diloco.admit(args.joiners, JOIN_NAME)
        if diloco.world != members[-1][1]:
            members.append([step, diloco.world])
        rank = diloco.rank
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
        if diloco.rank == 0 and not args.quiet:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    diloco.finish()
    if diloco.world != members[-1][1]:
        members.append([args.steps, diloco.world])
    wall = time.perf_counter() - start
    tx1 = host_tx_bytes()
    result = {"method": "diloco", "backend": args.backend, "world": diloco.world, "inner_steps": args.inner_steps,
              "fragments": args.fragments, "delayed": args.delayed, "codec": args.codec,
              "replicas_per_host": args.replicas_per_host, "losses": losses,
              "times_s": times, "params": sum(p.numel() for p in model.parameters()), "wall_s": wall,
              "bytes_sent": None if tx0 is None or tx1 is None else tx1 - tx0,
              "bytes_averaged": diloco.bytes_sent, "compute_s": compute, "compute_utilisation": compute / wall,
              "outer_steps": diloco.outer_steps,
              "members": members, "state_hash": diloco.state_hash(), "joined": bool(args.join)}
    if (diloco.rank == 0 or args.join) and args.json:
        print("JSON " + json.dumps(result), flush=True)
    if args.elastic and not args.nproc:
        # The world group lost or gained members: the shrunk or grown one ends the job, and
        # nothing is torn down through the world (its dead member would fail it).
        dist.barrier(group=diloco.group)
        sys.stdout.flush()
        os._exit(0)
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
    p.add_argument("--elastic", action="store_true", help="workers may die and join (shoal backend)")
    p.add_argument("--die-at", type=int, default=-1, help="--elastic: the last worker dies as this step begins")
    p.add_argument("--admit-at", type=int, default=-1, help="--elastic: admit --joiners before this step")
    p.add_argument("--joiners", type=int, default=1)
    p.add_argument("--join", action="store_true",
                   help="a newcomer: join the job of MASTER_ADDR:MASTER_PORT (torchrun's store) and train")
    args = parse_args(p)
    if (args.die_at >= 0 or args.admit_at >= 0 or args.join) and not args.elastic:
        p.error("--die-at, --admit-at and --join need --elastic")
    if args.join:
        train(args)
        return 0
    return launch(train, args, "diloco_train.py")


if __name__ == "__main__":
    sys.exit(main())
