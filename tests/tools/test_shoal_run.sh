#!/usr/bin/env bash
# End-to-end tests of shoal-run: the ranks' environment, exit statuses, failure handling,
# signal forwarding, --timeout, --tag-output, leaked descriptors and the hosted store.
# Usage: bash test_shoal_run.sh BIN_DIR     (ctest passes the build's bin directory)
set -u
BIN=${1:?usage: test_shoal_run.sh BIN_DIR}
RUN=$BIN/shoal-run
TORCH_PY=${SHOAL_TEST_PYTHON:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's torch
if [[ ! -x $RUN ]]; then
  echo "FAIL: $RUN does not exist or is not executable"
  exit 1
fi

D=$(mktemp -d /tmp/test_shoal_run.XXXXXX)
# Every process a case starts carries this marker in its command line, so that leftovers are
# found (and cleaned up by pid) without touching anything else on the machine.
MARK=shoalruntest_$$_$RANDOM
# A hung shoal-run fails its case instead of hanging the script; the cases together get a
# budget of BUDGET seconds, after which the rest fail without running.
GUARD=(timeout -s KILL 10)
SLOW_GUARD=(timeout -s KILL 20)  # for the case that imports torch on a loaded machine
BUDGET=30

# The same guard for a shoal-run started in the background, whose pid the case signals itself:
# prints the pid of a watchdog that kills PID after 10 s (stop it with kill).
watchdog() {
  (
    trap 'kill $s 2>/dev/null; exit 0' TERM
    (exec -a "$MARK-watchdog" sleep 10) & s=$!
    wait $s
    kill -KILL "$1"
  ) >/dev/null 2>&1 &
  echo $!
}

cleanup() {
  local pids
  pids=$(pgrep -f "$MARK")
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT

passed=0
failed=()
now() { echo "$EPOCHREALTIME"; }
elapsed_below() { awk -v a="$1" -v b="$(now)" -v lim="$2" 'BEGIN { exit !(b - a < lim) }'; }

# Waits (up to 10 s) until all the named files exist.
wait_files() {
  local i f missing
  for ((i = 0; i < 200; i++)); do
    missing=0
    for f in "$@"; do [[ -e $f ]] || missing=1; done
    ((missing == 0)) && return 0
    sleep 0.05
  done
  return 1
}

# True when no process with the case's marker is left (zombies being reaped get 2 s).
no_leftovers() {
  local i
  for ((i = 0; i < 40; i++)); do
    pgrep -f "$1" >/dev/null || return 0
    sleep 0.05
  done
  echo "    leftover processes:"
  ps -o pid,pgid,stat,args -p "$(pgrep -d, -f "$1")" | sed 's/^/      /'
  return 1
}

# run_case NAME: runs case_NAME, which prints what went wrong and returns non-zero on failure.
run_case() {
  local out
  if ! elapsed_below "$t_start" "$BUDGET"; then
    echo "FAIL: $1 (not run: the script's budget of $BUDGET s is spent)"
    failed+=("$1")
    return
  fi
  if out=$("case_$1" 2>&1); then
    echo "PASS: $1${out:+ ($out)}"
    passed=$((passed + 1))
  else
    echo "FAIL: $1"
    echo "$out" | sed 's/^/    /'
    failed+=("$1")
  fi
}

expect_rc() {  # expect_rc WANT GOT WHAT
  if [[ $2 != "$1" ]]; then
    echo "expected exit status $1 from $3, got $2"
    return 1
  fi
}

expect_grep() {  # expect_grep PATTERN FILE
  if ! grep -qE -- "$1" "$2"; then
    echo "expected /$1/ in $(basename "$2"), which holds:"
    sed 's/^/    | /' "$2"
    return 1
  fi
}

# ---------------------------------------------------------------------------------------------

case_help() {
  "${GUARD[@]}" "$RUN" --help >"$D/help" 2>&1 || { echo "--help failed"; cat "$D/help"; return 1; }
  local opt
  for opt in --nproc --master-addr --master-port --grace --tag-output --timeout PROGRAM \
             RANK WORLD_SIZE TORCHELASTIC_USE_AGENT_STORE --netns --hosts-file GROUP_RANK --bind-to; do
    expect_grep "$opt" "$D/help" || return 1
  done
}

case_bad_arguments() {
  # Usage errors exit 2 with a message that says what is wrong.
  local rc
  "${GUARD[@]}" "$RUN" true >"$D/noarg.out" 2>&1; rc=$?
  expect_rc 2 $rc "a missing -n" || return 1
  expect_grep "nproc is required" "$D/noarg.out" || return 1
  "${GUARD[@]}" "$RUN" -n 0 true >"$D/zero.out" 2>&1; rc=$?
  expect_rc 2 $rc "-n 0" || return 1
  expect_grep "nproc must be in 1\.\." "$D/zero.out" || return 1
  "${GUARD[@]}" "$RUN" -n 1 --grace -1 true >"$D/grace.out" 2>&1; rc=$?
  expect_rc 2 $rc "--grace -1" || return 1
  "${GUARD[@]}" "$RUN" -n 2 >"$D/noprog.out" 2>&1; rc=$?
  expect_rc 2 $rc "a missing PROGRAM" || return 1
  expect_grep "missing PROGRAM" "$D/noprog.out" || return 1
  "${GUARD[@]}" "$RUN" -n 2 --no-such-option true >"$D/badopt.out" 2>&1; rc=$?
  expect_rc 2 $rc "an unknown option" || return 1
  expect_grep "unknown option '--no-such-option'" "$D/badopt.out"
}

case_netns_arguments() {
  # Host lists that cannot work are usage errors (exit 2) before anything starts; these need
  # no root. Launching into namespaces is tested by test_netcluster.sh.
  local rc ns=nons$MARK
  "${GUARD[@]}" "$RUN" -n 2 --netns "$ns-a,$ns-b" true >"$D/ns1.out" 2>&1; rc=$?
  expect_rc 2 $rc "--netns naming a namespace that does not exist" || return 1
  expect_grep "cannot open network namespace '$ns-a' \(/var/run/netns/$ns-a\): No such file" \
    "$D/ns1.out" || return 1
  "${GUARD[@]}" "$RUN" -n 1 --netns "$ns-a,$ns-b" true >"$D/ns2.out" 2>&1; rc=$?
  expect_rc 2 $rc "fewer ranks than hosts" || return 1
  expect_grep "-n 1 is fewer ranks than the 2 hosts" "$D/ns2.out" || return 1
  "${GUARD[@]}" "$RUN" -n 3 --netns "$ns-a:1,$ns-b:1" true >"$D/ns3.out" 2>&1; rc=$?
  expect_rc 2 $rc "rank counts that do not add up to -n" || return 1
  expect_grep "add up to 2, but -n is 3" "$D/ns3.out" || return 1
  "${GUARD[@]}" "$RUN" -n 3 --netns "$ns-a:1,$ns-b" true >"$D/ns4.out" 2>&1; rc=$?
  expect_rc 2 $rc "a count for some hosts only" || return 1
  expect_grep "to every host or to none" "$D/ns4.out" || return 1
  "${GUARD[@]}" "$RUN" -n 2 --netns "$ns-a,$ns-a" true >"$D/ns5.out" 2>&1; rc=$?
  expect_rc 2 $rc "a host listed twice" || return 1
  expect_grep "listed twice" "$D/ns5.out" || return 1
  printf '# comment\n%s-c 2   # two ranks\n\n%s-d 1 extra\n' "$ns" "$ns" >"$D/hosts"
  "${GUARD[@]}" "$RUN" -n 3 --hosts-file "$D/hosts" true >"$D/ns6.out" 2>&1; rc=$?
  expect_rc 2 $rc "a malformed hosts file" || return 1
  expect_grep "hosts:4: expected \"NAME \[K\]\"" "$D/ns6.out" || return 1
  printf '%s-c 2   # two ranks\n%s-d\n' "$ns" "$ns" >"$D/hosts"
  "${GUARD[@]}" "$RUN" -n 3 --hosts-file "$D/hosts" true >"$D/ns7.out" 2>&1; rc=$?
  expect_rc 2 $rc "a hosts file with a count for one host only" || return 1
  expect_grep "to every host or to none" "$D/ns7.out" || return 1
  "${GUARD[@]}" "$RUN" -n 3 --hosts-file "$D/hosts" --netns x true >"$D/ns8.out" 2>&1; rc=$?
  expect_rc 2 $rc "--hosts-file with --netns" || return 1
}

case_environment() {
  local prog='
    for v in RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ROLE_RANK ROLE_WORLD_SIZE \
             MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT TORCHELASTIC_RUN_ID \
             TORCHELASTIC_USE_AGENT_STORE KEEP_ME; do
      echo "$v=${!v-UNSET}"
    done > "$1/env.$2.$RANK"'
  local rc r launch
  for launch in a b; do
    KEEP_ME=kept RANK=99 "${GUARD[@]}" "$RUN" -n 3 -- bash -c "$prog" "$MARK" "$D" "$launch"
    rc=$?
    expect_rc 0 $rc "a job whose ranks all exit 0" || return 1
  done
  for r in 0 1 2; do
    local f=$D/env.a.$r
    [[ -f $f ]] || { echo "rank $r did not run"; return 1; }
    for kv in RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 GROUP_RANK=0 ROLE_RANK=$r \
              ROLE_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 TORCHELASTIC_RESTART_COUNT=0 \
              TORCHELASTIC_USE_AGENT_STORE=True KEEP_ME=kept; do
      expect_grep "^$kv\$" "$f" || return 1
    done
    expect_grep '^MASTER_PORT=[1-9][0-9]*$' "$f" || return 1
    expect_grep '^TORCHELASTIC_RUN_ID=.+' "$f" || return 1
  done
  local id0 id1 ida idb
  id0=$(grep RUN_ID "$D/env.a.0"); id1=$(grep RUN_ID "$D/env.a.2"); idb=$(grep RUN_ID "$D/env.b.0")
  [[ $id0 == "$id1" ]] || { echo "ranks of one launch differ in $id0 / $id1"; return 1; }
  [[ $id0 != "$idb" ]] || { echo "two launches share $id0"; return 1; }
  # --master-port is passed on, and is where the store listens. The port is random, below
  # Linux's ephemeral range; another try if something else holds it.
  local port try
  for try in 1 2 3; do
    port=$((20000 + RANDOM % 12000))
    "${GUARD[@]}" "$RUN" -n 1 --master-port $port -- bash -c \
      'echo $MASTER_PORT > "$1/port"; exec 3<>/dev/tcp/$MASTER_ADDR/$MASTER_PORT' "$MARK" "$D" \
      2>"$D/port.err"
    rc=$?
    grep -q 'already in use' "$D/port.err" || break
  done
  cat "$D/port.err"
  expect_rc 0 $rc "a rank connecting to --master-port $port" || return 1
  [[ $(cat "$D/port") == "$port" ]] || { echo "MASTER_PORT=$(cat "$D/port"), wanted $port"; return 1; }
}

case_rank_fails() {
  local t0 rc m=${MARK}_fails
  t0=$(now)
  "${GUARD[@]}" "$RUN" -n 4 -- bash -c \
    '[[ $RANK == 2 ]] && { sleep 0.3; exit 3; }; exec -a "$0-sleep" sleep 30 & wait' "$m" \
    2>"$D/fails.err"
  rc=$?
  expect_rc 3 $rc "a job whose rank 2 exits 3" || { cat "$D/fails.err"; return 1; }
  expect_grep '^shoal-run: rank 2 \(pid [0-9]+\) exited with status 3$' "$D/fails.err" || return 1
  [[ $(grep -c 'exited with\|killed by' "$D/fails.err") == 1 ]] ||
    { echo "more than one failure reported:"; cat "$D/fails.err"; return 1; }
  elapsed_below "$t0" 4 || { echo "the others were not stopped promptly"; return 1; }
  no_leftovers "$m"
}

case_rank_killed() {
  local rc m=${MARK}_killed
  "${GUARD[@]}" "$RUN" -n 3 -- bash -c \
    '[[ $RANK == 1 ]] && { sleep 0.3; kill -KILL $$; }; exec -a "$0-sleep" sleep 30' "$m" \
    2>"$D/killed.err"
  rc=$?
  expect_rc 137 $rc "a job whose rank 1 is killed by SIGKILL" || { cat "$D/killed.err"; return 1; }
  expect_grep '^shoal-run: rank 1 \(pid [0-9]+\) killed by signal 9 \(SIGKILL\)$' \
    "$D/killed.err" || return 1
  no_leftovers "$m"
}

case_grace_escalates() {
  # Rank 1 (and its child) ignore SIGTERM; after --grace 1 they get SIGKILL.
  local t0 rc m=${MARK}_grace
  t0=$(now)
  "${GUARD[@]}" "$RUN" -n 2 --grace 1 -- bash -c '
    if [[ $RANK == 0 ]]; then
      while [[ ! -e $1/grace.ready ]]; do sleep 0.05; done; exit 5
    fi
    trap "" TERM; exec -a "$0-sleep" sleep 30 & touch "$1/grace.ready"; wait' "$m" "$D" \
    2>"$D/grace.err"
  rc=$?
  expect_rc 5 $rc "a job whose rank 0 exits 5" || { cat "$D/grace.err"; return 1; }
  expect_grep 'rank\(s\) 1 still running after --grace 1s, sending SIGKILL' "$D/grace.err" ||
    return 1
  elapsed_below "$t0" 5 || { echo "SIGKILL did not follow --grace 1"; return 1; }
  no_leftovers "$m"
}

case_forwards_sigterm() {
  local pid wd rc m=${MARK}_fwd
  "$RUN" -n 2 -- bash -c '
    trap "echo \$RANK > $1/term.\$RANK; exit 0" TERM
    exec -a "$0-sleep" sleep 30 &
    touch "$1/fwd.ready.$RANK"; wait' "$m" "$D" 2>"$D/fwd.err" &
  pid=$!
  wd=$(watchdog $pid)
  wait_files "$D/fwd.ready.0" "$D/fwd.ready.1" || { echo "ranks did not start"; kill -KILL $pid; return 1; }
  kill -TERM $pid
  wait $pid
  rc=$?
  kill $wd
  expect_rc 143 $rc "shoal-run sent SIGTERM" || { cat "$D/fwd.err"; return 1; }
  [[ -e $D/term.0 && -e $D/term.1 ]] || { echo "SIGTERM did not reach every rank"; return 1; }
  expect_grep 'received SIGTERM' "$D/fwd.err" || return 1
  no_leftovers "$m"
}

case_second_sigint_kills() {
  # Ranks ignore SIGINT and SIGTERM; a second SIGINT must kill them at once despite --grace 20.
  # (env restores SIGINT, which bash ignores in background jobs.)
  local pid wd rc t0 m=${MARK}_int
  env --default-signal=INT "$RUN" -n 2 --grace 20 -- bash -c '
    trap "" INT TERM; exec -a "$0-sleep" sleep 30 & touch "$1/int.ready.$RANK"; wait' \
    "$m" "$D" 2>"$D/int.err" &
  pid=$!
  wd=$(watchdog $pid)
  wait_files "$D/int.ready.0" "$D/int.ready.1" || { echo "ranks did not start"; kill -KILL $pid; return 1; }
  t0=$(now)
  kill -INT $pid
  sleep 0.3
  kill -INT $pid
  wait $pid
  rc=$?
  kill $wd
  expect_rc 130 $rc "shoal-run sent SIGINT twice" || { cat "$D/int.err"; return 1; }
  elapsed_below "$t0" 3 || { echo "the second SIGINT did not kill the ranks promptly"; return 1; }
  expect_grep 'second SIGINT' "$D/int.err" || return 1
  no_leftovers "$m"
}

case_dies_with_launcher() {
  # PR_SET_PDEATHSIG: ranks die when shoal-run is killed outright.
  local pid wd m=${MARK}_orphan
  "$RUN" -n 2 -- bash -c 'touch "$1/orphan.ready.$RANK"; exec -a "$0-sleep" sleep 30' \
    "$m" "$D" &
  pid=$!
  wd=$(watchdog $pid)
  wait_files "$D/orphan.ready.0" "$D/orphan.ready.1" || { echo "ranks did not start"; kill -KILL $pid; return 1; }
  sleep 0.1
  kill -KILL $pid
  wait $pid 2>/dev/null
  kill $wd
  no_leftovers "$m"
}

case_timeout() {
  local t0 rc m=${MARK}_timeout
  t0=$(now)
  "${GUARD[@]}" "$RUN" -n 2 --timeout 1 -- bash -c 'exec -a "$0-sleep" sleep 30' "$m" \
    2>"$D/timeout.err"
  rc=$?
  expect_rc 124 $rc "a job over --timeout 1" || { cat "$D/timeout.err"; return 1; }
  expect_grep 'exceeded --timeout 1s' "$D/timeout.err" || return 1
  elapsed_below "$t0" 4 || { echo "--timeout 1 took too long"; return 1; }
  no_leftovers "$m"
}

case_missing_program() {
  local rc
  "${GUARD[@]}" "$RUN" -n 2 "no-such-program-$MARK" 2>"$D/missing.err"; rc=$?
  expect_rc 127 $rc "a program not in PATH" || return 1
  expect_grep "program 'no-such-program-$MARK' not found in PATH" "$D/missing.err" || return 1
  "${GUARD[@]}" "$RUN" -n 2 "$D/nowhere/prog" 2>"$D/missing2.err"; rc=$?
  expect_rc 127 $rc "a path that does not exist" || return 1
  expect_grep "cannot execute '$D/nowhere/prog': No such file or directory" "$D/missing2.err" ||
    return 1
  printf 'echo hi\n' >"$D/notexec"
  "${GUARD[@]}" "$RUN" -n 2 "$D/notexec" 2>"$D/notexec.err"; rc=$?
  expect_rc 127 $rc "a file without execute permission" || return 1
  expect_grep "cannot execute '$D/notexec': Permission denied" "$D/notexec.err"
}

case_exec_fails_in_child() {
  # Executable, but execve fails (missing interpreter): the child must report it.
  local rc
  printf '#!/nonexistent/interpreter\n' >"$D/badinterp"
  chmod +x "$D/badinterp"
  "${GUARD[@]}" "$RUN" -n 2 "$D/badinterp" 2>"$D/badinterp.err"; rc=$?
  expect_rc 127 $rc "a program whose execve fails" || { cat "$D/badinterp.err"; return 1; }
  expect_grep "^shoal-run: rank 0 \(pid [0-9]+\) could not execute '$D/badinterp': No such file" \
    "$D/badinterp.err" || return 1
  [[ $(wc -l <"$D/badinterp.err") == 1 ]] || { echo "expected one line:"; cat "$D/badinterp.err"; return 1; }
}

case_tag_output() {
  local rc
  "${GUARD[@]}" "$RUN" -n 2 --tag-output -- bash -c \
    'echo "out $RANK"; echo "err $RANK" >&2; printf "partial $RANK"' "$MARK" \
    >"$D/tag.out" 2>"$D/tag.err"
  rc=$?
  expect_rc 0 $rc "a job with --tag-output" || return 1
  local r
  for r in 0 1; do
    expect_grep "^\[$r\] out $r\$" "$D/tag.out" || return 1
    expect_grep "^\[$r\] partial $r\$" "$D/tag.out" || return 1
    expect_grep "^\[$r\] err $r\$" "$D/tag.err" || return 1
  done
  # Without the flag, output is passed through untouched.
  "${GUARD[@]}" "$RUN" -n 1 -- bash -c 'echo plain' >"$D/plain.out"
  [[ $(cat "$D/plain.out") == plain ]] || { echo "untagged output changed: $(cat "$D/plain.out")"; return 1; }
}

case_stdin_to_rank0() {
  local rc
  echo "some input" | "${GUARD[@]}" "$RUN" -n 2 -- bash -c 'cat > "$1/stdin.$RANK"' "$MARK" "$D"
  rc=$?
  expect_rc 0 $rc "a job reading stdin" || return 1
  [[ $(cat "$D/stdin.0") == "some input" ]] || { echo "rank 0 did not get stdin"; return 1; }
  [[ ! -s $D/stdin.1 ]] || { echo "rank 1 read stdin too"; return 1; }
}

case_no_leaked_fds() {
  # A rank holds exactly the descriptors a plain child of this script holds: none of
  # shoal-run's sockets, signalfd or pipes. (find runs as a child, so its own fds do not show.)
  local lister='find /proc/$$/fd -mindepth 1 -printf "%f %l\n" > "$1"'
  local f
  bash -c "$lister" "$MARK" "$D/fds.plain"
  "${GUARD[@]}" "$RUN" -n 2 -- bash -c "$lister.\$RANK" "$MARK" "$D/fds.rank" || return 1
  "${GUARD[@]}" "$RUN" -n 1 --tag-output -- bash -c "$lister" "$MARK" "$D/fds.tagged" || return 1
  for f in plain rank.0 rank.1 tagged; do
    awk '$1 > 2' "$D/fds.$f" | sort >"$D/fds.$f.sorted"
  done
  for f in rank.0 rank.1 tagged; do
    if ! diff "$D/fds.plain.sorted" "$D/fds.$f.sorted" >/dev/null; then
      echo "descriptors leaked into a rank (fds.$f; < plain child, > rank):"
      diff "$D/fds.plain.sorted" "$D/fds.$f.sorted" | sed 's/^/    /'
      return 1
    fi
  done
}

case_no_zombies() {
  # Rank 0 exits at once; while rank 1 runs, shoal-run must have reaped it.
  local pid wd rc i zombies m=${MARK}_zombie
  "$RUN" -n 2 -- bash -c '
    [[ $RANK == 0 ]] && exit 0
    touch "$1/zombie.ready"; while [[ ! -e $1/zombie.go ]]; do sleep 0.05; done' "$m" "$D" &
  pid=$!
  wd=$(watchdog $pid)
  wait_files "$D/zombie.ready" || { echo "rank 1 did not start"; kill -KILL $pid; return 1; }
  for ((i = 0; i < 40; i++)); do
    [[ $(ps -o pid= --ppid $pid | wc -l) == 1 ]] && break
    sleep 0.05
  done
  zombies=$(ps -o stat= --ppid $pid | grep -c Z)
  touch "$D/zombie.go"
  wait $pid
  rc=$?
  kill $wd
  [[ $zombies == 0 ]] || { echo "shoal-run left $zombies zombie rank(s)"; return 1; }
  expect_rc 0 $rc "a job whose ranks exit 0 at different times"
}

case_store_reachable() {
  # Ranks use shoal-run's store through torch: a raw TCPStore client, then env:// init.
  local py='
import datetime, os, sys
import torch
import torch.distributed as dist
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
s = dist.TCPStore(addr, port, n, False, datetime.timedelta(seconds=20))
s.set("shoal-run-test/%d" % r, "hello from %d" % r)
peer = s.get("shoal-run-test/%d" % ((r + 1) % n)).decode()
assert peer == "hello from %d" % ((r + 1) % n), peer
assert s.add("shoal-run-test/counter", 1) >= 1
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=20))
t = torch.tensor([float(r + 1)])
dist.all_reduce(t)
assert t.item() == n * (n + 1) / 2, t
dist.barrier()
print("rank %d: got %r, all_reduce %g" % (r, peer, t.item()), flush=True)
dist.destroy_process_group()
os._exit(0)  # gloo can abort in the interpreter teardown (pytorch/pytorch#190489): not this test
'
  local rc
  # the project's torch (scripts/install-deps.sh): missing, the case fails
  "${SLOW_GUARD[@]}" "$RUN" -n 2 --tag-output -- "$TORCH_PY" -c "$py" "$MARK" \
    >"$D/store.out" 2>"$D/store.err"
  rc=$?
  expect_rc 0 $rc "ranks using the store with torch" || { cat "$D/store.out" "$D/store.err"; return 1; }
  expect_grep "^\[0\] rank 0: got 'hello from 1', all_reduce 3\$" "$D/store.out" || return 1
  expect_grep "^\[1\] rank 1: got 'hello from 0', all_reduce 3\$" "$D/store.out"
}

