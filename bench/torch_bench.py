#!/usr/bin/env python3
"""torch.distributed: "shoal" against "gloo", measured in the same run, interleaved.

    PYTHONPATH=build/python .venv/bin/python bench/torch_bench.py            # everything
    PYTHONPATH=build/python .venv/bin/python bench/torch_bench.py --train     # collectives only
    PYTHONPATH=build/python .venv/bin/python bench/torch_bench.py --no-collectives --train fsdp
    PYTHONPATH=build/python .venv/bin/python bench/torch_bench.py --device cuda --train   # on a GPU node

1. Collectives, --ranks ranks (default 2; one job, both backends: the world group is gloo, a new_group is shoal):
   all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single, gather,
   scatter and send/recv between pairs (the same call on both; --collectives picks some),
   float32, 1 KiB .. 64 MiB. For every size the two backends alternate
   for --rounds rounds; the median time per call (the slowest rank's) gives the bus bandwidth
   the way nccl-tests computes it: busbw = algbw * 2(p-1)/p for all_reduce, * 1 for broadcast and
   send/recv, * (p-1)/p for the others, where the size is the whole buffer (all_gather's output,
   reduce_scatter's input, all the parts of a gather or scatter). --csv writes bench/plot.py's CSV.
2. Training step time of examples/ddp_train.py (DDP) and examples/fsdp_train.py (FSDP2) at 2 and
   4 ranks with each backend, runs alternating, and whether their losses agree.

Prints markdown tables with shoal/gloo ratios. Ranks are started with <build>/bin/shoal-run.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

import doc_block  # bench/, beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]
KiB, MiB = 1 << 10, 1 << 20
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "gather", "scatter",
               "send_recv"]


# The training steps timed: the example and its model flags (FSDP2: a GPT large enough that
# its per-block all_gathers and reduce_scatters carry a few MiB).
TRAINING = {
    "ddp": ("ddp_train.py", []),
    "fsdp": ("fsdp_train.py", ["--dim", "192", "--layers", "4"]),
}


def build_dir():
    if os.environ.get("SHOAL_BUILD_DIR"):
        return pathlib.Path(os.environ["SHOAL_BUILD_DIR"])
    import shoal  # <build>/python/shoal/__init__.py

    return pathlib.Path(shoal.__file__).resolve().parents[2]


def human(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


# ------------------------------------------------------------------------------------------
# worker: runs on every rank under shoal-run


def worker(args):
    import torch
    import torch.distributed as dist

    import shoal.torch  # noqa: F401

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*private function.*")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": dist.group.WORLD, "shoal": dist.new_group(backend="shoal")}

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # gloo world group: not part of the timing
        return t.item()

    cuda = args.device == "cuda"
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) % torch.cuda.device_count()}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    def measure(fn, group, iters):
        fn(group)  # warm-up
        dist.barrier(group=group)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            fn(group)
        if cuda:
            torch.cuda.synchronize()  # the calls queue work on the device: time it done
        return slowest((time.perf_counter() - start) / iters)

    results = []
    sizes = [s for s in args.sizes if s <= args.max_bytes]
    for size in sizes:
        n = size // 4
        full = torch.zeros(n, device=device)
        other = torch.zeros(n, device=device)
        part = torch.zeros(n // world, device=device)
        parts = [torch.zeros(n // world, device=device) for _ in range(world)] if rank == 0 else None
        peer = rank + 1 if rank % 2 == 0 else rank - 1  # send_recv: pairs (0, 1), (2, 3), ...

        def send_recv(g):
            if peer >= world:
                return  # an odd world's last rank sits out
            (dist.send if rank % 2 == 0 else dist.recv)(full, peer, group=g)

        # The same torch call on both backends (torch 2.x's gloo has both tensor forms); the size
        # is the whole buffer (all_gather's output, reduce_scatter's input, every rank's part of a
        # gather or scatter), busbw as nccl-tests computes it (send_recv: the bytes one way).
        collectives = {
            "all_reduce": (lambda g: dist.all_reduce(full, group=g), 2 * (world - 1) / world),
            "all_gather": (lambda g: dist.all_gather_into_tensor(full, part, group=g), (world - 1) / world),
            "reduce_scatter": (lambda g: dist.reduce_scatter_tensor(part, full, group=g), (world - 1) / world),
            "broadcast": (lambda g: dist.broadcast(full, src=0, group=g), 1.0),
            "all_to_all": (lambda g: dist.all_to_all_single(other, full, group=g), (world - 1) / world),
            "gather": (lambda g: dist.gather(part, parts, dst=0, group=g), (world - 1) / world),
            "scatter": (lambda g: dist.scatter(part, parts, src=0, group=g), (world - 1) / world),
            "send_recv": (send_recv, 1.0),
        }
        colls = {k: v for k, v in collectives.items() if k in args.collectives}
        iters = max(2, min(args.max_iters, int(args.target_bytes // size)))
        for name, (fn, factor) in colls.items():
            times = {"gloo": [], "shoal": []}
            for r in range(args.rounds):
                order = ["gloo", "shoal"] if r % 2 == 0 else ["shoal", "gloo"]
                for backend in order:
                    times[backend].append(measure(fn, groups[backend], iters))
            row = {"collective": name, "bytes": size, "iters": iters}
            for backend, ts in times.items():
                t = statistics.median(ts)
                row[backend] = {"us": t * 1e6, "busbw": size / t * factor / 1e9}
            results.append(row)
            if rank == 0 and not args.quiet:
                print(f"# {name:15s} {human(size):>7s}  gloo {row['gloo']['busbw']:7.3f} GB/s  "
                      f"shoal {row['shoal']['busbw']:7.3f} GB/s", file=sys.stderr, flush=True)
    if rank == 0:
        print("JSON " + json.dumps({"world": world, "collectives": results}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# driver


def run(cmd, env, timeout):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"torch_bench: {' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    sys.stderr.write(proc.stderr if "--quiet" not in cmd else "")
    line = next(l for l in proc.stdout.splitlines() if l.startswith("JSON "))
    return json.loads(line[5:])


def check_doc(spec):
    """FILE#ID of --doc: FILE must hold the pair of marker lines, once each."""
    path, _, name = spec.partition("#")
    doc_block.check(path, "torch_bench.py", name)
    return path, name


