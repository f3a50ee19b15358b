"""How long each test module took, and the run in all: the table `.ci/run` ends with
(docs/testing.md, "CI's time").

Each test's setup, call and teardown are added to its file, so a module's fixtures (a real
cluster started once for the module) count where they are paid. At the end of the session the
ten slowest modules and the total are printed, and written as JSON to
``$SLURMGUARD_MODULE_TIMES`` when it is set (`.ci/run` prints that file again as its last
lines). tests/conftest.py registers this plugin for every run of the suite.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

_TIMES: dict[str, float] = {}
_START: list[float] = []


def slowest(times: dict[str, float], n: int = 10) -> list[tuple[str, float]]:
    """The ``n`` modules that took longest, longest first (ties by name)."""
    return sorted(times.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def table(times: dict[str, float], wall: float, n: int = 10,
          wall_is: str = "wall (with collection)") -> list[str]:
    """The lines printed: each of the slowest modules with its seconds and share of the
    tests' time, then the totals."""
    total = sum(times.values())
    lines = [f"{secs:8.1f} s  {100 * secs / total if total else 0:5.1f} %  {mod}"
             for mod, secs in slowest(times, n)]
    lines.append(f"{total:8.1f} s  in tests of {len(times)} modules; {wall:.1f} s {wall_is}")
    return lines


def pytest_sessionstart(session: Any) -> None:
    _START.append(time.monotonic())


def pytest_runtest_logreport(report: Any) -> None:
    mod = report.nodeid.split("::", 1)[0]
    _TIMES[mod] = _TIMES.get(mod, 0.0) + float(report.duration or 0.0)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _TIMES:
        return
    wall = time.monotonic() - _START[0] if _START else 0.0
    terminalreporter.section("slowest modules")
    for line in table(_TIMES, wall):
        terminalreporter.line(line)
    path = os.environ.get("SLURMGUARD_MODULE_TIMES")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"wall_s": round(wall, 1), "modules": {k: round(v, 1) for k, v in
                                                            sorted(_TIMES.items())}}, f,
                      indent=1)


def merged(parts: list[dict[str, Any]]) -> tuple[dict[str, float], float]:
    """One table's input from several runs' JSON (`.ci/run` runs the suite in parts): each
    module's seconds summed, and the parts' wall times summed (parts that ran side by side
    count once each, so this wall is the tests' own time, not the run's)."""
    times: dict[str, float] = {}
    for part in parts:
        for mod, secs in part["modules"].items():
            times[mod] = times.get(mod, 0.0) + float(secs)
    return times, sum(float(p["wall_s"]) for p in parts)


def main(paths: list[str]) -> int:
    """`python tests/support/module_times.py FILE.json...`: the table over every part."""
    parts = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"module times: {path}: {e}")
    times, wall = merged(parts)
    print("\n".join(table(times, wall, wall_is=f"of the {len(parts)} parts' walls summed "
                                                "(parts run side by side count in full)")))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
