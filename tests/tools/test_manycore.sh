#!/usr/bin/env bash
# bench/manycore.sh, the one-command sweep against Open MPI for nodes of many cores:
#   - missing prerequisites are named all at once, with their packages, before anything runs (exit 2);
#     with --no-build only those of the sweep (a node where shoal is built already);
#   - rank counts above the node's cores are left out and said so; none left: exit 2;
#   - a small sweep (2 ranks, against Open MPI's shared memory) writes a report whose ratios and
#     tails (p99 / p50) are the medians of compare.sh's raw rounds (rows.tsv), recomputed here
#     independently, and a plot.
# Usage: bash test_manycore.sh BIN_DIR     (ctest passes the build's bin directory)
source "$(dirname "$0")/tool_test.sh" test_manycore "${1:-}" shoal-run shoal-bench
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=$(cd "$BIN/.." && pwd)
MC="$ROOT/bench/manycore.sh"
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  skip "no Open MPI (mpirun, mpicc): scripts/install-deps.sh installs it"
fi

# 1. prerequisites named up front: without a compiler, the compiler and the three headers it
# would have found
if CXX=/nonexistent/c++ bash "$MC" --out "$D/none" >"$D/out" 2>&1; then
  fail "manycore.sh ran without a compiler"
else
  rc=$?
  if [[ $rc == 2 ]] && grep -q "C++20 compiler" "$D/out" && grep -q "CLI/CLI.hpp (Debian/Ubuntu: libcli11-dev)" "$D/out" &&
    grep -q "sodium.h" "$D/out" && grep -q "nlohmann/json.hpp" "$D/out" && [[ ! -e $D/none ]]; then
    pass
  else
    fail "missing prerequisites named all at once (exit $rc)"
  fi
fi

# 2. more ranks than cores: left out, and with nothing left, exit 2
if bash "$MC" --ranks 100000 --no-build --build-dir "$BUILD_DIR" --out "$D/big" >"$D/out" 2>&1; then
  fail "manycore.sh ran 100000 ranks"
else
  rc=$?
  if [[ $rc == 2 ]] && grep -q "100000 ranks left out" "$D/out" && grep -q "no rank count to run" "$D/out"; then
    pass
  else
    fail "rank counts above the cores left out (exit $rc)"
  fi
fi

# 3. a small sweep (--no-build: binaries built already, so no compiler needed); the report's
# ratios against the raw rounds
"$PY" -c "import matplotlib" 2>/dev/null || skip_case "the sweep's plot (python3-matplotlib: scripts/install-deps.sh)"
BUILD="$BUILD_DIR" bash "$ROOT/bench/peers/build.sh" --only mpi >"$D/out" 2>&1 || { fail "bench/peers/build.sh --only mpi"; summary; exit 1; }
if CXX=/nonexistent/c++ timeout 300 bash "$MC" --ranks 2 --collectives "all_reduce reduce_scatter" --sizes 8:64K:8 --rounds 3 --iters 5 \
  --no-build --build-dir "$BUILD_DIR" --out "$D/sweep" >"$D/out" 2>&1 &&
  "$PY" - "$D/sweep" >>"$D/out" 2>&1 <<'EOF'
import os, re, statistics, sys
base = sys.argv[1]
report = open(os.path.join(base, "report.md")).read()
assert "not measured here" in report, report
import importlib.util
if importlib.util.find_spec("matplotlib"):  # the report draws with the distribution's python, as this one
    assert os.path.getsize(os.path.join(base, "manycore.png")) > 0 and "](manycore.png)" in report
for coll, factor in (("all_reduce", 1.0), ("reduce_scatter", 0.5)):  # bus factors at 2 ranks
    rows = [l.split("\t") for l in open(os.path.join(base, "logs", f"{coll}-2", "rows.tsv"))]
    times = {}
    for h, rnd, size, t_out, t_in, *_ in rows:
        times.setdefault((h, int(size)), []).append((float(t_out), float(t_in)))
    section = report.split(f"### {coll}:")[1].split("###")[0]
    for size, label in ((8, "8 B"), (64, "64 B"), (512, "512 B"), (4096, "4 KiB"), (32768, "32 KiB")):
        if coll == "reduce_scatter" and size < 8:
            continue
        line = next(l for l in section.splitlines() if l.startswith(f"| {label} |"))
        printed = [float(x) for x in re.findall(r"\d+\.\d+", line)]
        want = []
        for k in (0, 1):
            mine = statistics.median(t[k] for t in times[("shoal", size)])
            peer = min(statistics.median(t[k] for t in v) for (h, s), v in times.items() if s == size and h != "shoal")
            want.append(peer / mine)  # busbw ratio = inverse time ratio
        want.append(statistics.median(t[1] for t in times[("shoal", size)]) /
                    statistics.median(t[0] for t in times[("shoal", size)]))
        assert len(printed) == 3 and all(abs(p - w) <= 0.006 for p, w in zip(printed, want)), (coll, label, printed, want)
        # the tails: shoal's p99 / p50 out of place in the round of median p99, from the raw rows
        tails = report.split(f"### {coll}: tails")[1].split("###")[0]
        line = next(l for l in tails.splitlines() if l.startswith(f"| {label} |"))
        pct = sorted((float(r[8]), float(r[7])) for r in rows if r[0] == "shoal" and int(r[2]) == size)
        median_p99 = pct[(len(pct) - 1) // 2][0]
        shown = float(re.findall(r"\d+\.\d+", line)[0])
        # rounds printed with the same p99 (two decimals) are all the median round
        assert len(pct) == 3 and any(abs(shown - p99 / p50) <= 0.051 for p99, p50 in pct if p99 == median_p99), \
            (coll, label, line, pct)
print("ok")
EOF
then pass; else fail "a 2-rank sweep's report equals the medians of its raw rounds"; fi
summary
