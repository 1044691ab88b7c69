#!/usr/bin/env python3
"""Plots a `shoal-swarm local` run: loss per round, and samples/s with the ideal from the
replicas' measured capacity, against time (kills marked). Usage: swarm_plot.py RUN_DIR [more
RUN_DIRs to overlay, labelled by their summary] -> RUN_DIR/swarm.png (or -o FILE)."""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(run):
    with open(os.path.join(run, "progress.csv")) as f:
        progress = list(csv.DictReader(f))
    with open(os.path.join(run, "rounds.csv")) as f:
        rounds = list(csv.DictReader(f))
    with open(os.path.join(run, "summary.json")) as f:
        summary = json.load(f)
    return progress, rounds, summary


def label(summary):
    return f"{summary['routing']}, codec {summary['codec']}, slowdown {summary['slowdown']}"


def main(argv):
    out = None
    if "-o" in argv:
        i = argv.index("-o")
        out = argv[i + 1]
        del argv[i:i + 2]
    runs = argv[1:]
    if not runs:
        sys.exit(__doc__)
    out = out or os.path.join(runs[0], "swarm.png")
    fig, (ax_loss, ax_rate) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        progress, rounds, summary = load(run)
        name = label(summary) if len(runs) > 1 else None
        ax_loss.plot([int(r["round"]) for r in rounds], [float(r["loss"]) for r in rounds], label=name)
        t = [float(p["time_s"]) for p in progress]
        line, = ax_rate.plot(t, [float(p["samples_per_s"]) for p in progress], label=name or "measured")
        ax_rate.plot(t, [float(p["ideal_samples_per_s"]) for p in progress], linestyle=":",
                     color=line.get_color(), label=None if name else "ideal (bottleneck stage capacity)")
        for k in summary.get("kills", []):
            ax_rate.axvline(k["time_s"], color="red", alpha=0.3)
    ax_loss.set_xlabel("optimizer round")
    ax_loss.set_ylabel("training loss (nats/token)")
    ax_loss.set_title("loss")
    ax_rate.set_xlabel("time (s)")
    ax_rate.set_ylabel("samples/s")
    ax_rate.set_title("throughput (red: a peer killed)")
    for ax in (ax_loss, ax_rate):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main(sys.argv)
