"""The one scorer of predictions: flags against the failures that followed. Pure.

`policy replay` (risk and lemon), `fleet risk --curve`, the tests and the figures of
docs/fleet.md all count with :func:`score`:

- a flag is an *alarm*: a node's run of consecutive flagged times, (first, last); an alarm
  that stays raised longer than the horizon renews its prediction every horizon, and each
  piece counts as one flag (a node flagged for a month without failing is four false flags
  at a horizon of 7 days, not one open one);
- it is **true** when the node's next failure starts after its first time and within
  ``horizon`` after its last; its *lead* is that failure's start minus the alarm's first time;
- it is **late**, and counts for nothing, when it starts while the node is inside a failure
  (from the failure's start to its return): it foresaw nothing;
- it is **open**, and counts for nothing, when no failure followed but its horizon reaches
  past the end of the history: what followed is not known yet;
- otherwise it is **false**.

The lemon verdict is by nature made at a failure and names the next one: replay scores it
with ``while_out="next"``, which judges an alarm raised inside a failure against the
failures after it instead of counting it for nothing.

precision = true / (true + false). recall = failures that started in [since, until] and had a
true alarm of their node before them / those failures; ``ahead`` counts those whose earliest
such alarm came at least ``min_lead`` before the failure (the in-time recall). ``among``
limits recall to some failures (a generator's predictable ones).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

DAY = 86400.0

Spans = Mapping[str, Sequence[tuple[float, float]]]


def failures_of(episodes: Iterable[Any], until: float) -> dict[str, list[tuple[float, float]]]:
    """node -> [(start, end)] of its failures (episodes that are not shared), sorted."""
    out: dict[str, list[tuple[float, float]]] = {}
    for e in episodes:
        if e.shared is None:
            out.setdefault(e.node, []).append((e.start, e.out_until(until)))
    return {n: sorted(v) for n, v in out.items()}


def alarms(days: Sequence[float], hot: Sequence[bool]) -> list[tuple[float, float]]:
    """Consecutive flagged times, as (first, last)."""
    spans: list[tuple[float, float]] = []
    prev = False
    for t, h in zip(days, hot, strict=True):
        if h and prev:
            spans[-1] = (spans[-1][0], t)
        elif h:
            spans.append((t, t))
        prev = h
    return spans


def pieces(spans: Sequence[tuple[float, float]], horizon: float) -> list[tuple[float, float]]:
    """Alarms cut into pieces of at most ``horizon`` (each renewal is a flag of its own)."""
    out = []
    for t0, t1 in spans:
        while horizon > 0 and t1 - t0 >= horizon:
            out.append((t0, t0 + horizon - 1.0))
            t0 += horizon
        out.append((t0, t1))
    return out


def _median(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def score(flags: Spans, failures: Mapping[str, Sequence[tuple[float, float]]], since: float,
          until: float, horizon: float, *, min_lead: float = DAY,
          among: Collection[tuple[str, float]] | None = None,
          while_out: str = "nothing") -> dict[str, Any]:
    """Count ``flags`` {node: [(first, last)]} against ``failures`` {node: [(start, end)]}."""
    true = false = late = open_ = 0
    first_true: dict[tuple[str, float], float] = {}  # failure -> its earliest true alarm
    for node, spans in flags.items():
        fs = failures.get(node, ())
        starts = [s for s, _ in fs]
        for t0, t1 in pieces(spans, horizon):
            if while_out == "nothing" and any(s <= t0 <= e for s, e in fs):
                late += 1
                continue
            i = bisect_right(starts, t0)
            if i < len(starts) and starts[i] <= t1 + horizon:
                true += 1
                key = (node, starts[i])
                first_true[key] = min(first_true.get(key, t0), t0)
            elif t1 + horizon > until:
                open_ += 1
            else:
                false += 1
    total = caught = ahead = 0
    leads = []
    for node, fs in failures.items():
        for s, _ in fs:
            if not since <= s <= until or (among is not None and (node, s) not in among):
                continue
            total += 1
            if (node, s) in first_true:
                caught += 1
                lead = s - first_true[(node, s)]
                leads.append(lead / DAY)
                ahead += lead >= min_lead
    med = _median(leads)
    return {"flags": true + false + late + open_, "true": true, "false": false, "late": late,
            "open": open_, "precision": round(true / (true + false), 3) if true + false else None,
            "failures": total, "caught": caught, "ahead": ahead, "min_lead_days": min_lead / DAY,
            "recall": round(caught / total, 3) if total else None,
            "recall_ahead": round(ahead / total, 3) if total else None,
            "lead_days_median": round(med, 2) if med is not None else None}
