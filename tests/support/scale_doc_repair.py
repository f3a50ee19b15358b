"""docs/scale.md's rows for the Xid wave with repair in act mode (support/scale_repair.py's
``wave_repair`` figures): the per-N table's and the goals table's, every value from the JSON."""

from __future__ import annotations

from typing import Any

WHAT = "Xid wave with repair"


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def table_rows(f: dict[str, Any]) -> list[str]:
    """The per-N table's rows of one run's ``wave_repair`` figures ([] when it has none)."""
    w = f.get("wave_repair")
    if not w:
        return []
    lim = w["limits"]
    return [
        f"| {WHAT}: limits max_nodes / max_percent (repairs at once here) / reboots_per_hour; "
        f"policy pass | {lim['max_nodes']} / {lim['max_percent']} % ({lim['slots']}) / "
        f"{lim['reboots_per_hour']}; every {lim['policy_interval']:g} s |",
        f"| {WHAT}: faulted / drained of them / healthy drained | {w['faulted']} / "
        f"{w['drained_faulted']} / {len(w['drained_healthy'])} |",
        f"| {WHAT}: fault to every faulted node drained (one check of every node) | "
        f"{w['all_drained_s']} s |",
        f"| {WHAT}: returned / ticketed / neither | {w['returned']} / {w['ticketed']} / "
        f"{len(w['unfinished'])} |",
        f"| {WHAT}: reboots (BMC) / most of one node / repairs of healthy nodes | {w['reboots']} "
        f"/ {w['max_reboots_per_node']} / {len(w['repaired_healthy'])} |",
        f"| {WHAT}: most repairs at once / most reboots in an hour | {w['max_concurrent']} / "
        f"{w['max_reboots_in_hour']} |",
        f"| {WHAT}: drain to repair start, p50 / max (waiting for a slot) | "
        f"{w['drain_to_start_p50_s']} / {w['drain_to_start_max_s']} s |",
        f"| {WHAT}: drain to return, p50 / max | {w['drain_to_return_p50_s']} / "
        f"{w['drain_to_return_max_s']} s |",
        f"| {WHAT}: fault to every faulted node returned or ticketed | {w['repair_wait_s']} s |",
    ]


def goal_rows(label: str, n: int, f: dict[str, Any]) -> list[str]:
    """The issue's assertions of the repaired wave, measured, one line each."""
    w = f.get("wave_repair")
    if not w:
        return []
    lim, hc = w["limits"], f.get("hc_interval", 300)
    head = f"| {label} | {n} | {WHAT}:"
    return [
        f"{head} every faulted node drained, no healthy one | {w['drained_faulted']}/"
        f"{w['faulted']}, healthy {len(w['drained_healthy'])} | "
        f"{_yes(not w['missed'] and not w['drained_healthy'])} |",
        f"{head} drained within one health-check interval ({hc} s) | {w['all_drained_s']} s | "
        f"{_yes(w['all_drained_s'] <= hc)} |",
        f"{head} repairs at once within max_nodes / max_percent | {w['max_concurrent']} "
        f"(at most {lim['slots']}) | {_yes(w['max_concurrent'] <= lim['slots'])} |",
        f"{head} reboots in any hour within reboots_per_hour | {w['max_reboots_in_hour']} "
        f"(at most {lim['reboots_per_hour']}) | "
        f"{_yes(w['max_reboots_in_hour'] <= lim['reboots_per_hour'])} |",
        f"{head} every node back or ticketed | {w['returned']} back, {w['ticketed']} "
        f"ticketed of {w['faulted']} | {_yes(not w['unfinished'])} |",
        f"{head} no node rebooted twice | most {w['max_reboots_per_node']} | "
        f"{_yes(not w['rebooted_twice'])} |",
    ]


def pace(n: int, percent: float = 3.0) -> str:
    """How long the default limits make an ``n``-node wave's repairs take, computed."""
    from support.scale_repair_conf import RepairLimits

    lim = RepairLimits()
    k = max(1, round(n * percent / 100))
    hours = lim.reboot_hours(k)
    return (f"{lim.reboots_per_hour} reboots an hour, so the last of a {n:,}-node wave's {k}\n"
            f"  reboots starts {hours} hours after the first ({lim.slots(n)} repairs at a time)")


def measured(data: dict[str, Any]) -> bool:
    """Whether any run of the JSON has the repaired wave."""
    return any("wave_repair" in f for runs in data["runs"].values() for f in runs.values())
