#!/usr/bin/env bash
# Communicator::from_environment under every launcher we support: shoal-run, Open MPI's mpirun,
# torchrun (its agent hosts a torch TCPStore that shoal joins as a client), and the
# environments of MPICH/Hydra and SLURM srun (reproduced by hand: neither is installed here).
set -u
BIN=${1:?usage: test_launchers.sh BIN_DIR}
fail=0
check() {  # check NAME EXPECTED_LINES OUTPUT
  local n; n=$(grep -c "all_reduce OK" <<<"$3")
  if [ "$n" -eq "$2" ]; then echo "ok   $1"; else echo "FAIL $1 ($n of $2 ranks OK)"; echo "$3" | tail -20; fail=1; fi
}

out=$(timeout 60 "$BIN/shoal-run" -n 3 "$BIN/shoal-info" --check 2>&1); check "shoal-run -n 3" 3 "$out"

if command -v mpirun >/dev/null; then
  out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 3 "$BIN/shoal-info" --check 2>&1)
  check "mpirun -np 3 (file store fallback)" 3 "$out"
  out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29731 "$BIN/shoal-info" --check 2>&1)
  check "mpirun -np 2 with MASTER_ADDR/PORT" 2 "$out"
else
  echo "FAIL mpirun: Open MPI is not installed (scripts/install-deps.sh installs it)"; fail=1
fi

# torchrun: the project's (.venv, scripts/install-deps.sh); missing, the case fails
TORCHRUN=${SHOAL_TEST_PYTHON:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}
out=$(timeout 120 "$TORCHRUN" -m torch.distributed.run --no_python --nproc_per_node 2 --master_port 29732 "$BIN/shoal-info" --check 2>&1)
check "torchrun --nproc_per_node 2 (agent store)" 2 "$out"

# MPICH/Hydra's variables, by hand
out=$( (for r in 0 1; do PMI_RANK=$r PMI_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29733 timeout 60 "$BIN/shoal-info" --check & done; wait) 2>&1)
check "PMI_RANK/PMI_SIZE (MPICH/Hydra)" 2 "$out"

# SLURM's variables, by hand: the store goes to the first host of the step's node list
out=$( (for r in 0 1 2; do SLURM_PROCID=$r SLURM_NTASKS=3 SLURM_LOCALID=$r SLURM_NTASKS_PER_NODE=3 \
  SLURM_STEP_NODELIST="localhost" SLURM_JOB_ID=4242 SLURM_STEP_ID=0 timeout 60 "$BIN/shoal-info" --check & done; wait) 2>&1)
check "SLURM_PROCID/SLURM_NTASKS (srun)" 3 "$out"

# A missing variable is a clear error, not a hang
out=$(env -u RANK -u WORLD_SIZE MASTER_ADDR=127.0.0.1 timeout 20 "$BIN/shoal-info" --check 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qi "rank\|launcher" <<<"$out"; then echo "ok   no launcher -> clear error"; else echo "FAIL no launcher: rc=$rc $out"; fail=1; fi

[ $fail -eq 0 ] && echo "launchers: all passed"
exit $fail
