#!/usr/bin/env python3
"""Report of bench/swarm_cluster.sh: per configuration, samples/s in the steady state against
the bottleneck ideal (the slowest stage's summed compute throughput, from the peers' own
measurements: what the links and the pipeline leave of it), bytes between stages per sample,
the loss of the first and last rounds. Exits non-zero when a run is missing or did not complete
its rounds. --doc FILE#ID also writes the report into FILE's block of ID (bench/doc_block.py)."""
import argparse
import json
import os
import sys

import doc_block  # bench/, beside this script


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--configs", default="sync async int8 async-int8")
    ap.add_argument("--layout", default="")
    doc_block.add_argument(ap, "swarm_cluster_report.py")
    a = ap.parse_args()
    lines = [f"# SWARM across emulated hosts ({a.layout})", "",
             "| configuration | model | rounds | steady samples/s | ideal samples/s | fraction of ideal "
             "| bytes between stages / sample | averaging bytes / member and round | loss first -> last |",
             "|---|---|---|---|---|---|---|---|---|"]
    status = 0
    for c in a.configs.split():
        path = os.path.join(a.out, c, "summary.json")
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            lines.append(f"| {c} | no result ({e}) |")
            status = 1
            continue
        losses = s.get("round_loss") or [float("nan")]
        avg = s.get("averaging_bytes_per_member_round")
        lines.append("| {} | {} | {}/{} | {:.1f} | {} | {} | {:,.0f} | {} | {:.3f} -> {:.3f} |".format(
            c, s.get("model"), s.get("rounds_done"), s.get("rounds"), s.get("steady_samples_per_s", 0),
            f"{s['ideal_samples_per_s']:.1f}" if "ideal_samples_per_s" in s else "-",
            f"{s['fraction_of_ideal']:.2f}" if "fraction_of_ideal" in s else "-",
            s.get("bytes_between_stages_per_sample", 0), f"{avg:,.0f}" if avg else "-", losses[0], losses[-1]))
        if not s.get("completed"):
            status = 1
    text = "\n".join(lines) + "\n"
    doc_block.publish(a.out, text, a.doc, "swarm_cluster_report.py")
    return status


if __name__ == "__main__":
    sys.exit(main())
