#!/usr/bin/python3
"""Tables and plots of docs/scale.md from bench/sim_studies.sh's JSON files.

  /usr/bin/python3 bench/sim_report.py STUDY_DIR [--img docs/img] [--doc docs/scale.md] > tables.md

Writes markdown to stdout: per model, the busbw of every algorithm against world size (one table
per collective and size), the fastest algorithm per (world, size) — where the choice changes —,
ring against the best recursive and hierarchical algorithms at 2,048 ranks (PCCL's finding) and
SWARM's regime in seconds; and one PNG per model (busbw against world size, a panel per
collective and size) into --img. --doc FILE also writes the Frontier-like model's choice tables
and the 2,048-rank table into FILE's blocks studies:frontier-choice and studies:pccl.
"""
import argparse
import collections
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_block  # noqa: E402  bench/, beside this script

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter"]
MODELS = {
    "frontier": "Frontier-like: 8 ranks and 4 NICs of 25 GB/s per node, 2 us",
    "commodity-2x100": "commodity: 8 ranks and 2 NICs of 100 Gbit/s per host, 5 us",
    "commodity-1x10": "commodity: 8 ranks and 1 NIC of 10 Gbit/s per host, 10 us",
    "swarm": "SWARM: 1 peer and 1 NIC of 200 Mbit/s per host, 100 ms",
}


def human(b):
    for unit in ["", "K", "M", "G"]:
        if b < 1024 or b % 1024:
            return f"{b}{unit}"
        b //= 1024
    return f"{b}T"


