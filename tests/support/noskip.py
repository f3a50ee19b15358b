"""Under CI=true a skipped test fails the run (docs/testing.md, "No silent skips").

`helpers.require` already turns a missing component into a failure under CI=true; this
plugin catches every other skip (a direct ``pytest.skip``, an ``importorskip``, a ``skipif``,
a module skipped at collection) and sets pytest's exit status to 1 at the end of the
session, naming each one. The few skips that are the platform's and not ours are allowed by
test id in :data:`ALLOWED_SKIPS`, each with its reason; docs/testing.md lists them.

tests/conftest.py imports the report hooks and calls :func:`finish` from its own
sessionfinish (so every run of the suite has them); a run of other files loads the whole
plugin with ``-p support.noskip`` (tests/test_noskip.py does).
"""

from __future__ import annotations

from typing import Any

import pytest

from support.helpers import IN_CI

# test id (without parameters) -> why that skip is the platform's, not a missing component.
ALLOWED_SKIPS: dict[str, str] = {
    "tests/test_agent.py::test_real_dev_kmsg_followed_by_the_agent_agrees":
        "a container without the kernel log (/dev/kmsg not readable) has nothing to follow; "
        "the agent's kmsg path is covered on fixture files by the other agent tests",
}

_SKIPPED: list[tuple[str, str]] = []


def allowed(nodeid: str) -> bool:
    return nodeid.split("[", 1)[0] in ALLOWED_SKIPS


def _why(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: why")
        return str(longrepr[2])
    return str(longrepr)


def _note(report: Any) -> None:
    if IN_CI and report.skipped and not hasattr(report, "wasxfail") and not allowed(report.nodeid):
        _SKIPPED.append((report.nodeid or "(collection)", _why(report)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _SKIPPED:
        return
    terminalreporter.section("skips under CI=true (each one fails the run)", red=True)
    for nodeid, why in _SKIPPED:
        terminalreporter.line(f"SKIPPED {nodeid}: {why}")
    terminalreporter.line("allowed skips are listed in tests/support/noskip.py ALLOWED_SKIPS "
                          "(docs/testing.md)")


def finish(session: pytest.Session, exitstatus: int) -> None:
    """A run that would pass but skipped something under CI=true exits 1."""
    if _SKIPPED and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    finish(session, exitstatus)
