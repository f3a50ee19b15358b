"""The fleet day's figures across seeds (docs/fleet-day.md's lead): each figure's mean and
range per arm, the goals measured against goal on every seed, and a sentence that slurmguard
wins on a figure only where it wins on every seed. Pure: from docs/fleet-day.json's runs."""

from __future__ import annotations

from collections.abc import Callable
from statistics import median
from typing import Any

from support.fleet_day_arms import ARMS, LABELS

SHARED = "fs-mount"  # the shared filesystem hang's cause


def node_lost(arm: dict[str, Any]) -> float:
    """GPU-seconds lost to node faults: every cause but the shared hang and overhead."""
    return sum(v for k, v in arm["lost_gpu_s_by_cause"].items() if k not in (SHARED, "overhead"))


def _h(s: float) -> float:
    return s / 3600


# (label, figure of one arm's figures, better: "high" | "low" | None, format)
FIGURES: list[tuple[str, Callable[[dict[str, Any]], float | None], str | None, str]] = [
    ("ETTR", lambda a: a["ettr"], "high", "{:.4f}"),
    ("goodput", lambda a: a["goodput"], "high", "{:.4f}"),
    ("allocated GPU-hours", lambda a: _h(a["allocated_gpu_s"]), None, "{:.2f}"),
    ("useful GPU-hours", lambda a: _h(a["useful_gpu_s"]), "high", "{:.2f}"),
    ("GPU-hours lost to node faults", lambda a: _h(node_lost(a)), "low", "{:.3f}"),
    ("GPU-hours lost to the shared hang", lambda a: _h(a["lost_gpu_s_by_cause"].get(SHARED, 0)),
     None, "{:.3f}"),
    ("overhead GPU-hours", lambda a: _h(a["lost_gpu_s_by_cause"].get("overhead", 0)), "low",
     "{:.3f}"),
    ("runs failed", lambda a: a["runs_failed"], "low", "{:g}"),
    ("jobs completed", lambda a: a["jobs_completed"], "high", "{:g}"),
    ("node-seconds out of service", lambda a: a["node_s_out_of_service"], None, "{:.0f}"),
    ("node faults not drained in the day", lambda a: len(a["undetected"]), "low", "{:g}"),
    ("healthy nodes drained", lambda a: len(a["healthy_drained"]), "low", "{:g}"),
]


