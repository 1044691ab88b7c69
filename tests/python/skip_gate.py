"""The pytest side of the skip gate (docs/reliability.md), loaded by conftest.py: under
SHOAL_TEST_NO_SKIP=1 (.ci/run) a skipped test fails the session, naming what it lacked; otherwise
each skip goes to $SHOAL_SKIP_LOG (make test prints that file last)."""
import os

_skipped = []


def _reason(report):
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session, exitstatus):
    if not _skipped:
        return
    if os.environ.get("SHOAL_TEST_NO_SKIP") == "1":
        for nodeid, reason in _skipped:
            print(f"\nFAIL: {nodeid} would skip, and SHOAL_TEST_NO_SKIP=1 allows none: {reason}")
        session.exitstatus = 1
        return
    log = os.environ.get("SHOAL_SKIP_LOG")
    if log:
        with open(log, "a") as f:
            for nodeid, reason in _skipped:
                f.write(f"{nodeid}: {reason}\n")
