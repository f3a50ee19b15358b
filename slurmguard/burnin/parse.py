"""Parsers of the outputs of NVIDIA's tools: ``dcgmi diag -j`` and nccl-tests' tables. Pure.

* ``dcgmi diag -r N -j``: NVVS writes (DCGM's JsonOutput.h)::

    {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment|Hardware|Integration|Performance|Stress|Custom",
         "tests": [{"name": "SM Stress", "results": [
             {"gpu_ids": "0", "status": "PASS|FAIL|WARN|SKIPPED" (DCGM 2/3: "Pass", "Fail",
              "Warn", "Skip"), "warnings": ["text", ...] (or [{"warning": "text",
              "error_id": 28}]), "info": ["text", ...]}]}]}],
      "version": "3.3.5", "runtime_error": "..." (when it could not run)}}

  with one result per GPU (one for all GPUs in the Deployment tests, ``gpu_ids`` a CSV
  string then); ``null`` entries may appear in the lists, and text may precede the JSON.
* ``all_reduce_perf`` (nccl-tests): ``#``-comment header lines, then one row per message
  size::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
          8388608       2097152     float     sum      -1    123.4  67.98  118.97      0    122.9  68.26  119.45      0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 67.9217

  (out-of-place then in-place columns; ``#wrong`` may read ``N/A`` when checking is off;
  rows may carry an ``srun --label`` prefix ``0:``).

Garbage is a :class:`~slurmguard.errors.ParseError` naming what was wrong, in one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from slurmguard.errors import ParseError


@dataclass(frozen=True)
class DcgmResult:
    category: str
    test: str
    gpus: tuple[int, ...]
    status: str  # pass, fail, warn, skip
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmDiag:
    version: str
    results: tuple[DcgmResult, ...]
    runtime_error: str = ""

    @property
    def failed(self) -> tuple[DcgmResult, ...]:
        return tuple(r for r in self.results if r.status == "fail")


_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
           "skipped": "skip", "not run": "skip", "notrun": "skip"}


def parse_dcgm_diag(text: str) -> DcgmDiag:
    """Parse ``dcgmi diag -j`` output (per test and per GPU)."""
    if not isinstance(text, str) or "{" not in text:
        raise ParseError("dcgmi diag -j: no JSON object in the output")
    try:
        data = json.loads(text[text.index("{"):text.rindex("}") + 1])
    except ValueError as exc:
        raise ParseError(f"dcgmi diag -j: not valid JSON ({exc})") from None
    root = data.get("DCGM GPU Diagnostic", data.get("DCGM Diagnostic")) if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise ParseError('dcgmi diag -j: no "DCGM GPU Diagnostic" object')
    cats = root.get("test_categories") or []
    if not isinstance(cats, list):
        raise ParseError(f"dcgmi diag -j: test_categories: expected a list, got {type(cats).__name__}")
    out: list[DcgmResult] = []
    for cat in cats:
        if not isinstance(cat, dict):
            continue
        cname = str(cat.get("category") or "")
        for test in _list(cat.get("tests"), "tests"):
            if not isinstance(test, dict):
                continue
            tname = str(test.get("name") or "unknown")
            for r in _list(test.get("results"), f"{tname}: results"):
                if not isinstance(r, dict):
                    continue
                raw = str(r.get("status", "")).strip().lower()
                if raw not in _STATUS:
                    raise ParseError(f"dcgmi diag -j: {tname}: unknown status {r.get('status')!r}")
                out.append(DcgmResult(cname, tname, _gpu_ids(r.get("gpu_ids", r.get("gpu_id"))),
                                      _STATUS[raw], tuple(_warnings(r.get("warnings")))))
    err = root.get("runtime_error") or data.get("runtime_error") or ""
    return DcgmDiag(str(root.get("version") or ""), tuple(out), str(err))


def _list(value: Any, field: str) -> list[Any]:
    """A list field of the diag JSON (absent -> empty); anything else is a ParseError."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"dcgmi diag -j: {field}: expected a list, got {type(value).__name__}")
    return value


def _gpu_ids(value: Any) -> tuple[int, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    try:
        return tuple(int(x) for x in str(value).split(",") if x.strip())
    except ValueError:
        raise ParseError(f"dcgmi diag -j: gpu_ids: expected GPU numbers, got {value!r}") from None


def _warnings(value: Any) -> list[str]:
    out = []
    for w in value or []:
        if isinstance(w, dict):
            w = w.get("warning") or w.get("message") or ""
        if w:
            out.append(" ".join(str(w).split()))
    return out


@dataclass(frozen=True)
class NcclRow:
    size: int
    count: int
    dtype: str
    redop: str
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None: N/A (checking off)
    busbw_inplace: float | None = None
    wrong_inplace: int | None = None


@dataclass(frozen=True)
class NcclResult:
    rows: tuple[NcclRow, ...]
    avg_busbw: float | None
    out_of_bounds: int | None
    notes: tuple[str, ...] = field(default=())

    @property
    def peak_busbw(self) -> float:
        return max(max(r.busbw, r.busbw_inplace or 0.0) for r in self.rows)

    @property
    def wrong(self) -> int:
        return sum((r.wrong or 0) + (r.wrong_inplace or 0) for r in self.rows)


_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_ROW = re.compile(
    rf"^\s*(?:\d+:\s+)?(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+(\S+)"
    rf"(?:\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+(\S+))?\s*$")
_AVG = re.compile(rf"#\s*Avg bus bandwidth\s*:\s*({_NUM})")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")


def _wrong(text: str | None) -> int | None:
    if text is None or text.upper() == "N/A":
        return None
    if not text.isdigit():
        raise ParseError(f"all_reduce_perf: #wrong: expected a count or N/A, got {text!r}")
    return int(text)


def parse_nccl_tests(text: str) -> NcclResult:
    """Parse an nccl-tests ``*_perf`` table (all_reduce_perf and the other collectives)."""
    if not isinstance(text, str):
        raise ParseError("all_reduce_perf: no output")
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        g = m.groups()
        rows.append(NcclRow(int(g[0]), int(g[1]), g[2], g[3], float(g[5]), float(g[6]),
                            float(g[7]), _wrong(g[8]),
                            float(g[11]) if g[11] is not None else None, _wrong(g[12])))
    if not rows:
        raise ParseError("all_reduce_perf: no result rows (size count type redop root time "
                         "algbw busbw #wrong ...) in the output")
    avg = _AVG.search(text)
    oob = _OOB.search(text)
    return NcclResult(tuple(rows), float(avg.group(1)) if avg else None,
                      int(oob.group(1)) if oob else None)
