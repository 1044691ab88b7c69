#!/usr/bin/env python3
"""Replays a recorded FSDP2 step (examples/fsdp_train.py --trace) through shoal-sim: every
collective of the step, in order, with the compute measured between them, at the recorded scale
(to check the model against the measured steps) and at 64-2,048 ranks (the end-to-end counterpart
of PCCL's table). docs/training.md.

    bench/fsdp_sim.py check TRACE... [--fit | --comm-scale K] [--nics K] [--policy shoal|gloo]
    bench/fsdp_sim.py scale TRACE [--worlds 64,256,1024,2048] [--frontier | --hosts-model emulated]
                                  [--ranks-per-host 8] [--nics 4] [--scale F]

The replay: the training thread's compute between two collective calls is the recorded gap; each
process group runs its calls in issue order, one at a time; an async call (a prefetched
all_gather) runs while the thread computes, a blocking one (FSDP2's reduce_scatter on CPU) stops
it; a wait lasts until its call has finished in virtual time. A call's time is shoal-sim's
prediction on the model for the policy:

  ring   every call on the ring, each local rank on its own NIC (NCCL's and RCCL's rings, rails)
  gloo   every call on the ring, one NIC per host (gloo: GLOO_SOCKET_IFNAME, no striping)
  shoal  the best of every registry row, hierarchical ones included, each pair's stream striped
         over every NIC (what shoal's dispatcher picks where its tuning is right: a lower bound)

`check` predicts the recorded steps on the emulated cluster's fitted model (docs/scale.md: 0.96
Gbit/s and 8.8 us per link, tc's token bucket) and prints each trace's median step, measured and
predicted; it exits 1 when an error exceeds --tolerance (default 15%). That model was fitted to
collectives that ran alone; in a training step they share the cores with the compute, so
`--fit` first fits one factor on every call's time to a set of traces (e.g. 2 hosts), which
`--comm-scale` then applies to others (4 hosts). `scale` keeps each
rank's compute and each unit's bytes (weak scaling: a rank's batch is fixed, the model too;
--scale F multiplies both, a model F times larger) and predicts the step at each world size.
"""

import argparse
import functools
import json
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIM = pathlib.Path(os.environ.get("SHOAL_BUILD_DIR", ROOT / "build")) / "bin" / "shoal-sim"
# docs/scale.md, "On the emulated cluster": the fit of 384 points on scripts/netcluster.sh
# hosts with 1 Gbit/s links.
EMULATED = ["--nic-gbps", "0.96", "--latency-us", "8.8", "--nic-burst-bytes", "250000",
            "--nic-burst-gbps", "24"]


@functools.lru_cache(maxsize=None)
def predict(op, size, p, rph, nics, stripe, model):
    """{row: seconds} of one call on `p` ranks, `rph` per host, by shoal-sim."""
    if p == 1:
        return {"ring": 0.0}
    base = ["--frontier"] if model == "frontier" else list(EMULATED)
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [str(SIM), "run", "-c", op, "-a", "all", "-p", str(p), "-s", str(size),
               *base, "--ranks-per-host", str(min(rph, p)), "--nics", str(nics),
               "--stripe", str(stripe), "--json", out.name]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(out.name))["rows"]
    times = {}
    for r in rows:
        if r.get("error"):
            continue
        times[r["algorithm"]] = r["time_us"] * 1e-6
    if not times:
        sys.exit(f"fsdp_sim.py: shoal-sim predicted nothing for {' '.join(cmd)}")
    return times


def call_time(policy, op, size, p, rph, nics, model):
    if policy == "shoal":
        return min(predict(op, size, p, rph, nics, 1 if nics > 1 else 0, model).values())
    rows = predict(op, size, p, rph, nics if policy == "ring" else 1, 0, model)
    return rows["ring"]


def groups_of(trace):
    """Each event's group as (kind, size): world, host (contiguous ranks of one host) or across
    (one rank per host)."""
    world, local = trace["world"], trace["local_world"]
    def kind(ranks):
        if len(ranks) == world:
            return "world"
        if ranks == list(range(ranks[0], ranks[0] + len(ranks))) and ranks[0] // local == ranks[-1] // local:
            return "host"
        return "across"
    return kind


