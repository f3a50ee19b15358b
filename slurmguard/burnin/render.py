"""How a burn-in report shows itself: tables for people, JSON for tools (`burnin report`).

:class:`ReportView` is the result `slurmguard burnin report` hands to ``output.emit``. Its
JSON is the document ``output.to_json`` would write, one node a line, but each node's line
is written here directly (:func:`node_line`): 10,000 nodes x 10 metrics a report, and
building 110,000 dicts for the encoder to sort cost more than the encoding
(tests/test_burnin_vector.py holds the two equal; docs/burnin.md, "Report at fleet scale").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from slurmguard.output import Block, Table, iso, lines_json, table

_float_repr = float.__repr__
_INFS = (math.inf, -math.inf)
_EMPTY = '""'
_NUMBER_TYPES = {float, int, type(None)}
_JSON_WORDS = {"None": "null", "nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
ORDER = ("failed", "flagged", "suspect", "degrading", "partial", "pending", "no_verdict",
         "pass")


def order(verdict: str) -> int:
    """Worst first: the order of verdicts in tables and counts."""
    return ORDER.index(verdict) if verdict in ORDER else 9


def num(x: float | None, fmt: str = "{:.2f}") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return fmt.format(x)


def node_json(v: Any, units: dict[str, str], metric: str | None) -> dict[str, Any]:
    """A node's verdict as a JSON object (the reference :func:`node_line` is held equal to)."""
    return {"node": v.node, "group": v.group, "run_id": v.run_id, "status": v.status,
            "verdict": v.verdict, "reason": v.reason, "why": v.why, "metric": v.metric,
            "degrading": list(v.degrading),
            "scores": {m: list(s) for m, s in v.scores.items()},
            "metrics": [{"metric": j.metric, "value": j.value, "unit": units.get(j.metric, ""),
                         "score": None if j.score is None or math.isinf(j.score) else j.score,
                         "z": j.z, "flagged": j.flagged, "why": j.why}
                        for j in v.judgements if metric is None or j.metric == metric]}


def _js(x: Any) -> str:
    """``json.dumps(x, sort_keys=True, default=str)`` (the C string encoder for a str)."""
    if type(x) is str:
        return _quote(x)
    return json.dumps(x, sort_keys=True, default=str)


def _jf(x: Any) -> str:
    """A number as ``json.dumps`` writes it (float repr when finite; NaN, Infinity, null)."""
    if type(x) is float and x - x == 0:
        return _float_repr(x)
    return json.dumps(x, sort_keys=True, default=str)


def numbers(xs: list[Any]) -> list[str]:
    """Each number of ``xs`` as ``json.dumps`` writes it: one C ``repr`` of the list, split
    (float repr is most of the JSON's cost; nan, inf and None spelled as JSON spells them)."""
    if not xs:
        return []
    if not set(map(type, xs)) <= _NUMBER_TYPES:
        return [_jf(x) for x in xs]
    text = repr(xs)[1:-1]
    toks = text.split(", ")
    if "n" in text:  # None, nan, inf (no finite float or int repr has an "n")
        toks = [_JSON_WORDS.get(t, t) for t in toks]
    return toks


def _metric_items(js: list[Any], units: dict[str, str], names: dict[str, tuple[str, str]]) -> list[str]:
    nums: list[Any] = []
    for j in js:
        sc = j.score
        nums += (j.value, None if sc is None or sc in _INFS else sc, j.z)
    toks = numbers(nums)
    items = []
    for i, j in enumerate(js):
        m = j.metric
        qm = names.get(m)
        if qm is None:  # the metric's name and unit, encoded once a report
            qm = names[m] = (_js(m), _js(units.get(m, "")))
        f, why = j.flagged, j.why
        flag = "true" if f is True else "false" if f is False else _js(f)
        items.append(f'{{"flagged": {flag}, "metric": {qm[0]}, "score": {toks[3 * i + 1]}, '
                     f'"unit": {qm[1]}, "value": {toks[3 * i]}, '
                     f'"why": {_js(why) if why else _EMPTY}, "z": {toks[3 * i + 2]}}}')
    return items


