"""Slurm's time limits on the hooks, judged against slurmguard's own budget (pure).

`slurmguard doctor` asks this for the node role. A Slurm limit at or under ``hooks.budget``
kills a slow hook before slurmguard's watchdog ends it cleanly (Slurm then drains the node
with its own reason, "Prolog error" or "Kill task failed", instead of slurmguard failing
open), so every limit must be longer than the budget. Which limits exist depends on the
running Slurm, and ``scontrol show config`` prints only those (tests/data/slurm/):

* ``PrologEpilogTimeout``: one limit for both hooks (up to 24.11; 25.05+ still accept it);
* ``PrologTimeout`` / ``EpilogTimeout``: separate limits, 25.05+ (printed instead of the
  former when set);
* ``HealthCheckTimeout``: 25.11+, must also stay below ``HealthCheckInterval`` (slurmctld
  complains otherwise). ``0`` means not set: Slurm applies its default; nothing to judge.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from slurmguard.adapters.slurm.conf import timeout_seconds


class Finding(NamedTuple):
    name: str  # the slurm.conf key
    ok: bool | None  # None: not applicable here
    detail: str
    fix: str = ""


def hook_limits(conf: Mapping[str, str], budget: float) -> list[Finding]:
    """One finding per hook limit this Slurm has (keys of ``conf`` lower-cased)."""
    keys = ("prologtimeout", "epilogtimeout")
    names: dict[str, str] = {"prologtimeout": "PrologTimeout", "epilogtimeout": "EpilogTimeout",
             "prologepilogtimeout": "PrologEpilogTimeout"}
    present = [k for k in keys if k in conf]
    if not present:  # 22.05 - 24.11, or 25.05+ with only the combined key set
        present = ["prologepilogtimeout"]
    out = [_against_budget(names[k], conf.get(k, ""), budget) for k in present]
    if "healthchecktimeout" in conf:
        out.append(_health_check(conf, budget))
    return out


def _against_budget(name: str, raw: str, budget: float) -> Finding:
    limit = timeout_seconds(raw, name)
    if limit is None:
        return Finding(name, True, f"{name}={raw or 'unset'} (unlimited)")
    return Finding(name, limit > budget, f"{name}={int(limit)} s, hooks.budget={budget:g} s",
                   f"set {name}={max(60, int(budget) + 30)} in slurm.conf (longer than "
                   "hooks.budget, so that slurmguard's own watchdog ends a slow run)")


def _health_check(conf: Mapping[str, str], budget: float) -> Finding:
    raw = conf.get("healthchecktimeout", "")
    limit = timeout_seconds(raw, "HealthCheckTimeout")
    if not limit:
        return Finding("HealthCheckTimeout", True,
                       f"HealthCheckTimeout={raw or 'unset'} (not set: Slurm's default)")
    interval = _interval(conf.get("healthcheckinterval", ""))
    detail = (f"HealthCheckTimeout={int(limit)} s, hooks.budget={budget:g} s, "
              f"HealthCheckInterval={int(interval)} s" if interval else
              f"HealthCheckTimeout={int(limit)} s, hooks.budget={budget:g} s")
    if limit <= budget:
        return Finding("HealthCheckTimeout", False, detail,
                       f"set HealthCheckTimeout={int(budget) + 10} in slurm.conf (longer than "
                       "hooks.budget, shorter than HealthCheckInterval)")
    if interval and limit >= interval:
        return Finding("HealthCheckTimeout", False, detail,
                       f"set HealthCheckTimeout below HealthCheckInterval ({int(interval)} s) "
                       f"and above hooks.budget ({budget:g} s); slurmctld refuses it otherwise")
    return Finding("HealthCheckTimeout", True, detail)


def _interval(raw: str) -> float:
    m = re.match(r"^\s*(\d+)", raw or "")
    return float(m.group(1)) if m else 0.0