def replay(step, time_of):
    """Virtual seconds of one recorded step when each event's call takes time_of(event)."""
    actions = []
    for i, e in enumerate(step["events"]):
        if not e["async"]:
            actions.append((e["issue"][0], e["issue"][1], "sync", i))
        else:
            actions.append((e["issue"][0], e["issue"][1], "issue", i))
            w = e.get("wait", [step["step_s"], step["step_s"]])
            actions.append((w[0], w[1], "wait", i))
    actions.sort(key=lambda a: (a[0], a[2] != "issue"))
    t, prev, channel, finish = 0.0, 0.0, {}, {}
    for start, end, what, i in actions:
        t += max(0.0, start - prev)  # the thread computes
        e = step["events"][i]
        g = tuple(e["ranks"])
        if what in ("sync", "issue"):
            begin = max(t, channel.get(g, 0.0))
            finish[i] = channel[g] = begin + time_of(e)
            t = finish[i] if what == "sync" else t + (end - start)
        else:
            t = max(t, finish[i])
        prev = max(prev, end)
    return t + max(0.0, step["step_s"] - prev)


def nics_of(path, given):
    if given:
        return given
    m = re.search(r"h\d+n(\d+)", os.path.basename(path))
    if not m:
        sys.exit(f"fsdp_sim.py: {path}: give --nics (the name does not say, as hHnK does)")
    return int(m.group(1))


def check_one(path, trace, policy, nics, comm_scale, verbose):
    """(measured, predicted) median step of one trace on the emulated cluster's model."""
    kind = groups_of(trace)
    rph = trace["local_world"]
    policy = policy or trace["backend"]

    def time_of(e):
        k = kind(e["ranks"])
        return comm_scale * call_time(policy, e["op"], e["bytes"], len(e["ranks"]),
                                      rph if k != "across" else 1, nics, "emulated")

    predictions = [replay(step, time_of) for step in trace["steps"]]
    if verbose:
        print(f"{path}: {trace['world']} ranks ({trace['world'] // rph} hosts x {rph}), {nics} NIC(s), "
              f"recorded over {trace['backend']}, predicted as {policy}")
        print(f"{'step':>6} {'measured ms':>12} {'predicted ms':>13} {'error':>7} {'comm-free ms':>13}")
        for step, got in zip(trace["steps"], predictions):
            print(f"{step['step']:>6} {1e3 * step['step_s']:12.1f} {1e3 * got:13.1f} "
                  f"{got / step['step_s'] - 1:+7.1%} {1e3 * replay(step, lambda e: 0.0):13.1f}")
    return statistics.median(s["step_s"] for s in trace["steps"]), statistics.median(predictions)


def check(a, traces):
    """Prints each trace's median step measured and predicted; with --fit, first fits the one
    factor by which the traces' collectives run slower than the model predicts for them alone
    (their ranks share the cores with the compute) and applies it."""
    k = a.comm_scale
    if a.fit:
        def cost(k):
            return sum(math.log(pred / meas) ** 2 for meas, pred in
                       (check_one(p, t, a.policy, nics_of(p, a.nics), k, False) for p, t in traces))
        lo, hi = 0.25, 8.0
        for _ in range(40):  # golden-section search on a convex-enough cost
            m1, m2 = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
            lo, hi = (lo, m2) if cost(m1) < cost(m2) else (m1, hi)
        k = (lo + hi) / 2
        print(f"fitted: collectives take {k:.2f}x the model's time for the call alone")
    errors = []
    print("| trace | measured ms | predicted ms | error |")
    print("|---|---:|---:|---:|")
    for path, trace in traces:
        meas, pred = check_one(path, trace, a.policy, nics_of(path, a.nics), k, a.verbose)
        err = pred / meas - 1
        errors.append(abs(err))
        print(f"| {os.path.basename(path)} | {1e3 * meas:.1f} | {1e3 * pred:.1f} | {err:+.1%} |")
    worst = max(errors)
    print(f"median |error| {statistics.median(errors):.1%}, largest {worst:.1%} "
          f"(tolerance {a.tolerance:.0%}); comm scale {k:.2f}")
    return 0 if worst <= a.tolerance else 1


