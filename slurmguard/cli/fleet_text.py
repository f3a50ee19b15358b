"""Text, node keys and the plot of `slurmguard fleet report` and `slurmguard policy replay`
(cli/fleet.py stays the commands only)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


def node_key(by: str, *, groups: Mapping[str, str] = {}, models: Mapping[str, str] = {},
             partitions: Mapping[str, Iterable[str]] = {}) -> Callable[[str], str] | None:
    """node -> its label for ``--by``: a policy group, a GPU model ([fleet.models]) or its
    Slurm partition(s); "-" when none names it. None for ``--by cause``."""
    from slurmguard.nodeset import expand

    if by == "cause":
        return None
    if by == "partition":
        parts = {n: ",".join(sorted(p)) or "-" for n, p in partitions.items()}
        return lambda n: parts.get(n, "-")
    table, what = (groups, "policy.groups") if by == "group" else (models, "fleet.models")
    member: dict[str, str] = {}
    for name in sorted(table):
        for n in expand(table[name], source=f"{what}.{name}"):
            member.setdefault(n, name)
    return lambda n: member.get(n, "-")


def _f(x: Any, fmt: str = "{:g}") -> str:
    return "-" if x is None else fmt.format(x)


def report_text(rep: Mapping[str, Any]) -> str:
    from slurmguard.output import iso, table

    out = [f"fleet {iso(rep['since'])} .. {iso(rep['until'])}: {rep['nodes']} nodes, "
           f"{rep['node_days']:g} node-days, {rep['failures']} failures = "
           f"{_f(rep['per_1000_node_days'])} per 1,000 node-days; MTBF {_f(rep['mtbf_days'])} "
           f"node-days; {rep['shared_incidents']} shared-cause incident(s) "
           f"({rep['shared_episodes']} drains, not counted as node failures); "
           f"{rep['still_out']} node(s) still out",
           "", table([[c, v["failures"], _f(v["per_1000_node_days"])] for c, v in rep["by_cause"].items()],
                     ["cause", "failures", "per 1k node-days"])]
    if rep["groups"]:
        out += ["", table([[g, _f(v["node_days"]), v["failures"], _f(v["per_1000_node_days"])]
                           for g, v in rep["groups"].items()],
                          [rep["by"], "node-days", "failures", "per 1k node-days"])]
    for key, label in (("mttr_by_cause", "cause"), ("mttr_by_returner", "returned by")):
        out += ["", table([[k, v["returned"], _f(v["median_h"]), _f(v["p90_h"]), _f(v["mean_h"])]
                           for k, v in rep[key].items()],
                          [label, "returned", "median h", "p90 h", "mean h"])]
    tbf = rep["between_failures"]
    out += ["", f"time between failures of one node: {tbf['pairs']} pair(s), median "
                f"{_f(tbf['median_days'])} days; " +
            ", ".join(f"{k}: {v}" for k, v in tbf["histogram"].items()),
            f"out of service: mean {100 * rep['out_of_service']['mean']:.2f}% of node-time, "
            f"worst day {100 * rep['out_of_service']['max']:.2f}%"]
    return "\n".join(out)


def replay_text(runs: Mapping[str, Mapping[str, Any]]) -> str:
    """One column per config replayed ("current", "candidate")."""
    from slurmguard.output import iso, table

    names = list(runs)
    first = runs[names[0]]
    rows: list[list[Any]] = []

    def row(label: str, get: Callable[[Mapping[str, Any]], Any]) -> None:
        rows.append([label] + [_f(get(r)) if not isinstance(get(r), str) else get(r)
                               for r in runs.values()])

    row("lemon: nodes flagged", lambda r: r["lemon"]["flagged"])
    row("lemon: recorded in the store", lambda r: r["lemon"]["recorded"])
    row("lemon: node-hours kept out (at most)", lambda r: r["lemon"]["node_hours_kept_out"])
    row("lemon: precision", lambda r: r["lemon"]["precision"])
    row("lemon: recall", lambda r: r["lemon"]["recall"])
    row("risk: nodes flagged", lambda r: r["risk"]["nodes_flagged"])
    row("risk: alarms", lambda r: r["risk"]["flags"])
    row("risk: precision", lambda r: r["risk"]["precision"])
    row("risk: recall", lambda r: r["risk"]["recall"])
    row("risk: caught a day ahead", lambda r: r["risk"]["recall_ahead"])
    row("risk: median lead (days)", lambda r: r["risk"]["lead_days_median"])
    row("blast: drains (recorded)", lambda r: f"{r['blast']['drains']} ({r['blast']['recorded_drains']})")
    row("blast: refusals (recorded)",
        lambda r: f"{r['blast']['refusals']} ({r['blast']['recorded_refusals']})")
    row("blast: alerts", lambda r: r["blast"]["alerts"])
    row("blast: newly refused / newly allowed", lambda r: (
        f"{r['blast']['newly_refused']} / {r['blast']['newly_allowed']}"
        + ("" if r["blast"].get("partitions", True) else " (no partitions)")))
    row("probation: returns / ended", lambda r: f"{r['probation']['returns']} / {r['probation']['ended']}")
    row("probation: median hours", lambda r: r["probation"]["median_h"])
    row("repair: episodes / would repair", lambda r: f"{r['repair']['episodes']} / "
                                                     f"{r['repair']['would_repair']}")
    row("repair: first rungs", lambda r: ", ".join(f"{k} {v}" for k, v in
                                                   r["repair"]["first_rungs"].items()) or "-")
    row("repair: shared / no ladder / ticket", lambda r: (
        f"{r['repair']['shared']} / {sum(r['repair']['no_ladder'].values())} / "
        f"{r['repair']['ticket_at_once']}"))
    row("repair: stopped as lemons (nodes)", lambda r: f"{r['repair']['lemon_stopped']} "
                                                       f"({len(r['repair']['lemon_nodes'])})")
    row("repair: held by reboots_per_hour", lambda r: r["repair"]["held_by_reboot_limit"])
    row("repair: admin returns it would do", lambda r: r["repair"]["returned_by_admin"])
    row("repair: returns that came back", lambda r: r["repair"]["came_back_rate"])
    head = (f"replay {iso(first['since'])} .. {iso(first['until'])}; failures in the window: "
            f"{first['risk']['failures']}; a flag is true when the node failed within "
            f"{first['horizon_days']:g} days after it; lemon rule fed {first['count']}")
    out = [head, "", table(rows, ["", *names])]
    if len(runs) == 2:
        a, b = (runs[n]["lemon"]["nodes"] for n in names)
        gained, lost = sorted(set(b) - set(a)), sorted(set(a) - set(b))
        if gained or lost:
            out.append("")
            out.append(f"lemons only with {names[1]}: {_list(gained)}; only with {names[0]}: {_list(lost)}")
    return "\n".join(out)


def _list(names: list[str]) -> str:
    from slurmguard.nodeset import fold

    return fold(names) if names else "-"


def plot(rep: Mapping[str, Any], path: str) -> None:
    """Share of node-time out of service per day, and failures by cause (PNG)."""
    from slurmguard.plotting import pyplot, save_png

    plt = pyplot()
    from datetime import UTC, datetime

    series = rep["out_of_service"]["series"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.plot([datetime.fromtimestamp(t, UTC) for t, _ in series], [100 * s for _, s in series])
    ax1.set_ylabel("% of node-time out of service")
    ax1.set_title("out of service")
    causes = list(rep["by_cause"])
    ax2.barh(causes, [rep["by_cause"][c]["per_1000_node_days"] for c in causes])
    ax2.set_xlabel("failures per 1,000 node-days")
    ax2.set_title(f"{rep['failures']} failures, {rep['per_1000_node_days']} per 1,000 node-days")
    save_png(fig, path, dates=True)


def curve_text(c: Mapping[str, Any]) -> str:
    """`fleet risk --curve`: one row per level, the current level marked."""
    from slurmguard.output import iso, table

    rows = [[f"{r['level']:g}" + (" *" if r["level"] == c["current_level"] else ""),
             r["nodes_flagged"], r["true"], r["false"], r["late"] + r["open"], _f(r["precision"]),
             _f(r["recall"]), _f(r["recall_ahead"]), _f(r["lead_days_median"])]
            for r in c["levels"]]
    first = c["levels"][0] if c["levels"] else {"failures": 0}
    head = (f"risk curve {iso(c['since'])} .. {iso(c['until'])}: {c['nodes']} nodes, "
            f"{first['failures']} failures; a flag is true when the node failed within "
            f"{c['horizon_days']:g} days after it (* = risk.level now)")
    return "\n".join([head, "", table(rows, ["level", "nodes", "true", "false", "unjudged",
                                             "precision", "recall", "a day ahead",
                                             "lead (days)"])])


def at_risk_text(risks: Mapping[str, Any], level: float) -> str:
    """`fleet risk`: the nodes at or above the level now, riskiest first, and why."""
    from slurmguard.output import table

    rows = [[n, f"{r.score:g}", r.why()] for n, r in
            sorted(risks.items(), key=lambda kv: (-kv[1].score, kv[0])) if r.score >= level]
    if not rows:
        return f"no node at risk (risk.level {level:g})"
    return table(rows, ["node", "risk", "why"])