def by_size(runs: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for f in runs.values():
        out.setdefault(int(f["nodes"]), []).append(f)
    for fs in out.values():
        fs.sort(key=lambda f: f["seed"])
    return dict(sorted(out.items()))


def _arms(fs: list[dict[str, Any]]) -> list[str]:
    return [a for a in ARMS if all(a in f for f in fs)]


def across_seeds(n: int, fs: list[dict[str, Any]]) -> list[str]:
    arms = _arms(fs)
    seeds = ", ".join(str(f["seed"]) for f in fs)
    rows = [f"### {n:,} nodes: {len(fs)} seed{'s' if len(fs) != 1 else ''} ({seeds}), "
            f"mean (min to max)", "",
            "| figure | " + " | ".join(LABELS[a] for a in arms) + " |",
            "|---|" + "---|" * len(arms)]
    for label, fig, _, fmt in FIGURES:
        cells = []
        for a in arms:
            vals = [v for v in (fig(f[a]) for f in fs) if v is not None]
            if not vals:
                cells.append("–")
                continue
            mean = sum(vals) / len(vals)
            mfmt = "{:.1f}" if fmt == "{:g}" and mean != int(mean) else fmt  # a mean of counts
            cells.append(mfmt.format(mean) + (f" ({fmt.format(min(vals))} to {fmt.format(max(vals))})"
                                             if len(vals) > 1 else ""))
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows + [""] + starved(fs) + wins(n, fs) + [""] + goals(n, fs)


def starved(fs: list[dict[str, Any]]) -> list[str]:
    """Where a day ran in halves: how many of its jobs each arm never started. A half this
    host could not keep busy has less GPU time at stake, so its GPU-hours, goodput and jobs
    completed do not compare with the other half's; ETTR and the goals per arm pair do."""
    halved = [f for f in fs if len(f.get("halves", [])) > 1]
    if not halved:
        return []
    cells = []
    for f in halved:
        cells.append(f"seed {f['seed']}: " + ", ".join(
            f"{LABELS[a]} {f[a]['jobs_never_started']}" for a in _arms([f])) + f" of "
            f"{len(f['job_mix'])}")
    return ["- Run in halves; the jobs each arm never started in the day: " + "; ".join(cells)
            + ". Where the halves differ, their GPU-hours, goodput and jobs completed do not "
            "compare across halves (less GPU time was at stake in the busier host's half); "
            "ETTR, a ratio, and the figures of the arms run together do."]


def wins(n: int, fs: list[dict[str, Any]]) -> list[str]:
    """A sentence per figure with a better direction: slurmguard better than NHC and Slurm
    alone on every seed, or the seeds where it was not."""
    rivals = [a for a in ("nhc", "slurm") if a in _arms(fs)]
    if "slurmguard" not in _arms(fs) or not rivals:
        return []
    out = []
    for label, fig, better, fmt in FIGURES:
        if better is None:
            continue
        lost = []
        for f in fs:
            mine = fig(f["slurmguard"])
            for r in rivals:
                theirs = fig(f[r])
                if mine is None or theirs is None or not (
                        mine > theirs if better == "high" else mine < theirs):
                    why = ("a tie" if mine == theirs
                           else "slurmguard's: " + "; ".join(
                               f"{n} at {w}" for n, w in f["slurmguard"]["healthy_drained_why"].items())
                           if label == "healthy nodes drained" else _why(
                        f, "slurmguard", r, node_only=label == "GPU-hours lost to node faults",
                        key="overhead_gpu_s_by_part" if "overhead" in label
                        else "lost_gpu_s_by_cause"))
                    lost.append(f"seed {f['seed']} ({LABELS[r]} {_v(fmt, theirs)} against "
                                f"{_v(fmt, mine)}: {why})")
        if not lost:
            out.append(f"- **slurmguard wins on {label}** at {n:,} nodes on every seed "
                       f"({len(fs)} of {len(fs)}): better than "
                       + " and ".join(LABELS[r] for r in rivals) + " on each.")
        else:
            out.append(f"- {label}: slurmguard not better on every seed; not on "
                       + "; ".join(lost) + ".")
    return out


def _v(fmt: str, v: float | None) -> str:
    return "–" if v is None else fmt.format(v)


def _why(f: dict[str, Any], a: str, b: str, node_only: bool = False,
         key: str = "lost_gpu_s_by_cause") -> str:
    """The cause (``key``: or the overhead's part) whose lost GPU time differs most between
    arms ``a`` and ``b`` on a run (``node_only``: among the node faults' causes)."""
    la, lb = f[a].get(key, {}), f[b].get(key, {})
    diffs = {c: la.get(c, 0) - lb.get(c, 0) for c in set(la) | set(lb)
             if not node_only or c not in (SHARED, "overhead")}
    if not diffs:
        return "no GPU time lost by either"
    c = max(diffs, key=lambda k: abs(diffs[k]))
    out = f"the largest difference is {c}, {diffs[c] / 3600:+.3f} GPU-hours for {LABELS[a]}"
    if c == SHARED and key == "lost_gpu_s_by_cause":
        out += _hang(f, a, b)
    elif node_only:
        out += _late(f, a, b)
    return out


def _late(f: dict[str, Any], a: str, b: str) -> str:
    """Why one arm lost more to node faults: how long a pass of its checks took (a fault waits
    for its node's next check) and the node faults it left undrained in the day."""
    pa, pb = f[a].get("hc_pass_s") or [], f[b].get("hc_pass_s") or []
    if not pa or not pb:
        return ""
    return (f": a pass of {LABELS[a]}'s checks over every node took {median(pa):.0f} s "
            f"(median) against {LABELS[b]}'s {median(pb):.0f} s, and it left "
            f"{len(f[a]['undetected'])} node faults undrained in the day against "
            f"{len(f[b]['undetected'])}")


def _hang(f: dict[str, Any], a: str, b: str) -> str:
    """Why the shared hang cost one arm more: how busy each was when it came (recorded by the
    runs that record ``shared_fault``), and the useful time each kept."""
    sa, sb = f[a].get("shared_fault"), f[b].get("shared_fault")
    if not sa or not sb:
        return ""

    def rest(arm: dict[str, Any], st: dict[str, Any]) -> float:
        return max(0.0, arm["lost_gpu_s_by_cause"].get(SHARED, 0) - st["stall_gpu_s"])

    return (f": the hang stalls every running GPU for its length, and {LABELS[a]} had "
            f"{sa['gpus_running']:,} GPUs running when it came against {LABELS[b]}'s "
            f"{sb['gpus_running']:,} (stalled {_h(sa['stall_gpu_s']):.3f} against "
            f"{_h(sb['stall_gpu_s']):.3f} GPU-hours; the rest of what those runs lost, their "
            f"start-up, checkpoints, polls and redone steps, is {_h(rest(f[a], sa)):.3f} against "
            f"{_h(rest(f[b], sb)):.3f}), while keeping "
            f"{_h(f[a]['useful_gpu_s']):.2f} useful GPU-hours against {_h(f[b]['useful_gpu_s']):.2f}")


def _reach(f: dict[str, Any], a: str) -> str:
    """Why an ETTR goal out of every arm's reach on this host was missed: the best reactive
    arm's ETTR on the same schedule, and the jobs this host never started in the day."""
    out = []
    if "oracle" in f and f["oracle"].get("ettr") is not None:
        out.append(f"the oracle, an instant correct drain on the same schedule, reached "
                   f"{f['oracle']['ettr']:.4f}")
    n = len(f.get("job_mix", []))
    if n:
        out.append(f"{f[a]['jobs_never_started']} of {n} jobs never started in the day in "
                   f"{LABELS[a]}'s " + ("half" if len(f.get("halves", [])) > 1 else "run")
                   + ": this host did not keep the fleet busy")
    return "; ".join(out)


def goals(n: int, fs: list[dict[str, Any]]) -> list[str]:
    from support.fleet_day_doc import GOAL_ETTR_512, GOAL_LOST_SHARE, GOAL_OVERHEAD

    arms = _arms(fs)
    ov = dict(FIGURES[i][:2] for i in range(len(FIGURES)))["overhead GPU-hours"]
    Pair = Callable[[dict[str, Any]], tuple[float | None, float | None]]
    checks: list[tuple[str, str, str, str, Pair]] = []  # label, arm, rival, ">=" or "<=", pair
    if {"slurmguard", "nhc"} <= set(arms):
        checks += [("ETTR: slurmguard at least NHC's", "slurmguard", "nhc", ">=",
                    lambda f: (f["slurmguard"]["ettr"], f["nhc"]["ettr"])),
                   (f"lost to node faults: slurmguard at most {GOAL_LOST_SHARE:g}x NHC's",
                    "slurmguard", "nhc", "<=",
                    lambda f: (node_lost(f["slurmguard"]) / 3600,
                               GOAL_LOST_SHARE * node_lost(f["nhc"]) / 3600)),
                   (f"overhead: slurmguard at most NHC's + {GOAL_OVERHEAD - 1:.0%}",
                    "slurmguard", "nhc", "<=",
                    lambda f: (ov(f["slurmguard"]), GOAL_OVERHEAD * ov(f["nhc"])))]
    if {"nhc", "slurm"} <= set(arms):
        checks.append(("ETTR: NHC at least Slurm alone's", "nhc", "slurm", ">=",
                       lambda f: (f["nhc"]["ettr"], f["slurm"]["ettr"])))
    if n >= 512 and "slurmguard" in arms:
        checks.append((f"ETTR with slurmguard at least {GOAL_ETTR_512:g}", "slurmguard", "", ">=",
                       lambda f: (f["slurmguard"]["ettr"], GOAL_ETTR_512)))
    rows = [f"Goals at {n:,} nodes, measured against goal on each seed:", "",
            "| goal | measured / goal, each seed | met |", "|---|---|---|"]
    for label, a, b, op, pair in checks:
        cells, missed = [], []
        for f in fs:
            mine, goal = pair(f)
            ok = mine is not None and goal is not None and (
                mine >= goal if op == ">=" else mine <= goal)
            cells.append(f"seed {f['seed']}: {_v('{:.4g}', mine)} / {_v('{:.4g}', goal)}")
            if not ok:
                by = "–" if mine is None or goal is None else f"{mine - goal:+.4g}"
                why = (f" ({_reach(f, a)})" if not b
                       else f" ({_why(f, a, b, node_only=label.startswith('lost'))})"
                       if not label.startswith("overhead")
                       else f" ({_why(f, a, b, key='overhead_gpu_s_by_part')})")
                missed.append(f"seed {f['seed']} by {by}{why}")
        met = (f"on every seed ({len(fs)} of {len(fs)})" if not missed
               else f"**not met** on {len(missed)} of {len(fs)}: " + "; ".join(missed))
        rows.append(f"| {label} | " + "; ".join(cells) + f" | {met} |")
    return rows
