#!/usr/bin/python3
"""Fits small-message latency against world size (bench/logp_fit.sh): for every all_gather and
reduce_scatter algorithm of a shoal-tune file holding one size at many worlds, least squares of
t = a + b log2(p) and of t = a + b (p - 1), and at the largest world the ring's time over each
algorithm's beside the ratio of their step counts. Prints markdown."""
import argparse
import json
import math

import numpy as np


def fit(x, y):
    """Least squares y = a + b x; returns a, b, R^2."""
    A = np.vstack([np.ones_like(x), x]).T
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - (a + b * x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return a, b, 1 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file")
    args = ap.parse_args()
    doc = json.load(open(args.file))
    by_coll = {}
    for t in doc["tables"]:
        by_coll.setdefault(t["collective"], []).append(t)
    for coll in ("all_gather", "reduce_scatter"):
        tables = sorted(by_coll.get(coll, []), key=lambda t: t["world"])
        if len(tables) < 3:
            continue
        algos = list(tables[0]["times_us"])
        print(f"\n#### {coll}, {tables[0]['sizes'][0]} bytes, microseconds per call\n")
        print("| ranks | " + " | ".join(algos) + " |")
        print("|---:|" + "---:|" * len(algos))
        for t in tables:
            print(f"| {t['world']} | " + " | ".join(f"{t['times_us'][a][0]:.1f}" for a in algos) + " |")
        p = np.array([t["world"] for t in tables], dtype=float)
        top = tables[-1]
        steps = lambda q: q - 1 if q > 1 else 0
        print(f"\nFits over {int(p.min())}-{int(p.max())} ranks (R^2 of least squares; the better model in bold), "
              f"and at {top['world']} ranks the ring's time over each algorithm's against the ratio of their "
              f"step counts (p-1 over ceil(log2 p)).\n")
        print("| algorithm | a + b log2 p | a + b (p-1) | ring / it at %d ranks | steps: (p-1) / ceil(log2 p) |"
              % top["world"])
        print("|---|---:|---:|---:|---:|")
        ring = top["times_us"].get("ring", [None])[0]
        for a in algos:
            y = np.array([t["times_us"][a][0] for t in tables])
            r_log, r_lin = fit(np.log2(p), y)[2], fit(p - 1, y)[2]
            cells = [f"**{r_log:.3f}**" if r_log >= r_lin else f"{r_log:.3f}",
                     f"**{r_lin:.3f}**" if r_lin > r_log else f"{r_lin:.3f}"]
            q = top["world"]
            log_steps = math.ceil(math.log2(q))
            ratio = f"{ring / top['times_us'][a][0]:.2f}" if ring else "-"
            step_ratio = "1" if a == "ring" else f"{steps(q) / log_steps:.2f}"
            print(f"| {a} | " + " | ".join(cells) + f" | {ratio} | {step_ratio} |")

if __name__ == "__main__":
    main()
