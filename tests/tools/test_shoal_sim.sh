#!/usr/bin/env bash
# End-to-end tests of shoal-sim's tune subcommand and the dispatcher reading what it writes:
# the simulated tables are a valid tuning file; the dispatcher (through shoal-info) takes, for a
# world beyond every measured one, the fastest algorithm of the nearest simulated table, and the
# hierarchy where its predicted time is less still (checked
# against the file's own times, read independently with python); SHOAL_TUNE_SIM=off and
# worlds up to the largest measured one do not read them; --merge keeps measured tables and
# does not simulate what they cover; shoal-info says where a measured table's "hierarchical"
# times take the hierarchy; bad arguments exit non-zero with a message.
# Usage: bash test_shoal_sim.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
# shellcheck source=tool_test.sh
source "$(dirname "$0")/tool_test.sh" test_shoal_sim "${1:-}" shoal-sim shoal-info
SIM=$BIN/shoal-sim
INFO=$BIN/shoal-info
GUARD=(timeout -s KILL 120)

SIZES=1K,64K,1M,16M
# A commodity model: 2 NICs of 25 Gbit/s per host of 4 ranks, 5 us between hosts.
MODEL=(--ranks-per-host 4 --nics 2 --nic-gbps 25 --latency-us 5 --overhead-us 1)

# 1. tune writes simulated tables for every collective x world.
if "${GUARD[@]}" "$SIM" tune "${MODEL[@]}" --worlds 32,128 --sizes $SIZES --threads 1 -o "$D/sim.json" >"$D/out" 2>&1 &&
  $PY - "$D/sim.json" <<'EOF'; then
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["format"] == "shoal-tune 1"
assert doc["simulated_with"]["nics"] == 2 and doc["simulated_with"]["ranks_per_host"] == 4
keys = {(t["collective"], t["world"]) for t in doc["tables"]}
assert keys == {(c, w) for c in ("all_reduce", "all_gather", "reduce_scatter") for w in (32, 128)}, keys
for t in doc["tables"]:
    assert t["source"] == "simulated" and t["transport"] == "tcp" and t["ranks_per_host"] == 4
    assert t["sizes"] == [1024, 65536, 1048576, 16777216]
    assert len(t["times_us"]) >= 3 and "hierarchical" in t["times_us"], t["times_us"].keys()
    for name, times in t["times_us"].items():
        assert len(times) == 4 and all(x > 0 for x in times), (name, times)
        assert times == sorted(times), (name, times)  # more bytes never take less time
EOF
  pass
else
  fail "tune writes a valid file of simulated tables"
fi

# fastest COLLECTIVE WORLD SIZE: the algorithm with the least time in the simulated table, then
# "yes" when its hierarchical time is less still, else "no"
fastest() {
  $PY - "$D/sim.json" "$1" "$2" "$3" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
coll, world, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
(t,) = [t for t in doc["tables"] if t["collective"] == coll and t["world"] == world]
i = t["sizes"].index(size)
rows = {k: v for k, v in t["times_us"].items() if k != "hierarchical"}
name, times = min(rows.items(), key=lambda kv: kv[1][i])
print(name, "yes" if t["times_us"]["hierarchical"][i] < times[i] else "no")
EOF
}

# info WORLD: shoal-info's choices for WORLD ranks, 4 per host, over tcp
info() {
  "${GUARD[@]}" "$INFO" --algorithms --world "$1" --ranks-per-host 4 --transport tcp --sizes $SIZES
}

