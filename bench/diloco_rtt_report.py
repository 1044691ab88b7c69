#!/usr/bin/env python3
"""Compute utilisation against round-trip time (bench/diloco_rtt.sh's runs): a table and a plot.

    python3 bench/diloco_rtt_report.py OUT [--doc FILE#ID [--img PNG]]

A DiLoCo run's utilisation is its own: the time in inner steps over the wall-clock time. A DDP
step does the same forward, backward and optimizer step as a DiLoCo inner step, plus its
all_reduce; its utilisation is its steps times the median inner step's compute time of the
DiLoCo run at the same RTT (what the step would take without communication) over its wall time.
Exits non-zero when a run failed or an RTT has no DiLoCo run to take the compute time from.
"""
import argparse
import json
import os
import re
import statistics
import sys

import doc_block


def load(out):
    """{rtt_ms: {variant: run}} from OUT/rtt-<RTT>/runs.jsonl, and the failed runs."""
    by_rtt, failed = {}, []
    for name in os.listdir(out):
        m = re.fullmatch(r"rtt-(\d+(?:\.\d+)?)ms", name)
        path = os.path.join(out, name, "runs.jsonl")
        if not m or not os.path.exists(path):
            continue
        rtt = float(m.group(1))
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("failed"):
                failed.append((rtt, r["variant"]))
            else:
                by_rtt.setdefault(rtt, {}).setdefault(r["variant"], r)
    return by_rtt, failed


def step_compute_s(runs):
    """Seconds of compute per step: the median, over the DiLoCo runs at this RTT, of each run's
    mean inner step."""
    per_step = [r["compute_s"] / len(r["losses"]) for v, r in runs.items()
                if v.startswith("diloco") and r.get("compute_s")]
    return statistics.median(per_step) if per_step else None


def utilisation(run, compute):
    if run.get("compute_utilisation") is not None:
        return run["compute_utilisation"]
    return len(run["losses"]) * compute / run["wall_s"] if compute else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    doc_block.add_argument(p, "diloco_rtt_report.py")
    p.add_argument("--img", metavar="PNG", help="with --doc: the plot's copy beside the page")
    args = p.parse_args()
    by_rtt, failed = load(args.out)
    if not by_rtt:
        print(f"diloco_rtt_report.py: no runs under {args.out}/rtt-*/", file=sys.stderr)
        return 1
    rtts = sorted(by_rtt)
    variants = []
    for rtt in rtts:
        variants += [v for v in by_rtt[rtt] if v not in variants]
    any_run = next(iter(by_rtt[rtts[0]].values()))
    status = 0
    lines = [f"**Compute utilisation against RTT: {any_run.get('hosts')} hosts, a worker each, "
             f"links of {any_run.get('rate')}**", "",
             "| RTT | " + " | ".join(variants) + " | compute per step |",
             "|---:|" + "---:|" * (len(variants) + 1)]
    series = {v: [] for v in variants}
    for rtt in rtts:
        runs = by_rtt[rtt]
        compute = step_compute_s(runs)
        if compute is None:
            status = 1
        cells = []
        for v in variants:
            u = utilisation(runs[v], compute) if v in runs else None
            series[v].append((rtt, u))
            cells.append("-" if u is None else f"{u:.0%}")
        lines.append(f"| {rtt:g} ms | " + " | ".join(cells) +
                     (f" | {compute * 1e3:.0f} ms |" if compute else " | - |"))
    for rtt, v in failed:
        lines.append(f"\n{v} at {rtt:g} ms FAILED (logs in {args.out}/rtt-{rtt:g}ms/logs)")
        status = 1
    text = "\n".join(lines) + "\n"
    doc_block.publish(args.out, text, args.doc, "diloco_rtt_report.py")
    plt = doc_block.pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for v, pts in series.items():
            pts = [(r, u) for r, u in pts if u is not None]
            ax.plot([r for r, _ in pts], [100 * u for _, u in pts], marker="o", label=v)
        ax.set_xlabel("round-trip time between hosts, ms")
        ax.set_ylabel("compute utilisation, %")
        ax.set_ylim(0, 100)
        ax.legend()
        doc_block.save_figure(fig, os.path.join(args.out, "utilisation.png"), args.doc and args.img)
    return status


if __name__ == "__main__":
    sys.exit(main())
