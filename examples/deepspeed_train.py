#!/usr/bin/env python3
"""Trains the GPT of gpt.py with DeepSpeed ZeRO-3 on CPU, its collectives over shoal or gloo.

    shoal-run -n 2 .venv/bin/python examples/deepspeed_train.py --backend shoal
    .venv/bin/torchrun --standalone --nproc_per_node 2 examples/deepspeed_train.py --backend gloo

`deepspeed.init_distributed(dist_backend="shoal")` makes DeepSpeed's communication
(deepspeed.comm) run on torch.distributed with the shoal backend; ZeRO stage 3 partitions the
parameters, gradients and AdamW state over the ranks and all_gathers each module's parameters
before it runs. DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu, set here) needs no GPU; it
compiles a small shared-memory op of its own (for inference all_reduce, unused here) on first
use. Rank r trains on batch(seed, r, step), as fsdp_train.py's ranks do; rank 0 prints every
step's loss (the mean over ranks) and, with --json, one JSON line.
Needs PYTHONPATH=<build>/python for --backend shoal (docs/torch.md) and deepspeed
(python/requirements.txt).
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gpt import FORTUNES, add_common_args, batch, from_other_launcher, make_model, parse_args


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, layers=4, corpus=FORTUNES, dim=128, batch=8, seq=32)
    p.add_argument("--stage", type=int, default=3, choices=[1, 2, 3], help="ZeRO stage")
    p.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # deepspeed's launcher
    args = parse_args(p)
    from_other_launcher()
    if "RANK" not in os.environ:
        sys.exit("deepspeed_train.py: run under torchrun, shoal-run, srun or mpirun")
    if args.backend == "shoal":
        import shoal.torch  # noqa: F401  registers the backend
    import deepspeed

    torch.set_num_threads(args.threads)
    deepspeed.init_distributed(dist_backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model(args)
    config = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "torch_adam": True}},
              "zero_optimization": {"stage": args.stage}, "steps_per_print": 1 << 30}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    losses, times = [], []
    for step in range(args.steps):
        x, y = batch(args, rank, step)
        start = time.perf_counter()
        loss = F.cross_entropy(engine(x).reshape(-1, args.vocab), y.reshape(-1))
        engine.backward(loss)
        engine.step()
        times.append(time.perf_counter() - start)
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
        if rank == 0 and not args.quiet:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    if rank == 0 and args.json:
        warm = times[args.warmup:] or times
        print("JSON " + json.dumps({"backend": dist.get_backend(), "world": world, "stage": args.stage,
                                    "losses": losses, "step_ms": 1000 * statistics.median(warm)}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
