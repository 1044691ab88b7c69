#!/usr/bin/env python3
"""A study of one emulated WAN layout in virtual time (docs/scale.md, "Regions"): the spec
`scripts/netcluster.sh spec --layout LAYOUT --hosts H` prints, every row of each collective (and
the hierarchical compositions, with several ranks per host) through `shoal-sim run --wan-spec`,
and per collective and size a table of the best row, the ring in rank order, the ring on the
model's links (link_ring) and the best hierarchical composition, as times and as a fraction of
the best. Each LAYOUT:HOSTSxRANKS is one world; --doc FILE#ID writes the tables there.

  bench/sim_wan_study.py --layout continents --worlds 64x1,8x8 --sizes 1M,16M,256M [--doc FILE#ID]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import doc_block  # bench/, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_spec(layout, hosts, tmp):
    """The layout's WAN spec for `hosts` hosts (netcluster.sh spec), once per world."""
    spec = os.path.join(tmp, f"{layout}-{hosts}.wan")
    with open(spec, "w") as f:
        subprocess.run(["bash", os.path.join(ROOT, "scripts/netcluster.sh"), "spec", "--layout", layout,
                        "--hosts", str(hosts)], stdout=f, check=True)
    return spec


def simulate(spec, hosts, rph, collective, sizes, sim, tmp):
    out = os.path.join(tmp, f"{os.path.basename(spec)}-{rph}-{collective}.json")
    subprocess.run([sim, "run", "--wan-spec", spec, "--ranks-per-host", str(rph), "-c", collective, "-a", "all",
                    "-p", str(hosts * rph), "-s", sizes, "--threads", "1", "--json", out],
                   stdout=subprocess.DEVNULL, check=True)
    with open(out) as f:
        return json.load(f)["rows"]


def ms(t):
    return f"{t:,.0f}" if t is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layout", default="continents")
    ap.add_argument("--worlds", default="64x1,8x8", help="HOSTSxRANKS_PER_HOST, comma-separated")
    ap.add_argument("--collectives", default="all_reduce,all_gather,reduce_scatter")
    ap.add_argument("--sizes", default="1M,16M,256M")
    ap.add_argument("--sim", default=os.environ.get("SHOAL_SIM", os.path.join(ROOT, "build/bin/shoal-sim")))
    doc_block.add_argument(ap, "sim_wan_study.py")
    a = ap.parse_args()
    lines = [f"# {a.layout}: predicted times (ms) per world, collective and size", "",
             "| world | collective | size | best row | best | ring | link_ring | best hierarchical | link_ring / best |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for world in a.worlds.split(","):
            hosts, rph = (int(x) for x in world.split("x"))
            spec = write_spec(a.layout, hosts, tmp)
            for c in a.collectives.split(","):
                rows = [r for r in simulate(spec, hosts, rph, c, a.sizes, a.sim, tmp) if r.get("time_us")]
                for size in sorted({r["size"] for r in rows}):
                    at = {r["algorithm"]: r["time_us"] / 1e3 for r in rows if r["size"] == size}
                    best = min(at, key=at.get)
                    hier = [t for name, t in at.items() if name.startswith("hier(")]
                    ratio = f"{at['link_ring'] / at[best]:.2f}" if "link_ring" in at else "-"
                    lines.append(
                        f"| {hosts} × {rph} | {c} | {doc_block.size_name(size)} | {best} | {ms(at[best])} | "
                        f"{ms(at.get('ring'))} | {ms(at.get('link_ring'))} | {ms(min(hier) if hier else None)} | "
                        f"{ratio} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.doc:
        doc_block.write(a.doc, "sim_wan_study.py", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