def node_line(v: Any, units: dict[str, str], metric: str | None,
              names: dict[str, tuple[str, str]]) -> str:
    """``json.dumps(node_json(v, units, metric), sort_keys=True, default=str)``, written
    directly (``names``: the encoded metric names and units, shared by a report's lines)."""
    js = [j for j in v.judgements if metric is None or j.metric == metric]
    items = _metric_items(js, units, names)
    scores = ", ".join(f"{_js(m)}: [{', '.join(numbers(list(s)))}]"
                       for m, s in sorted(v.scores.items()))
    return (f'{{"degrading": [{", ".join(map(_js, v.degrading))}], "group": {_js(v.group)}, '
            f'"metric": {_js(v.metric)}, "metrics": [{", ".join(items)}], "node": {_js(v.node)}, '
            f'"reason": {_js(v.reason)}, "run_id": {_jf(v.run_id)}, "scores": {{{scores}}}, '
            f'"status": {_js(v.status)}, "verdict": {_js(v.verdict)}, "why": {_js(v.why)}}}')


@dataclass
class ReportView:
    """A judged report as `burnin report` shows it: filtered by node or metric, with what
    ``--apply`` did and where ``--plot`` drew it."""

    report: Any  # burnin.verdict.Report
    verdicts: Sequence[Any]  # the NodeVerdicts to show (already filtered by --node)
    since: float
    node: str | None = None
    metric: str | None = None
    outcomes: Sequence[Any] = ()  # burnin.apply.Outcome
    plot: str | None = None
    show_all: bool = False

    def groups(self) -> list[Any]:
        return [g for g in self.report.groups if self.metric is None or g.metric == self.metric]

    def to_json(self) -> str:
        units, names = self.report.units, {}
        groups = [{"group": g.group, "metric": g.metric, "n": g.n, "median": g.median,
                   "mad": g.mad, "unit": units.get(g.metric, ""), "verdict": g.verdict,
                   "why": g.why} for g in self.groups()]
        doc = {"since": iso(self.since), "counts": self.report.counts(), "groups": groups,
               "nodes": [], "applied": [o.to_dict() for o in self.outcomes], "plot": self.plot}
        lines = [node_line(v, units, self.metric, names) for v in self.verdicts]
        return lines_json(doc, {"nodes": lines})

    def to_text(self) -> str:
        out: list[Block] = []
        units = self.report.units
        groups = self.groups()
        if groups:
            out += [Table([[g.group, g.metric, g.n, num(g.median, "{:.4g}"), num(g.mad, "{:.3g}"),
                            units.get(g.metric, ""), "" if g.verdict else g.why] for g in groups],
                          ["group", "metric", "nodes", "median", "MAD", "unit", "note"]), ""]
        out += self._node_blocks() if self.node else self._fleet_blocks()
        if self.outcomes:
            out += ["", Table([[o.node, o.action, o.detail] for o in self.outcomes],
                              ["node", "action", "detail"])]
        if self.plot:
            out.append(f"plot: {self.plot}")
        return "\n".join(str(b) for b in out)

    def _node_blocks(self) -> list[Block]:
        out: list[Block] = []
        units, metric = self.report.units, self.metric
        for v in self.verdicts:
            out.append(f"node {v.node} (group {v.group}): {v.verdict}: {v.reason or v.why}")
            out.append(table([[j.metric, num(j.value, "{:.4g}"), units.get(j.metric, ""),
                               num(j.score), num(j.z, "{:.1f}"), j.why or "-"]
                              for j in v.judgements if metric is None or j.metric == metric],
                             ["metric", "value", "unit", "score", "robust z", "flag"]))
        return out

    def _fleet_blocks(self) -> list[Block]:
        metric = self.metric
        shown = self.verdicts if self.show_all else [v for v in self.verdicts if v.verdict != "pass"]
        rows = []
        for v in sorted(shown, key=lambda v: (v.group, order(v.verdict), v.node)):
            worst = min((j for j in v.judgements if j.score is not None
                         and (metric is None or j.metric == metric)),
                        key=lambda j: j.score, default=None)
            rows.append([v.group, v.node, v.status, v.verdict,
                         f"{worst.metric} {num(worst.score)}" if worst else "-",
                         v.reason or v.why])
        counts = self.report.counts()
        out: list[Block] = ["nodes: " + (", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=order))
                                         or "no burn-in run since then")]
        if rows:
            out.append(Table(rows, ["group", "node", "run", "verdict", "lowest score", "why"]))
        return out
