"""The shadow arm on docs/fleet-day.md: a `--arms shadow` day (support/fleet_day_observe.py:
LBNL NHC acting, slurmguard observing, one cluster with Slurm accounting) of the same size,
seed and schedule as a run of the page is stored in that run's entry under ``shadow``
(:func:`entry`, :func:`join`, by tests/scale/run.py), and its section shows
(:func:`rows`) what `slurmguard shadow report` said acting would have saved and cost, in
GPU-hours, beside what the four-arm run measured: GPU-hours lost to node faults with NHC
minus with slurmguard. Pure: a dict in, a dict or the page's lines out.

The two are not one measurement: the report counts the jobs that ran on one cluster where
NHC acted (slurmdbd's records: each job's GPUs times its seconds on the node), the four arms
each arm's lost GPU time on its own cluster (tests/support/fleet_day_plan.py); both are
GPU-hours of this host's compressed day, so they are of one scale and can be set side by
side, not subtracted.
"""

from __future__ import annotations

from typing import Any

from support.fleet_day_summary import node_lost

# What a stored shadow day holds.
KEYS = frozenset({"date", "scenario_s", "summary", "gpu_hours", "truth_equal", "diff", "extra",
                  "mapped", "false_on_fault", "jobs_from", "incumbent_from", "match_window"})


def entry(day: dict[str, Any], date: str) -> dict[str, Any]:
    """The page's ``shadow`` of a run from a `--arms shadow` day's figures (fleet_day_run's
    dict): the report's summary, its lists as [node, cause, GPU-hours], whether they equal
    the truth (and where not)."""
    s = day["shadow"]["shadow"]
    return {"date": date, "scenario_s": day.get("scenario_s"), "summary": s["report"]["summary"],
            "gpu_hours": s["gpu_hours"], "truth_equal": s["diff"] == {} and s["extra"] == [],
            "diff": s["diff"], "extra": s["extra"], "mapped": s["mapped"],
            "false_on_fault": s["false_on_fault"],
            "jobs_from": s["report"]["jobs_from"],
            "incumbent_from": s["report"]["incumbent_from"], "match_window": s["match_window"]}


def join(run: dict[str, Any] | None, day: dict[str, Any], date: str) -> dict[str, Any] | None:
    """``run`` (the page's entry of the day's size and seed) with the shadow day stored in it,
    when it is the same day (same schedule and settings); None when there is no such run."""
    from support.fleet_day_doc import SAME_DAY

    if run is None or any(run.get(k) != day.get(k) for k in SAME_DAY):
        return None
    return {**run, "shadow": entry(day, date)}


def lost_difference(run: dict[str, Any]) -> float | None:
    """GPU-hours lost to node faults, NHC's arm minus slurmguard's; None without both."""
    if "nhc" not in run or "slurmguard" not in run:
        return None
    return (node_lost(run["nhc"]) - node_lost(run["slurmguard"])) / 3600


def _sum(rows: list[list[Any]]) -> float:
    return sum(r[2] or 0.0 for r in rows)


def _row(r: list[Any]) -> str:
    node, cause, h, ended = r
    jobs = ", ".join(f"{k} {v}" for k, v in sorted(ended.items()))
    return f"{node} {cause}" + ("" if h is None else f" {h:g}") + (f" ({jobs})" if jobs else "")


def rows(run: dict[str, Any]) -> list[str]:
    """The run's shadow table (the page's lines), or none without a stored shadow day."""
    sh = run.get("shadow")
    if not sh:
        return []
    s, h = sh["summary"], sh["gpu_hours"]
    diff = lost_difference(run)
    out = ["", f"**The shadow arm** (LBNL NHC acting, slurmguard observing, on one cluster with "
           f"Slurm accounting; the same day, run alone, measured {sh['date']}): "
           "`slurmguard shadow report` beside this run's arms (GPU-hours of this day):", "",
           "| | GPU-hours |", "|---|---|",
           f"| shadow report: only slurmguard, the jobs on those nodes meanwhile "
           f"(rows: {len(h['only_slurmguard'])}) | {_sum(h['only_slurmguard']):.4f} |",
           f"| shadow report: saved (jobs that failed where slurmguard would have drained "
           f"first) | {s['saved_gpu_hours']:.4f} |",
           f"| shadow report: would have been false, cost (rows: "
           f"{len(h['would_have_been_false'])}; on a real fault whose jobs there all completed: "
           f"{len(sh['false_on_fault'])}) | {s['cost_gpu_hours']:.4f} |",
           "| four arms: lost to node faults, Slurm + LBNL NHC minus slurmguard | "
           + ("–" if diff is None else f"{diff:.4f}") + " |",
           "| the report's lists equal the day's truth | "
           + ("yes" if sh["truth_equal"] else "no: " + ", ".join(
               sorted(sh["diff"]) + (["rows without a fault"] if sh["extra"] else []))) + " |"]
    lists = [f"{name.replace('_', ' ')}: " + (", ".join(_row(r) for r in h[name]) or "–")
             for name in ("only_slurmguard", "both", "only_incumbent", "would_have_been_false")]
    out += ["", "The report's rows (node, cause, GPU-hours, how the jobs there ended): "
            + "; ".join(lists) + "."]
    return out
