#!/usr/bin/env python3
"""Report of bench/manycore.sh: from every LOGS/COLL-RANKS/rows.tsv (bench/compare.sh's rounds:
harness, round, bytes, out-of-place and in-place time in us, wrong counts, then p50 and p99 of
the iterations out of place and in place), the median round per cell, shoal's bus bandwidth over
the best MPI's (out of place and in place), shoal's in-place time against its out-of-place time,
the tails (p99 / p50 of shoal and of the best MPI), and the targets of issue 44 at 8 ranks and
more:

  - all_reduce, all_gather, reduce_scatter: every size at least 1.0x the best MPI's busbw, and
    all_reduce and reduce_scatter at least 2.0x from 1 MiB up;
  - no shoal cell whose out-of-place and in-place times differ by more than 2x;
  - at 16 ranks, the p99 of an 8 B all_reduce within 3x its p50.

Usage: manycore_report.py LOGS [--cores N] [--cmdline TEXT] [--plot PNG]. Prints markdown
(--plot: shoal ÷ best MPI against size, a line per rank count, a panel per collective, where
matplotlib is installed); exits 1 when a harness reported a wrong result or a target measured
here is missed (0 when none could be: no run of 8 ranks or more)."""
import argparse
import os
import statistics
import sys

from doc_block import size_name  # bench/ is the script's directory, so on sys.path

ORDER = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")  # of the report's sections
TARGET_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
TWICE_FROM_1M = ("all_reduce", "reduce_scatter")
PLACES = {"out": "out of place", "in": "in place"}


def bus_factor(coll, n):
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("broadcast", "reduce"):
        return 1.0
    return (n - 1.0) / n


def load(logs):
    """{(coll, ranks): {(harness, bytes): {"out": [us...], "in": [us...], "wrong": bool,
                                           "pct": {"out": [(p50, p99)...], "in": [...]}}}}"""
    runs = {}
    for name in sorted(os.listdir(logs)):
        path = os.path.join(logs, name, "rows.tsv")
        coll, _, ranks = name.rpartition("-")
        if not os.path.exists(path) or not ranks.isdigit():
            continue
        cells = runs.setdefault((coll, int(ranks)), {})
        for line in open(path):
            f = line.rstrip("\n").split("\t")
            if len(f) < 7:
                continue
            if int(f[2]) == 0:  # nccl-tests' rows of 0 elements per rank (8 B over 8 ranks): nothing moves
                continue
            cell = cells.setdefault((f[0], int(f[2])),
                                    {"out": [], "in": [], "wrong": False, "pct": {"out": [], "in": []}})
            for key, t, w in (("out", f[3], f[5]), ("in", f[4], f[6])):
                if t not in ("N/A", "") and float(t) > 0:
                    cell[key].append(float(t))
                if w not in ("N/A", "", "0"):
                    cell["wrong"] = True
            if len(f) >= 11:  # compare.sh --percentiles
                for key, p50, p99 in (("out", f[7], f[8]), ("in", f[9], f[10])):
                    if p50 != "N/A" and p99 != "N/A" and float(p50) > 0:
                        cell["pct"][key].append((float(p50), float(p99)))
    return runs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("logs")
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--cmdline", default="bench/manycore.sh")
    p.add_argument("--plot", default="")
    a = p.parse_args()
    runs = load(a.logs)
    if not runs:
        print(f"manycore_report: no rows.tsv under {a.logs}", file=sys.stderr)
        return 1
    out, misses = [], []
    wrong = [f"{coll} {n} ranks {size_name(s)}: {h} reported a wrong result"
             for (coll, n), cells in runs.items() for (h, s), c in sorted(cells.items()) if c["wrong"]]
    curves = {}  # collective -> ranks -> [(bytes, shoal / best MPI out of place)]
    out.append(f"Command: `{a.cmdline}`; {a.cores} cores; each cell the median of the rounds; "
               "busbw as nccl-tests; shoal ÷ best MPI > 1: shoal is faster.\n")
    colls = sorted({c for c, _ in runs}, key=lambda c: ORDER.index(c) if c in ORDER else len(ORDER))
    rank_counts = sorted({n for _, n in runs})
    def busbw_cell(coll, n, s, cells):
        shoal = cells.get(("shoal", s))
        peers = [(h, c) for (h, size), c in cells.items() if size == s and h != "shoal"]
        if not shoal or not shoal["out"]:
            return "—"
        f = bus_factor(coll, n)
        text = []
        for place in ("out", "in"):
            if not shoal[place]:
                text.append("—")
                continue
            mine = s * f / statistics.median(shoal[place])
            best = max((s * f / statistics.median(c[place]) for _, c in peers if c[place]), default=0)
            ratio = mine / best if best else None
            text.append(f"{ratio:.2f}" if ratio else "—")
            if place == "out" and ratio:
                curves.setdefault(coll, {}).setdefault(n, []).append((s, ratio))
            if n >= 8 and coll in TARGET_COLLECTIVES and ratio is not None:
                need = 2.0 if coll in TWICE_FROM_1M and s >= 1 << 20 else 1.0
                if ratio < need:
                    misses.append(f"{coll} {n} ranks {size_name(s)} {PLACES[place]}: {ratio:.2f}x < {need:.1f}x")
        spread = ""
        if shoal["out"] and shoal["in"]:
            q = statistics.median(shoal["in"]) / statistics.median(shoal["out"])
            spread = f" ({q:.2f})"
            if n >= 8 and max(q, 1 / q) > 2.0:
                misses.append(f"{coll} {n} ranks {size_name(s)}: in place {q:.2f}x out of place")
        return " / ".join(text) + spread

    for coll in colls:
        table(out, runs, coll, rank_counts,
              "shoal ÷ best MPI busbw, out of place / in place; shoal in place ÷ out of place time", busbw_cell)
    out += tails(runs, colls, rank_counts, misses)
    big = [n for n in rank_counts if n >= 8]
    over = [n for n in rank_counts if n > a.cores]
    if over:
        out.append(f"{', '.join(map(str, over))} ranks ran oversubscribed on {a.cores} cores: the targets "
                   "are a core per rank's, checked here all the same.")
    if not big:
        out.append("Targets (8 ranks and more): not measured here (no run of 8 ranks or more on this node).")
    elif misses:
        out.append(f"Targets (8 ranks and more): {len(misses)} cells missed:")
        out += [f"- {m}" for m in misses]
    else:
        out.append(f"Targets (8 ranks and more, {', '.join(map(str, big))}): every cell met.")
    if wrong:
        out.append("Wrong results:")
        out += [f"- {w}" for w in wrong]
    if a.plot:
        out.append(plot(curves, a.plot))
    print("\n".join(out))
    return 1 if misses or wrong else 0


