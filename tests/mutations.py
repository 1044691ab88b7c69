#!/usr/bin/env python3
"""Mutations the test suite is known to catch (tests/mutations.md lists them).

Each mutation replaces one exact piece of library source, builds the test that should catch
it, runs that test (a gtest filter), and restores the source, whatever happens. A mutation is
caught when the test fails (non-zero exit, a time-out counting as a failure).

    tests/mutations.py [--build DIR] [--only NAME ...] [--list]

--list prints the table of tests/mutations.md. Without --only every mutation runs (roughly a
minute or two each on a 2-core machine: one library file recompiles, one test relinks); the
targets are rebuilt from the restored sources at the end.
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, file, original text, mutated text, test target, gtest filter, what it breaks
MUTATIONS = [
    ("signature-drops-op", "src/algorithms/schedule.cpp",
     "  if (!reduces) fields[2] = 0;", "  fields[2] = 0;",
     "test_mismatch", "*_op*",
     "the op is left out of every call's signature: sum on one rank, max on another return different results"),
    ("signature-drops-dtype", "src/algorithms/schedule.cpp",
     "static_cast<uint64_t>(a.dtype),", "0,",
     "test_mismatch", "*dtype*",
     "the dtype is left out of the signature: float32 against int32 of the same bytes passes"),
    ("eof-raises-nothing", "src/transport/connection.cpp",
     '  fail(ErrorCode::PeerFailure, "rank " + std::to_string(peer_) +\n'
     '                                   " closed the connection without saying goodbye',
     '  if (false) fail(ErrorCode::PeerFailure, "rank " + std::to_string(peer_) +\n'
     '                                   " closed the connection without saying goodbye',
     "test_failures", "*KilledPeerMidCollective*:*SurvivorsShrink*",
     "a dead peer's EOF breaks nothing: the survivors learn of it only from the heartbeat limit or the timeout"),
    ("heartbeat-ignores-collective", "src/comm/engine.cpp",
     "void Engine::on_peer_in_collective(int peer, uint64_t seq, uint32_t signature) {\n",
     "void Engine::on_peer_in_collective(int peer, uint64_t seq, uint32_t signature) {\n  return;\n",
     "test_mismatch", "*schedules_tcp_root_reduce*",
     "on_peer_in_collective returns at once (a heartbeat's collective is not compared): two roots of a reduce over TCP wait for the timeout"),
    ("hierarchy-compares-phases-only", "src/comm/hierarchical.cpp",
     "  detail::Internals::of(local_).check_with_next_call(whole);\n"
     "  detail::Internals::of(aligned_).check_with_next_call(whole);\n",
     "  (void)whole;\n",
     "test_mismatch", "*hierarchical_op_avg*",
     "the hierarchy's groups compare only their phases: sum on one host, avg on the other passes"),
    ("mismatch-names-self", "src/comm/engine.cpp",
     "  if (code == ErrorCode::Mismatch && culprit == rank_) culprit = peer;\n", "",
     "test_mismatch", "*schedules_tcp*:*schedules_rings*",
     "a rank told of a mismatch by its peer's abort frame names itself as the culprit (Error::peer())"),
    ("queued-broadcast-unchecked", "src/comm/communicator.cpp",
     "      unchecked_ = plan.signature | uint64_t{1} << 32;", "      unchecked_ = 0;",
     "test_mismatch", "*queued_root*",
     "a queued broadcast's root checks nobody and nothing carries its signature on: two roots never fail"),
    ("dispatch-takes-first-row", "src/comm/plan.cpp",
     "  a.algorithm = rule_row ? rule_row : d.choose(a.collective, algorithms::model_bytes(a)).algorithm;",
     "  a.algorithm = rule_row ? rule_row : &algorithms::first_row(a.collective);",
     "test_dispatch_multirank", "*TuningFilePicksRunAndMatchReference*",
     "the dispatcher's pick never reaches the call: every call runs the first row (ring)"),
    ("frame-magic-unchecked", "src/transport/frame.cpp",
     "  if (h.magic != kFrameMagic) {", "  if (false) {",
     "test_failures", "*MalformedFrames*",
     "a frame with a bad magic is taken (the test must fail, not abort the binary)"),
    ("chaos-oracle-skips-last-member", "src/chaos/workload.cpp",
     "for (size_t r = 1; r < size; ++r) acc = combine", "for (size_t r = 1; r + 1 < size; ++r) acc = combine",
     "test_chaos_workload", "*ExpectedResults*:*FourRanks*",
     "the soak's expected all_reduce leaves the last member out: every soak would report corruption"),
    ("swarm-lr-six-decimals", "src/swarm/train/settings.cpp",
     "exact(c.optim.lr)", "std::to_string(c.optim.lr)",
     "test_swarm_settings", "*EveryField*",
     "a launched swarm's learning rate keeps six decimals: 2.5e-7 reaches the peers as 0"),
    ("link-ring-blocks-by-rank", "src/algorithms/ring.cpp",
     "    b.offset.push_back(static_cast<uint64_t>(order ? (*order)[i] : i) * count * es);",
     "    b.offset.push_back(static_cast<uint64_t>(i) * count * es);",
     "test_schedules", "LinkRing.*",
     "the ring in measured order takes the block at a position for the block of that rank: all_gather and reduce_scatter land rank blocks in the wrong places"),
    ("signature-drops-ring-order", "src/algorithms/schedule.cpp",
     "    for (int r : *a.ring_order) mix(static_cast<uint64_t>(r));",
     "    for (int r : *a.ring_order) (void)r;",
     "test_dispatch_multirank", "MeasuredLinks.DifferentRates*",
     "ranks that hold different link rates go around different rings: the wrong blocks are reduced, or the ranks wait for frames that never come"),
]


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, **kw)


def table():
    lines = ["| mutation | file | change | caught by (target, gtest filter) | what it breaks |",
             "|---|---|---|---|---|"]
    for name, path, old, new, target, filt, why in MUTATIONS:
        # the lines that differ (the rest of each text only anchors the change)
        gone = [l.strip() for l in old.splitlines() if l not in new.splitlines()]
        added = [l.strip() for l in new.splitlines() if l not in old.splitlines()]
        change = ("`" + " ".join(gone) + "` → " if gone else "insert ") + ("`" + " ".join(added) + "`" if added else "(removed)")
        change = change.replace("|", "\\|")
        lines.append(f"| {name} | `{path}` | {change} | `{target}` `{filt}` | {why} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print(table())
        return 0
    chosen = [m for m in MUTATIONS if args.only is None or m[0] in args.only]
    results, targets = [], set()
    for name, path, old, new, target, filt, _ in chosen:
        file = os.path.join(ROOT, path)
        with open(file) as f:
            original = f.read()
        if original.count(old) != 1:
            results.append((name, "STALE: the original text is not in the file exactly once"))
            continue
        targets.add(target)
        try:
            with open(file, "w") as f:
                f.write(original.replace(old, new))
            b = run(["nice", "-n", "15", "cmake", "--build", args.build, "-j1", "--target", target],
                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            if b.returncode != 0:
                results.append((name, "BUILD FAILED (the mutation does not compile)"))
                continue
            try:
                t = run(["nice", "-n", "15", os.path.join(args.build, "bin", target), f"--gtest_filter={filt}"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=600)
                caught = t.returncode != 0
            except subprocess.TimeoutExpired:
                caught = True
            results.append((name, "caught" if caught else "NOT CAUGHT"))
        finally:
            with open(file, "w") as f:
                f.write(original)
        print(f"{name}: {results[-1][1]}", flush=True)
    if targets:  # the binaries from the restored sources
        run(["nice", "-n", "15", "cmake", "--build", args.build, "-j1", "--target", *sorted(targets)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    missed = [r for r in results if r[1] != "caught"]
    for name, what in results:
        print(f"{what:>12}  {name}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
