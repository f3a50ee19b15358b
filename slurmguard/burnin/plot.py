"""`burnin report --plot FILE.png` (matplotlib, the `plot` extra; Agg backend, no display)."""

from __future__ import annotations

import time
from typing import Any

from slurmguard.plotting import PlotUnavailable, pyplot, save_png

__all__ = ["PlotUnavailable", "plot_history", "plot_report"]


def plot_report(report: Any, path: str, metric: str | None = None) -> None:
    """One panel per (group, metric): every node's score, flagged nodes marked and named."""
    plt = pyplot()
    panels: dict[tuple[str, str], list[Any]] = {}
    for v in report.nodes.values():
        for j in v.judgements:
            if j.score is not None and (metric is None or j.metric == metric):
                panels.setdefault((v.group, j.metric), []).append(j)
    keys = sorted(panels) or [("-", metric or "-")]
    fig, axes = plt.subplots(len(keys), 1, figsize=(9, 2.4 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys, strict=True):
        js = sorted(panels.get(key, []), key=lambda j: j.value)
        ok = [j for j in js if not j.flagged]
        bad = [j for j in js if j.flagged]
        unit = report.units.get(key[1], "")
        ax.hist([j.value for j in ok], bins=min(50, max(5, len(ok) // 4 or 5)), color="#4c72b0",
                label=f"{len(ok)} nodes")
        for j in bad:
            ax.axvline(j.value, color="#c44e52", lw=1.5)
            ax.annotate(f"{j.node} ({j.score:.2f})", (j.value, 0), rotation=90, fontsize=7,
                        va="bottom", ha="right", color="#c44e52")
        ax.set_title(f"{key[0]}: {key[1]} ({len(bad)} flagged)", fontsize=9)
        ax.set_xlabel(unit)
        ax.legend(fontsize=7)
    save_png(fig, path, dpi=100)


def plot_history(store: Any, node: str, metric: str | None, path: str, since: float) -> None:
    """One node's values over its complete runs, per metric."""
    plt = pyplot()
    metrics = [metric] if metric else sorted({s.metric for s in store.burnin.series(nodes=[node])})
    fig, axes = plt.subplots(max(1, len(metrics)), 1, figsize=(9, 2.2 * max(1, len(metrics))),
                             squeeze=False)
    for ax, m in zip(axes[:, 0], metrics or ["-"], strict=False):
        pts = store.burnin.history(node, m, since) if m != "-" else []
        ax.plot([time.strftime("%m-%d", time.gmtime(t)) for t, _ in pts], [v for _, v in pts],
                marker="o")
        ax.set_title(f"{node}: {m}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    save_png(fig, path, dpi=100)