def write_doc(path, name, tables):
    doc_block.replace(path, "torch_bench.py", name,
                      tables.replace("\n### ", "\n#### ").replace("### ", "#### ", 1))
    print(f"torch_bench.py: rewrote {name} in {path}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=2, help="ranks of the collective measurements")
    p.add_argument("--max-bytes", type=int, default=64 * MiB)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per size (median)")
    p.add_argument("--target-bytes", type=float, default=256 * MiB, help="bytes moved per measurement")
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the collectives' tensors live (cuda: staged through pinned host buffers by "
                        "shoal, by gloo its own way; a GPU per rank, or one shared)")
    p.add_argument("--collectives", nargs="+", default=COLLECTIVES, choices=COLLECTIVES,
                   help="which to time (default: all)")
    p.add_argument("--csv", help="also write the collectives' figures as bench/plot.py's CSV "
                                 "(library shoal and torch-gloo), for plots")
    p.add_argument("--no-collectives", action="store_true")
    p.add_argument("--train", nargs="*", default=["ddp", "fsdp"], choices=sorted(TRAINING),
                   help="training steps to time (none: collectives only)")
    p.add_argument("--train-ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--train-steps", type=int, default=12)
    p.add_argument("--train-repeats", type=int, default=2, help="runs per backend and world size (alternating)")
    p.add_argument("--json", help="also write the raw results to this file")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--doc", metavar="FILE#ID",
                   help="also write the tables between '<!-- torch_bench.py:ID -->' and "
                        "'<!-- /torch_bench.py:ID -->' in FILE (a re-run rewrites them)")
    args = p.parse_args()
    args.sizes = [KiB << (2 * i) for i in range(9)]  # 1 KiB, 4 KiB, ... 64 MiB
    if args.worker:
        return worker(args)
    if args.doc:  # checked before the run, which takes minutes
        doc_path, doc_id = check_doc(args.doc)
    tables = []

    def emit(line=""):
        print(line)
        tables.append(line)

    build = build_dir()
    shoal_run = build / "bin" / "shoal-run"
    env = dict(os.environ, OMP_NUM_THREADS="1", SHOAL_BUILD_DIR=str(build))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(build / "python"), env.get("PYTHONPATH")]))
    py = sys.executable
    out = {}

    if not args.no_collectives:
        cmd = [str(shoal_run), "-n", str(args.ranks), py, __file__, "--worker", "--max-bytes", str(args.max_bytes),
               "--rounds", str(args.rounds), "--target-bytes", str(args.target_bytes), "--max-iters", str(args.max_iters),
               "--device", args.device, "--collectives", *args.collectives]
        if args.quiet:
            cmd.append("--quiet")
        coll = run(cmd, env, timeout=1800)
        out["collectives"] = coll
        emit(f"\n### torch.distributed collectives, {coll['world']} ranks, float32 on {args.device} "
              f"(bus bandwidth GB/s, median of {args.rounds} interleaved rounds)\n")
        emit("| collective | size | gloo busbw | shoal busbw | shoal / gloo | gloo µs | shoal µs |")
        emit("|---|---:|---:|---:|---:|---:|---:|")
        for row in coll["collectives"]:
            g, s = row["gloo"], row["shoal"]
            emit(f"| {row['collective']} | {human(row['bytes'])} | {g['busbw']:.3f} | {s['busbw']:.3f} | "
                  f"{s['busbw'] / g['busbw']:.2f}x | {g['us']:.0f} | {s['us']:.0f} |")
        if args.csv:
            with open(args.csv, "w") as f:
                f.write("scenario,collective,ranks,library,bytes,time_us,busbw_gbs\n")
                for row in coll["collectives"]:
                    for backend, library in (("shoal", "shoal"), ("gloo", "torch-gloo")):
                        f.write(f"torch-{args.device},{row['collective']},{coll['world']},{library},"
                                f"{row['bytes']},{row[backend]['us']:.3f},{row[backend]['busbw']:.6f}\n")

    for example in args.train:
        script, extra = TRAINING[example]
        runs = {}
        for world in args.train_ranks:
            for rep in range(args.train_repeats):
                order = ["gloo", "shoal"] if rep % 2 == 0 else ["shoal", "gloo"]
                for backend in order:
                    r = run([str(shoal_run), "-n", str(world), py, str(REPO / "examples" / script),
                             "--backend", backend, "--steps", str(args.train_steps), "--json", "--quiet",
                             *extra], env, timeout=900)
                    runs.setdefault((world, backend), []).append(r)
        out[example] = {f"{w}/{b}": v for (w, b), v in runs.items()}
        params = next(iter(runs.values()))[0]["params"]
        emit(f"\n### {example.upper()} step time, examples/{script} {' '.join(extra)} ({params} parameters, "
              f"{args.train_steps} steps, median step after warm-up; best of {args.train_repeats} alternating runs)\n")
        emit("| ranks | gloo ms/step | shoal ms/step | gloo / shoal | losses equal |")
        emit("|---:|---:|---:|---:|---|")
        for world in args.train_ranks:
            g = min(r["step_ms"] for r in runs[(world, "gloo")])
            s = min(r["step_ms"] for r in runs[(world, "shoal")])
            lg, ls = runs[(world, "gloo")][0]["losses"], runs[(world, "shoal")][0]["losses"]
            worst = max(abs(a - b) / abs(b) for a, b in zip(ls, lg))
            emit(f"| {world} | {g:.1f} | {s:.1f} | {g / s:.2f}x | max rel. diff {worst:.1e} |")
    if args.doc:
        write_doc(doc_path, doc_id, "\n".join(tables).strip("\n"))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
