"""decide(): one node's check results -> one action. Pure; covered by a table test.

The rules, in order:
1. A node that Slurm has DOWN is never touched (no drain, no undrain).
2. Any ``unhealthy`` result (or ``degraded``/``error`` when configured to drain on them)
   -> drain, with the reason ``slurmguard: <first failing check>: <its reason>``.
3. Otherwise any ``error`` result -> ``checker-error``: slurmguard failed, the node is not
   blamed, nothing is drained and nothing is undrained (we cannot tell it is healthy).
4. Otherwise, in healthcheck mode, a drain whose reason is ours and names a node check that
   ran in this round and came back healthy -> undrain. Drains by fleet policy
   (``slurmguard: lemon: ...``), by the Kubernetes reconciler or by an admin are not ours to
   clear here: their own paths return those nodes.
5. Otherwise -> pass.
"""

from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from slurmguard.contract import CheckResult, Health, format_reason, reason_source

REASON_MAX = 160  # long enough to say what broke, short enough for `sinfo -R`


class Action(StrEnum):
    PASS = "pass"
    DRAIN = "drain"
    UNDRAIN = "undrain"
    CHECKER_ERROR = "checker-error"
    LEAVE = "leave"  # the node is DOWN: not ours to touch


class Decision(NamedTuple):
    action: Action
    reason: str  # the drain reason, or why nothing was done
    failing: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def drain_reason(check: str, text: str) -> str:
    """``slurmguard: <check>: <text>`` on one line, capped for `sinfo -R`."""
    return format_reason(check, text, REASON_MAX)


def decide(
    results: Sequence[CheckResult],
    *,
    hook: str,
    drain_on_degraded: bool = False,
    drain_on_error: bool = False,
    node_down: bool = False,
    current_reason: str | None = None,
    node_checks: frozenset[str] = frozenset(),
) -> Decision:
    """Turn results into one action. ``node_checks``: names that a healthcheck may undrain."""
    bad = {Health.UNHEALTHY}
    if drain_on_degraded:
        bad.add(Health.DEGRADED)
    if drain_on_error:
        bad.add(Health.ERROR)
    failing = [r for r in results if r.health in bad]
    errors = tuple(r.name for r in results if r.health is Health.ERROR)
    names = tuple(r.name for r in failing)
    if node_down:
        return Decision(Action.LEAVE, "node is DOWN in Slurm: left alone", names, errors)
    if failing:
        first = failing[0]
        more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
        text = first.reason or first.health.value
        reason = drain_reason(first.name, text[: REASON_MAX - len(first.name) - 20] + more)
        return Decision(Action.DRAIN, reason, names, errors)
    if errors:
        return Decision(Action.CHECKER_ERROR, "checker error in " + ", ".join(errors), (), errors)
    if hook == "healthcheck":
        drained_by = reason_source(current_reason)
        healthy_now = {r.name for r in results if r.health is Health.HEALTHY}
        if drained_by and drained_by in node_checks and drained_by in healthy_now:
            return Decision(Action.UNDRAIN, f"{drained_by} passes again", (), ())
    return Decision(Action.PASS, "", (), ())
