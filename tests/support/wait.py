"""The suite's one way to wait: poll a condition until it holds, never sleep blind.

A test that needs "X has happened" polls X with `wait_for`. A test that needs "nothing
happened" does not sleep for a guessed while either: it waits until the component had its
chance (a pass counter advanced: serve's `slurmguard_policy_passes_total`, the agent's
`passes` in its status reply) and then asserts that nothing happened (`counter_advanced`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Errors that mean "not ready yet" while a daemon starts: a refused or reset connection, a
# reply that is not JSON yet. Anything else is a fault and ends the wait at once.
STARTING = (OSError, ValueError)


class WaitTimeout(AssertionError):
    """The condition did not hold in time; the message names what and the last value seen."""


def wait_for(condition: Callable[[], T], timeout: float = 30.0, *, interval: float = 0.1,
             what: str = "", ignore: tuple[type[BaseException], ...] = (),
             error: Callable[[str], BaseException] = WaitTimeout) -> T:
    """Call ``condition`` every ``interval`` s until it returns something truthy; return it.

    Everything after ``timeout`` is keyword-only, so that a call never reads a description
    as an interval.

    Raises WaitTimeout after ``timeout`` s, naming ``what`` and the last value (or the last
    ignored exception) seen. ``ignore``: exception types that count as "not yet" (e.g.
    STARTING while a server comes up). The condition is always tried once more at the
    deadline, so a slow machine that oversleeps still gets its last look. ``error``: the
    exception type to raise instead, built from that message (a harness raises its own, with
    a log tail).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = condition()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise error(f"timed out after {timeout:g}s waiting for "
                        f"{what or getattr(condition, '__name__', 'a condition')}; "
                        f"last seen: {last!r}")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def counter_advanced(read: Callable[[], int], by: int = 1, *, timeout: float = 30.0,
                     interval: float = 0.1, what: str = "pass") -> int:
    """Wait until the counter ``read()`` has advanced by ``by`` from its value now.

    For "nothing happens" tests: read the counter, then wait for ``by`` more passes, so that
    the component had its chance whatever the machine's load. Returns the new value.
    """
    start = read()
    seen = [start]

    def advanced() -> bool:
        seen[0] = read()
        return seen[0] >= start + by

    try:
        wait_for(advanced, timeout=timeout, interval=interval, what=what, ignore=STARTING)
    except WaitTimeout:
        raise WaitTimeout(f"timed out after {timeout:g}s waiting for {by} more {what}: "
                          f"counter was {start}, last seen {seen[0]}") from None
    return seen[0]
