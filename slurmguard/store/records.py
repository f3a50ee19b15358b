"""Validation of result records (the JSON that hooks send; see slurmguard.record.make_record).

Bad input is refused with one line naming the field and the value; nothing else is stored
from that record.
"""

from __future__ import annotations

import math
import re
from typing import Any

from slurmguard.errors import InputError
from slurmguard.nodeset import is_node_name

_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
_CHECK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
HEALTHS = ("healthy", "degraded", "unhealthy", "unsupported", "error")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(field: str, value: Any, expected: str) -> InputError:
    return InputError(f"record.{field}: expected {expected}, got {_show(value)}")


def validate_node(name: Any, field: str = "node") -> str:
    """A node name by the one rule (slurmguard.nodeset); InputError otherwise."""
    if not is_node_name(name):
        raise _bad(field, name, "a node name") if field != "node" else InputError(
            f"node: expected a node name, got {_show(name)}")
    return name


def validate_record(rec: Any) -> dict[str, Any]:
    """Check a decoded record; returns it normalized or raises InputError naming the field."""
    if not isinstance(rec, dict):
        raise InputError(f"record: expected a JSON object, got {_show(rec)}")
    rid = rec.get("id")
    if not isinstance(rid, str) or not _ID.match(rid):
        raise _bad("id", rid, "a record id (8-64 of [A-Za-z0-9_-])")
    node = rec.get("node")
    if not is_node_name(node):
        raise _bad("node", node, "a node name")
    hook = rec.get("hook")
    if not isinstance(hook, str) or not _CHECK.match(hook):
        raise _bad("hook", hook, "a hook name")
    started = rec.get("started")
    if isinstance(started, bool) or not isinstance(started, (int, float)) or not math.isfinite(started):
        raise _bad("started", started, "epoch seconds")
    duration = rec.get("duration", 0.0)
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not math.isfinite(duration):
        raise _bad("duration", duration, "seconds")
    job_id = rec.get("job_id")
    if job_id is not None and not isinstance(job_id, (str, int)):
        raise _bad("job_id", job_id, "a job id or null")
    decision = rec.get("decision") or {}
    if not isinstance(decision, dict):
        raise _bad("decision", decision, "an object")
    action = decision.get("action", "pass")
    if not isinstance(action, str) or len(action) > 32:
        raise _bad("decision.action", action, "a string")
    reason = decision.get("reason", "")
    if not isinstance(reason, str):
        raise _bad("decision.reason", reason, "a string")
    results = rec.get("results", [])
    if not isinstance(results, list):
        raise _bad("results", results, "a list")
    out_results = []
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            raise _bad(f"results[{i}]", r, "an object")
        name = r.get("name")
        if not isinstance(name, str) or not _CHECK.match(name):
            raise _bad(f"results[{i}].name", name, "a check name")
        health = r.get("health")
        if health not in HEALTHS:
            raise _bad(f"results[{i}].health", health, "one of " + ", ".join(HEALTHS))
        details = r.get("details") or {}
        if not isinstance(details, dict):
            raise _bad(f"results[{i}].details", details, "an object")
        rdur = r.get("duration", 0.0)
        if isinstance(rdur, bool) or not isinstance(rdur, (int, float)):
            raise _bad(f"results[{i}].duration", rdur, "seconds")
        out_results.append({"name": name, "health": health, "reason": str(r.get("reason", ""))[:1000],
                            "details": details, "duration": float(rdur)})
    return {
        "version": rec.get("version", 1),
        "id": rid,
        "node": node,
        "hook": hook,
        "job_id": None if job_id is None else str(job_id)[:64],
        "started": float(started),
        "duration": float(duration),
        "decision": {"action": action, "reason": reason[:1000]},
        "results": out_results,
        "slurmguard_version": str(rec.get("slurmguard_version", ""))[:32],
        # What the hook did about its decision ("drained", "already drained or down", ...):
        # serve ledgers node-side drains from it.
        "applied": str(rec.get("applied", ""))[:64],
        # Set by the node's spool (slurmguard.report.spool): the record was replayed.
        "spooled": _spooled(rec.get("spooled")),
    }


def _spooled(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None