def scale(a, trace):
    kind = groups_of(trace)
    step = sorted(trace["steps"], key=lambda s: s["step_s"])[len(trace["steps"]) // 2]  # the median
    model = "frontier" if a.frontier else "emulated"
    rph, nics = a.ranks_per_host, a.nics
    # A model F times larger: F times the bytes, and F times the compute (at --compute-scale of
    # the recorded speed: the trace's CPUs against the modelled cluster's accelerators).
    t = a.scale * a.compute_scale
    step = dict(step, step_s=step["step_s"] * t,
                events=[dict(e, bytes=max(1, int(e["bytes"] * a.scale)), issue=[x * t for x in e["issue"]],
                             **({"wait": [x * t for x in e["wait"]]} if "wait" in e else {}))
                        for e in step["events"]])
    free = replay(step, lambda e: 0.0)
    print(f"model {model} ({rph} ranks and {nics} NICs per host), trace of {trace['world']} ranks over "
          f"{trace['backend']} ({trace['params']:,} parameters x {a.scale:g}), compute per step "
          f"{1e3 * free:.1f} ms; step ms (communication alone, no compute, in brackets)")
    print("| ranks | ring (NCCL/RCCL-like) | gloo-like | shoal | ring ÷ shoal | gloo ÷ shoal |")
    print("|---:|---:|---:|---:|---:|---:|")
    results = []
    for w in a.worlds:
        row = {}
        for policy in ("ring", "gloo", "shoal"):
            def time_of(e, policy=policy, w=w):
                k = kind(e["ranks"])
                p, r = {"world": (w, rph), "host": (rph, rph), "across": (w // rph, 1)}[k]
                return call_time(policy, e["op"], e["bytes"], p, r, nics, model)
            row[policy] = replay(step, time_of)
            row[policy + "_comm"] = sum(time_of(e) for e in step["events"])
        results.append(dict(world=w, **row))
        cell = {p: f"{1e3 * row[p]:.1f} ({1e3 * row[p + '_comm']:.1f})" for p in ("ring", "gloo", "shoal")}
        print(f"| {w:,} | {cell['ring']} | {cell['gloo']} | {cell['shoal']} | "
              f"{row['ring'] / row['shoal']:.2f}× ({row['ring_comm'] / row['shoal_comm']:.2f}×) | "
              f"{row['gloo'] / row['shoal']:.2f}× ({row['gloo_comm'] / row['shoal_comm']:.2f}×) |", flush=True)
    if a.json:
        json.dump({"model": model, "scale": a.scale, "compute_s": free, "rows": results}, open(a.json, "w"))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("traces", nargs="+")
    c.add_argument("--nics", type=int, default=0, help="NICs per host (default: from the name, hHnK)")
    c.add_argument("--policy", choices=["shoal", "gloo", "ring"], default=None,
                   help="default: each trace's backend")
    c.add_argument("--comm-scale", type=float, default=1.0,
                   help="factor on every predicted call (what --fit prints)")
    c.add_argument("--fit", action="store_true", help="fit --comm-scale to these traces first")
    c.add_argument("--verbose", action="store_true", help="every step of every trace")
    c.add_argument("--tolerance", type=float, default=0.15)
    s = sub.add_parser("scale")
    s.add_argument("trace")
    s.add_argument("--worlds", default="64,256,1024,2048")
    s.add_argument("--frontier", action="store_true", help="Frontier-like nodes (8 ranks, 4 NICs of 25 GB/s)")
    s.add_argument("--ranks-per-host", type=int, default=8)
    s.add_argument("--nics", type=int, default=4)
    s.add_argument("--scale", type=float, default=1.0, help="model F times larger: bytes and compute x F")
    s.add_argument("--compute-scale", type=float, default=1.0,
                   help="the modelled ranks' compute time per step against the trace's (e.g. 0.01: "
                        "accelerators 100x faster than the recording's CPUs)")
    s.add_argument("--json")
    a = p.parse_args()
    if not SIM.exists():
        sys.exit(f"fsdp_sim.py: no {SIM}: run make build")
    paths = a.traces if a.cmd == "check" else [a.trace]
    traces = [(p, json.load(open(p))) for p in paths]
    for p, t in traces:
        if not t.get("steps"):
            sys.exit(f"fsdp_sim.py: {p} holds no recorded step (fewer --steps than --warmup?)")
    if a.cmd == "check":
        return check(a, traces)
    trace = traces[0][1]
    a.worlds = [int(x) for x in a.worlds.split(",")]
    return scale(a, trace)


if __name__ == "__main__":
    sys.exit(main())
