"""Fleet reliability figures from episodes. Pure (docs/fleet.md explains each one).

- failures per 1,000 node-days: non-shared episodes that *started* in the window, over the
  node-days the fleet had in it (each known node from its first sighting to the window's end);
  by cause and by a node key (group, partition, GPU model);
- time between failures: per node, the gaps between the starts of its consecutive failures
  (a fleet histogram), and the fleet MTBF (node-days / failures);
- time to return (MTTR): drain to clear of episodes that were returned in the window, by
  cause and by who returned the node; episodes still out are counted apart;
- out of service: per bucket (a day by default), the share of node-time inside an episode
  (from its drain to its return), shared episodes included: those nodes were out too.
Shared-cause incidents (fleet alerts) are counted once each, apart from node failures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurmguard.fleet.episodes import Episode
from slurmguard.fleet.history import Alert

DAY = 86400.0
# Histogram of time between failures, in days: [0,1), [1,7), [7,30), [30,90), [90, inf).
TBF_BUCKETS = (1.0, 7.0, 30.0, 90.0)


def node_days(first_seen: Mapping[str, float], since: float, until: float,
              key: Callable[[str], str] | None = None) -> dict[str, float]:
    """Node-days in [since, until] per key (one key "all" without ``key``)."""
    out: dict[str, float] = {}
    for node, first in first_seen.items():
        days = max(0.0, until - max(first, since)) / DAY
        k = key(node) if key else "all"
        out[k] = out.get(k, 0.0) + days
    return out


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    i = (len(s) - 1) * q
    lo, hi = math.floor(i), math.ceil(i)
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


def _rate(n: int, days: float) -> float | None:
    return round(1000.0 * n / days, 3) if days > 0 else None


def _durations(eps: Sequence[Episode], key: Callable[[Episode], str]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[float]] = {}
    for e in eps:
        if e.returned_at is not None:
            groups.setdefault(key(e), []).append((e.returned_at - e.drained_at) / 3600.0)
    return {k: {"returned": len(v), "median_h": _round(_quantile(v, 0.5)),
                "p90_h": _round(_quantile(v, 0.9)), "mean_h": _round(sum(v) / len(v))}
            for k, v in sorted(groups.items())}


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def between_failures(eps: Sequence[Episode]) -> list[float]:
    """Days between the starts of each node's consecutive (non-shared) failures."""
    last: dict[str, float] = {}
    gaps = []
    for e in sorted(eps, key=lambda e: e.start):
        if e.node in last:
            gaps.append((e.start - last[e.node]) / DAY)
        last[e.node] = e.start
    return gaps


def histogram(values: Sequence[float], edges: Sequence[float] = TBF_BUCKETS) -> dict[str, int]:
    labels = [f"<{edges[0]:g}d"] + [f"{a:g}-{b:g}d" for a, b in zip(edges, edges[1:], strict=False)]
    labels.append(f">={edges[-1]:g}d")
    out = dict.fromkeys(labels, 0)
    for v in values:
        i = sum(1 for e in edges if v >= e)
        out[labels[i]] += 1
    return out


def out_of_service(eps: Sequence[Episode], first_seen: Mapping[str, float], since: float,
                   until: float, bucket: float = DAY) -> list[tuple[float, float]]:
    """[(bucket start, share of node-time out of service)] over [since, until]."""
    n = max(1, math.ceil((until - since) / bucket))
    out_s = [0.0] * n
    for e in eps:
        a, b = max(e.drained_at, since), min(e.out_until(until), until)
        while a < b:
            i = min(n - 1, int((a - since) // bucket))
            end = min(b, since + (i + 1) * bucket)
            out_s[i] += end - a
            a = end
    series = []
    for i in range(n):
        t0, t1 = since + i * bucket, min(until, since + (i + 1) * bucket)
        alive = sum(max(0.0, t1 - max(f, t0)) for f in first_seen.values())
        series.append((t0, round(out_s[i] / alive, 5) if alive > 0 else 0.0))
    return series


def report(episodes: Sequence[Episode], alerts: Sequence[Alert], first_seen: Mapping[str, float],
           since: float, until: float, *, key: Callable[[str], str] | None = None,
           by: str = "cause", bucket: float = DAY) -> dict[str, Any]:
    """The fleet report as plain data (the CLI prints it, --json dumps it)."""
    in_window = [e for e in episodes if since <= e.start <= until]
    failures = [e for e in in_window if e.shared is None]
    days = node_days(first_seen, since, until)["all"]
    by_cause: dict[str, int] = {}
    for e in failures:
        by_cause[e.cause] = by_cause.get(e.cause, 0) + 1
    groups: dict[str, Any] = {}
    if key is not None:
        denom = node_days(first_seen, since, until, key)
        counts: dict[str, int] = {}
        for e in failures:
            counts[key(e.node)] = counts.get(key(e.node), 0) + 1
        groups = {g: {"node_days": round(d, 1), "failures": counts.get(g, 0),
                      "per_1000_node_days": _rate(counts.get(g, 0), d)}
                  for g, d in sorted(denom.items())}
    gaps = between_failures(failures)
    returned = [e for e in episodes if e.returned_at is not None and since <= e.returned_at <= until]
    shared_alerts = [a for a in alerts if since <= a.opened <= until]
    oos = out_of_service(episodes, first_seen, since, until, bucket)
    shares = [s for _, s in oos]
    return {
        "since": since, "until": until, "by": by, "nodes": len(first_seen),
        "node_days": round(days, 1), "failures": len(failures),
        "per_1000_node_days": _rate(len(failures), days),
        "by_cause": {c: {"failures": n, "per_1000_node_days": _rate(n, days)}
                     for c, n in sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0]))},
        "groups": groups,
        "shared_incidents": len(shared_alerts),
        "shared_episodes": sum(1 for e in in_window if e.shared is not None),
        "mtbf_days": round(days / len(failures), 1) if failures else None,
        "between_failures": {"pairs": len(gaps), "median_days": _round(_quantile(gaps, 0.5)),
                             "histogram": histogram(gaps)},
        "mttr_by_cause": _durations(returned, lambda e: e.cause),
        "mttr_by_returner": _durations(returned, lambda e: e.returned_by or "-"),
        "still_out": sum(1 for e in episodes if e.returned_at is None and e.drained_at <= until),
        "out_of_service": {"mean": _round(sum(shares) / len(shares), 5) if shares else 0.0,
                           "max": max(shares) if shares else 0.0, "series": oos},
    }
