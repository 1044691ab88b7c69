#!/usr/bin/env python3
"""Report of bench/links_cluster.sh: per variant and size, the all_reduce time (median over
rounds of the out-of-place and in-place times) and bus bandwidth, what shoal-sim predicted for
the row on the same network (OUT/predicted.json) and measured / predicted, then the ratio of
the ring that follows measured links to the ring in rank order at the largest size. Exits
non-zero when a run is missing or failed its check, or when that ratio is below --target.
--doc FILE#ID also writes the report into FILE's block of ID (bench/doc_block.py)."""
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
    predicted = {}
    try:
        with open(os.path.join(a.out, "predicted.json")) as f:
            for row in json.load(f)["rows"]:
                predicted[(row["algorithm"], row["size"])] = row["time_us"]
    except (OSError, ValueError, KeyError):
        pass  # the report says "-" where there is no prediction
    times, busbw, problems, sizes = {}, {}, [], set()
    for v in a.variants.split():
        for r in range(a.rounds):
            path = os.path.join(a.out, f"{v}-{r}.json")
            try:
                with open(path) as f:
                    run = json.load(f)
            except (OSError, ValueError) as e:
                problems.append(f"{v} round {r}: no result ({e})")
                continue
            if run.get("out_of_bounds", 0):
                problems.append(f"{v} round {r}: wrong results")
            for row in run["rows"]:
                for kind in ("out_of_place", "in_place"):
                    if row[kind].get("wrong"):
                        problems.append(f"{v} round {r}: wrong results at {row['size']} B")
                    times.setdefault((v, row["size"]), []).append(row[kind]["time_us"])
                busbw.setdefault((v, row["size"]), []).append(row["out_of_place"]["busbw"])
                sizes.add(row["size"])
    lines = [f"# all_reduce on {a.layout}", "",
             "| variant | size | time (ms) | bus bandwidth (MB/s) | predicted (ms) | measured / predicted |",
             "|---|---:|---:|---:|---:|---:|"]
    for v in a.variants.split():
        for size in sorted(sizes):
            if (v, size) not in times:
                continue
            t = statistics.median(times[(v, size)]) / 1e3
            b = statistics.median(busbw[(v, size)]) * 1e3
            p = predicted.get((v, size))
            pred = f"{p / 1e3:.0f}" if p else "-"
            ratio = f"{t / (p / 1e3):.2f}" if p else "-"
            lines.append(f"| {v} | {doc_block.size_name(size)} | {t:.0f} | {b:.1f} | {pred} | {ratio} |")
    largest = max(sizes) if sizes else None
    ring, link = busbw.get(("ring", largest)), busbw.get(("link_ring", largest))
    if ring and link:
        ratio = statistics.median(link) / statistics.median(ring)
        lines += ["", f"link_ring / ring at {doc_block.size_name(largest)}: {ratio:.2f}x (target {a.target}x)"]
        if ratio < a.target:
            problems.append(f"link_ring is {ratio:.2f}x ring, below the target {a.target}x")
    text = "\n".join(lines + [""] + [f"problem: {p}" for p in problems]) + "\n"
    doc_block.publish(a.out, text, a.doc, "links_report.py")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
