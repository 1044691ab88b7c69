"""The tables of a bench/scenarios.sh run, from its CSV (scenario,collective,ranks,library,bytes,
time_us,busbw_gbs: one row per library and size, the round compare.sh chose).

    python3 bench/scenarios_report.py CSV [--style tables|summary] [--doc FILE#ID]

--style tables: one table per (scenario, collective), bus bandwidth in GB/s of shoal and every
peer and shoal ÷ the best peer at each size. --style summary: one line per (scenario,
collective) counted against the one-host targets: from 64 KiB shoal's bus bandwidth at least the
best peer's; below, within 10% of it; and the geometric mean of shoal ÷ best peer. --doc writes
the result between FILE's '<!-- scenarios_report.py:ID -->' lines (bench/doc_block.py) instead
of printing it. Exits 1 when a (scenario, collective) has no shoal row or no peer row.
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_block  # noqa: E402

TOOL = "scenarios_report.py"
NAMES = {"mpi-vader": "Open MPI (vader)", "mpi-tcp": "Open MPI (tcp)", "mpich": "MPICH",
         "mpich-tcp": "MPICH (tcp)", "gloo": "Gloo", "torch-gloo": "torch gloo"}
SPLIT = 64 * 1024  # the targets change at 64 KiB


def fmt(x):
    """Three significant digits, never in exponent form (the peers' small-message cells)."""
    if x <= 0:
        return "0"
    return f"{x:.{max(0, 2 - math.floor(math.log10(x)))}f}"


def load(path):
    """-> {(scenario, collective): {library: {bytes: busbw}}}, in the CSV's order."""
    groups = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["scenario"], row["collective"])
            lib = groups.setdefault(key, {}).setdefault(row["library"], {})
            lib[int(row["bytes"])] = float(row["busbw_gbs"])
    return groups


def peer_name(scenario, lib):
    name = NAMES.get(lib, lib)
    if scenario.startswith("cluster") and lib == "mpi-vader":
        return "Open MPI (vader+tcp)"
    return name


def ratios(libs):
    """-> [(bytes, shoal, {peer: busbw}, shoal ÷ best peer)] over the sizes every library ran."""
    peers = [p for p in libs if p != "shoal"]
    rows = []
    for b in sorted(libs["shoal"]):
        got = {p: libs[p][b] for p in peers if b in libs[p]}
        best = max(got.values(), default=0.0)
        if best > 0:
            rows.append((b, libs["shoal"][b], got, libs["shoal"][b] / best))
    return peers, rows


def tables(groups):
    out = []
    for (scen, coll), libs in groups.items():
        peers, rows = ratios(libs)
        out.append(f"**{scen}: {coll}**\n")
        out.append("| size | shoal busbw | " + " | ".join(peer_name(scen, p) for p in peers) +
                   " | shoal ÷ best peer |")
        out.append("|---:|---:|" + "---:|" * len(peers) + "---:|")
        for b, s, got, r in rows:
            cells = " | ".join(fmt(got[p]) if p in got else "—" for p in peers)
            out.append(f"| {doc_block.size_name(b)} | {fmt(s)} | {cells} | {r:.2f} |")
        out.append("")
    return "\n".join(out)


def counted(ratios_, ok):
    """(how many of `ratios_` pass `ok` / how many, the worst), or dashes for none."""
    if not ratios_:
        return "—", "—"
    return f"{sum(ok(r) for r in ratios_)}/{len(ratios_)}", f"{min(ratios_):.2f}"


def summary(groups):
    out = ["| scenario | collective | sizes ≥ 64 KiB: shoal ≥ best peer | worst there | "
           "sizes < 64 KiB: within 10% of the best | worst there | geomean shoal ÷ best |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for (scen, coll), libs in groups.items():
        _, rows = ratios(libs)
        big = [r for b, _, _, r in rows if b >= SPLIT]
        small = [r for b, _, _, r in rows if b < SPLIT]
        geo = math.exp(sum(math.log(r) for _, _, _, r in rows) / len(rows))
        b_ok, b_worst = counted(big, lambda r: r >= 1.0)
        s_ok, s_worst = counted(small, lambda r: r >= 0.9)
        out.append(f"| {scen} | {coll} | {b_ok} | {b_worst} | {s_ok} | {s_worst} | {geo:.2f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--style", choices=("tables", "summary"), default="tables")
    ap.add_argument("--doc", help="FILE#ID: write between the page's markers")
    a = ap.parse_args()
    groups = load(a.csv)
    bad = [f"{s} {c}" for (s, c), libs in groups.items()
           if "shoal" not in libs or len(libs) < 2 or not ratios(libs)[1]]
    if not groups or bad:
        sys.exit(f"{TOOL}: {a.csv}: no shoal or no peer rows for: {', '.join(bad) or 'anything'}")
    body = tables(groups) if a.style == "tables" else summary(groups)
    if a.doc:
        path, name = doc_block.split(TOOL, a.doc)
        doc_block.replace(path, TOOL, name, body)
        print(f"{TOOL}: wrote {a.doc}")
    else:
        print(body)


if __name__ == "__main__":
    main()
