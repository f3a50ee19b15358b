"""Which requeue path the running Slurm offers the watcher (pure, plus one adapter call).

Slurm 25.11 added expedited requeue: a job submitted with ``--requeue=expedite`` (``scontrol
show job`` prints ``ExpeditedRequeue=Yes``) that a node fault requeues is made eligible by
slurmctld itself, without the ~121 s wait (``EligibleTime`` = requeue + cred_expire) that the
watcher otherwise cuts short; ``SlurmctldParameters=enable_expedited_requeue`` turns it on
(slurmctld logs "Expedited requeue requested but not enabled" otherwise), ``requeue_delay=N``
tunes the delay. Where Slurm has it, the watcher leaves eligibility to Slurm for such jobs
and still does what Slurm does not: exclude the failed nodes, release a launch-failure
hold, stop crash loops. Everywhere else (22.05, 24.11, a job without the flag) it keeps
setting ``EligibleTime=now`` itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

SINCE = (25, 11, 0)
_DELAY_RE = re.compile(r"(?:^|,)\s*requeue_delay=(\d+)")


class RequeuePath(NamedTuple):
    slurm_expedites: bool  # slurmctld makes flagged jobs eligible itself
    requeue_delay: int | None = None  # seconds, when set
    why: str = ""  # one line for the watcher's start message

    @property
    def name(self) -> str:
        return "slurm-expedited" if self.slurm_expedites else "watcher"


def requeue_path(version: tuple[int, int, int], conf: Mapping[str, str]) -> RequeuePath:
    """The path for this Slurm version and ``scontrol show config`` (lower-case keys)."""
    v = ".".join(map(str, version))
    if version < SINCE:
        return RequeuePath(False, None, f"Slurm {v} has no expedited requeue: the watcher "
                           "sets EligibleTime=now")
    params = f"{conf.get('slurmctldparameters', '')},{conf.get('schedulerparameters', '')}"
    m = _DELAY_RE.search(params)
    delay = int(m.group(1)) if m else None
    if "enable_expedited_requeue" not in params:
        return RequeuePath(False, delay, f"Slurm {v}: expedited requeue not enabled "
                           "(SlurmctldParameters=enable_expedited_requeue): the watcher sets "
                           "EligibleTime=now")
    more = f", requeue_delay={delay} s" if delay is not None else ""
    return RequeuePath(True, delay, f"Slurm {v}: expedited requeue enabled{more}: jobs "
                       "submitted with --requeue=expedite are made eligible by Slurm; the "
                       "watcher excludes the failed nodes and sets EligibleTime=now for the rest")


def job_expedited(job: Any) -> bool:
    """The job asked for expedited requeue (``--requeue=expedite``)."""
    raw = getattr(job, "raw", None) or {}
    if not isinstance(raw, Mapping):
        return False
    if str(raw.get("ExpeditedRequeue", "")).lower() in ("yes", "1"):
        return True
    flags = raw.get("flags")
    return isinstance(flags, list) and "EXPEDITED_REQUEUE" in flags


def detect(slurm: Any) -> RequeuePath:
    """Ask the running Slurm; a failure keeps today's path (and says why)."""
    from slurmguard.errors import SlurmguardError

    try:
        return requeue_path(slurm.version(), slurm.show_config())
    except SlurmguardError as exc:
        return RequeuePath(False, None, f"Slurm's version/config unreadable ({exc.message}): "
                           "the watcher sets EligibleTime=now")
