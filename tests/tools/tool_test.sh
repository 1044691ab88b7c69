# Shared by the tools' end-to-end scripts (sourced; not a test itself):
#   source "$(dirname "$0")/tool_test.sh" NAME "${1:-}" TOOL...
# checks that BIN_DIR (the script's argument, ctest passes the build's bin directory) has every
# TOOL, sets BIN, PY (Debian's python), TORCH_PY (the project's, with torch) and D (a work directory removed on exit), and defines
# skip and skip_case (skip.sh), pass, fail CASE (prints the tail of $D/out, where cases leave their output) and summary (the
# last line; its status is the script's).
TEST_NAME=$1
SKIP_NAME=$TEST_NAME
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
BIN=${2:?usage: $TEST_NAME.sh BIN_DIR}
shift 2
for tool in "$@"; do
  if [[ ! -x $BIN/$tool ]]; then
    echo "FAIL: $BIN/$tool does not exist or is not executable"
    exit 1
  fi
done
PY=/usr/bin/python3  # JSON checks: Debian's python, no packages needed
TORCH_PY=${SHOAL_TEST_PYTHON:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python}  # the project's torch
D=$(mktemp -d "/tmp/$TEST_NAME.XXXXXX")
trap 'rm -rf "$D"' EXIT

passed=0
failed=()
pass() { passed=$((passed + 1)); }
fail() { failed+=("$1"); echo "FAIL: $1"; [[ -f $D/out ]] && sed 's/^/    /' "$D/out" | tail -25; }
summary() {
  echo "$TEST_NAME: $passed passed, ${#failed[@]} failed"
  ((${#failed[@]} == 0))
}
