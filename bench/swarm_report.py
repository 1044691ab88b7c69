#!/usr/bin/env python3
"""Tables and figures of docs/swarm.md from the runs of bench/swarm_evidence.sh.
Usage: swarm_report.py EVIDENCE_DIR [IMG_DIR=docs/img] [--doc FILE]

With --doc, each evidence N found in EVIDENCE_DIR also replaces what stands between
'<!-- swarm_report.py:N -->' and '<!-- /swarm_report.py:N -->' in FILE (its heading stays FILE's),
so that a re-run rewrites the figures there and the prose around them stays."""
import csv
import itertools
import json
import os
import sys

import doc_block  # bench/, beside this script
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(base, name):
    d = os.path.join(base, name)
    if not os.path.exists(os.path.join(d, "summary.json")):
        return None
    with open(os.path.join(d, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(d, "progress.csv")) as f:
        progress = list(csv.DictReader(f))
    with open(os.path.join(d, "rounds.csv")) as f:
        rounds = list(csv.DictReader(f))
    peers = []
    if os.path.exists(os.path.join(d, "peers.csv")):
        with open(os.path.join(d, "peers.csv")) as f:
            peers = list(csv.DictReader(f))
    return {"summary": summary, "progress": progress, "rounds": rounds, "peers": peers}


def load_all(base, prefix, names):
    """(name, run) for each of prefix-name that exists."""
    runs = [(n, load(base, f"{prefix}-{n}")) for n in names]
    return [(n, r) for n, r in runs if r]


def survivors_best_at(peers, t, stages):
    """Best bottleneck the peers live at time t could deliver, from their latest measured speed."""
    times = sorted({float(p["time_s"]) for p in peers if float(p["time_s"]) <= t})
    if not times:
        return float("nan")
    rows = [p for p in peers if float(p["time_s"]) == times[-1]]
    return best_bottleneck([float(p["throughput"]) for p in rows if int(p["stage"]) >= 0], stages)


def best_bottleneck(rates, stages):
    """Largest achievable min-stage capacity when the given peer rates are placed optimally."""
    best = 0.0
    for placement in itertools.product(range(stages), repeat=len(rates)):
        cap = [0.0] * stages
        for r, s in zip(rates, placement):
            cap[s] += r
        best = max(best, min(cap))
    return best


def plot_losses(curves, path):
    """Loss per round of each (label, losses, linestyle) into one figure at path."""
    plt.figure(figsize=(6, 4))
    for label, losses, style in curves:
        plt.plot(losses, linestyle=style, label=label)
    plt.xlabel("round")
    plt.ylabel("loss")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.tight_layout()
    plt.savefig(path, dpi=100)
    plt.close()


def col(rows, key):
    return [float(r[key]) for r in rows]


def write_doc(path, text):
    """Each '### N. ...' section of `text`, without its heading, into FILE's block N."""
    sections = {}
    for part in ("\n" + text).split("\n### ")[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.split(".")[0]] = body.strip("\n")
    for n, body in sections.items():
        doc_block.replace(path, "swarm_report.py", n, body)
    print(f"swarm_report.py: rewrote evidence {', '.join(sorted(sections))} in {path}", file=sys.stderr)


def main(base, img, doc=None):
    os.makedirs(img, exist_ok=True)
    out = []
    # 1. correctness
    c = load(base, "correctness")
    if c:
        s = c["summary"]
        out.append("### 1. Correctness\n")
        out.append(f"{s['model']}, {s['rounds_done']} rounds: max |loss(swarm) - loss(single process)| = "
                   f"**{s.get('reference_max_abs_diff', float('nan')):.2e}** "
                   f"(loss {s['round_loss'][0]:.4f} -> {s['round_loss'][-1]:.4f}).\n")
        plot_losses([("swarm (3 stages x 1 replica)", s["round_loss"], "-"),
                     ("single process", s["reference_loss"], "--")], os.path.join(img, "swarm-correctness.png"))
    # 2. heterogeneity
    hs, hst = load(base, "het-swarm"), load(base, "het-static")
    if hs and hst:
        out.append("### 2. Heterogeneity (peers 1x, 2x, 4x slower; 3 of each speed per stage)\n")
        out.append("| routing | steady samples/s | ideal (bottleneck capacity) | fraction of ideal |")
        out.append("|---|---|---|---|")
        for name, r in (("SWARM (stochastic wiring)", hs), ("static pipelines (GPipe-style)", hst)):
            s = r["summary"]
            out.append(f"| {name} | {s.get('steady_samples_per_s', s['samples_per_s']):.1f} | "
                       f"{s.get('ideal_samples_per_s', float('nan')):.1f} | "
                       f"**{s.get('fraction_of_ideal', float('nan')):.2f}** |")
        ratio = hs["summary"].get("steady_samples_per_s", 0) / max(1e-9, hst["summary"].get("steady_samples_per_s", 1e-9))
        out.append(f"\nSWARM / static = **{ratio:.2f}x**.\n")
    # 3. failures
    fs, fst = load(base, "fail-swarm"), load(base, "fail-static")
    if fs:
        s = fs["summary"]
        prog = fs["progress"]
        period = s.get("rebalance_period_s", 0)
        kills = ", ".join("%.0f s (%s)" % (k["time_s"], k["peer"]) for k in s["kills"])
        out.append("### 3. Failures (3 of 9 peers killed)\n")
        out.append(f"Kills at {kills}; {s['rounds_done']}/{s['rounds']} rounds completed; loss "
                   f"{s['round_loss'][0]:.3f} -> {s['round_loss'][-1]:.3f}. \"Survivors' best\" is the bottleneck "
                   f"capacity of the best placement of the peers alive after the kill, from their measured speeds "
                   f"(brute force over placements); rebalancing period {period:.0f} s.\n")
        out.append("| kill at | survivors' best (samples/s) | back to >= 85 % of it after | "
                   "samples/s two periods after the kill | as a fraction of survivors' best |")
        out.append("|---|---|---|---|---|")
        best_line = []
        kill_times = [k["time_s"] for k in s["kills"]] + [float("inf")]
        for i, k in enumerate(s["kills"]):
            t0 = k["time_s"]
            # speeds measured a few seconds after the kill: the victim is gone from the registry
            best = survivors_best_at(fs["peers"], min(t0 + 6.0, kill_times[i + 1] - 0.5), 3)
            best_line.append((t0, min(kill_times[i + 1], float(prog[-1]["time_s"])), best))
            later = [r for r in prog if t0 + 5.0 < float(r["time_s"]) < kill_times[i + 1]]
            hit = next((r for r in later if float(r["samples_per_s"]) >= 0.85 * best), None)
            at2 = next((r for r in prog if float(r["time_s"]) >= t0 + 2 * period), None)
            frac = float(at2["samples_per_s"]) / best if at2 and float(at2["time_s"]) < kill_times[i + 1] else float("nan")
            out.append(f"| {t0:.0f} s | {best:.1f} | {('%.1f s' % (float(hit['time_s']) - t0)) if hit else 'not before the next kill'} | "
                       f"{float(at2['samples_per_s']) if at2 else float('nan'):.1f} | {frac:.2f} |")
        if "reference_loss" in s:
            ref = s["reference_loss"]
            worst = max(range(len(ref)), key=lambda i: abs(ref[i] - s["round_loss"][i]))
            diffs = sorted(abs(a - b) for a, b in zip(ref, s["round_loss"]))
            out.append(f"\nSingle-process training on the same batches (no failures): loss {ref[0]:.3f} -> {ref[-1]:.3f}. "
                       f"Per round, the swarm's loss differs from it by at most {diffs[-1]:.3f} (round {worst}: "
                       f"{s['round_loss'][worst]:.3f} against {ref[worst]:.3f}), otherwise by at most {diffs[-2]:.4f}; "
                       f"the differences come from the gradients the killed and moving peers dropped.\n")
        if fst:
            st = fst["summary"]
            out.append(f"\nStatic pipelines, same peers, one kill at {st['kills'][0]['time_s']:.0f} s: "
                       f"{st['rounds_done']}/{st['rounds']} rounds, trainer failures {st['trainer_failures']} "
                       f"({'stopped' if not st['completed'] else 'completed'}).\n")
        if "reference_loss" in s:
            plot_losses([("swarm, 3 of 9 peers killed", s["round_loss"], "-"),
                         ("single process, no failures", s["reference_loss"], "--")],
                        os.path.join(img, "swarm-failures-loss.png"))
        plt.figure(figsize=(7, 4))
        t = col(prog, "time_s")
        plt.plot(t, col(prog, "samples_per_s"), label="SWARM samples/s (5 s window)")
        plt.plot(t, col(prog, "ideal_samples_per_s"), linestyle=":", label="bottleneck capacity of current placement")
        for i, (a, b, best) in enumerate(best_line):
            plt.hlines(best, a, b, color="gray", linestyle="--", label="survivors' best placement" if i == 0 else None)
        for k in s["kills"]:
            plt.axvline(k["time_s"], color="red", alpha=0.4)
        if fst:
            tp = fst["progress"]
            plt.plot(col(tp, "time_s"), col(tp, "samples_per_s"), label="static pipelines", alpha=0.7)
        plt.xlabel("time (s)")
        plt.ylabel("samples/s")
        plt.title("failures (red: a peer killed)")
        plt.legend(fontsize=8)
        plt.grid(alpha=0.3)
        plt.tight_layout()
        plt.savefig(os.path.join(img, "swarm-failures.png"), dpi=100)
        plt.close()
    # 4. rebalancing
    rb = load(base, "rebalance")
    if rb:
        s = rb["summary"]
        prog = rb["progress"]
        out.append("### 4. Rebalancing (7 of 9 peers start on stage 0)\n")
        first, last = prog[min(2, len(prog) - 1)], prog[-1]
        out.append(f"Placement {first['replicas_per_stage']} -> {last['replicas_per_stage']} after {s['moves']} moves; "
                   f"samples/s {float(first['samples_per_s']):.1f} (t={float(first['time_s']):.0f} s) -> "
                   f"{float(last['samples_per_s']):.1f} (t={float(last['time_s']):.0f} s).\n")
        out.append("| time (s) | replicas per stage | samples/s |")
        out.append("|---|---|---|")
        seen = None
        for r in prog:
            if r["replicas_per_stage"] != seen:
                seen = r["replicas_per_stage"]
                out.append(f"| {float(r['time_s']):.0f} | {seen} | {float(r['samples_per_s']):.1f} |")
        fig, ax = plt.subplots(figsize=(7, 4))
        t = col(prog, "time_s")
        ax.plot(t, col(prog, "samples_per_s"), label="samples/s")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("samples/s")
        ax2 = ax.twinx()
        reps = [list(map(int, r["replicas_per_stage"].split("/"))) for r in prog]
        for k in range(len(reps[0])):
            ax2.step(t, [x[k] for x in reps], where="post", linestyle="--", label=f"replicas of stage {k}")
        ax2.set_ylabel("replicas")
        fig.legend(fontsize=8, loc="lower right", bbox_to_anchor=(0.86, 0.14))
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(img, "swarm-rebalance.png"), dpi=100)
        plt.close(fig)
    # 5. compression
    codecs = load_all(base, "codec", ("none", "fp16", "int8"))
    if codecs:
        out.append("### 5. Compression between stages\n")
        out.append("| codec | bytes per sample between stages | vs none | final loss | mean loss, last 10 rounds | "
                   "largest per-round loss difference from none |")
        out.append("|---|---|---|---|---|---|")
        base_loss = codecs[0][1]["summary"]["round_loss"]
        base_bytes = codecs[0][1]["summary"]["bytes_between_stages_per_sample"]
        for c, r in codecs:
            s = r["summary"]
            tail = s["round_loss"][-10:]
            out.append(f"| {c} | {s['bytes_between_stages_per_sample']:.0f} | "
                       f"{s['bytes_between_stages_per_sample'] / base_bytes:.2f} | {s['round_loss'][-1]:.4f} | "
                       f"{sum(tail) / len(tail):.4f} | "
                       f"{max(abs(a - b) for a, b in zip(s['round_loss'], base_loss)):.4f} |")
        plot_losses([(c, r["summary"]["round_loss"], "-") for c, r in codecs],
                    os.path.join(img, "swarm-compression.png"))
    # 6. asynchronous rounds
    pairs = [(gb, load(base, f"rounds-sync-{gb}"), load(base, f"rounds-delayed-{gb}")) for gb in (24, 48)]
    pairs = [p for p in pairs if p[1] and p[2]]
    if pairs:
        out.append("### 6. Asynchronous rounds (delayed parameter updates)\n")
        out.append("| global batch (micro-batches) | rounds | schedule | time (s) | steady samples/s | fraction of ideal | "
                   "final loss | largest per-round difference from single-process training on its schedule |")
        out.append("|---|---|---|---|---|---|---|---|")
        fig, ax = plt.subplots(figsize=(6, 4))
        for color, (gb, sync, delayed) in enumerate(pairs):
            for name, r in (("synchronous", sync), ("delayed updates", delayed)):
                s = r["summary"]
                ref = s.get("reference_loss", [])
                diff = max((abs(a - b) for a, b in zip(ref, s["round_loss"])), default=float("nan"))
                frac = s.get("fraction_of_ideal", float("nan"))
                out.append(f"| {gb} | {s['rounds_done']} | {name} | {s['elapsed_s']:.1f} | "
                           f"{s.get('steady_samples_per_s', float('nan')):.1f} | "
                           f"{('**%.2f**' % frac) if name != 'synchronous' else '%.2f' % frac} | "
                           f"{s['round_loss'][-1]:.4f} | {diff:.1e} |")
                ax.plot([float(x["time_s"]) for x in r["rounds"]], [float(x["loss"]) for x in r["rounds"]],
                        linestyle="-" if name == "synchronous" else "--", color=f"C{color}",
                        label=f"{name}, {gb} micro-batches")
            ratio = delayed["summary"].get("steady_samples_per_s", 0) / max(
                1e-9, sync["summary"].get("steady_samples_per_s", 1e-9))
            out.append(f"| {gb} | | delayed / synchronous | | **{ratio:.2f}x** | | | |")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("loss")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(img, "swarm-delayed-updates.png"), dpi=100)
        plt.close(fig)
    # 7. compressed averaging
    runs = load_all(base, "averaging", ("none", "fp16", "int8"))
    if runs:
        out.append("### 7. Compressed averaging inside a stage\n")
        out.append("| averaging | bytes per member and round | vs none | steady samples/s | final loss | "
                   "mean loss, last 10 rounds | per-round loss difference from none: median, largest (round) |")
        out.append("|---|---|---|---|---|---|---|")
        base_run = runs[0][1]["summary"]
        for c, r in runs:
            s = r["summary"]
            tail = s["round_loss"][-10:]
            per = s.get("averaging_bytes_per_member_round", float("nan"))
            diffs = [abs(a - b) for a, b in zip(s["round_loss"], base_run["round_loss"])]
            worst = max(range(len(diffs)), key=lambda i: diffs[i])
            out.append(f"| {c} | {per:.0f} | {per / base_run.get('averaging_bytes_per_member_round', float('nan')):.2f} | "
                       f"{s.get('steady_samples_per_s', float('nan')):.1f} | {s['round_loss'][-1]:.4f} | "
                       f"{sum(tail) / len(tail):.4f} | "
                       f"{sorted(diffs)[len(diffs) // 2]:.4f}, {diffs[worst]:.4f} ({worst}) |")
        plot_losses([(c, r["summary"]["round_loss"], "-") for c, r in runs],
                    os.path.join(img, "swarm-averaging.png"))
    print("\n".join(out))
    if doc:
        write_doc(doc, "\n".join(out))


if __name__ == "__main__":
    args = sys.argv[1:]
    doc = None
    if "--doc" in args:
        i = args.index("--doc")
        if i + 1 >= len(args):
            sys.exit(__doc__)
        doc = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    main(args[0], args[1] if len(args) > 1 else "docs/img", doc)
