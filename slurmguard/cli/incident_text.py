"""Text and plot of `slurmguard incident list|show` (cli/incident.py stays the commands)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmguard.fleet.incidents import COSTS

HEADS = ["redone", "detect", "waiting", "out of service", "total"]


def _h(x: float) -> str:
    return f"{x:.2f}"


def _costs(row: Mapping[str, float]) -> list[str]:
    """GPU-hours of the four parts and their total, from GPU-seconds."""
    return [_h(row.get(k, 0.0) / 3600) for k in COSTS] + [_h(sum(row.get(k, 0.0) for k in COSTS) / 3600)]


def list_text(doc: Mapping[str, Any], incs: list[Any], by_cause: Mapping[str, Any],
              by_week: Mapping[str, Any]) -> list[Any]:
    from slurmguard.output import Table, iso

    g = doc["goodput"]
    head = (f"incidents {doc['since']} .. {doc['until']}: {len(incs)}; lost "
            f"{doc['total_gpu_hours']['total']:.2f} GPU-hours" + (" (GPU-hours below)" if incs else ""))
    out: list[Any] = [head] if not incs else [
        head,
        Table([[i.id, i.cause, ",".join(i.nodes), iso(i.first_signal.at), iso(i.drained_at),
                i.outcome, len({h.job_id for h in i.hits}), *_costs(i.cost)] for i in incs],
              ["incident", "cause", "nodes", "first signal", "drained", "outcome", "jobs", *HEADS])]
    for title, rows in (("cause", by_cause), ("week", by_week)) if incs else ():
        out += ["", Table([[k, int(v["incidents"]), *_costs(v)] for k, v in rows.items()],
                          [title, "incidents", *HEADS])]
    out += ["", f"goodput's badput of the {g['jobs']} job(s) that ended in the window: "
                f"{g['badput_gpu_hours']:.4f} GPU-hours; incidents explain "
                f"{g['explained_gpu_hours']:.4f} (redone + detect + waiting), no incident "
                f"{g['no_incident_gpu_hours']:.4f} (start-ups, saves, stalls, stragglers, jobs' "
                "own failures)"]
    return out


def show_text(inc: Any) -> list[Any]:
    from slurmguard.output import Table, iso

    d = inc.to_dict()
    head = (f"incident {inc.id}: {inc.cause} on {','.join(inc.nodes)}"
            f"{' (shared cause)' if inc.shared else ''}; first signal {iso(inc.first_signal.at)}, "
            f"drained {iso(inc.drained_at)} by {inc.drained_by} ({d['detect_s']:.0f} s later), "
            + (f"returned {iso(inc.returned_at)}" if inc.returned_at else inc.outcome))
    steps = Table([[iso(s.at), s.lane, s.what, s.source] for s in inc.timeline],
                  ["time", "lane", "what", "source"], wrap=[None, None, 70, None])
    cost = Table([[k.replace("_", " "), _h(inc.cost.get(k, 0.0) / 3600)] for k in COSTS]
                 + [["total", _h(inc.total / 3600)]], ["cost", "GPU-hours"])
    return [head, "", steps, "", cost]


def plot(inc: Any, path: str) -> None:
    """One lane for the node (detect, out of service, the ledger's steps) and one per job
    (its runs on the node, the wait, the next run elsewhere)."""
    from datetime import UTC, datetime

    from slurmguard.plotting import pyplot, save_png

    plt = pyplot()
    lanes = ["node"] + sorted({s.lane for s in inc.timeline} - {"node"})
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * len(lanes)))

    def dt(t: float) -> Any:
        return datetime.fromtimestamp(t, UTC)

    def bar(y: int, a: float, b: float, color: str, label: str) -> None:
        ax.barh(y, (dt(b) - dt(a)), left=dt(a), height=0.5, color=color, label=label)

    end = inc.returned_at or max(s.at for s in inc.timeline)
    bar(0, inc.first_signal.at, inc.drained_at, "orange", "first signal to drain")
    bar(0, inc.drained_at, end, "firebrick", "out of service")
    for h in inc.hits:
        y = lanes.index(f"job {h.job_id}")
        bar(y, h.start, h.end, "steelblue", "run on the failing node")
        if h.next_start is not None:
            bar(y, h.end, h.next_start, "lightgrey", "waiting to run again")
    for s in inc.timeline:
        ax.plot(dt(s.at), lanes.index(s.lane), "k|", markersize=14)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize="small")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_title(f"incident {inc.id}: {inc.cause}, {inc.total / 3600:.2f} GPU-hours lost")
    save_png(fig, path, dates=True)
