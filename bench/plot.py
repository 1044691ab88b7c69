#!/usr/bin/python3
"""plot.py: figures from bench/compare.sh's CSV (--csv FILE, or --plot, which calls this).

    bench/plot.py --csv build/compare/.../plot.csv --out-dir docs/img --prefix local-2r \\
        [--labels 'shoal=shoal;mpi-vader=Open MPI (vader)'] [--title '2 ranks on one host']

The CSV has the columns scenario,collective,ranks,library,bytes,time_us,busbw_gbs (one row per
library and size: the round compare.sh chose). For each collective (and each rank count, when the
file holds several) it writes two log-log figures with one line per library:

    OUT_DIR/PREFIX-COLLECTIVE-busbw.png   bus bandwidth (GB/s) against size
    OUT_DIR/PREFIX-COLLECTIVE-time.png    time of one call (us) against size
    (PREFIX-SCENARIO-COLLECTIVE-... when the CSV holds several scenarios, and -Nr- after the
    collective when it holds several rank counts of one; --scenario keeps one scenario's rows)

Sizes with no call (zero count) or no time are left out. Needs python3-matplotlib.
"""
import argparse
import csv
import os
import sys
import textwrap

STYLE = {  # library -> (marker, line style); shoal drawn thicker
    "shoal": ("o", "-"), "mpi-vader": ("s", "--"), "mpi-tcp": ("^", "--"), "mpich": ("D", "-."),
    "mpich-tcp": ("v", "-."), "gloo": ("x", ":"), "torch-gloo": ("+", ":"),
}
LABELS = {"shoal": "shoal", "mpi-vader": "Open MPI (vader)", "mpi-tcp": "Open MPI (tcp)",
          "mpich": "MPICH (shm)", "mpich-tcp": "MPICH (tcp)", "gloo": "Gloo", "torch-gloo": "torch gloo"}
ORDER = ["shoal", "mpi-vader", "mpi-tcp", "mpich", "mpich-tcp", "gloo", "torch-gloo"]


def human(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            v = b / f
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.1f %s" % (v, unit))
    return "%d B" % b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, nargs="+", help="compare.sh CSV file(s)")
    ap.add_argument("--out-dir", default="docs/img")
    ap.add_argument("--prefix", required=True, help="file-name prefix, e.g. the scenario")
    ap.add_argument("--labels", default="", help="LIB=legend text;LIB=... (default: the usual names)")
    ap.add_argument("--title", default="", help="added to each figure's title")
    ap.add_argument("--scenario", default="", help="only rows of this scenario")
    a = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        sys.exit("plot.py: needs matplotlib (apt-get install python3-matplotlib)")

    labels = dict(LABELS)
    labels.update(kv.split("=", 1) for kv in a.labels.split(";") if "=" in kv)
    data = {}  # (collective, ranks) -> library -> [(bytes, time_us, busbw)]
    for path in a.csv:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if a.scenario and row["scenario"] != a.scenario:
                    continue
                b, t, bw = int(row["bytes"]), float(row["time_us"]), float(row["busbw_gbs"])
                if b <= 0 or t <= 0 or bw <= 0:
                    continue
                key = (row["scenario"], row["collective"], int(row["ranks"]))
                data.setdefault(key, {}).setdefault(row["library"], []).append((b, t, bw))
    if not data:
        sys.exit("plot.py: no rows to plot in %s" % " ".join(a.csv))
    os.makedirs(a.out_dir, exist_ok=True)
    ranks_of = {}
    for scen, coll, n in data:
        ranks_of.setdefault((scen, coll), set()).add(n)
    several_scenarios = len({k[0] for k in data}) > 1

    written = []
    for (scen, coll, n), libs in sorted(data.items()):
        stem = a.prefix + ("-" + scen if several_scenarios else "") + "-" + coll
        stem += "-%dr" % n if len(ranks_of[(scen, coll)]) > 1 else ""
        for what, idx, ylabel in (("busbw", 2, "bus bandwidth (GB/s)"), ("time", 1, "time per call (µs)")):
            fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
            for lib in sorted(libs, key=lambda l: (ORDER.index(l) if l in ORDER else 99, l)):
                pts = sorted(libs[lib])
                marker, ls = STYLE.get(lib, (".", "-"))
                ax.plot([p[0] for p in pts], [p[idx] for p in pts], marker=marker, linestyle=ls,
                        linewidth=2.2 if lib == "shoal" else 1.3, markersize=4,
                        label=labels.get(lib, lib))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human(int(x)) if x >= 1 else ""))
            ax.set_xlabel("size (nccl-tests' size: bytes per rank's larger buffer)")
            ax.set_ylabel(ylabel)
            title = "%s, %d ranks" % (coll, n) + (" (%s)" % scen if several_scenarios else "")
            if a.title:
                title += "\n" + "\n".join(textwrap.wrap(a.title, 90))
            ax.set_title(title, fontsize=9)
            ax.grid(True, which="major", alpha=0.4)
            ax.grid(True, which="minor", alpha=0.15)
            ax.legend(fontsize=8)
            for lbl in ax.get_xticklabels():
                lbl.set_rotation(30)
                lbl.set_fontsize(8)
            fig.tight_layout()
            out = os.path.join(a.out_dir, "%s-%s.png" % (stem, what))
            fig.savefig(out)
            plt.close(fig)
            written.append(out)
    for w in written:
        print("plot.py: wrote %s" % w)


if __name__ == "__main__":
    main()
