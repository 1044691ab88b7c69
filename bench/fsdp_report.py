#!/usr/bin/env python3
"""Tables and plots of a bench/fsdp_cluster.sh run: OUT/runs.jsonl -> OUT/report.md, OUT/*.png.

    bench/fsdp_report.py OUT [--tolerance 1e-4] [--doc FILE#ID]
    bench/fsdp_report.py --append RUNS NAME=VALUE...   (fsdp_cluster.sh: one run's JSON on stdin)

Per cluster (hosts x NICs) and configuration (fsdp, hsdp): each variant's step time (median over
rounds of each run's median step), global tokens/s, the time a step waits on communication (mean
over ranks, and the worst rank's), its share of the step, and gloo's step time over the
variant's. Exits 1 when a run failed or when a shoal run's losses differ from gloo's on the same
cluster and configuration by more than --tolerance (relative, any step). --doc also writes the
report into FILE's block of ID (bench/doc_block.py).
"""

import argparse
import collections
import json
import pathlib
import statistics
import sys

import doc_block  # bench/, beside this script


def load(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(path, fields):
    """Adds the run's fields (NAME=VALUE, numbers as numbers) to the JSON line on stdin, appends it
    to `path` and prints a one-line summary."""
    r = json.loads(sys.stdin.read())
    for f in fields:
        name, value = f.split("=", 1)
        r[name] = int(value) if value.isdigit() else value
    with open(path, "a") as out:
        out.write(json.dumps(r) + "\n")
    print(f"  {r['config']:5s} {r['variant']:20s} step {r['step_ms']:8.1f} ms, "
          f"waits {r['comm_wait_ms']:7.1f} ms, last loss {r['losses'][-1]:.5f}", flush=True)
    return 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--append":
        return append(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--tolerance", type=float, default=1e-4)
    doc_block.add_argument(p, "fsdp_report.py")
    a = p.parse_args()
    runs = load(a.out / "runs.jsonl")
    problems = [f"{r['hosts']} hosts x {r['nics']} NICs {r['config']} {r['variant']} round {r['round']} failed"
                for r in runs if r.get("failed")]
    teardowns = collections.Counter(r["variant"] for r in runs if r.get("teardown_failed"))
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in runs:
        if not r.get("failed"):
            groups[(r["hosts"], r["nics"], r["config"])][r["variant"]].append(r)

    lines = ["| hosts × NICs | config | backend | params | step ms | tokens/s | comm wait ms (mean / worst rank) "
             "| exposed share | gloo ÷ this | max loss rel. diff vs gloo |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (hosts, nics, config), variants in sorted(groups.items()):
        gloo = variants.get("gloo")
        gloo_ms = statistics.median(r["step_ms"] for r in gloo) if gloo else None
        order = ["gloo", "shoal"] + sorted(v for v in variants if v not in ("gloo", "shoal"))
        for v in order:
            if v not in variants:
                continue
            rs = variants[v]
            ms = statistics.median(r["step_ms"] for r in rs)
            wait = statistics.median(r["comm_wait_ms"] for r in rs)
            worst = statistics.median(r["comm_wait_ms_max"] for r in rs)
            tps = statistics.median(r["tokens_per_s"] for r in rs)
            diff = ""
            if gloo and v != "gloo":
                ref = gloo[0]["losses"]
                d = max(abs(x - y) / abs(y) for r in rs for x, y in zip(r["losses"], ref))
                diff = f"{d:.1e}"
                if d > a.tolerance or any(len(r["losses"]) != len(ref) for r in rs):
                    problems.append(f"{hosts}x{nics} {config} {v}: losses differ from gloo's by {d:.2e}")
            ratio = f"{gloo_ms / ms:.2f}×" if gloo_ms else ""
            lines.append(f"| {hosts} × {nics} | {config} | {v} | {rs[0]['params']:,} | {ms:.0f} | {tps:,.0f} | "
                         f"{wait:.0f} / {worst:.0f} | {wait / ms:.0%} | {ratio} | {diff} |")
    first = runs[0] if runs else {}
    header = (f"{len([r for r in runs if not r.get('failed')])} runs; model dim {first.get('dim')} "
              f"layers {first.get('layers')}, batch {first.get('batch')} × seq {first.get('seq')} per rank, "
              f"NICs of {first.get('rate')}; median over rounds of each run's median step after warm-up.")
    if teardowns:
        header += (" Runs whose ranks failed after training, in destroy_process_group: " +
                   ", ".join(f"{v} {n}" for v, n in sorted(teardowns.items())) + ".")
    report = "\n".join([header, ""] + lines) + "\n"
    if problems:
        report += "\nPROBLEMS:\n" + "\n".join(f"- {x}" for x in problems) + "\n"
    doc_block.publish(a.out, report, a.doc, "fsdp_report.py")
    plot(a.out, groups)
    return 1 if problems else 0


def plot(out, groups):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fsdp_report.py: no matplotlib, no plots", file=sys.stderr)
        return
    keys = sorted(groups)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(keys)), 4))
    variants = sorted({v for k in keys for v in groups[k]}, key=lambda v: (v != "gloo", v != "shoal", v))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        xs, step, wait = [], [], []
        for j, k in enumerate(keys):
            if v in groups[k]:
                xs.append(j + i * width)
                step.append(statistics.median(r["step_ms"] for r in groups[k][v]))
                wait.append(statistics.median(r["comm_wait_ms"] for r in groups[k][v]))
        ax.bar(xs, step, width, label=v)
        ax.bar(xs, wait, width, color="none", edgecolor="black", hatch="//", linewidth=0)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))])
    ax.set_xticklabels([f"{h}h×{n}nic\n{c}" for h, n, c in keys])
    ax.set_ylabel("ms per step (hatched: waiting on communication)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fsdp-step.png", dpi=120)

    fig, ax = plt.subplots(figsize=(6, 4))
    k = max(keys, key=lambda k: (k[0], k[1], k[2] == "fsdp"))
    for v in ("gloo", "shoal"):
        if v in groups[k]:
            ax.plot(groups[k][v][0]["losses"], label=v, linestyle="-" if v == "gloo" else "--")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"{k[0]} hosts × {k[1]} NICs, {k[2]}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fsdp-loss.png", dpi=120)


if __name__ == "__main__":
    sys.exit(main())
