#!/usr/bin/env python3
"""Trains the GPT of gpt.py pipeline-parallel with torch.distributed.pipelining, on CPU: rank r
holds stage r of as many stages as ranks (stage 0 the embeddings and the first blocks, the last
stage the last blocks, the final norm and the head); activations go forward and gradients back
over send/recv, micro-batch by micro-batch, on the GPipe or 1F1B schedule.

    shoal-run -n 2 .venv/bin/python examples/pipeline_train.py --schedule 1F1B
    .venv/bin/torchrun --standalone --nproc_per_node 4 examples/pipeline_train.py --layers 4
    .venv/bin/python examples/pipeline_train.py --reference      # one process, no pipeline

Every step trains on batch(seed, 0, step) (--batch sequences, cut into --microbatches); the
last stage prints "step N loss X" (the mean over micro-batches: the whole batch's loss) and,
with --json, one JSON line. `--reference` trains the unsplit model on the same batches, so the
losses can be compared step by step. Needs PYTHONPATH=<build>/python for --backend shoal.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from gpt import FORTUNES, add_common_args, batch, launch, make_model, parse_args


class Stage(nn.Module):
    """Blocks [first, last) of a GPT, with its embeddings (first stage) or its head (last)."""

    def __init__(self, gpt, first, last, is_first, is_last):
        super().__init__()
        self.tok = gpt.tok if is_first else None
        self.pos = gpt.pos if is_first else None
        self.blocks = nn.Sequential(*gpt.blocks[first:last])
        self.ln = gpt.ln if is_last else None
        self.head = gpt.head if is_last else None

    def forward(self, x):
        if self.tok is not None:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        x = self.blocks(x)
        if self.head is not None:
            x = self.head(self.ln(x))
        return x


def stage_of(args, model, stage, stages):
    if args.layers < stages:
        sys.exit(f"pipeline_train.py: {args.layers} blocks cannot fill {stages} stages (--layers)")
    base, extra = divmod(args.layers, stages)
    first = stage * base + min(stage, extra)
    last = first + base + (stage < extra)
    return Stage(model, first, last, stage == 0, stage == stages - 1)


def loss_fn(args):
    return lambda logits, y: F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))


def train(args):
    from torch.distributed import pipelining

    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % args.microbatches:
        sys.exit(f"pipeline_train.py: --batch {args.batch} is not a multiple of --microbatches")
    module = stage_of(args, make_model(args), rank, world)
    stage = pipelining.PipelineStage(module, rank, world, torch.device("cpu"))
    schedule = getattr(pipelining, "Schedule" + args.schedule)(
        stage, n_microbatches=args.microbatches, loss_fn=loss_fn(args))
    opt = torch.optim.AdamW(module.parameters(), lr=args.lr)
    losses, times = [], []
    for step in range(args.steps):
        x, y = batch(args, 0, step)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        micro = []
        if rank == 0:
            schedule.step(x, target=y if world == 1 else None, losses=micro)
        elif rank == world - 1:
            schedule.step(target=y, losses=micro)
        else:
            schedule.step()
        opt.step()
        times.append(time.perf_counter() - start)
        if rank == world - 1:
            losses.append(torch.stack(micro).mean().item())
            if not args.quiet:
                print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    if rank == world - 1 and args.json:
        report(args, world, losses, times)


def reference(args):
    torch.set_num_threads(args.threads)
    model = make_model(args)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses, times = [], []
    for step in range(args.steps):
        x, y = batch(args, 0, step)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(args)(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        if not args.quiet:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    if args.json:
        report(args, 1, losses, times)


def report(args, world, losses, times):
    warm = times[args.warmup:] or times
    print("JSON " + json.dumps({"backend": "none" if args.reference else args.backend, "stages": world,
                                "schedule": args.schedule, "losses": losses,
                                "step_ms": 1000 * statistics.median(warm)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, layers=4, corpus=FORTUNES, dim=64, batch=8, seq=32)
    p.add_argument("--schedule", default="1F1B", choices=["GPipe", "1F1B"])
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--reference", action="store_true", help="no pipeline: the unsplit model here")
    args = parse_args(p)
    if args.reference:
        reference(args)
        return 0
    return launch(train, args, "pipeline_train.py")


if __name__ == "__main__":
    sys.exit(main())
