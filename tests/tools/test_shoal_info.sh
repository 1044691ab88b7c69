#!/usr/bin/env bash
# shoal-info --algorithms: the rows and the planner's two paths (flat, hierarchical) listed
# together, and per collective and size what a call takes — the planner itself on the layout
# given (comm/plan.hpp) — under SHOAL_HIERARCHICAL and SHOAL_ALGO; a path named for a
# collective it does not serve is refused with the choices; --learned prints SHOAL_TUNE_SAVE's
# file, and a missing or malformed one is an error by name.
# Usage: bash test_shoal_info.sh BIN_DIR     (ctest passes the build's bin directory)
source "$(dirname "$0")/tool_test.sh" test_shoal_info "${1:-}" shoal-info
INFO=$BIN/shoal-info
# takes COLLECTIVE BYTES: the "takes" column of that line of $D/out
takes() { awk -v c="$1" -v b="$2" '$1 == c && $2 == b { for (i = 3; i <= NF; ++i) if ($i == "us" || $i == "-") { print $(i + 1); exit } }' "$D/out"; }

# 1. Both paths are listed beside the rows, with what they serve and how they are priced.
if "$INFO" --algorithms >"$D/out" 2>&1 && grep -q "^flat$" "$D/out" && grep -q "^hierarchical$" "$D/out" &&
  grep -q "serves:      all_reduce,all_gather,reduce_scatter,broadcast,reduce" "$D/out" &&
  (($(grep -c "priced by:" "$D/out") == 2)); then
  pass
else
  fail "the paths are listed"
fi

# 2. One host over shared memory: the flat path takes what fits.
if "$INFO" --algorithms --world 4 --sizes 64K >"$D/out" 2>&1 && [[ $(takes all_reduce 65536) == flat ]] &&
  [[ $(takes reduce_scatter 65536) == flat ]]; then
  pass
else
  fail "flat on one host"
fi

# 3. Two hosts of 4 over TCP: SHOAL_HIERARCHICAL=on takes the hierarchy, off the dispatcher's row.
if SHOAL_HIERARCHICAL=on "$INFO" --algorithms --world 8 --ranks-per-host 4 --transport tcp --sizes 1K >"$D/out" 2>&1 &&
  [[ $(takes all_gather 1024) == hierarchical ]] &&
  SHOAL_HIERARCHICAL=off "$INFO" --algorithms --world 8 --ranks-per-host 4 --transport tcp --sizes 1K >"$D/out" 2>&1 &&
  [[ $(takes all_gather 1024) == $(awk '$1 == "all_gather" && $2 == 1024 { print $3 }' "$D/out") ]] &&
  [[ $(takes all_gather 1024) != hierarchical ]]; then
  pass
else
  fail "SHOAL_HIERARCHICAL on and off"
fi

# 4. SHOAL_ALGO names a path for a range and a row beyond it; one host of 4 ranks over TCP has
# no hierarchy, so that rule is as if not written and the next (ring) decides.
RULE="all_reduce:0-4K:hierarchical;all_reduce:ring"
if SHOAL_ALGO=$RULE "$INFO" --algorithms --world 8 --ranks-per-host 4 --transport tcp --sizes 1K,1M >"$D/out" 2>&1 &&
  [[ $(takes all_reduce 1024) == hierarchical ]] && [[ $(takes all_reduce 1048576) == ring ]] &&
  SHOAL_ALGO=$RULE "$INFO" --algorithms --world 4 --transport tcp --sizes 1K >"$D/out" 2>&1 &&
  [[ $(takes all_reduce 1024) == ring ]]; then
  pass
else
  fail "SHOAL_ALGO's path and row"
fi

# 5. A path for a collective it does not serve: refused, naming what each path serves.
if SHOAL_ALGO=broadcast:hierarchical "$INFO" --algorithms >"$D/out" 2>&1; then
  fail "broadcast:hierarchical was accepted"
elif grep -q "broadcast has no 'hierarchical' path (flat: all_reduce all_gather reduce_scatter broadcast reduce; hierarchical: all_reduce all_gather reduce_scatter)" "$D/out"; then
  pass
else
  fail "broadcast:hierarchical names the choices"
fi
# 6. --learned: one line per bucket, the winner and what exploring cost; errors by name.
cat >"$D/learned.json" <<'EOF'
{"format": "shoal-learned 1", "buckets": [
 {"collective": "all_reduce", "world": 4, "ranks_per_host": 1, "transport": "tcp", "log2_bytes": 26,
  "pick": "rabenseifner", "alternative": "ring", "winner": "ring", "pick_us": 9030000.0,
  "alternative_us": 4490000.0, "exploration_us": 9600000.0},
 {"collective": "all_reduce", "world": 4, "ranks_per_host": 1, "transport": "tcp", "log2_bytes": 20,
  "pick": "rabenseifner", "alternative": "ring", "runner_up": "recursive_doubling",
  "winner": "recursive_doubling", "pick_us": 3000.0, "alternative_us": 4000.0,
  "runner_up_us": 2000.0, "exploration_us": 3000.0}]}
EOF
if "$INFO" --learned "$D/learned.json" >"$D/out" 2>&1 &&
  grep -qE "^all_reduce +4 +1 tcp +67108864 rabenseifner +- +ring +9030.00 +4490.00 +- +9600.00$" "$D/out" &&
  grep -qE "^all_reduce +4 +1 tcp +1048576 rabenseifner +recursive_doubling +recursive_doubling +3.00 +4.00 +2.00 +3.00$" "$D/out"; then
  pass
else
  fail "--learned prints the bucket: $(tail -1 "$D/out")"
fi
echo '{"format": "shoal-learned 1", "buckets": [{"collective": "all_reduce"}]}' >"$D/bad.json"
if "$INFO" --learned "$D/bad.json" >"$D/out" 2>&1; then
  fail "--learned accepted a malformed file"
elif grep -qF "learned file '$D/bad.json': buckets[0]: missing field 'world'" "$D/out" &&
  ! "$INFO" --learned "$D/none.json" >/dev/null 2>&1; then
  pass
else
  fail "--learned names the problem: $(cat "$D/out")"
fi
summary
