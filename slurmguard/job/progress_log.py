"""What `slurmguard run` reads from the progress file (slurmguard.progress writes it).

:class:`Progress` folds the events every rank appends (steps, checkpoints) into what the
wrapper acts on and records: the step frontier, per-node step times (slow nodes), the
checkpoints with their save times, and the ranks seen per node. :class:`Tail` reads whole JSON
lines appended since the run began.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

SLOW_FACTOR = 1.5  # a node whose median step time is 1.5x the job's median is named slow
_MIN_SAMPLES = 3
MAX_CHECKPOINTS = 200  # checkpoint events kept in a run record (the newest)


@dataclass
class Progress:
    """What the progress file said: last step, per-node step intervals, checkpoints, and the
    job's step frontier (the highest step any rank reported, and when), which goodput
    accounting reads from the run record."""

    last_event: float
    last_step: int | None = None
    last_node: str | None = None
    last_ckpt: dict[str, Any] | None = None
    steps: int = 0
    _prev: dict[tuple[str, Any], tuple[float, int]] = field(default_factory=dict)
    intervals: dict[str, list[float]] = field(default_factory=dict)
    first_step: tuple[float, int] | None = None  # (t, step) of the first step reported
    frontier: tuple[float, int] | None = None  # (t, step) when the highest step was first seen
    step_times: list[float] = field(default_factory=list)  # seconds per step along the frontier
    checkpoints: list[list[Any]] = field(default_factory=list)  # [t, step, seconds or None]
    stalls: list[list[float]] = field(default_factory=list)  # [from, to]: no step in between
    ranks: dict[str, set[Any]] = field(default_factory=dict)  # ranks seen per node

    def feed(self, ev: dict[str, Any]) -> None:
        t = float(ev.get("t") or time.time())
        node = str(ev.get("node") or "?")
        if ev.get("ev") == "ckpt":
            self.last_ckpt = {"path": ev.get("path"), "step": ev.get("step")}
            secs = ev.get("seconds")
            if isinstance(ev.get("step"), int):
                self.checkpoints.append([t, ev["step"], float(secs) if isinstance(
                    secs, (int, float)) and not isinstance(secs, bool) else None])
                del self.checkpoints[:-MAX_CHECKPOINTS]
            return
        if ev.get("ev") != "step":
            return
        self.steps += 1
        self.last_event = max(self.last_event, time.time())
        self.last_step, self.last_node = ev.get("step"), node
        key = (node, ev.get("rank"))
        try:
            n = int(ev.get("step"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        if self.first_step is None or t < self.first_step[0]:
            self.first_step = (t, n)
        if self.frontier is None or n > self.frontier[1]:
            if self.frontier is not None and t > self.frontier[0]:
                self.step_times.append((t - self.frontier[0]) / (n - self.frontier[1]))
            self.frontier = (t, n)
        if key in self._prev:
            pt, pn = self._prev[key]
            if n > pn:  # reports are throttled: the time per step between two of them
                self.intervals.setdefault(node, []).append(max(0.0, t - pt) / (n - pn))
        self._prev[key] = (t, n)
        self.ranks.setdefault(node, set()).add(ev.get("rank"))

    def median_step(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    def node_medians(self) -> dict[str, float]:
        return {n: statistics.median(v) for n, v in self.intervals.items() if len(v) >= _MIN_SAMPLES}

    def slow_nodes(self) -> list[str]:
        """Nodes whose median step time exceeds SLOW_FACTOR x the median over nodes."""
        med = self.node_medians()
        if len(med) < 2:
            return []
        overall = statistics.median(med.values())
        return sorted(n for n, m in med.items() if overall > 0 and m > SLOW_FACTOR * overall)

    def steps_after_checkpoint(self) -> int | None:
        """Steps reported after the newest checkpoint reported (a lower bound when reports
        are throttled); None without steps."""
        if self.frontier is None:
            return None
        last = max((c[1] for c in self.checkpoints), default=0)
        return max(0, self.frontier[1] - last)

    def slow_evidence(self, job: str) -> dict[str, Any]:
        """What serve's /suspect takes for the slow nodes: their median step times, the ratio
        to the median over nodes, and their ranks."""
        meds = self.node_medians()
        overall = statistics.median(meds.values())
        return {"job": job, "job_median_step_s": round(overall, 6),
                "nodes": [{"node": n, "median_step_s": round(meds[n], 6),
                           "ratio": round(meds[n] / overall, 3),
                           "ranks": sorted(r for r in self.ranks.get(n, ()) if isinstance(r, int))}
                          for n in self.slow_nodes()]}


class Tail:
    """Reads whole JSON lines appended to the progress file since the run started."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.offset = os.path.getsize(path)
        except OSError:
            self.offset = 0
        self.buf = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(1 << 20)
        except OSError:
            return []
        self.offset += len(data)
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a foreign or torn line: progress is advisory
            if isinstance(ev, dict):
                out.append(ev)
        return out
