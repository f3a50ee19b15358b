"""How `slurmguard run` maps the end of a training run to "requeue" or "do not requeue" (pure).

Slurm requeues a batch job whose exit code is listed in ``RequeueExit=`` (docs/requeue.md
uses ``RequeueExit=75``, EX_TEMPFAIL). The wrapper exits 75 only when the run ended because of
the *infrastructure*, so that an application bug does not crash-loop through the queue:

===================================================  =============  ===========================
what happened (first match wins)                     verdict        wrapper exits
===================================================  =============  ===========================
child exited 0                                       success        0
the run was over the requeue limit                   limit          7 (EXIT_REFUSED), message
stall with ``--stall-action requeue``                infra          75
a drain notice ended the run (checkpoint done, or    infra          75
  none in time but one to resume from; also when
  the program ended before the wrapper's look)
child killed by SIGBUS (uncorrectable memory error   infra          75
  on a mapped page: a hardware fault)
child exited 75 itself (asks to be requeued,         requested      75
  e.g. after checkpointing on SIGUSR1)
wrapper got SIGUSR1 (``--signal=B:USR1@T``: time     requested      75
  limit or preemption near) and the child stopped
wrapper got SIGTERM/SIGINT (scancel, preemption)     cancelled      child's code (Slurm decides)
child's stderr matched an infrastructure pattern     infra          75
  (NCCL system/remote error or watchdog timeout,
  Xid, uncorrectable ECC, GPU fallen off the bus)
this node was drained by slurmguard during the run   infra          75
anything else (exit 1, a traceback, SIGSEGV, SIGKILL app           child's code, 128+signal
  by the OOM killer: memory use is the job's)
===================================================  =============  ===========================
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

REQUEUE_EXIT = 75  # RequeueExit=75 in slurm.conf (docs/requeue.md)
LIMIT_EXIT = 7  # slurmguard.errors.EXIT_REFUSED: requeue refused by the cap

# Lines in a training program's stderr that mean the hardware or the fabric failed, not the
# program. Each is a message NCCL, PyTorch or the CUDA runtime prints for such a fault.
INFRA_PATTERNS: tuple[str, ...] = (
    r"NCCL error.*(unhandled system error|remote process exited|ncclSystemError|ncclRemoteError)",
    r"ncclSystemError|ncclRemoteError",
    r"Watchdog caught collective operation timeout",
    r"NET/IB : Got completion .*error",
    r"uncorrectable ECC error",
    r"\bXid\b",
    r"GPU has fallen off the bus",
    r"cudaErrorECCUncorrectable",
    r"CUDA-capable device\(s\) is/are busy or unavailable",
)


@dataclass(frozen=True)
class RunEnd:
    """Facts about how a run ended (what the wrapper saw)."""

    returncode: int  # Popen style: negative = killed by that signal
    restart: int = 0  # SLURM_RESTART_COUNT of this run
    max_requeues: int = 3
    stalled: bool = False
    stall_action: str = "log"
    got_signal: int | None = None  # last of SIGTERM/SIGINT/SIGUSR1 the wrapper received
    infra_line: str | None = None  # first stderr line matching INFRA_PATTERNS
    node_drained: str | None = None  # our drain reason on this node, if drained during the run
    notice: str | None = None  # the wrapper ended the run after a drain notice (why)


@dataclass(frozen=True)
class Verdict:
    kind: str  # success, infra, requested, cancelled, app, limit
    exit_code: int
    reason: str

    @property
    def requeue(self) -> bool:
        return self.exit_code == REQUEUE_EXIT


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def child_code(rc: int) -> int:
    """The shell's view of a child status: 128+N for a death by signal N."""
    return 128 - rc if rc < 0 else rc


def match_infra(line: str, patterns: tuple[str, ...] = INFRA_PATTERNS) -> bool:
    return any(re.search(p, line) for p in patterns)


def decide(end: RunEnd) -> Verdict:
    """The exit code of `slurmguard run` for a run that ended as ``end`` (see the table)."""
    rc = end.returncode
    if rc == 0:
        return Verdict("success", 0, "finished")
    why: tuple[str, str] | None = None  # (kind, reason) that asks for a requeue
    if end.stalled and end.stall_action == "requeue":
        why = ("infra", "stalled: no progress within --stall-timeout")
    elif end.notice is not None:
        why = ("infra", end.notice)
    elif rc == -signal.SIGBUS:
        why = ("infra", "killed by SIGBUS (uncorrectable memory error)")
    elif rc == REQUEUE_EXIT:
        why = ("requested", f"the program exited {REQUEUE_EXIT} to ask for a requeue")
    elif end.got_signal == signal.SIGUSR1:
        why = ("requested", "SIGUSR1 (time limit or preemption near): checkpoint and requeue")
    elif end.got_signal in (signal.SIGTERM, signal.SIGINT):
        return Verdict("cancelled", child_code(rc), f"{signal_name(end.got_signal)} received: "
                       "cancelled or preempted, Slurm decides")
    elif end.infra_line is not None:
        why = ("infra", f"infrastructure error in the program's output: {end.infra_line.strip()[:160]}")
    elif end.node_drained:
        why = ("infra", f"this node was drained during the run: {end.node_drained}")
    if why is None:
        what = f"killed by {signal_name(-rc)}" if rc < 0 else f"exited {rc}"
        code = child_code(rc)
        if code == REQUEUE_EXIT:  # cannot happen for rc >= 0; keep 75 reserved anyway
            code = 1
        return Verdict("app", code, f"application error: {what}; not requeued")
    kind, reason = why
    if end.restart >= end.max_requeues:
        return Verdict("limit", LIMIT_EXIT,
                       f"{reason}; but the job was already requeued {end.restart} times "
                       f"(--max-requeues {end.max_requeues}): not requeueing again")
    return Verdict(kind, REQUEUE_EXIT,
                   f"{reason}; exiting {REQUEUE_EXIT} so Slurm requeues the job "
                   f"(requeue {end.restart + 1} of at most {end.max_requeues})")
