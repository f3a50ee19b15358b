"""Burn-in histories with planted truth, for the planted-truth tests and the benchmarks
(docs/burnin.md, "False flags across the fleet").

    fleet = history(seed=1, nodes=10_000, shape="t4", rerun=True)
    report = judge_rows(fleet.runs, fleet.rows, StatParams())
    precision_recall(report, "flagged", fleet.slow)      # drained tonight
    again = judge_rows(fleet.rerun_runs, fleet.rerun_rows, StatParams())
    rates(drained(report, again), fleet.slow)            # and once suspects are re-run

What is planted, and why it looks like a fleet:

* **groups**: 4 GPU groups (node i in group i % 4), 10 metrics, 8 nights (what
  ``burnin_series.recent`` keeps), all nodes' last night the same (one nightly campaign).
* **noise**: each (group, metric) has its own level, uniform in 1-3 % (the coefficient of
  variation: standard deviation / mean), either Gaussian or Student-t with 4 degrees of
  freedom scaled to that standard deviation (``shape="t4"``: heavy tails; a healthy node
  lands 12 robust z below the median about once in 10,000 tests). Each night the whole
  group moves together by up to +-1 % (a fleet-wide change is not a node's fault).
* **slow nodes** (``slow_frac``, 1 %): a fault on one component, which every metric that
  exercises it sees: 3 in 4 faults hit a component measured by 2-3 metrics (GPU compute and
  memory, host CPU and memory, disk write and read), 1 in 4 a single metric (the network);
  the loss is 15-50 %; half started tonight, half 1-4 nights ago (and stayed).
* **degrading nodes** (``falling_frac``, 0.5 %): a component that wears: its 2-3 metrics
  lose 2 % a night over the last 4 nights (8 % in all), the node's latest score still
  near or above the threshold.
* **the re-run** (``rerun=True``): every node's next burn-in run, the re-run that confirms
  or clears tonight's suspects: a fresh draw of each node's noise and of the group's
  drift (from a generator of its own, so tonight's fleet is the same with or without it),
  each planted fault as it stands tonight (a slow node stays slow, a worn one as worn).
  ``Fleet.rerun_runs`` and ``Fleet.rerun_rows`` are the fleet one night on: each node's
  ``recent`` shifted by one, the re-run's value last.

:func:`wearing` is the fleet night after night instead (tests/test_burnin_degrading_lead.py):
its wearing nodes keep wearing, 1-3 % a night from a night of their own, and the judge runs
on every night's last 8 (``Wearing.night``), so that the night a node is first named
degrading can be set against the night it is first drained as slow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import numpy as np

from slurmguard.store.burnin_read import SeriesRow

GROUPS = ("8x NVIDIA H100 80GB HBM3", "8x NVIDIA A100-SXM4-80GB", "4x NVIDIA L40S",
          "8x NVIDIA H200")
# Components and the metrics that measure them (indices into METRICS).
METRICS = ("gpu_tflops", "gpu_membw_gbs", "gpu_power_w", "host_cpu_gflops", "host_membw_gbs",
           "disk_write_mbs", "disk_read_mbs", "nccl_busbw_gbs", "pcie_h2d_gbs", "pcie_d2h_gbs")
COMPONENTS = ((0, 1, 2), (3, 4), (5, 6), (8, 9), (7,))
LAST_NIGHT = date(2027, 1, 14)


@dataclass(frozen=True)
class Run:
    node: str
    id: int
    status: str = "complete"
    reason: str = ""
    group_key: str = ""


@dataclass(frozen=True)
class Fleet:
    runs: list[Run]
    rows: list[SeriesRow]
    slow: frozenset[str]  # planted slow nodes: the truth for "flagged"
    falling: frozenset[str]  # planted degrading nodes: the truth for "degrading"
    rerun_runs: list[Run] = field(default_factory=list)  # the next run of every node
    rerun_rows: list[SeriesRow] = field(default_factory=list)  # (with ``rerun=True``)


def _noise(rng: np.random.Generator, shape: str, cv: np.ndarray, size: tuple[int, ...]
           ) -> np.ndarray:
    """Relative noise with standard deviation ``cv`` (broadcast over the last axes)."""
    if shape == "gauss":
        return rng.standard_normal(size) * cv
    if shape in ("t3", "t4", "t5"):  # Student-t with nu degrees of freedom, scaled to sd 1
        nu = int(shape[1])
        return rng.standard_t(nu, size) / math.sqrt(nu / (nu - 2.0)) * cv
    raise ValueError(f"shape: expected gauss, t3, t4 or t5, got {shape!r}")


def _fleet(rng: np.random.Generator, nodes: int, nights: int, shape: str, slow_frac: float,
           falling_frac: float) -> tuple[np.ndarray, ...]:
    """The draws both generators share, in this order: each node's group, each metric's base,
    each (group, metric)'s noise level and nightly drift, each node's relative noise, and
    which nodes are slow and which wear."""
    nm, ng = len(METRICS), len(GROUPS)
    group = np.arange(nodes) % ng
    base = rng.uniform(10, 1000, nm)
    cv = rng.uniform(0.01, 0.03, (ng, nm))  # per (group, metric)
    drift = 1.0 + rng.uniform(-0.01, 0.01, (ng, nm, nights))
    noise = 1.0 + _noise(rng, shape, cv[group][:, :, None], (nodes, nm, nights))
    picked = rng.permutation(nodes)
    n_slow, n_fall = round(nodes * slow_frac), round(nodes * falling_frac)
    return group, base, cv, drift, noise, picked[:n_slow], picked[n_slow:n_slow + n_fall]


def _slow_component(rng: np.random.Generator) -> tuple[int, ...]:
    """A slow node's faulty component: 3 in 4 a multi-metric one, else the network."""
    return COMPONENTS[rng.integers(len(COMPONENTS) - 1)] if rng.random() < 0.75 \
        else COMPONENTS[-1]


