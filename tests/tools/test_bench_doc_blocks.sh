#!/usr/bin/env bash
# The bench reports that write docs/ (--doc FILE#ID, bench/doc_block.py): from results made here
# with known numbers, each report writes its table between its own marker lines and leaves the
# rest of the page as it was; the figures in the block are the ones computed here from the
# results; a page without the markers is refused by name and left untouched; a report whose gate
# fails still exits non-zero.
# Usage: bash test_bench_doc_blocks.sh BIN_DIR     (ctest passes the build's bin directory)
source "$(dirname "$0")/tool_test.sh" test_bench_doc_blocks "${1:-}"
BENCH=$(cd "$(dirname "$0")/../../bench" && pwd)

# page TOOL: a page with text around TOOL's block "t" and stale content inside it
page() {
  printf '# Page\n\nbefore\n<!-- %s:t -->\nSTALE\n<!-- /%s:t -->\nafter\n' "$1" "$1" >"$D/page.md"
}
# outside: the page's lines outside the block are the ones page() wrote
outside() {
  [[ $(sed '/^<!-- [a-z_]*\.py:t -->$/,/^<!-- \/[a-z_]*\.py:t -->$/d' "$D/page.md") == $'# Page\n\nbefore\nafter' ]] &&
    ! grep -q STALE "$D/page.md"
}

# 1. diloco_report.py: DDP over gloo at loss 3.0 from its 10th step (time 10 s), DiLoCo from its
#    10th at 5 s: 2.00x sooner; 1,000 bytes a step against 100: 10x fewer.
mkdir -p "$D/diloco"
$PY - "$D/diloco/runs.jsonl" <<'PYEOF'
import json, sys
runs = [
    {"variant": "ddp-gloo", "hosts": 4, "rate": "100mbit", "losses": [3.0] * 20,
     "times_s": [float(i + 1) for i in range(20)], "wall_s": 21.0, "bytes_sent": 20 * 1000},
    {"variant": "diloco", "losses": [3.0] * 20, "times_s": [0.5 * (i + 1) for i in range(20)],
     "wall_s": 11.0, "bytes_sent": 20 * 100, "compute_utilisation": 0.9},
]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in runs))
PYEOF
page diloco_report.py
if $PY "$BENCH/diloco_report.py" "$D/diloco" --doc "$D/page.md#t" >"$D/out" 2>&1 && outside &&
  grep -q '^\*\*DiLoCo against DDP: 4 hosts, a worker each, links of 100mbit\*\*$' "$D/page.md" &&
  grep -qF '| diloco | 20 | 11.0 | 3.0000 | 5.0 | 2.00x | 100 | 10x fewer | 90% |' "$D/page.md"; then
  pass
else
  cat "$D/page.md" >>"$D/out"
  fail "diloco_report.py writes its block"
fi

# 2. fsdp_report.py: gloo 300 ms a step, shoal 100 ms (medians of rounds 250/300/350 and
#    100/90/120): 3.00×; the same losses, so a relative difference of 0.
: >"$D/fsdp-runs.jsonl"
mkdir -p "$D/fsdp"
for run in gloo:1:250 gloo:2:300 gloo:3:350 shoal:1:100 shoal:2:90 shoal:3:120; do
  IFS=: read -r variant round ms <<<"$run"
  echo "{\"config\": \"fsdp\", \"variant\": \"$variant\", \"step_ms\": $ms, \"comm_wait_ms\": 10.0,
    \"comm_wait_ms_max\": 20.0, \"tokens_per_s\": 1000.0, \"params\": 12345, \"losses\": [2.0, 1.5],
    \"dim\": 64, \"layers\": 2, \"batch\": 4, \"seq\": 32, \"rate\": \"1gbit\"}" | tr -d '\n' |
    $PY "$BENCH/fsdp_report.py" --append "$D/fsdp/runs.jsonl" hosts=2 nics=1 round="$round" >/dev/null
done
page fsdp_report.py
if $PY "$BENCH/fsdp_report.py" "$D/fsdp" --doc "$D/page.md#t" >"$D/out" 2>&1 && outside &&
  grep -qF '| 2 × 1 | fsdp | gloo | 12,345 | 300 |' "$D/page.md" &&
  grep -qF '| 2 × 1 | fsdp | shoal | 12,345 | 100 | 1,000 | 10 / 20 | 10% | 3.00× | 0.0e+00 |' "$D/page.md"; then
  pass
