#!/usr/bin/env bash
# End-to-end tests of shoal-bench: every collective at 2 and 3 ranks from 8 B to 1 MiB with
# -c 1 (every element of every iteration checked), the number of lines the size flags ask
# for, --json, a few data types and operators, bad flags (exit 2) and a failed collective
# (an error on stderr and exit 1, not a hang).
# Usage: bash test_shoal_bench.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
# shellcheck source=tool_test.sh
source "$(dirname "$0")/tool_test.sh" test_shoal_bench "${1:-}" shoal-run shoal-bench
RUN=$BIN/shoal-run
BENCH=$BIN/shoal-bench
GUARD=(timeout -s KILL 60)  # a hung run fails its case instead of hanging the script

# expected_rows MIN MAX FACTOR STEP: the sizes nccl-tests' loop visits
expected_rows() {
  local s=$1 n=0
  while ((s <= $2)); do
    n=$((n + 1))
    if (($3 > 1)); then s=$((s * $3)); else s=$((s + $4)); fi
    ((s == 0)) && break
  done
  echo $n
}

# check_table FILE ROWS: ROWS data lines of 13 columns, #wrong 0 in both modes, the closing lines
check_table() {
  awk -v want="$2" '
    $1 ~ /^[0-9]+$/ { rows++; if (NF != 13 || $9 != "0" || $13 != "0") bad = bad " [" $0 "]" }
    /^# Out of bounds values : 0 OK/ { ok = 1 }
    /^# Avg bus bandwidth    : / { avg = 1 }
    END {
      if (rows != want) { print "rows: " rows " instead of " want; exit 1 }
      if (bad != "") { print "wrong results or layout:" bad; exit 1 }
      if (!ok || !avg) { print "no closing lines"; exit 1 }
    }' "$1"
}

# bench RANKS ARGS...: runs shoal-bench under shoal-run, output in $D/out, status in $rc
bench() {
  local ranks=$1
  shift
  "${GUARD[@]}" "$RUN" -n "$ranks" "$BENCH" "$@" >"$D/out" 2>&1
  rc=$?
  return $rc
}

# ---- every collective, 2 and 3 ranks, 8 B .. 1 MiB, checked ----
rows=$(expected_rows 8 1048576 2 0)
for n in 2 3; do
  for coll in all_reduce all_gather reduce_scatter broadcast reduce all_to_all; do
    name="$coll on $n ranks, 8 B to 1 MiB, -c 1"
    if ! bench "$n" "$coll" -b 8 -e 1M -f 2 -n 2 -w 1 -c 1 -r $((n - 1)); then
      fail "$name: exit status $rc"
    elif ! msg=$(check_table "$D/out" "$rows"); then
      fail "$name: $msg"
    elif ! grep -q "^# shoal-bench $coll: $n ranks (1 hosts), dtype float32, op sum, iters 2, warmup 1" "$D/out"; then
      fail "$name: header line"
    else
      pass
    fi
  done
done

# ---- step in bytes (-i), K suffixes, the root column ----
if ! bench 2 broadcast -b 1K -e 4K -f 1 -i 1024 -n 1 -w 0 -r 1; then
  fail "-i stepping: exit status $rc"
elif ! msg=$(check_table "$D/out" "$(expected_rows 1024 4096 1 1024)"); then
  fail "-i stepping: $msg"
elif [[ $(awk '$1 ~ /^[0-9]+$/ { print $1 "/" $5 }' "$D/out" | tr '\n' ' ') != "1024/1 2048/1 3072/1 4096/1 " ]]; then
  fail "-i stepping: sizes or root column: $(awk '$1 ~ /^[0-9]+$/ { print $1 "/" $5 }' "$D/out" | tr '\n' ' ')"
else
  pass
fi

# ---- warm-up at every size (-W): results still checked, a negative count refused ----
if ! bench 2 all_gather -b 1K -e 64K -f 8 -n 2 -w 0 -W 3 -c 1; then
  fail "-W 3: exit status $rc"
