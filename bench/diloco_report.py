#!/usr/bin/env python3
"""Report of bench/diloco_cluster.sh: OUT/runs.jsonl -> OUT/report.md (and OUT/loss.png where
matplotlib is installed). Per variant: the loss it ends with (the mean of its last 10 steps'),
when it first reaches the loss DDP over gloo ends with (the same mean over a sliding window of
10 steps), that time against DDP over gloo's, the bytes its host sent per inner step (the
kernel's counter) and the fraction of the wall-clock time spent in inner steps. Exits non-zero
when a run failed, a DiLoCo variant never reaches DDP over gloo's final loss, or diloco-elastic
(a worker killed, a newcomer admitted) took fewer outer steps than diloco or ends with a newcomer
whose state hash differs from worker 0's.

    bench/diloco_report.py OUT [--baseline ddp-gloo] [--window 10] [--doc FILE#ID [--img PNG]]

--doc also writes the report into FILE's block of ID (bench/doc_block.py) and --img the plot to PNG.
"""

import argparse
import json
import os
import sys

import doc_block  # bench/, beside this script


def smoothed(losses, window):
    out, acc = [], 0.0
    for i, v in enumerate(losses):
        acc += v
        if i >= window:
            acc -= losses[i - window]
        out.append(acc / min(i + 1, window))
    return out


def first_time_at_or_below(run, target, window):
    for i, (loss, t) in enumerate(zip(smoothed(run["losses"], window), run["times_s"])):
        if i + 1 >= window and loss <= target:
            return t
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--baseline", default="ddp-gloo")
    p.add_argument("--window", type=int, default=10)
    doc_block.add_argument(p, "diloco_report.py")
    p.add_argument("--img", metavar="PNG", help="with --doc: the plot's copy beside the page")
    args = p.parse_args()
    with open(os.path.join(args.out, "runs.jsonl")) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    failed = [r for r in runs if r.get("failed")]
    ok = [r for r in runs if not r.get("failed")]
    by_variant = {}
    for r in ok:  # the first round of each variant
        by_variant.setdefault(r["variant"], r)
    if args.baseline not in by_variant:
        print(f"diloco_report.py: no {args.baseline} run in {args.out}/runs.jsonl", file=sys.stderr)
        return 1
    base = by_variant[args.baseline]
    target = smoothed(base["losses"], args.window)[-1]
    t_base = first_time_at_or_below(base, target, args.window)
    r0 = base
    layout = (f", {r0.get('regions')} regions, {r0.get('between')} between" if (r0.get("regions") or 1) > 1 else "")
    links = f"links of {r0.get('rate')}{layout}"
    if r0.get("wan"):  # netcluster.sh's own account of its WAN's links
        links = f"WAN `{r0['wan']}`: {r0.get('links') or 'links of ' + str(r0.get('rate'))}"
    lines = [f"# DiLoCo against DDP: {r0.get('hosts')} hosts, a worker each, {links}",
             "",
             f"Target: the loss {args.baseline} ends with, {target:.4f} (mean of its last {args.window} steps), "
             f"reached at {t_base:.1f} s.",
             "",
             "| variant | steps | wall s | final loss | reaches target at s | sooner than " + args.baseline
             + " | bytes sent / inner step | bytes vs " + args.baseline + " | compute utilisation |",
             "|---|---|---|---|---|---|---|---|---|"]
    status = 0
    base_bytes = base["bytes_sent"] / len(base["losses"]) if base.get("bytes_sent") else None
    for name, r in by_variant.items():
        n = len(r["losses"])
        t = first_time_at_or_below(r, target, args.window)
        per_step = r["bytes_sent"] / n if r.get("bytes_sent") is not None else None
        util = r.get("compute_utilisation")
        lines.append("| {} | {} | {:.1f} | {:.4f} | {} | {} | {} | {} | {} |".format(
            name, n, r["wall_s"], smoothed(r["losses"], args.window)[-1],
            f"{t:.1f}" if t is not None else "never", f"{t_base / t:.2f}x" if t else "-",
            f"{per_step:,.0f}" if per_step is not None else "-",
            ("-" if not per_step or not base_bytes else f"{base_bytes / per_step:.0f}x fewer"
             if base_bytes / per_step >= 1.5 else f"{per_step / base_bytes:.2f}x"),
            f"{util:.0%}" if util is not None else "-"))
        if name.startswith("diloco") and t is None:
            status = 1
    elastic = by_variant.get("diloco-elastic")
    if elastic:  # a kill and a join lose no outer step: as many as the undisturbed run, one state
        plain = by_variant.get("diloco")
        joiner = elastic.get("joiner") or {}
        same_steps = plain is not None and elastic["outer_steps"] == plain["outer_steps"]
        same_state = joiner.get("state_hash") == elastic.get("state_hash")
        lines += ["", "diloco-elastic: workers over inner steps " + ", ".join(
            f"{w} from step {s}" for s, w in elastic.get("members", [])) +
            f"; outer steps {elastic['outer_steps']} (diloco: {plain['outer_steps'] if plain else '-'}); "
            f"the newcomer took {joiner.get('outer_steps')} and ends with "
            + ("worker 0's state hash" if same_state else "ANOTHER state hash than worker 0")]
        if not same_state or (plain is not None and not same_steps):
            status = 1
    for r in failed:
        lines.append(f"\n{r['variant']} round {r['round']} FAILED (logs in {args.out}/logs)")
        status = 1
    text = "\n".join(lines) + "\n"
    doc_block.publish(args.out, text, args.doc, "diloco_report.py")
    plt = doc_block.pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, r in by_variant.items():
            ax.plot(r["times_s"], smoothed(r["losses"], args.window), label=name)
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("wall-clock s")
        ax.set_ylabel(f"training loss (mean of {args.window} steps)")
        ax.set_xscale("log")
        ax.legend()
        doc_block.save_figure(fig, os.path.join(args.out, "loss.png"), args.doc and args.img)
    return status


if __name__ == "__main__":
    sys.exit(main())
