#!/usr/bin/env bash
# End-to-end tests of shoal-tune: one launch tunes several worlds (--worlds, each on the job's
# first ranks) into a file with a table per collective and world, every algorithm timed at
# every size; --append keeps the tables of other worlds; --report reads it; shoal-info picks
# from it and names a table of another world; a bad --worlds fails with its name; ranks that
# wait for a world they are not in survive a sweep longer than SHOAL_TIMEOUT.
# Usage: bash test_shoal_tune.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
# shellcheck source=tool_test.sh
source "$(dirname "$0")/tool_test.sh" test_shoal_tune "${1:-}" shoal-run shoal-tune shoal-info
RUN=$BIN/shoal-run
TUNE=$BIN/shoal-tune
GUARD=(timeout -s KILL 120)
F=$D/tune.json

# tables FILE: "collective world ranks_per_host sizes algorithms" per table, sorted; fails on a
# time that is not positive or a time list of the wrong length
tables() {
  "$PY" - "$1" <<'EOF'
import json, sys
for t in sorted(json.load(open(sys.argv[1]))["tables"], key=lambda t: (t["collective"], t["world"])):
    for name, times in t["times_us"].items():
        assert len(times) == len(t["sizes"]) and all(x > 0 for x in times), (t["collective"], t["world"], name)
    print(t["collective"], t["world"], t["ranks_per_host"], len(t["sizes"]), len(t["times_us"]))
EOF
}

# ---- one launch, three worlds ----
if ! "${GUARD[@]}" "$RUN" -n 4 "$TUNE" -o "$F" --worlds 2,3,4 --sizes 1K,64K -n 2 -w 1 --rounds 1 >"$D/out" 2>&1; then
  fail "--worlds 2,3,4 on 4 ranks: exit status $?"
elif ! grep -q "wrote $F (2 ranks, 2 per host, shm; 3 ranks, 3 per host, shm; 4 ranks, 4 per host, shm)" "$D/out"; then
  fail "--worlds 2,3,4: the closing line names the three worlds"
elif ! tables "$F" >"$D/tables" 2>&1; then
  cp "$D/tables" "$D/out"
  fail "--worlds 2,3,4: a time list is wrong"
else
  # all_reduce has 6 algorithms, all_gather 5, reduce_scatter 4 (link_ring is not swept); 2 sizes
  expect=$(printf '%s\n' "all_gather 2 2 2 5" "all_gather 3 3 2 5" "all_gather 4 4 2 5" \
    "all_reduce 2 2 2 6" "all_reduce 3 3 2 6" "all_reduce 4 4 2 6" \
    "reduce_scatter 2 2 2 4" "reduce_scatter 3 3 2 4" "reduce_scatter 4 4 2 4")
  if [[ $(cat "$D/tables") == "$expect" ]]; then pass; else
    cp "$D/tables" "$D/out"
    fail "--worlds 2,3,4: one table per collective and world, every algorithm"
  fi
fi

# ---- --append: a run at 2 ranks replaces the 2-rank tables and keeps the others ----
before=$(grep -c . <(tables "$F"))
if "${GUARD[@]}" "$RUN" -n 2 "$TUNE" -o "$F" --append --sizes 1K,4K,64K -n 2 -w 1 --rounds 1 >"$D/out" 2>&1 &&
  [[ $(grep -c . <(tables "$F")) == "$before" ]] && tables "$F" | grep -q "^all_reduce 2 2 3 6$" &&
  tables "$F" | grep -q "^all_reduce 4 4 2 6$"; then
  pass
else
  fail "--append keeps the other worlds' tables and replaces this world's"
fi

# ---- --report and shoal-info read it ----
if "$TUNE" --report "$F" >"$D/out" 2>&1 && grep -q "^### reduce_scatter, 3 ranks (3 per host, shm)" "$D/out" &&
  grep -q "held out" "$D/out"; then
  pass
else
  fail "--report reads the file"
fi
info() { SHOAL_TUNE_FILE=$F "$BIN/shoal-info" --algorithms --world "$1" --sizes 1K >"$D/out" 2>&1; }
if info 3 && grep -qE "^all_reduce +1024 +[a-z_]+ +tuning file +[0-9.]+ us" "$D/out" &&
  info 6 && grep -qE "^all_reduce +1024 +[a-z_]+ +tuning file \(4x4\) " "$D/out"; then
  pass
else
  fail "shoal-info picks from the file and names another world's table"
fi

# ---- bad worlds ----
for bad in 5 1; do
  if "${GUARD[@]}" "$RUN" -n 4 "$TUNE" -o "$D/bad.json" --worlds 2,$bad --sizes 1K >"$D/out" 2>&1; then
    fail "--worlds 2,$bad on 4 ranks was accepted"
  elif ! grep -q -- "--worlds: $bad is not a world from 2 to the job's 4 ranks" "$D/out" || [[ -e $D/bad.json ]]; then
    fail "--worlds 2,$bad: the error names it and nothing is written"
  else
    pass
  fi
done

# ---- a world's sweep longer than SHOAL_TIMEOUT: the rank left out waits in the store ----
start=$(date +%s)
if ! SHOAL_TIMEOUT=3 "${GUARD[@]}" "$RUN" -n 3 "$TUNE" -o "$D/long.json" --worlds 2 -b 1K -e 16M -f 2 -n 40 -w 2 \
  --rounds 20 >"$D/out" 2>&1; then
  fail "a 3-rank job tuning 2 ranks for longer than SHOAL_TIMEOUT=3"
elif (($(date +%s) - start < 5)); then
  fail "the sweep took under 5 s: the case needs it longer than SHOAL_TIMEOUT"
else
  pass
fi

summary