elif ! msg=$(check_table "$D/out" "$(expected_rows 1024 65536 8 0)"); then
  fail "-W 3: $msg"
else
  pass
fi
if bench 2 all_gather -b 1K -e 1K -W -1; then
  fail "-W -1 was accepted"
elif ! grep -q "invalid -n/-w/-W/-a/-p/-f/-i value" "$D/out"; then
  fail "-W -1: no clear error: $(tail -2 "$D/out")"
else
  pass
fi
# rank 0 starts a second late: the launcher must still report rank 0's message, not kill it
# before it prints because rank 1 failed first
"${GUARD[@]}" "$RUN" -n 2 bash -c '[[ $RANK == 0 ]] && sleep 1; exec "$0" "$@"' "$BENCH" all_gather -W -1 \
  >"$D/out" 2>&1
rc=$?
if [[ $rc != 2 ]] || ! grep -q "invalid -n/-w/-W/-a/-p/-f/-i value" "$D/out"; then
  fail "-W -1 with a late rank 0: status $rc, $(tail -2 "$D/out")"
else
  pass
fi

# ---- data types and operators ----
# COLLECTIVE RANKS DTYPE OP TYPE-COLUMN REDOP-COLUMN
while read -r coll n dtype op type redop; do
  name="$coll -d $dtype -o $op on $n ranks"
  if ! bench "$n" "$coll" -b 8 -e 256K -f 8 -n 2 -w 1 -c 1 -d "$dtype" -o "$op"; then
    fail "$name: exit status $rc"
  elif ! msg=$(check_table "$D/out" "$(expected_rows 8 262144 8 0)"); then
    fail "$name: $msg"
  elif [[ $(awk '$1 ~ /^[0-9]+$/ { print $3 "/" $4; exit }' "$D/out") != "$type/$redop" ]]; then
    fail "$name: type/redop columns are $(awk '$1 ~ /^[0-9]+$/ { print $3 "/" $4; exit }' "$D/out"), not $type/$redop"
  else
    pass
  fi
done <<'EOF'
all_reduce 3 float16 prod half prod
reduce_scatter 3 int8 avg int8 avg
reduce 2 bfloat16 max bfloat16 max
all_reduce 3 uint8 sum uint8 sum
all_reduce 2 int64 min int64 min
reduce 3 double avg double avg
all_gather 3 int32 sum int32 none
EOF

# ---- --json ----
json=$D/rows.json
if ! bench 3 all_reduce -b 8 -e 64K -f 4 -n 2 -w 1 -c 1 -d bf16 -o sum --json "$json"; then
  fail "--json: exit status $rc"
elif ! msg=$("$PY" - "$json" "$(expected_rows 8 65536 4 0)" <<'EOF' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
assert doc["collective"] == "all_reduce" and doc["nranks"] == 3 and doc["hosts"] >= 1, doc
assert doc["dtype"] == "bfloat16" and doc["op"] == "sum" and doc["iters"] == 2 and doc["warmup"] == 1, doc
assert len(doc["rows"]) == want, f'{len(doc["rows"])} rows instead of {want}'
for r in doc["rows"]:
    assert r["collective"] == "all_reduce" and r["type"] == "bfloat16" and r["redop"] == "sum" and r["root"] == -1, r
    for mode in ("out_of_place", "in_place"):
        m = r[mode]
        assert m["wrong"] == 0 and m["time_us"] > 0 and m["algbw"] >= 0 and m["busbw"] >= 0, r
assert doc["rows"][0]["size"] == 8 and doc["rows"][-1]["size"] == 32768, doc["rows"]
assert doc["out_of_bounds"] == 0
EOF
); then
  fail "--json: $msg"
else
  pass
fi

# ---- -p 1: p50 and p99 of the iterations, in the table (4 more columns) and the JSON ----
json=$D/pct.json
if ! bench 3 all_reduce -b 8 -e 64K -f 8 -n 9 -w 1 -c 1 -p 1 --json "$json"; then
  fail "-p 1: exit status $rc"