def load(study_dir):
    """data[model][collective][world][algorithm][size] = (time_us, busbw)."""
    data = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(dict)))
    for path in glob.glob(os.path.join(study_dir, "*.json")):
        m = re.match(r"(.+)_(all_reduce|all_gather|reduce_scatter)_(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        doc = json.load(open(path))
        model, coll, world = m.group(1), m.group(2), int(m.group(3))
        for row in doc["rows"]:
            data[model][coll][world].setdefault(row["algorithm"], {})[row["size"]] = (row["time_us"], row["busbw"])
    return data


def algorithms_of(worlds):
    names = []
    for w in sorted(worlds):
        for a in worlds[w]:
            if a not in names:
                names.append(a)
    flat = [a for a in names if not a.startswith("hier(")]
    return flat + [a for a in names if a.startswith("hier(")]


def sizes_of(worlds):
    return sorted({s for w in worlds.values() for a in w.values() for s in a})


def busbw_table(worlds, size):
    algos = algorithms_of(worlds)
    out = ["| ranks | " + " | ".join(algos) + " |", "|---:|" + "---:|" * len(algos)]
    for w in sorted(worlds):
        cells = []
        best = max((worlds[w][a][size][1] for a in algos if size in worlds[w].get(a, {})), default=None)
        if best is None:  # not run at this size
            continue
        for a in algos:
            v = worlds[w].get(a, {}).get(size)
            if v is None:
                cells.append("—")
            else:
                cells.append(f"**{v[1]:.2f}**" if v[1] == best else f"{v[1]:.2f}")
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def fastest(worlds, w, size, keep=lambda a: True):
    """(time, row) of the fastest row; of equal times, the one run first (the registry's order:
    the ring before link_ring where the links give rank order, hier(ring+ring) before the
    compositions that run no other row)."""
    cands = [(v[size][0], i, a) for i, (a, v) in enumerate(worlds[w].items()) if size in v and keep(a)]
    return min(cands)[::2] if cands else None


def choice_table(worlds):
    sizes = sizes_of(worlds)
    out = ["| ranks | " + " | ".join(human(s) for s in sizes) + " |", "|---:|" + "---|" * len(sizes)]
    for w in sorted(worlds):
        cells = []
        for s in sizes:
            best = fastest(worlds, w, s)
            if not best:
                cells.append("—")
                continue
            flat = fastest(worlds, w, s, lambda a: not a.startswith("hier("))
            cell = best[1]
            if best[1].startswith("hier(") and flat:
                cell += f" ({flat[0] / best[0]:.2f}× over {flat[1]})"
            cells.append(cell)
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def pccl_table(data, model, world, sizes):
    out = ["| collective | size | ring (µs) | best other flat row (µs) | best hierarchical (µs) | ring loses by |",
           "|---|---:|---:|---:|---:|---:|"]
    for coll in COLLECTIVES:
        worlds = data[model][coll]
        if world not in worlds:
            continue
        for s in sizes:
            ring = worlds[world].get("ring", {}).get(s)
            rec = fastest(worlds, world, s, lambda a: a not in ("ring",) and not a.startswith("hier("))
            hier = fastest(worlds, world, s, lambda a: a.startswith("hier("))
            if not ring:
                continue
            best = min(x for x in [rec, hier] if x)
            out.append(f"| {coll} | {human(s)} | {ring[0]:,.0f} | {rec[0]:,.0f} ({rec[1]}) | "
                       + (f"{hier[0]:,.0f} ({hier[1]})" if hier else "—")
                       + f" | **{ring[0] / best[0]:.1f}×** |")
    return "\n".join(out)


def swarm_table(worlds):
    algos = algorithms_of(worlds)
    out = ["| peers | size | " + " | ".join(algos) + " | best | ring / best |",
           "|---:|---:|" + "---:|" * len(algos) + "---|---:|"]
    for w in sorted(worlds):
        for s in sizes_of(worlds):
            times = {a: worlds[w][a][s][0] / 1e6 for a in algos if s in worlds[w].get(a, {})}
            if not times:
                continue
            best = min(times, key=times.get)
            cells = [(f"**{times[a]:.1f}**" if a == best else f"{times[a]:.1f}") if a in times else "—" for a in algos]
            out.append(f"| {w} | {human(s)} | " + " | ".join(cells) + f" | {best} | {times['ring'] / times[best]:.1f}× |")
    return "\n".join(out)


def plot(data, model, img_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = [s for s in (1 << 20, 1 << 28) if any(s in sizes_of(data[model][c]) for c in COLLECTIVES)]
    fig, axes = plt.subplots(len(sizes), 3, figsize=(15, 4.2 * len(sizes)), squeeze=False)
    for i, s in enumerate(sizes):
        for j, coll in enumerate(COLLECTIVES):
            ax = axes[i][j]
            worlds = data[model][coll]
            for a in algorithms_of(worlds):
                pts = [(w, worlds[w][a][s][1]) for w in sorted(worlds) if s in worlds[w].get(a, {})]
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=3, ls="--" if a.startswith("hier(") else "-", label=a)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{coll}, {human(s)}B")
            ax.set_xlabel("ranks")
            ax.set_ylabel("predicted busbw (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"shoal-sim, {MODELS.get(model, model)}")
    fig.tight_layout()
    path = os.path.join(img_dir, f"scale-{model}.png")
    fig.savefig(path, dpi=80)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("study_dir")
    ap.add_argument("--img", default=None, help="write one PNG per model here")
    ap.add_argument("--doc", default=None, metavar="FILE",
                    help="write the Frontier-like tables into FILE's studies:frontier-choice and studies:pccl")
    args = ap.parse_args()
    data = load(args.study_dir)
    if args.doc:
        for block in ("frontier-choice", "pccl"):
            doc_block.check(args.doc, "studies", block)
        frontier = data["frontier"]
        choice = "\n".join(f"**{c}**\n\n{choice_table(frontier[c])}\n" for c in COLLECTIVES)
        doc_block.replace(args.doc, "studies", "frontier-choice", choice)
        doc_block.replace(args.doc, "studies", "pccl",
                          pccl_table(data, "frontier", 2048, [64 << 10, 1 << 20, 16 << 20]))
    print("# shoal-sim studies: every table\n\nGenerated by `/usr/bin/python3 bench/sim_report.py STUDY_DIR --img docs/img` "
          "from the runs of\n`bash bench/sim_studies.sh STUDY_DIR`; read with [scale.md](scale.md). Predicted times and "
          "busbw (nccl-tests\ndefinition), not measurements; \"—\": not run.\n")
    for model in [m for m in MODELS if m in data]:
        print(f"## {MODELS[model]}\n")
        if model == "swarm":
            print(swarm_table(data[model]["all_reduce"]) + "\n")
            continue
        if args.img:
            print(f"Plot: [{os.path.basename(plot(data, model, args.img))}](img/scale-{model}.png)\n")
        for coll in COLLECTIVES:
            worlds = data[model][coll]
            print(f"### {coll}: the fastest algorithm per world and size\n\n{choice_table(worlds)}\n")
        for coll in COLLECTIVES:
            worlds = data[model][coll]
            for s in sizes_of(worlds):
                print(f"### {coll}, {human(s)} — busbw GB/s (best in bold)\n\n{busbw_table(worlds, s)}\n")
        if model == "frontier":
            print("### Ring against the recursive and hierarchical algorithms at 2,048 ranks\n")
            print(pccl_table(data, model, 2048, [64 << 10, 1 << 20, 16 << 20]) + "\n")


if __name__ == "__main__":
    main()