def table(lines, runs, coll, rank_counts, title, cell):
    """Appends a section to lines: its heading, then a row per size and a column per rank count
    the collective ran at, each cell cell(coll, ranks, size, that run's cells)."""
    present = [n for n in rank_counts if (coll, n) in runs]
    lines.append(f"### {coll}: {title}\n")
    lines.append("| size | " + " | ".join(f"{n} ranks" for n in present) + " |")
    lines.append("|---:|" + "---:|" * len(present))
    for s in sorted({s for n in present for (_, s) in runs[(coll, n)]}):
        lines.append("| " + " | ".join([size_name(s)] + [cell(coll, n, s, runs[(coll, n)]) for n in present]) + " |")
    lines.append("")


def tail_ratio(cell, place):
    """(p50 us, p99 / p50) of the median round (by p99), or None without percentiles."""
    rounds = sorted(cell["pct"][place], key=lambda q: q[1]) if cell else []
    if not rounds:
        return None
    p50, p99 = rounds[(len(rounds) - 1) // 2]
    return p50, p99 / p50


def tails(runs, colls, rank_counts, misses):
    """The tails section: per cell, shoal's p99 / p50 out of place, and the best MPI's (the MPI
    with the higher median busbw) beside it; adds the 16-rank 8 B all_reduce target to misses."""
    lines = []
    if not any(c["pct"]["out"] for cells in runs.values() for c in cells.values()):
        return ["No tails: these logs have no percentiles (compare.sh --percentiles)."]
    lines.append("")

    def tail_cell(coll, n, s, cells):
        mine = tail_ratio(cells.get(("shoal", s)), "out")
        peers = [c for (h, size), c in cells.items() if size == s and h != "shoal" and c["out"]]
        best = min(peers, key=lambda c: statistics.median(c["out"]), default=None)
        theirs = tail_ratio(best, "out")
        return (f"{mine[1]:.1f}" if mine else "—") + (f" ({theirs[1]:.1f})" if theirs else "")

    for coll in colls:
        table(lines, runs, coll, rank_counts,
              "tails, p99 ÷ p50 of the iterations out of place, shoal (best MPI)", tail_cell)
    cell = runs.get(("all_reduce", 16), {}).get(("shoal", 8))
    for place in ("out", "in"):
        q = tail_ratio(cell, place)
        if q and q[1] > 3.0:
            misses.append(f"all_reduce 16 ranks 8 B {PLACES[place]}: p99 {q[1]:.1f}x p50 ({q[0]:.2f} us) > 3x")
    return lines


def plot(curves, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"No plot: matplotlib is not installed for {sys.executable}."
    fig, axes = plt.subplots(1, len(curves), figsize=(4.5 * len(curves), 3.6), squeeze=False)
    for ax, (coll, by_ranks) in zip(axes[0], curves.items()):
        for n, points in sorted(by_ranks.items()):
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-", ms=3, label=f"{n} ranks")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_title(coll)
        ax.set_xlabel("bytes")
        ax.set_ylabel("shoal ÷ best MPI busbw")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return f"\n![shoal ÷ best MPI busbw against size]({os.path.basename(path)})"


if __name__ == "__main__":
    sys.exit(main())
