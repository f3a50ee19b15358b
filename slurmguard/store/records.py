"""Validation of result records (the JSON that hooks send; see slurmguard.node.record.make_record).

Bad input is refused with one line naming the field and the value; nothing else is stored
from that record.
"""

from __future__ import annotations

import math
import re
from typing import Any

from slurmguard.contract import HEALTHS
from slurmguard.errors import InputError
from slurmguard.nodeset import is_node_name

_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
_CHECK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
EPOCH_MIN = 946_684_800.0  # 2000-01-01: anything earlier is a broken clock, not a run
FUTURE_SLACK = 86_400.0  # a node's clock may run ahead of serve's by a day at most


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(field: str, value: Any, expected: str) -> InputError:
    return InputError(f"record.{field}: expected {expected}, got {_show(value)}")


def _text(field: str, value: Any, limit: int, *, default: str = "") -> str:
    """A string field: absent -> default; not a string, a NUL or unencodable text -> InputError.

    PostgreSQL refuses NUL in text and both engines refuse lone surrogates (JSON's "\\ud800"),
    so such a record would fail the whole write batch it was in: it is refused here instead.
    """
    if value is None:
        return default
    if not isinstance(value, str):
        raise _bad(field, value, "a string")
    if "\x00" in value:
        raise _bad(field, value, "text without NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(field, value, "valid UTF-8 text") from None
    return value[:limit]


def _number(field: str, value: Any, expected: str, lo: float = -math.inf,
            hi: float = math.inf) -> float:
    """A finite JSON number within [lo, hi] as a float; InputError otherwise (also for an
    integer too large for a float, which float() would raise OverflowError on)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(field, value, expected)
    try:
        f = float(value)
    except OverflowError:
        raise _bad(field, value, expected) from None
    if not math.isfinite(f) or not lo <= f <= hi:
        raise _bad(field, value, expected)
    return f


def validate_node(name: Any, field: str = "node") -> str:
    """A node name by the one rule (slurmguard.nodeset); InputError otherwise."""
    if not is_node_name(name):
        raise _bad(field, name, "a node name") if field != "node" else InputError(
            f"node: expected a node name, got {_show(name)}")
    return name


def _job_id(job_id: Any) -> str | int | None:
    if isinstance(job_id, bool) or (job_id is not None and not isinstance(job_id, (str, int))):
        raise _bad("job_id", job_id, "a job id or null")
    if isinstance(job_id, str):
        job_id = _text("job_id", job_id, 64)
    return job_id


def _decision(decision: Any) -> tuple[str, str]:
    """(action, reason) of a record's ``decision`` object."""
    decision = {} if decision is None else decision  # "" or 0 is a wrong type, not absent
    if not isinstance(decision, dict):
        raise _bad("decision", decision, "an object")
    action = decision.get("action", "pass")
    if not isinstance(action, str) or len(action) > 32:
        raise _bad("decision.action", action, "a string")
    action = _text("decision.action", action, 32)
    return action, _text("decision.reason", decision.get("reason", ""), 1000)


def _result(i: int, r: Any) -> dict[str, Any]:
    """One check result of a record, checked field by field (``results[i].field`` in errors)."""
    if not isinstance(r, dict):
        raise _bad(f"results[{i}]", r, "an object")
    name = r.get("name")
    if not isinstance(name, str) or not _CHECK.fullmatch(name):
        raise _bad(f"results[{i}].name", name, "a check name")
    health = r.get("health")
    if health not in HEALTHS:
        raise _bad(f"results[{i}].health", health, "one of " + ", ".join(HEALTHS))
    details = r.get("details")
    details = {} if details is None else details
    if not isinstance(details, dict):
        raise _bad(f"results[{i}].details", details, "an object")
    rdur = _number(f"results[{i}].duration", r.get("duration", 0.0), "seconds (0 to 1e7)",
                   0.0, 1e7)
    rreason = _text(f"results[{i}].reason", r.get("reason", ""), 1000)
    return {"name": name, "health": health, "reason": rreason, "details": details,
            "duration": rdur}


def validate_record(rec: Any, *, now: float | None = None) -> dict[str, Any]:
    """Check a decoded record; returns it normalized or raises InputError naming the field.

    With ``now`` (serve's clock at receipt) ``started`` must also be plausible: after
    2000-01-01 and at most a day ahead of ``now``; a run from the future would stay the
    node's "newest" and hide every later one.
    """
    if not isinstance(rec, dict):
        raise InputError(f"record: expected a JSON object, got {_show(rec)}")
    rid = rec.get("id")
    if not isinstance(rid, str) or not _ID.fullmatch(rid):
        raise _bad("id", rid, "a record id (8-64 of [A-Za-z0-9_-])")
    node = rec.get("node")
    if not is_node_name(node):
        raise _bad("node", node, "a node name")
    hook = rec.get("hook")
    if not isinstance(hook, str) or not _CHECK.fullmatch(hook):
        raise _bad("hook", hook, "a hook name")
    started = _number("started", rec.get("started"), "epoch seconds")
    if now is not None and not EPOCH_MIN <= started <= now + FUTURE_SLACK:
        raise _bad("started", started, f"epoch seconds between {EPOCH_MIN:.0f} and now + 1 day")
    duration = _number("duration", rec.get("duration", 0.0), "seconds (0 to 1e7)", 0.0, 1e7)
    job_id = _job_id(rec.get("job_id"))
    action, reason = _decision(rec.get("decision"))
    results = rec.get("results")
    results = [] if results is None else results
    if not isinstance(results, list):
        raise _bad("results", results, "a list")
    out_results = [_result(i, r) for i, r in enumerate(results)]
    return {
        "version": rec.get("version", 1),
        "id": rid,
        "node": node,
        "hook": hook,
        "job_id": None if job_id is None else str(job_id)[:64],
        "started": started,
        "duration": duration,
        "decision": {"action": action, "reason": reason[:1000]},
        "results": out_results,
        "slurmguard_version": _text("slurmguard_version", rec.get("slurmguard_version"), 32),
        # What the hook did about its decision ("drained", "already drained or down", ...):
        # serve ledgers node-side drains from it (a drain_failed event carries the error).
        "applied": _text("applied", rec.get("applied"), 300),
        # Set by the node's spool (slurmguard.adapters.spool.write): the record was replayed.
        "spooled": _spooled(rec.get("spooled")),
    }


def _spooled(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None
