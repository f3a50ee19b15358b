"""Which processes count as a finished job's leftovers: one rule for the epilog's gather
(``slurmguard.adapters.host.gather_procs`` waits for them to exit) and its check
(``slurmguard.checks.host``, which judges what is still there)."""

from __future__ import annotations

from typing import Any


def leftovers(procs: Any, uid: int, job_id: str | None, ignore: Any, self_pid: int) -> list[Any]:
    """Processes of ``uid`` that count as leftovers of job ``job_id`` (see below)."""
    skip = set(ignore)
    return [
        p for p in procs
        if p.uid == uid and p.state != "Z" and p.comm not in skip and p.pid != self_pid
        and not (p.job_id and job_id and p.job_id != job_id)
    ]