# --bind-to: by default each rank gets a core of its own when there are enough (as mpirun),
# "none" leaves the launcher's affinity, "core" binds round robin; a bad value is a usage error.
case_binding() {
  local prog='grep Cpus_allowed_list /proc/self/status | cut -f2 > "$1/cpus.$2.$RANK"'
  local own cores n r rc
  own=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
  cores=$(taskset -c -p $$ | sed 's/.*: //' | tr ',' '\n' |
          awk -F- '{ if (NF == 2) for (c = $1; c <= $2; c++) print c; else print $1 }')
  n=$(echo "$cores" | wc -l)
  # One core cannot tell a bound rank from an unbound one: the case fails rather than pass
  # untested (the project's machines have at least 2).
  ((n >= 2)) || { echo "this process may use only $n core: binding cannot be tested"; return 1; }
  "${GUARD[@]}" "$RUN" -n 2 -- bash -c "$prog" "$MARK" "$D" auto; rc=$?
  expect_rc 0 $rc "a bound job" || return 1
  for r in 0 1; do
    local want
    want=$(echo "$cores" | sed -n "$((r + 1))p")
    [[ $(cat "$D/cpus.auto.$r") == "$want" ]] || { echo "rank $r: cores $(cat "$D/cpus.auto.$r"), not $want"; return 1; }
  done
  "${GUARD[@]}" "$RUN" -n $((n + 1)) -- bash -c "$prog" "$MARK" "$D" over; rc=$?
  expect_rc 0 $rc "more ranks than cores" || return 1
  [[ $(cat "$D/cpus.over.$n") == "$own" ]] || { echo "more ranks than cores, yet rank $n was bound"; return 1; }
  "${GUARD[@]}" "$RUN" --bind-to core -n $((n + 1)) -- bash -c "$prog" "$MARK" "$D" core; rc=$?
  expect_rc 0 $rc "--bind-to core" || return 1
  [[ $(cat "$D/cpus.core.$n") == "$(echo "$cores" | head -1)" ]] || { echo "--bind-to core: rank $n not on the first core again"; return 1; }
  "${GUARD[@]}" "$RUN" --bind-to none -n 2 -- bash -c "$prog" "$MARK" "$D" none; rc=$?
  expect_rc 0 $rc "--bind-to none" || return 1
  [[ $(cat "$D/cpus.none.1") == "$own" ]] || { echo "--bind-to none bound rank 1"; return 1; }
  "${GUARD[@]}" "$RUN" --bind-to socket -n 2 -- true 2>/dev/null; rc=$?
  expect_rc 2 $rc "--bind-to socket (not a choice)"
}

t_start=$(now)
for c in help bad_arguments environment rank_fails rank_killed grace_escalates forwards_sigterm \
         second_sigint_kills dies_with_launcher timeout missing_program exec_fails_in_child \
         tag_output stdin_to_rank0 no_leaked_fds no_zombies store_reachable netns_arguments binding; do
  run_case "$c"
done
echo "$passed passed, ${#failed[@]} failed in $(awk -v a="$t_start" -v b="$(now)" \
  'BEGIN { printf "%.1f", b - a }') s${failed[*]:+: ${failed[*]}}"
((${#failed[@]} == 0))
