#!/usr/bin/env python3
"""Report of bench/links_cluster.sh: bus bandwidth per variant (median over rounds) and the
ratio of the ring that follows measured links to the ring in rank order. Exits non-zero when a
run is missing or failed its check, or when that ratio is below --target. --doc FILE#ID also
writes the report into FILE's block of ID (bench/doc_block.py)."""
import argparse
import json
import os
import statistics
import sys

import doc_block  # bench/, beside this script


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--variants", default="ring link_ring rabenseifner auto")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--target", type=float, default=1.8)
    ap.add_argument("--layout", default="")
    doc_block.add_argument(ap, "links_report.py")
    a = ap.parse_args()
    busbw, problems = {}, []
    for v in a.variants.split():
        values = []
        for r in range(a.rounds):
            path = os.path.join(a.out, f"{v}-{r}.json")
            try:
                with open(path) as f:
                    run = json.load(f)
            except (OSError, ValueError) as e:
                problems.append(f"{v} round {r}: no result ({e})")
                continue
            row = run["rows"][-1]["out_of_place"]
            if run.get("out_of_bounds", 0) or row.get("wrong", 0):
                problems.append(f"{v} round {r}: wrong results")
            values.append(row["busbw"])
        if values:
            busbw[v] = statistics.median(values)
    lines = [f"# Ring order on measured links ({a.layout})", "",
             "| variant | all_reduce bus bandwidth (MB/s) | vs ring |", "|---|---:|---:|"]
    for v, b in busbw.items():
        vs = f"{b / busbw['ring']:.2f}x" if "ring" in busbw else "-"
        lines.append(f"| {v} | {b * 1e3:.1f} | {vs} |")
    ratio = busbw["link_ring"] / busbw["ring"] if "ring" in busbw and "link_ring" in busbw else None
    if ratio is not None:
        lines += ["", f"link_ring / ring: {ratio:.2f}x (target {a.target}x)"]
        if ratio < a.target:
            problems.append(f"link_ring is {ratio:.2f}x ring, below the target {a.target}x")
    text = "\n".join(lines + [""] + [f"problem: {p}" for p in problems]) + "\n"
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(text)
    print(text, end="")
    if a.doc:
        doc_block.write(a.doc, "links_report.py", text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
