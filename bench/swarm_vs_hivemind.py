#!/usr/bin/python3
"""SWARM on shoal against SWARM on hivemind, side by side (docs/swarm.md, "Against hivemind").

For each configuration, one `shoal-swarm local` run, then one bench/peers/hivemind_swarm.py run
with the same model, stages, peers, slowdowns, global batch, trainers and micro-batches in flight,
and the kills at the same times taking the same peers as shoal's launcher picked. While a run
goes, the CPU seconds of its whole process tree are sampled every second beside its progress.

    bench/swarm_vs_hivemind.py [--configs het,het-async,kills] [--out swarm-vs-hivemind]
                               [--report-only] [--img docs/img] [--doc FILE#ID]

Configurations (the peers of docs/swarm.md's evidence 2: 9 peers on 3 stages, one of each speed
1x, 2x, 4x per stage, 20 ms emulated device time per forward):
    het        synchronous rounds of 144 micro-batches (hivemind.Optimizer's default, blocking step)
    het-async  delayed updates (shoal --delayed-updates; hivemind delay_optimizer_step and
               delay_grad_averaging)
    kills      rounds of 96 micro-batches, a peer killed at 20 s and another at 40 s (SIGKILL of
               the peer's whole process group); shoal rebalances every 8 s, hivemind cannot move peers
    home       across homes: scripts/netcluster.sh's `home` layout (6 hosts, each its own region
               on a 40 Mbit/s uplink and 200 Mbit/s downlink, 30-120 ms between hosts, 0.5 %
               loss a path), the 9 peers of two speeds (1x, 2x; two fast and one slow a stage)
               spread over the hosts as shoal-swarm local --netns places them, delayed updates,
               24 micro-batches in flight a trainer (a second of round trips to cover), 16
               rounds of 96 micro-batches, one peer killed at 25 s; both launchers and the
               bootstrap (shoal's registry, hivemind's first DHT node) run on host 0. Needs root.
               hivemind's averaging finds no group there: libp2p counts 198.18.0.0/15 as
               unroutable (docs/swarm.md, "Against hivemind").

Runs on Debian's python (matplotlib); the hivemind peer runs on the project's .venv (hivemind
1.1.12 beside torch, python/requirements.txt). Needs build/bin/shoal-swarm (a build with torch).
Writes OUT/<config>/{shoal,hivemind}/ (each launcher's files and cpu.csv), OUT/report.md and
IMG/swarm-vs-hivemind.png; exits non-zero when a run did not complete or shoal misses a target
(a higher fraction of ideal, at most half the CPU seconds per sample, recovery at least as fast;
on home also at least 0.8 of the ideal for shoal).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

import doc_block  # bench/, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")  # hivemind and torch (scripts/install-deps.sh)

MODEL = ["--stages", "3", "--d-model", "64", "--layers", "3", "--seq-len", "32", "--micro-batch", "4"]
SWARM9 = ["--peers", "9", "--trainers", "2", "--inflight", "8", "--device-ms", "20",
          "--slowdown", "1,2,4,2,4,1,4,1,2"]
CONFIGS = {
    "het": {"args": ["--global-batch", "144", "--rounds", "6"], "shoal": [], "hivemind": []},
    "het-async": {"args": ["--global-batch", "144", "--rounds", "6"], "shoal": ["--delayed-updates"],
                  "hivemind": ["--delayed-updates"]},
    "kills": {"args": ["--global-batch", "96", "--rounds", "20", "--kill-at", "20,40"],
              "shoal": ["--rebalance-period", "8"], "hivemind": []},
    "home": {"args": ["--global-batch", "96", "--rounds", "16", "--kill-at", "25", "--delayed-updates"],
             "shoal": ["--rebalance-period", "8"], "hivemind": [],
             "swarm": ["--peers", "9", "--trainers", "2", "--inflight", "24", "--device-ms", "20",
                       "--slowdown", "1,1,1,2,2,2,1,1,1"],
             "wan": ["--layout", "home", "--hosts", "6"], "min_fraction": 0.8},
}
NETCLUSTER = os.path.join(ROOT, "scripts", "netcluster.sh")
PREFIX = "svh"  # the emulated hosts of the WAN configurations: svh-h0, svh-h1, ...


class Hosts:
    """scripts/netcluster.sh's hosts for a WAN configuration, up for the `with` block: where the
    launchers run (host 0, whose address is the bootstrap) and the --netns list."""

    def __init__(self, wan):
        self.wan = wan
        self.hosts = int(wan[wan.index("--hosts") + 1])

    def __enter__(self):
        subprocess.run([NETCLUSTER, "down", "--prefix", PREFIX], capture_output=True)
        subprocess.run([NETCLUSTER, "up", "--prefix", PREFIX] + self.wan, check=True, stdout=subprocess.DEVNULL)
        self.netns = ",".join(f"{PREFIX}-h{h}" for h in range(self.hosts))
        self.first = "198.18.0.1"  # host 0, rail 0 (netcluster.sh's addressing)
        return self

    def __exit__(self, *_):
        subprocess.run([NETCLUSTER, "down", "--prefix", PREFIX], capture_output=True)

    def launch(self, cmd):
        return ["ip", "netns", "exec", f"{PREFIX}-h0"] + cmd


def cpu_seconds(root_pids):
    """utime + stime of every live process under the given roots, by pid (from /proc)."""
    children = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(pid))
            except OSError:
                pass
    tick = os.sysconf("SC_CLK_TCK")
    seen, stack = {}, list(root_pids)
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            seen[pid] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
        stack.extend(children.get(pid, []))
    return seen


def run(cmd, out, log):
    """Runs cmd, sampling the CPU seconds of its process tree and its progress.csv every second."""
    os.makedirs(out, exist_ok=True)
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        seen, rows, start = {}, [], time.time()
        while proc.poll() is None:
            time.sleep(1.0)
            seen.update(cpu_seconds([proc.pid]))
            samples = 0
            try:
                with open(os.path.join(out, "progress.csv")) as f:
                    lines = f.read().strip().splitlines()
                if len(lines) > 1:
                    samples = int(float(lines[-1].split(",")[1]))
            except (OSError, ValueError, IndexError):
                pass
            rows.append((time.time() - start, sum(seen.values()), samples))
    with open(os.path.join(out, "cpu.csv"), "w") as f:
        f.write("wall_s,cpu_s,samples\n")
        for r in rows:
            f.write("%.2f,%.3f,%d\n" % r)
    return proc.returncode


def load(d):
    if not os.path.exists(os.path.join(d, "summary.json")):
        return None
    r = {"summary": json.load(open(os.path.join(d, "summary.json")))}
    for name in ("progress", "peers", "cpu"):
        path = os.path.join(d, name + ".csv")
        r[name] = list(csv.DictReader(open(path))) if os.path.exists(path) else []
    return r


def cpu_per_sample(run, global_batch, micro_batch):
    """CPU seconds of the whole tree per sample, from the end of the first round to the last sample."""
    rows = [(float(c["cpu_s"]), int(c["samples"])) for c in run["cpu"]]
    first = next((r for r in rows if r[1] >= global_batch * micro_batch), None)
    last = max(rows, key=lambda r: r[1], default=None)
    if not first or not last or last[1] <= first[1]:
        return float("nan")
    last = next(r for r in rows if r[1] == last[1])  # the first sample at the final count
    return (last[0] - first[0]) / (last[1] - first[1])


def recoveries(run, stages):
    """Per kill: (time, the victim, the survivors' capacity in the starting placement (peer i on
    stage i mod stages, where hivemind's peers stay) from their throughputs measured just before
    the kill, seconds until the 5-s samples/s window is back to 85 % of that, or None)."""
    s, prog, peers = run["summary"], run["progress"], run["peers"]
    out = []
    kill_times = [k["time_s"] for k in s["kills"]] + [float("inf")]
    for i, k in enumerate(s["kills"]):
        t0 = k["time_s"]
        times = sorted({float(p["time_s"]) for p in peers if float(p["time_s"]) <= t0 - 0.5})
        cap = [0.0] * stages
        if times:
            for p in peers:
                if float(p["time_s"]) == times[-1] and p["peer"] != k["peer"]:
                    cap[int(p["peer"].removeprefix("server")) % stages] += float(p["throughput"])
        target = 0.85 * min(cap)
        hit = next((float(r["time_s"]) for r in prog if t0 + 5.0 <= float(r["time_s"]) < kill_times[i + 1]
                    and float(r["samples_per_s"]) >= target), None)
        out.append((t0, k["peer"], min(cap), None if hit is None else hit - t0))
    return out


def report(base, configs, img, doc=None):
    lines, ok = [], True
    wan = [CONFIGS[c]["wan"] for c in configs if "wan" in CONFIGS[c]]
    lines.append("# SWARM on shoal against SWARM on hivemind" +
                 (f" (netcluster.sh up {' '.join(wan[0])})" if wan else " (one host)") + "\n")
    lines.append("| configuration | system | steady samples/s | bottleneck ideal | fraction of ideal | "
                 "CPU s / sample | bytes between stages / sample | loss per round |")
    lines.append("|---|---|---|---|---|---|---|---|")
    figures = []
    for name in configs:
        gb = int(CONFIGS[name]["args"][1])
        runs = {sys_: load(os.path.join(base, name, sys_)) for sys_ in ("shoal", "hivemind")}
        if not all(runs.values()):
            print(f"{name}: a run is missing", file=sys.stderr)
            ok = False
            continue
        row = {}
        for sys_, r in runs.items():
            s = r["summary"]
            cps = cpu_per_sample(r, gb, 4)
            row[sys_] = (s.get("fraction_of_ideal", 0.0), cps, s)
            losses = " ".join("%.2f" % x for x in s["round_loss"])
            lines.append(f"| {name} | {sys_} | {s.get('steady_samples_per_s', float('nan')):.1f} | "
                         f"{s.get('ideal_samples_per_s', float('nan')):.1f} | {s.get('fraction_of_ideal', 0):.2f} | "
                         f"{cps:.4f} | {s['bytes_between_stages_per_sample']:,.0f} | {losses} |")
            if not s.get("completed"):
                print(f"{name}/{sys_}: did not complete ({s['rounds_done']}/{s['rounds']} rounds)", file=sys.stderr)
                ok = False
        (fs, cs, ss), (fh, ch, sh) = row["shoal"], row["hivemind"]
        lines.append(f"| {name} | shoal / hivemind | {ss.get('steady_samples_per_s', 0) / max(sh.get('steady_samples_per_s', 1e-9), 1e-9):.2f}x | | "
                     f"{fs / max(fh, 1e-9):.2f}x | {cs / ch:.2f} | | |")
        if not fs > fh:
            print(f"{name}: fraction of ideal shoal {fs:.2f} not above hivemind {fh:.2f}", file=sys.stderr)
            ok = False
        if fs < CONFIGS[name].get("min_fraction", 0.0):
            print(f"{name}: shoal's fraction of ideal {fs:.2f} below {CONFIGS[name]['min_fraction']}", file=sys.stderr)
            ok = False
        if not cs <= 0.5 * ch:
            print(f"{name}: CPU s/sample shoal {cs:.3f} more than half of hivemind's {ch:.3f}", file=sys.stderr)
            ok = False
        figures.append((name, runs))
    kills = [(n, r) for n, r in figures if r["shoal"]["summary"]["kills"]]
    for name, runs in kills:
        lines.append(f"\nKills ({name}): time from the kill until the samples/s of the last 5 s are back to 85 % of "
                     "the survivors' capacity in the starting placement (where hivemind's peers stay; shoal may move "
                     "them), from each system's own measured throughputs (by construction at least 5 s).\n")
        lines.append("| kill at | peer | system | survivors' capacity (samples/s) | back to 85 % after |")
        lines.append("|---|---|---|---|---|")
        rec = {sys_: recoveries(r, 3) for sys_, r in runs.items()}
        for i in range(len(rec["shoal"])):
            for sys_ in ("shoal", "hivemind"):
                if i >= len(rec[sys_]):
                    continue
                t0, peer, cap, back = rec[sys_][i]
                lines.append(f"| {t0:.0f} s | {peer} | {sys_} | {cap:.1f} | "
                             f"{'%.0f s' % back if back is not None else 'not before the next kill or the end'} |")
            if i < len(rec["hivemind"]):
                bs, bh = rec["shoal"][i][3], rec["hivemind"][i][3]
                if bs is None or (bh is not None and bs > bh):
                    print(f"{name}: kill {i}: shoal back after {bs} s, hivemind after {bh} s", file=sys.stderr)
                    ok = False
    doc_block.publish(base, "\n".join(lines) + "\n", doc, "swarm_vs_hivemind.py")
    if img and figures:
        wan = "".join(f"-{n}" for n, _ in figures if "wan" in CONFIGS[n])
        plot(figures, os.path.join(img, f"swarm-vs-hivemind{wan}.png"))
    return ok


def plot(figures, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(figures), figsize=(5 * len(figures), 7), squeeze=False)
    for col, (name, runs) in enumerate(figures):
        for sys_, style in (("shoal", "-"), ("hivemind", "--")):
            r = runs[sys_]
            t = [float(p["time_s"]) for p in r["progress"]]
            axes[0][col].plot(t, [float(p["samples_per_s"]) for p in r["progress"]], style, label=f"{sys_} samples/s")
            axes[0][col].plot(t, [float(p["ideal_samples_per_s"]) for p in r["progress"]], style, alpha=0.4,
                              label=f"{sys_} ideal")
            s = r["summary"]
            axes[1][col].plot(s["round_time_s"][:len(s["round_loss"])], s["round_loss"][:len(s["round_time_s"])],
                              style + "o", label=sys_)
            for k in s["kills"]:
                axes[0][col].axvline(k["time_s"], color="grey", lw=0.8)
        axes[0][col].set_title(name)
        axes[0][col].set_xlabel("s")
        axes[0][col].legend(fontsize=7)
        axes[1][col].set_xlabel("s")
        axes[1][col].set_ylabel("loss (round mean)")
        axes[1][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def run_pair(c, cfg, a, hosts):
    """One configuration: shoal-swarm local, then hivemind_swarm.py local killing the same peers."""
    d = os.path.abspath(os.path.join(a.out, c))
    swarm = cfg.get("swarm", SWARM9)
    shoal_cmd = [os.path.join(a.bin, "shoal-swarm"), "local"] + MODEL + swarm + cfg["args"] + cfg["shoal"] + \
        ["--out", os.path.join(d, "shoal")]
    hm = [VENV_PY, os.path.join(HERE, "peers", "hivemind_swarm.py"), "local"] + MODEL + swarm + \
        cfg["args"] + cfg["hivemind"] + ["--out", os.path.join(d, "hivemind")]
    if hosts:
        shoal_cmd = hosts.launch(shoal_cmd + ["--netns", hosts.netns, "--registry", hosts.first + ":0"])
        hm += ["--netns", hosts.netns, "--host", hosts.first]
    print(f"== {c}: shoal-swarm local", flush=True)
    run(shoal_cmd, os.path.join(d, "shoal"), os.path.join(d, "shoal.log"))
    shoal_summary = load(os.path.join(d, "shoal"))
    if shoal_summary and shoal_summary["summary"]["kills"]:
        hm += ["--kill-peers", ",".join(k["peer"] for k in shoal_summary["summary"]["kills"])]
    print(f"== {c}: hivemind_swarm.py local", flush=True)
    run(hosts.launch(hm) if hosts else hm, os.path.join(d, "hivemind"), os.path.join(d, "hivemind.log"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default="het,het-async,kills")
    p.add_argument("--out", default="swarm-vs-hivemind")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--img", default="", help="write swarm-vs-hivemind.png there (docs/img)")
    p.add_argument("--report-only", action="store_true")
    doc_block.add_argument(p, "swarm_vs_hivemind.py")
    a = p.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"swarm_vs_hivemind: unknown configuration {c} (known: {', '.join(CONFIGS)})")
    if a.doc:  # before a long run, not after it
        path, name = doc_block.split("swarm_vs_hivemind.py", a.doc)
        doc_block.check(path, "swarm_vs_hivemind.py", name)
    if any("wan" in CONFIGS[c] for c in configs) and not a.report_only and os.geteuid() != 0:
        sys.exit("swarm_vs_hivemind: the WAN configurations need root (the hosts are network namespaces)")
    if not a.report_only:
        for c in configs:
            cfg = CONFIGS[c]
            if "wan" in cfg:
                with Hosts(cfg["wan"]) as hosts:
                    run_pair(c, cfg, a, hosts)
            else:
                run_pair(c, cfg, a, None)
    return 0 if report(a.out, configs, a.img, a.doc) else 1

if __name__ == "__main__":
    sys.exit(main())
