#!/usr/bin/python3
"""The WAN emulator's fidelity (netcluster.sh's WAN mode, shoal-wan): each setting on 2 emulated
hosts, measured with netcluster.sh bw, against what the setting says.

  - round trip (a refused TCP connect, median of 5) against --rtt: within 5% + 0.2 ms;
  - a stream's goodput on a loss-free link against the rate's TCP payload (1448 of every 1500
    bytes): within 5%;
  - a stream's goodput under random loss against the congestion control's model: CUBIC's
    (RFC 9438: the larger of its average window, (C(3+b)/(4(1-b)))^(1/4) (RTT/p)^(3/4) with
    C = 0.4, b = 0.7, and the Reno-friendly 1.22/sqrt(p), in packets of MSS a round trip) and
    BBR's (the bottleneck's rate less the packets lost, (1 - p), for loss below its 20% limit).

    sudo bench/wan_fidelity.py [--quick] [--doc docs/cluster.md#wan-fidelity]

Prints a markdown table; --doc also writes it into the page's block (bench/doc_block.py). Exits 1
when a round trip or a loss-free goodput misses its bound, or when a lossy one is outside 0.5-2x
of its model; 2 on a setting that could not be measured. Needs root and build/bin/shoal-wan.
"""
import argparse
import math
import os
import re
import subprocess
import sys

import doc_block  # bench/, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NC = os.path.join(ROOT, "scripts", "netcluster.sh")
PREFIX = "wf"
MSS = 1448


def nc(*args):
    r = subprocess.run([NC, *args, "--prefix", PREFIX], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"wan_fidelity.py: netcluster.sh {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def bw(seconds, cc=None):
    out = nc("bw", "0", "1", "--seconds", str(seconds), *(["--cc", cc] if cc else []))
    rtt = re.search(r"^rtt to \S+: ([0-9.]+) ms", out, re.M)
    total = re.search(r"^total: ([0-9.]+) Gbit/s", out, re.M)
    if not rtt or not total:
        sys.exit(f"wan_fidelity.py: no figures in:\n{out}")
    return float(rtt.group(1)), float(total.group(1)) * 1e3


def bits(rate):
    m = re.fullmatch(r"([0-9.]+)(mbit|gbit)", rate)
    return float(m.group(1)) * (1e6 if m.group(2) == "mbit" else 1e9)


def model_mbps(cc, rate_bps, rtt_s, p):
    """What the congestion control's model gives on a link of rate_bps, RTT and loss p."""
    payload = rate_bps * MSS / 1500
    if cc == "bbr":
        return payload * (1 - p) / 1e6
    c, b = 0.4, 0.7
    w_cubic = (c * (3 + b) / (4 * (1 - b))) ** 0.25 * (rtt_s / p) ** 0.75
    w_reno = 1.22 / math.sqrt(p)
    return min(payload, max(w_cubic, w_reno) * MSS * 8 / rtt_s) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer settings, shorter streams")
    doc_block.add_argument(ap, "wan_fidelity.py")
    a = ap.parse_args()
    if a.doc:  # before the runs, which take minutes
        path, name = doc_block.split("wan_fidelity.py", a.doc)
        doc_block.check(path, "wan_fidelity.py", name)
    secs = 3 if a.quick else 6
    rows, problems = [], []
    # (rate, rtt, loss, cc, seconds)
    settings = [("100mbit", "0", "0", None, secs), ("1gbit", "0", "0", None, secs),
                ("100mbit", "20ms", "0", None, secs), ("100mbit", "80ms", "0", None, 2 * secs),
                ("100mbit", "200ms", "0", None, 3 * secs)]
    lossy = [("100mbit", "80ms", "0.1%", "cubic"), ("100mbit", "80ms", "0.1%", "bbr"),
             ("100mbit", "80ms", "1%", "cubic"), ("100mbit", "80ms", "1%", "bbr"),
             ("100mbit", "200ms", "1%", "bbr")]
    if a.quick:
        settings = settings[:1] + settings[3:4]
        lossy = lossy[:2]
    settings += [(r, t, l, cc, 5 * secs) for r, t, l, cc in lossy]
    try:
        for rate, rtt, loss, cc, seconds in settings:
            nc("up", "--hosts", "2", "--rate", rate, "--wan", *(["--rtt", rtt] if rtt != "0" else []),
               *(["--loss", loss] if loss != "0" else []))
            got_rtt, got = bw(seconds, cc)
            want_rtt = float(rtt[:-2]) if rtt != "0" else 0.0
            p = float(loss.rstrip("%")) / 100
            rtt_ok = abs(got_rtt - want_rtt) <= 0.05 * want_rtt + 0.2
            if p == 0:
                want = bits(rate) * MSS / 1500 / 1e6
                what = "rate's payload"
                ok = abs(got - want) <= 0.05 * want if want_rtt < 50 else got <= 1.05 * want
                # a long round trip's slow start is part of a short stream: bounded above only
            else:
                want = model_mbps(cc, bits(rate), want_rtt / 1e3, p)
                what = f"{cc.upper() if cc == 'bbr' else 'CUBIC'} model"
                ok = 0.5 <= got / want <= 2
            if not rtt_ok:
                problems.append(f"{rate} RTT {rtt}: measured {got_rtt:.2f} ms")
            if not ok:
                problems.append(f"{rate} RTT {rtt} loss {loss} {cc or ''}: {got:.1f} Mbit/s against {want:.1f}")
            rows.append(f"| {rate} | {rtt} | {loss} | {cc or 'default'} | {seconds} s | {got_rtt:.2f} ms | "
                        f"{got:.1f} | {want:.1f} ({what}) | {got / want:.2f} |")
    finally:
        subprocess.run([NC, "down", "--prefix", PREFIX], capture_output=True)
    cc_default = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    text = "\n".join([
        f"# shoal-wan's links against their settings (2 hosts, one stream; default congestion control {cc_default})",
        "",
        "| rate | RTT set | loss | congestion control | stream | RTT measured | goodput Mbit/s | model Mbit/s | measured ÷ model |",
        "|---|---|---|---|---|---|---|---|---|", *rows]) + "\n"
    if problems:
        text += "\n" + "\n".join(f"- MISSED: {x}" for x in problems) + "\n"
    print(text, end="")
    if a.doc:
        doc_block.write(a.doc, "wan_fidelity.py", text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
