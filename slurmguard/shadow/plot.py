"""`shadow report --plot FILE.png`: one row per node, slurmguard's would-episodes above the
incumbent's drains, each bar coloured by how the report filed it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from slurmguard.plotting import pyplot, save_png

_COLOURS = {"both": "tab:blue", "only_slurmguard": "tab:green", "false": "tab:red",
            "refused": "tab:gray", "incumbent": "tab:orange"}


def draw(rep: Any, would: Sequence[Any], spans: Sequence[Any], path: str) -> None:
    plt = pyplot()
    filed = {(r["node"], r["cause"], r["at"]): kind for kind in ("both", "only_slurmguard", "false")
             for r in getattr(rep, kind)}
    nodes = sorted({w.node for w in would} | {s.node for s in spans})
    fig, ax = plt.subplots(figsize=(10, 1 + 0.5 * max(1, len(nodes))))

    def t(x: float | None) -> datetime:
        return datetime.fromtimestamp(rep.until if x is None else x, UTC)

    for i, node in enumerate(nodes):
        for w in (w for w in would if w.node == node):
            kind = "refused" if w.refused else filed.get((w.node, w.cause, w.start), "false")
            ax.barh(i + 0.2, t(w.end) - t(w.start), left=t(w.start), height=0.35,
                    color=_COLOURS[kind])
        for s in (s for s in spans if s.node == node):
            ax.barh(i - 0.2, t(s.end) - t(s.start), left=t(max(s.start, rep.since)), height=0.35,
                    color=_COLOURS["incumbent"])
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlim(t(rep.since), t(rep.until))
    ax.set_title("observe mode: slurmguard (upper bars) against the incumbent (lower, orange)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _COLOURS.values()]
    ax.legend(handles, ["caught by both", "only slurmguard", "would have been false",
                        "guard would refuse", "incumbent's drain"], loc="upper left", fontsize=7)
    save_png(fig, path, dates=True)
