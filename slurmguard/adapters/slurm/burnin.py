"""Slurm calls of burn-in: submit a job script, job states, MAINT reservations.

Everything goes through :class:`slurmguard.adapters.slurm.commands.SlurmCLI` (and so through
:func:`slurmguard.proc.run_command`, argv lists and a timeout).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from slurmguard.adapters.slurm.commands import SlurmCLI, validate_nodeset
from slurmguard.errors import InputError, ParseError, RefusedError

RESERVATION_PREFIX = "slurmguard_burnin"
_RES_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")
# Job states in which a burn-in job may still reach its worker's end.
LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                         "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT",
                         "EXPEDITING"})  # 25.11+: requeued by Slurm's expedited requeue


def validate_reservation(name: object) -> str:
    if not isinstance(name, str) or not _RES_RE.fullmatch(name):
        raise InputError(f"reservation: not a valid reservation name: {name!r}")
    return name


# The refusal of a submission that observe mode withheld (slurmguard/observe.py): no job.
NOT_SUBMITTED = "sbatch: not submitted: the nodes observe (policy.mode)"


def sbatch(cli: SlurmCLI, script: str, args: Sequence[str]) -> str:
    """Submit ``script`` (text, read by sbatch from stdin) with ``args``; returns the job id.
    RefusedError(:data:`NOT_SUBMITTED`) when observe mode withheld it."""
    res, withheld = cli._call("sbatch", "--parsable", *args, input=script)
    if withheld:
        raise RefusedError(NOT_SUBMITTED)
    job = res.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise ParseError(f"sbatch: expected a job id, got {res.stdout.strip()[:80]!r}")
    return job


def job_states(cli: SlurmCLI) -> dict[str, str]:
    """Job id -> state of every job Slurm still lists (squeue --json)."""
    return {j.job_id: j.state for j in cli.jobs()}


def reservations(cli: SlurmCLI) -> list[str]:
    """Names of the reservations Slurm has now."""
    res = cli._run("scontrol", "show", "reservation", "-o", check=False)
    return re.findall(r"(?:^|\s)ReservationName=(\S+)", res.stdout)


def create_reservation(cli: SlurmCLI, name: str, nodes: str, users: Sequence[str],
                       minutes: int) -> None:
    """A MAINT reservation over ``nodes`` for ``users``, starting now, for ``minutes``:
    other jobs cannot start there while a drained node is opened for its burn-in."""
    validate_reservation(name)
    validate_nodeset(nodes)
    for u in users:
        if not _USER_RE.fullmatch(u):
            raise InputError(f"reservation user: not a user name: {u!r}")
    cli._run("scontrol", "create", "reservation", f"reservationname={name}", f"nodes={nodes}",
             f"users={','.join(users)}", "starttime=now", f"duration={max(1, int(minutes))}",
             "flags=maint,ignore_jobs")


def reservation_exists(cli: SlurmCLI, name: str) -> bool:
    """True when Slurm has a reservation named ``name`` (``scontrol show reservation``)."""
    res = cli._run("scontrol", "show", "reservation", validate_reservation(name), check=False)
    return res.rc == 0 and f"ReservationName={name} " in res.stdout + " "


def delete_reservation(cli: SlurmCLI, name: str) -> None:
    cli._run("scontrol", "delete", f"reservationname={validate_reservation(name)}")