# 2. For 100 and 4,096 ranks the dispatcher reads the 128-rank table, for 40 the 32-rank one:
# its row, and the hierarchy where the table's hierarchical time beats every row.
for w in 40:32 100:128 4096:128; do
  world=${w%%:*} table=${w##*:}
  ok=1
  SHOAL_TUNE_FILE=$D/sim.json info "$world" >"$D/out" 2>&1 || ok=0
  for c in all_reduce all_gather reduce_scatter; do
    for s in 1024 65536 1048576 16777216; do
      read -r want hier <<<"$(fastest $c "$table" $s)"
      grep -qE "^$c +$s +$want +simulation .* $hier \(simulation\)$" "$D/out" ||
        { ok=0; echo "want $c $s $want, hierarchy $hier (table $table)"; }
    done
  done
  if ((ok)); then pass; else fail "world $world picks the fastest of the $table-rank simulated table"; fi
done

# 3. SHOAL_TUNE_SIM=off: the cost model decides.
if SHOAL_TUNE_SIM=off SHOAL_TUNE_FILE=$D/sim.json info 100 >"$D/out" 2>&1 &&
  ! grep -q simulation "$D/out" && (($(grep -cE "^(all_reduce|all_gather|reduce_scatter) .* cost model " "$D/out") == 12)); then
  pass
else
  fail "SHOAL_TUNE_SIM=off ignores the simulated tables"
fi
if SHOAL_TUNE_SIM=maybe SHOAL_TUNE_FILE=$D/sim.json info 100 >"$D/out" 2>&1; then
  fail "SHOAL_TUNE_SIM=maybe is rejected"
elif grep -q "SHOAL_TUNE_SIM='maybe' is not on or off" "$D/out"; then
  pass
else
  fail "SHOAL_TUNE_SIM=maybe names the setting"
fi

# 4. --merge: a measured table at 32 ranks (ring always) is kept and not simulated; up to
# 32 ranks it decides, above it the simulated 128-rank table does (the same model as sim.json's,
# so the same times).
cat >"$D/measured.json" <<'EOF'
{"format": "shoal-tune 1", "host": "test",
 "tables": [{"collective": "all_reduce", "world": 32, "ranks_per_host": 4, "transport": "tcp",
             "sizes": [1024, 16777216], "times_us": {"ring": [1, 2], "rabenseifner": [10, 20]}}]}
EOF
if "${GUARD[@]}" "$SIM" tune "${MODEL[@]}" --collectives all_reduce --worlds 32,128 --sizes $SIZES --threads 1 \
  --merge "$D/measured.json" -o "$D/merged.json" >"$D/out" 2>&1 &&
  grep -q "all_reduce world 32: measured in $D/measured.json, not simulated" "$D/out" &&
  $PY - "$D/merged.json" <<'EOF'; then
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["host"] == "test", "the measured file's fields are kept"
kinds = sorted((t["world"], t.get("source", "measured")) for t in doc["tables"])
assert kinds == [(32, "measured"), (128, "simulated")], kinds
EOF
  pass
else
  fail "--merge keeps the measured table and adds the simulated ones"
fi
if SHOAL_TUNE_FILE=$D/merged.json info 32 >"$D/out" 2>&1 && grep -qE "^all_reduce +65536 +ring +tuning file +[0-9.]+ us" "$D/out" &&
  SHOAL_TUNE_FILE=$D/merged.json info 24 >"$D/out" 2>&1 && grep -qE "^all_reduce +65536 +ring +tuning file \(32x4\) " "$D/out" &&
  SHOAL_TUNE_FILE=$D/merged.json info 64 >"$D/out" 2>&1 &&
  grep -qE "^all_reduce +65536 +$(fastest all_reduce 128 65536 | cut -d' ' -f1) +simulation " "$D/out"; then
  pass
else
  fail "measured up to 32 ranks (another world's table named), simulated above"
fi

# 5. shoal-info's hierarchy column: a measured table's "hierarchical" times decide where they
# cover the size (faster at 1 KiB, slower at 16 MiB here), SHOAL_HIERARCHICAL=off says no.
cat >"$D/hier.json" <<'EOF'
{"format": "shoal-tune 1",
 "tables": [{"collective": "all_gather", "world": 32, "ranks_per_host": 4, "transport": "tcp",
             "sizes": [1024, 16777216], "times_us": {"ring": [10, 20], "hierarchical": [1, 1000]}}]}
EOF
if SHOAL_TUNE_FILE=$D/hier.json info 32 >"$D/out" 2>&1 &&
  grep -qE "^all_gather +1024 .* yes \(tuning file\)$" "$D/out" &&
  grep -qE "^all_gather +16777216 .* no \(tuning file\)$" "$D/out" &&
  SHOAL_HIERARCHICAL=off SHOAL_TUNE_FILE=$D/hier.json info 32 >"$D/out" 2>&1 &&
  grep -qE "^all_gather +1024 .* no \(off\)$" "$D/out"; then
  pass
else
  fail "shoal-info shows where the tuning file's hierarchical times take the hierarchy"
fi

# 6. The emulated WAN's spec (netcluster.sh spec, no root needed) as the model: on continents
# the 1 MiB ring in rank order crosses between regions at each of its 10 steps, so it cannot beat
# 10 x 35 ms of one-way delay, and the ring on the measured links (link_ring) crosses fewer
# lines and is faster; a spec the model cannot hold is refused with the reason.
NETCLUSTER=$(cd "$(dirname "$0")/../.." && pwd)/scripts/netcluster.sh
if bash "$NETCLUSTER" spec --layout continents --hosts 6 >"$D/cont.wan" 2>"$D/out" &&
  "${GUARD[@]}" "$SIM" run --wan-spec "$D/cont.wan" --ranks-per-host 1 -c all_reduce -a all -p 6 \
    -s 1M --threads 1 --json "$D/cont.json" >>"$D/out" 2>&1 &&
  grep -q "3 regions, one way .*1-2 100.0 ms 100 Mbit/s" "$D/out" &&
  $PY - "$D/cont.json" <<'EOF'; then
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
t = {r["algorithm"]: r["time_us"] for r in rows}
assert t["ring"] >= 10 * 35e3, t
assert t["link_ring"] < t["ring"], t
EOF
  pass
else
  fail "shoal-sim run --wan-spec simulates the continents layout netcluster.sh writes"
  cat "$D/out"
fi
printf 'regions 1\nendpoint a eth0 198.18.0.1 1000 1000 0\nendpoint b eth0 198.18.0.2 1000 1000 0\nendpoint b eth1 198.18.1.2 1000 1000 0\n' >"$D/bad.wan"
if "${GUARD[@]}" "$SIM" run --wan-spec "$D/bad.wan" -c all_reduce -p 2 -s 1M >"$D/out" 2>&1 ||
  ! grep -q "has 2 NICs" "$D/out"; then
  fail "a WAN spec of hosts with different NIC counts is refused, saying so"
  cat "$D/out"
else
  pass
fi

# 7. run -a flat: every registry row of the collective and no composition; -a all: the same
# rows with the same times, plus hier(ring+X) for each row X once the world spans hosts.
if "${GUARD[@]}" "$SIM" run "${MODEL[@]}" -c reduce_scatter -a flat -p 16 -s 1M --threads 1 \
  --json "$D/flat.json" >"$D/out" 2>&1 &&
  "${GUARD[@]}" "$SIM" run "${MODEL[@]}" -c reduce_scatter -a all -p 16 -s 1M --threads 1 \
    --json "$D/all.json" >>"$D/out" 2>&1 &&
  "${GUARD[@]}" "$INFO" --algorithms >"$D/rows" 2>>"$D/out" &&
  $PY - "$D/flat.json" "$D/all.json" "$D/rows" <<'EOF'; then
import json, re, sys
flat = {r["algorithm"]: r["time_us"] for r in json.load(open(sys.argv[1]))["rows"]}
every = {r["algorithm"]: r["time_us"] for r in json.load(open(sys.argv[2]))["rows"]}
rows = set(re.findall(r"^reduce_scatter +([a-z_]+) ", open(sys.argv[3]).read(), re.M))
assert set(flat) == rows, (sorted(flat), sorted(rows))
hier = {k for k in every if k.startswith("hier(")}
assert hier == {f"hier(ring+{x})" for x in rows if x != "link_ring"}, sorted(hier)
assert {k: v for k, v in every.items() if k not in hier} == flat, (every, flat)
EOF
  pass
else
  fail "shoal-sim run -a flat simulates every row and no composition"
  cat "$D/out"
fi

# 8. Bad arguments: a message and a non-zero exit, no file.
for args in "--worlds 1 --sizes 1K" "--worlds 8 --collectives all_smash" "--worlds 8 --sizes 1K:2K:1"; do
  # shellcheck disable=SC2086
  if "${GUARD[@]}" "$SIM" tune $args -o "$D/bad.json" >"$D/out" 2>&1 || [[ -e $D/bad.json ]] ||
    ! grep -q "shoal-sim: " "$D/out"; then
    fail "tune $args is rejected with a message"
  else
    pass
  fi
done

summary