def history(seed: int = 1, nodes: int = 10_000, nights: int = 8, shape: str = "gauss",
            slow_frac: float = 0.01, falling_frac: float = 0.005, rerun: bool = False) -> Fleet:
    """A fleet's burn-in summary rows with planted slow and degrading nodes (module doc)."""
    rng = np.random.default_rng(seed)
    nm, ng = len(METRICS), len(GROUPS)
    group, base, cv, drift, noise, slow, falling = _fleet(rng, nodes, nights, shape, slow_frac,
                                                         falling_frac)
    values = base[None, :, None] * drift[group] * noise
    for i in slow.tolist():
        comp = _slow_component(rng)
        start = nights - 1 - (0 if rng.random() < 0.5 else int(rng.integers(1, 5)))
        values[i, list(comp), start:] *= 1.0 - rng.uniform(0.15, 0.50)
    for i in falling.tolist():
        comp = list(COMPONENTS[rng.integers(len(COMPONENTS) - 1)])
        for back in range(4):  # the last 4 nights: -2 %, -4 %, -6 %, -8 %
            values[i, comp, nights - 4 + back] *= 1.0 - 0.02 * (back + 1)
    names = [f"gpu{i:05d}" for i in range(nodes)]
    runs, rows = _rows(names, group, values, LAST_NIGHT, 1)
    rerun_runs: list[Run] = []
    rerun_rows: list[SeriesRow] = []
    if rerun:
        # Each node's fault as it stands tonight (1.0: none), under fresh noise and drift.
        fault = values[:, :, -1] / (base[None, :] * drift[group][:, :, -1] * noise[:, :, -1])
        again = np.random.default_rng([seed, 1])
        fresh = base[None, :] * (1.0 + again.uniform(-0.01, 0.01, (ng, nm)))[group] * fault * (
            1.0 + _noise(again, shape, cv[group], (nodes, nm)))
        rerun_runs, rerun_rows = _rows(names, group, np.concatenate(
            (values[:, :, 1:], fresh[:, :, None]), axis=2), LAST_NIGHT + timedelta(days=1),
            nodes + 1)
    return Fleet(runs, rows, frozenset(names[i] for i in slow.tolist()),
                 frozenset(names[i] for i in falling.tolist()), rerun_runs, rerun_rows)


def _rows(names: list[str], group: np.ndarray, values: np.ndarray, night: date, first_id: int
          ) -> tuple[list[Run], list[SeriesRow]]:
    """One complete run per node (ids from ``first_id``) and its summary rows, ``values``
    (node x metric x night) ending on ``night``."""
    last = night.isoformat()
    runs = [Run(n, first_id + i, group_key=GROUPS[group[i]]) for i, n in enumerate(names)]
    rows = [SeriesRow(names[i], METRICS[m], "u", True, GROUPS[group[i]], first_id + i, 0.0,
                      float(values[i, m, -1]), last, tuple(values[i, m].tolist()))
            for i in range(len(names)) for m in range(values.shape[1])]
    return runs, rows