else
  cat "$D/page.md" >>"$D/out"
  fail "fsdp_report.py writes its block"
fi

# 3. links_report.py: ring 0.1 GB/s (100 ms), link_ring 0.25 (40 ms) at 8 MiB: 2.50x, above a
#    target of 2; shoal-sim predicted 32 ms for link_ring (1.25 of it measured) and nothing for
#    ring; below a target of 3 the report still writes the block and exits 1.
mkdir -p "$D/links"
for run in ring:0.1:100000 link_ring:0.25:40000; do
  IFS=: read -r v bw us <<<"$run"
  echo "{\"rows\": [{\"size\": 8388608, \"out_of_place\": {\"busbw\": $bw, \"time_us\": $us, \"wrong\": 0},
    \"in_place\": {\"busbw\": $bw, \"time_us\": $us, \"wrong\": 0}}]}" >"$D/links/$v-0.json"
done
echo '{"rows": [{"algorithm": "link_ring", "size": 8388608, "time_us": 32000}]}' >"$D/links/predicted.json"
page links_report.py
if $PY "$BENCH/links_report.py" "$D/links" --variants "ring link_ring" --target 2 --layout "6 hosts" \
  --doc "$D/page.md#t" >"$D/out" 2>&1 && outside &&
  grep -qF '| link_ring | 8 MiB | 40 | 250.0 | 32 | 1.25 |' "$D/page.md" &&
  grep -qF '| ring | 8 MiB | 100 | 100.0 | - | - |' "$D/page.md" &&
  grep -qF 'link_ring / ring at 8 MiB: 2.50x (target 2.0x)' "$D/page.md"; then
  pass
else
  cat "$D/page.md" >>"$D/out"
  fail "links_report.py writes its block"
fi
page links_report.py
if ! $PY "$BENCH/links_report.py" "$D/links" --variants "ring link_ring" --target 3 --doc "$D/page.md#t" >"$D/out" 2>&1 &&
  outside && grep -qF 'problem: link_ring is 2.50x ring, below the target 3.0x' "$D/page.md"; then
  pass
else
  fail "links_report.py below its target"
fi

# 4. swarm_cluster_report.py: one configuration's summary, as read.
mkdir -p "$D/swarm/sync"
echo '{"model": "m", "rounds_done": 4, "rounds": 4, "steady_samples_per_s": 12.34, "ideal_samples_per_s": 20.0,
  "fraction_of_ideal": 0.617, "bytes_between_stages_per_sample": 4096, "round_loss": [5.0, 4.5], "completed": true}' \
  >"$D/swarm/sync/summary.json"
page swarm_cluster_report.py
if $PY "$BENCH/swarm_cluster_report.py" "$D/swarm" --configs sync --layout "3 hosts" --doc "$D/page.md#t" \
  >"$D/out" 2>&1 && outside &&
  grep -qF '| sync | m | 4/4 | 12.3 | 20.0 | 0.62 | 4,096 | - | 5.000 -> 4.500 |' "$D/page.md"; then
  pass
else
  cat "$D/page.md" >>"$D/out"
  fail "swarm_cluster_report.py writes its block"
fi

# 5. scenarios_report.py: shoal 2.0 GB/s against Gloo's 1.0 and Open MPI's 4.0 at 1 MiB (0.50x
#    the best), 0.019 against 0.02 at 8 B (0.95x, within 10%); the geomean of the two: 0.69.
printf '%s\n' scenario,collective,ranks,library,bytes,time_us,busbw_gbs \
  local-2r,all_reduce,2,shoal,8,1,0.019 local-2r,all_reduce,2,gloo,8,1,0.02 \
  local-2r,all_reduce,2,shoal,1048576,1,2.0 local-2r,all_reduce,2,gloo,1048576,1,1.0 \
  local-2r,all_reduce,2,mpi-vader,1048576,1,4.0 local-2r,all_reduce,2,mpi-vader,8,1,0.01 >"$D/scen.csv"
