#!/usr/bin/python3
"""How well a tuning table picks, read two ways, judged on two runs' files.

  /usr/bin/python3 bench/tune_smoothing.py runC.json runD.json

For every table (collective x world) and every measured size, a pick counts when its measured
time is within 10% of that size's fastest. Two judgements, as `shoal-tune --report` makes them:
  held out   the model built from the other half of the sizes (even / odd indices) picks;
  other run  the model built from the other file's table (all its sizes) picks.
Two ways of reading a table at a size:
  log-linear the dispatcher's: each algorithm's time linear in log(size) between the two
             measured neighbours (the ends outside them);
  smoothed h a kernel-weighted local-linear fit of log(time) over log2(size) through every
             measured size, Gaussian weights of width h octaves: one noisy point moves the
             curve less. Not in the dispatcher (see docs/algorithms.md, "Left out").
Also, per table, whether the picks' total time over the sizes beats the best single algorithm.
"""
import json
import math
import sys


def load(path):
    tables = {}
    for t in json.load(open(path))["tables"]:
        # "hierarchical", where timed, is one more column here (the dispatcher decides it
        # apart, a tie staying flat; the counts come out as shoal-tune --report's).
        tables[(t["collective"], t["world"])] = (t["sizes"], dict(t["times_us"]))
    return tables


def log_linear(sizes, times, b):
    b = min(max(b, sizes[0]), sizes[-1])
    hi = next(i for i, s in enumerate(sizes) if s >= b)
    if sizes[hi] == b:
        return {a: t[hi] for a, t in times.items()}
    lo = hi - 1
    w = (math.log(b) - math.log(sizes[lo])) / (math.log(sizes[hi]) - math.log(sizes[lo]))
    return {a: (1 - w) * t[lo] + w * t[hi] for a, t in times.items()}


def smoothed(h):
    def read(sizes, times, b):
        x0 = math.log2(min(max(b, sizes[0]), sizes[-1]))
        out = {}
        for a, t in times.items():
            sw = sx = sy = sxx = sxy = 0.0
            for s, v in zip(sizes, t):
                x = math.log2(s) - x0
                y = math.log(v)
                w = math.exp(-0.5 * (x / h) ** 2)
                sw, sx, sy, sxx, sxy = sw + w, sx + w * x, sy + w * y, sxx + w * x * x, sxy + w * x * y
            det = sw * sxx - sx * sx
            out[a] = math.exp((sy * sxx - sx * sxy) / det) if det > 1e-12 else math.exp(sy / sw)
        return out
    return read


def pick(read, sizes, times, b):
    t = read(sizes, times, b)
    return min(t, key=t.get)


def judge(run, other, read):
    held = from_other = cells = 0
    beats_held = beats_other = 0
    for key, (sizes, times) in run.items():
        held_total = other_total = 0.0
        for i, s in enumerate(sizes):
            best = min(t[i] for t in times.values())
            keep = [j for j in range(len(sizes)) if j % 2 != i % 2]
            p = pick(read, [sizes[j] for j in keep], {a: [t[j] for j in keep] for a, t in times.items()}, s)
            held += times[p][i] <= 1.1 * best
            held_total += times[p][i]
            if key in other:
                q = pick(read, *other[key], s)
                from_other += times[q][i] <= 1.1 * best
                other_total += times[q][i]
            cells += 1
        single = min(sum(t) for t in times.values())
        beats_held += held_total <= single
        beats_other += key in other and other_total <= single
    return held, from_other, cells, beats_held, beats_other, len(run)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    runs = [load(sys.argv[1]), load(sys.argv[2])]
    reads = [("log-linear (the dispatcher's)", log_linear)] + [
        (f"smoothed, h = {h} octaves", smoothed(h)) for h in (1.0, 1.5, 2.0, 2.5, 3.0)]
    print("| reading | held out, run A | held out, run B | other run's, A | other run's, B "
          "| tables whose held-out picks beat every single algorithm, A / B |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, read in reads:
        a = judge(runs[0], runs[1], read)
        b = judge(runs[1], runs[0], read)
        print(f"| {name} | {a[0]} / {a[2]} | {b[0]} / {b[2]} | {a[1]} / {a[2]} | {b[1]} / {b[2]} "
              f"| {a[3]} / {a[5]}, {b[3]} / {b[5]} |")


if __name__ == "__main__":
    main()
