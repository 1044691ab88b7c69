#!/usr/bin/python3
"""torch_plot.py: one figure of bench/torch_bench.py's collectives (its --csv): a panel per
collective, bus bandwidth against size, shoal against torch's gloo.

    /usr/bin/python3 bench/torch_plot.py --csv torch.csv --out docs/img/torch-collectives-2r.png

Needs python3-matplotlib (scripts/install-deps.sh).
"""
import argparse
import csv
import math
from collections import defaultdict

LABELS = {"shoal": "shoal", "torch-gloo": "torch gloo"}


def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    series = defaultdict(lambda: defaultdict(list))  # collective -> library -> [(bytes, busbw)]
    ranks = set()
    with open(a.csv) as f:
        for row in csv.DictReader(f):
            series[row["collective"]][row["library"]].append((int(row["bytes"]), float(row["busbw_gbs"])))
            ranks.add(row["ranks"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(series)
    cols = 4
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        for library in ("shoal", "torch-gloo"):
            points = sorted(series[name].get(library, []))
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if library == "shoal" else "x",
                        linewidth=2 if library == "shoal" else 1, label=LABELS[library])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(name)
        sizes = sorted({p[0] for lib in series[name].values() for p in lib})
        ax.set_xticks(sizes[::2], [human(s) for s in sizes[::2]], fontsize=7)
        ax.set_ylabel("busbw GB/s")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend()
    fig.suptitle(a.title or f"torch.distributed collectives, {'/'.join(sorted(ranks))} ranks: shoal against gloo")
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"torch_plot: wrote {a.out}")


if __name__ == "__main__":
    main()