page scenarios_report.py
if $PY "$BENCH/scenarios_report.py" "$D/scen.csv" --style summary --doc "$D/page.md#t" >"$D/out" 2>&1 &&
  outside && grep -qF '| local-2r | all_reduce | 0/1 | 0.50 | 1/1 | 0.95 | 0.69 |' "$D/page.md" &&
  $PY "$BENCH/scenarios_report.py" "$D/scen.csv" >"$D/out" 2>&1 &&
  grep -qF '| size | shoal busbw | Gloo | Open MPI (vader) | shoal ÷ best peer |' "$D/out" &&
  grep -qF '| 1 MiB | 2.00 | 1.00 | 4.00 | 0.50 |' "$D/out" && grep -qF '| 8 B | 0.0190 | 0.0200 | 0.0100 | 0.95 |' "$D/out" &&
  grep -v ',shoal,' "$D/scen.csv" >"$D/noshoal.csv" &&
  ! $PY "$BENCH/scenarios_report.py" "$D/noshoal.csv" >"$D/out" 2>&1 && grep -q "no shoal or no peer rows for: local-2r all_reduce" "$D/out"; then
  pass
else
  cat "$D/page.md" "$D/out" >>"$D/out.all" 2>/dev/null
  fail "scenarios_report.py writes its block: $(cat "$D/out")"
fi

# 6. diloco_rtt_report.py: DiLoCo's inner step 0.4 s of compute (8 s over 20 steps); DDP's 10
#    steps in 8 s at 0 ms (50%) and 20 s at 80 ms (20%); DiLoCo's own 90% and 80%. A failed run
#    is named and the report exits non-zero.
for rtt in 0 80; do
  mkdir -p "$D/rtt/rtt-${rtt}ms"
  $PY - "$D/rtt/rtt-${rtt}ms/runs.jsonl" "$rtt" <<'PYEOF'
import json, sys
rtt = int(sys.argv[2])
runs = [
    {"variant": "ddp-gloo", "hosts": 4, "rate": "100mbit", "losses": [3.0] * 10,
     "wall_s": 8.0 if rtt == 0 else 20.0},
    {"variant": "diloco", "losses": [3.0] * 20, "wall_s": 9.0, "compute_s": 8.0,
     "compute_utilisation": 0.9 if rtt == 0 else 0.8},
]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in runs))
PYEOF
done
page diloco_rtt_report.py
if $PY "$BENCH/diloco_rtt_report.py" "$D/rtt" --doc "$D/page.md#t" >"$D/out" 2>&1 && outside &&
  grep -qF '| 0 ms | 50% | 90% | 400 ms |' "$D/page.md" &&
  grep -qF '| 80 ms | 20% | 80% | 400 ms |' "$D/page.md" &&
  echo '{"variant": "ddp-shoal", "round": 1, "failed": true}' >>"$D/rtt/rtt-80ms/runs.jsonl" &&
  ! $PY "$BENCH/diloco_rtt_report.py" "$D/rtt" >"$D/out" 2>&1 && grep -q "ddp-shoal at 80 ms FAILED" "$D/out"; then
  pass
else
  cat "$D/page.md" >>"$D/out"
  fail "diloco_rtt_report.py writes its block and fails on a failed run: $(cat "$D/out")"
fi

# 7. A page without the report's markers (or with another report's) is refused by name and left
#    as it was; so is FILE without #ID; the cluster scripts' early check says the same.
page fsdp_report.py
cp "$D/page.md" "$D/before.md"
if ! $PY "$BENCH/links_report.py" "$D/links" --variants "ring link_ring" --target 2 --doc "$D/page.md#t" >"$D/out" 2>&1 &&
  grep -qF "needs one '<!-- links_report.py:t -->' line before one '<!-- /links_report.py:t -->' line" "$D/out" &&
  cmp -s "$D/page.md" "$D/before.md" &&
  ! $PY "$BENCH/doc_block.py" check links_report.py "$D/page.md" >"$D/out" 2>&1 && grep -q "takes FILE#ID" "$D/out" &&
  ! $PY "$BENCH/doc_block.py" check links_report.py "$D/none.md#t" >"$D/out" 2>&1 && grep -q "No such file" "$D/out" &&
  $PY "$BENCH/doc_block.py" check fsdp_report.py "$D/page.md#t" >"$D/out" 2>&1; then
  pass
else
  fail "a page without the markers"
fi

summary
