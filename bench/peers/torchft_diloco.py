#!/usr/bin/env python3
"""The peer of examples/diloco_train.py: torchft's DiLoCo (torchft.local_sgd.DiLoCo, PyPI
torchft) on the same model, data, inner optimizer and H, over gloo, its pseudo-gradients
averaged in buckets (--bucket-mb). Every worker is a replica group of one process with its own
store; a torchft lighthouse (torchft_lighthouse.py, or bench/diloco_cluster.sh) forms the
quorum of every outer step.

    .venv/bin/python bench/peers/torchft_diloco.py --replica 0 --replicas 4 \\
        --lighthouse http://198.18.0.1:29510 --host 198.18.0.1 --inner-steps 40 --steps 800 --json

With --json the worker of replica 0 prints one line `JSON {...}` with the fields of
diloco_train.py's: losses, times_s, wall_s, bytes_sent (the host's interfaces, from the kernel's
counters), compute_s, compute_utilisation, outer_steps.
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from gpt import FORTUNES, add_common_args, batch, host_tx_bytes, make_model, parse_args  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, layers=2, corpus=FORTUNES if os.path.isdir(FORTUNES) else "synthetic")
    p.add_argument("--replica", type=int, required=True, help="this worker's replica group id (its data rank)")
    p.add_argument("--replicas", type=int, required=True, help="replica groups the quorum waits for")
    p.add_argument("--lighthouse", required=True, help="the lighthouse's address, http://HOST:PORT")
    p.add_argument("--host", required=True, help="this host's address, advertised to the other replicas")
    p.add_argument("--inner-steps", type=int, default=40)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--bucket-mb", type=int, default=32,
                   help="torchft's bucketized all_reduce of the pseudo-gradients, buckets of this many MiB "
                        "(0: its default, one all_reduce per parameter tensor, each paying the round trips)")
    args = parse_args(p)
    from torchft.local_sgd import DiLoCo
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    torch.set_num_threads(args.threads)
    model = make_model(args)
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr)
    outer = torch.optim.SGD(model.parameters(), lr=args.outer_lr, momentum=args.outer_momentum, nesterov=True)
    # The replica group's store: this one process.
    store = dist.TCPStore(args.host, 0, is_master=True, wait_for_workers=False)

    def state_dict():
        return {"model": model.state_dict(), "inner": inner.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["inner"])

    timeout = datetime.timedelta(seconds=args.timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=args.replicas,
                      use_async_quorum=False, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"replica{args.replica}", store_addr=args.host, store_port=store.port,
                      rank=0, world_size=1, lighthouse_addr=args.lighthouse, hostname=args.host,
                      timeout=timeout, quorum_timeout=timeout, connect_timeout=timeout)
    losses, times, compute, step_times = [], [], 0.0, []
    try:
        bucketing = {"use_bucketization": True, "bucket_cap_mb": args.bucket_mb} if args.bucket_mb else {}
        with DiLoCo(manager, [model], inner, outer, sync_every=args.inner_steps, **bucketing):
            tx0, start = host_tx_bytes(), time.perf_counter()
            for step in range(args.steps):
                x, y = batch(args, args.replica, step)
                t0 = time.perf_counter()
                inner.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
                loss.backward()
                compute += time.perf_counter() - t0
                t1 = time.perf_counter()
                inner.step()  # DiLoCo's hook: the outer step every sync_every calls
                if (step + 1) % args.inner_steps:
                    step_times.append(time.perf_counter() - t1)
                    compute += step_times[-1]
                elif step_times:  # the optimizer's own share of a step that also synced
                    compute += sorted(step_times)[len(step_times) // 2]
                losses.append(loss.item())
                times.append(time.perf_counter() - start)
                if args.replica == 0 and not args.quiet:
                    print(f"step {step} loss {loss.item():.6f}", flush=True)
            wall, tx1 = time.perf_counter() - start, host_tx_bytes()
        outer_steps = manager.current_step()
    finally:
        manager.shutdown(wait=False)
    result = {"method": "torchft-diloco", "backend": "gloo", "world": args.replicas,
              "inner_steps": args.inner_steps, "losses": losses, "times_s": times,
              "params": sum(q.numel() for q in model.parameters()), "wall_s": wall,
              "bytes_sent": None if tx0 is None or tx1 is None else tx1 - tx0, "compute_s": compute,
              "compute_utilisation": compute / wall, "outer_steps": outer_steps}
    if args.replica == 0 and args.json:
        print("JSON " + json.dumps(result), flush=True)
    os._exit(0)  # torchft's threads (quorum, heartbeats) would hold the process up


if __name__ == "__main__":
    main()
