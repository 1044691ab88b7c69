#!/usr/bin/env python3
"""Predicted against measured, from `shoal-sim calibrate -o FIT.json` (docs/scale.md).

  /usr/bin/python3 bench/sim_calibration_plot.py FIT.json OUT.png [TITLE]

One panel per collective (a row per transport when the fit has several), log-log, one colour
per world size, the diagonal and +-15% around it.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    fit = json.load(open(sys.argv[1]))
    points = fit["points"]
    collectives = sorted({p["collective"] for p in points})
    transports = sorted({p["transport"] for p in points})
    worlds = sorted({p["ranks"] for p in points})
    fig, axes = plt.subplots(len(transports), len(collectives), figsize=(5 * len(collectives), 4.6 * len(transports)),
                             squeeze=False)
    for row, transport in zip(axes, transports):
        for ax, coll in zip(row, collectives):
            mine = [p for p in points if p["collective"] == coll and p["transport"] == transport]
            for w in worlds:
                xs = [p["measured_us"] for p in mine if p["ranks"] == w]
                ys = [p["predicted_us"] for p in mine if p["ranks"] == w]
                if xs:
                    ax.scatter(xs, ys, s=12, label=f"{w} ranks", alpha=0.8)
            lo = min(min(p["measured_us"], p["predicted_us"]) for p in mine) / 1.5
            hi = max(max(p["measured_us"], p["predicted_us"]) for p in mine) * 1.5
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            ax.plot([lo, hi], [lo * 1.15, hi * 1.15], "k:", lw=0.6)
            ax.plot([lo, hi], [lo / 1.15, hi / 1.15], "k:", lw=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_xlabel("measured (us)")
            ax.set_ylabel("predicted (us)")
            on = f" ({transport})" if len(transports) > 1 else ""
            ax.set_title(f"{coll}{on}: every algorithm, 1 KiB-16 MiB")
            ax.grid(True, which="both", lw=0.3)
            ax.legend(fontsize=8)
    errors = sorted(abs(p["predicted_us"] - p["measured_us"]) / p["measured_us"] for p in points)
    median = errors[len(errors) // 2] if len(errors) % 2 else (errors[len(errors) // 2 - 1] + errors[len(errors) // 2]) / 2
    title = sys.argv[3] if len(sys.argv) > 3 else "shoal-sim calibrate"
    fig.suptitle(f"{title}: median |error| {100 * median:.1f}% over {len(points)} points (dotted: +-15%)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
