# The one way a test script skips (sourced; docs/reliability.md):
#   skip REASON        ends the script as skipped (exit 77, ctest's SKIP_RETURN_CODE)
#   skip_case REASON   leaves out one case and goes on
# Each adds "NAME: REASON" to $SHOAL_SKIP_LOG when set (make test prints that file last). Under
# SHOAL_TEST_NO_SKIP=1 (.ci/run) a skip is a failure: the script exits 1 naming what it lacked.
SKIP_NAME=${SKIP_NAME:-$(basename "$0" .sh)}
skip_case() {
  if [[ ${SHOAL_TEST_NO_SKIP:-0} == 1 ]]; then
    echo "FAIL: $SKIP_NAME would skip, and SHOAL_TEST_NO_SKIP=1 allows none: $*"
    exit 1
  fi
  echo "SKIP: $*"
  if [[ -n ${SHOAL_SKIP_LOG:-} ]]; then echo "$SKIP_NAME: $*" >>"$SHOAL_SKIP_LOG"; fi
  return 0
}
skip() {
  skip_case "$@"
  exit 77
}