def precision_recall(report: Any, verdict: str, truth: Iterable[str],
                     faulty: Iterable[str] = ()) -> tuple[float, float, int]:
    """(precision, recall, healthy nodes given it) of the nodes given ``verdict`` against
    ``truth``. ``faulty``: other planted faults that are no false alarm either (a degrading
    node whose component already lost 8 % may well be flagged as slow)."""
    return rates({n for n, v in report.nodes.items() if v.verdict == verdict}, truth, faulty)


def drained(tonight: Any, rerun: Any) -> set[str]:
    """The nodes drained once tonight's suspects have had their re-run: flagged tonight, or a
    suspect tonight whose re-run (``rerun``: the report one run later) flags it."""
    return {n for n, v in tonight.nodes.items() if v.verdict == "flagged" or (
        v.verdict == "suspect" and rerun.nodes[n].verdict == "flagged")}


def rates(got: set[str], truth: Iterable[str], faulty: Iterable[str] = ()
          ) -> tuple[float, float, int]:
    """(precision, recall, healthy nodes among them) of the nodes ``got``, as
    :func:`precision_recall`. Naming no node has precision 0.0, not 1.0: a verdict that is
    never given must fail a precision test, not pass it."""
    truth = set(truth)
    bad = truth | set(faulty)
    precision = len(got & bad) / len(got) if got else 0.0
    recall = len(got & truth) / len(truth) if truth else 1.0
    return precision, recall, len(got - bad)



@dataclass(frozen=True)
class Wearing:
    """A fleet night after night (:func:`wearing`): ``values`` node x metric x night, the
    planted slow and wearing nodes, and each wearing node's first night of wear."""

    names: list[str]
    group: np.ndarray
    values: np.ndarray
    slow: frozenset[str]
    falling: frozenset[str]
    start: dict[str, int]  # wearing node -> its first night of wear
    window: int

    def night(self, t: int) -> tuple[list[Run], list[SeriesRow]]:
        """The runs and summary rows the judge reads on night ``t`` (>= window - 1): each
        node's last ``window`` nights, the store's ``recent``."""
        return _rows(self.names, self.group, self.values[:, :, t - self.window + 1:t + 1],
                     LAST_NIGHT + timedelta(days=t), 1 + t * len(self.names))


def wearing(seed: int = 1, nodes: int = 4000, nights: int = 22, shape: str = "gauss",
            slow_frac: float = 0.01, falling_frac: float = 0.01, window: int = 8,
            rate: tuple[float, float] = (0.01, 0.03)) -> Wearing:
    """A fleet that the judge runs on each night, its wearing nodes wearing on: noise and
    groups as :func:`history`; slow nodes as there (a step of 15-50 % on one component),
    from a night drawn among those judged; each wearing node loses ``rate`` (drawn uniform
    per node: 1-3 %) a night on its component's 2-3 metrics from a night drawn in
    [window - 2, nights - 11] on, without end (what a wearing fan or a drying thermal pad
    does), so that it is named early, flagged as slow later, or both."""
    rng = np.random.default_rng([seed, 7])
    group, base, _cv, drift, noise, slow, falling = _fleet(rng, nodes, nights, shape, slow_frac,
                                                          falling_frac)
    values = base[None, :, None] * drift[group] * noise
    for i in slow.tolist():
        comp = _slow_component(rng)
        values[i, list(comp), int(rng.integers(window - 1, nights)):] *= \
            1.0 - rng.uniform(0.15, 0.50)
    names = [f"gpu{i:05d}" for i in range(nodes)]
    start = {}
    nights_of = np.arange(nights)
    for i in falling.tolist():
        comp = list(COMPONENTS[rng.integers(len(COMPONENTS) - 1)])
        s, r = int(rng.integers(window - 2, nights - 10)), rng.uniform(*rate)
        values[i, comp, :] *= np.clip(1.0 - r * np.maximum(nights_of - s, 0), 0.05, 1.0)
        start[names[i]] = s
    return Wearing(names, group, values, frozenset(names[i] for i in slow.tolist()),
                   frozenset(names[i] for i in falling.tolist()), start, window)