elif ! msg=$("$PY" - "$json" "$D/out" "$(expected_rows 8 65536 8 0)" <<'EOF' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
lines = [l.split() for l in open(sys.argv[2]) if l.split() and l.split()[0].isdigit()]
want = int(sys.argv[3])
assert len(doc["rows"]) == want and len(lines) == want, (len(doc["rows"]), len(lines), want)
for r, cols in zip(doc["rows"], lines):
    assert len(cols) == 17, cols
    printed = [float(c) for c in cols[13:17]]
    got = []
    for mode in ("out_of_place", "in_place"):
        m = r[mode]
        # with fewer than 100 iterations p99 is the slowest iteration of the slowest rank, which
        # no rank's mean (time_us: the slowest rank's mean) can exceed
        assert 0 < m["p50_us"] <= m["p99_us"], m
        assert m["time_us"] <= m["p99_us"] * 1.0001, m
        got += [m["p50_us"], m["p99_us"]]
    assert all(abs(p - g) <= max(0.006, 0.0006 * g) for p, g in zip(printed, got)), (printed, got)
EOF
); then
  fail "-p 1: $msg"
else
  pass
fi

# ---- bad flags: usage and exit 2, before any rendezvous ----
for args in "all_reduce --bogus" "all_reduce -d quad" "all_reduce -o xor" "allreduce_typo" "" \
            "all_reduce -b 1M -e 1K" "all_reduce --json" "all_reduce -p 2"; do
  # shellcheck disable=SC2086  # the words are the arguments
  "${GUARD[@]}" "$BENCH" $args >"$D/out" 2>&1
  rc=$?
  if [[ $rc != 2 ]]; then fail "shoal-bench $args: exit status $rc instead of 2"; else pass; fi
done
bench 2 broadcast -b 8 -e 8 -r 2
if [[ $rc != 2 ]] || ! grep -q "root 2 out of range" "$D/out"; then fail "-r 2 on 2 ranks: exit status $rc instead of 2"; else pass; fi
if ! "${GUARD[@]}" "$BENCH" --help >"$D/out" 2>&1 || ! grep -q -- "--json FILE" "$D/out"; then
  fail "--help"
else
  pass
fi

# ---- a failed collective: rank 1 is frozen (SIGSTOP), rank 0 hears no heartbeat from it for
# SHOAL_HEARTBEAT, declares it failed long before SHOAL_TIMEOUT, says why, exits 1 ----
SHOAL_TIMEOUT=60 SHOAL_HEARTBEAT=1 timeout -s KILL 30 "$RUN" -n 2 --grace 1 "$BENCH" all_reduce -b 4M -e 4M -n 100000 -w 0 -c 0 \
  >"$D/out" 2>"$D/err" &
run_pid=$!  # timeout's; shoal-run is its child and the ranks are shoal-run's
victim=""
for _ in $(seq 100); do  # up to 10 s for the ranks to start
  for p in $(pgrep -P "$(pgrep -P "$run_pid" | head -1)" 2>/dev/null); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1'; then victim=$p; fi
  done
  [[ -n $victim ]] && grep -q "^# minBytes" "$D/out" 2>/dev/null && break
  sleep 0.1
done
start=$(date +%s)
[[ -n $victim ]] && kill -STOP "$victim"
wait "$run_pid"
rc=$?
took=$(($(date +%s) - start))
if [[ -z $victim ]]; then
  fail "failed collective: rank 1 not found"
elif [[ $rc != 1 ]] || ! grep -q "shoal-bench: rank 0: .*rank 1 sent nothing for .*SHOAL_HEARTBEAT" "$D/err" ||
  ((took > 10)); then
  cp "$D/err" "$D/out"
  fail "failed collective: exit status $rc after $took s, stderr above"
else
  pass
fi

summary
