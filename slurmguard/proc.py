"""The one subprocess helper: argv lists only, a timeout, and a process-group kill.

Every external command of slurmguard goes through :func:`run_command`. The child runs in a
new session so that on timeout the whole group (the tool and anything it spawned) is killed;
a child stuck in uninterruptible sleep (a dead NFS mount) is abandoned after the kill rather
than waited for, so the caller still finishes inside its budget.
"""

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from slurmguard.errors import CommandError

# After killing a timed-out group, wait at most this long for it to be reaped.
_REAP_GRACE = 0.5


class CommandResult(NamedTuple):
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    duration: float


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    cwd: str | None = None,
) -> CommandResult:
    """Run ``argv`` (a list, never a shell string) with a timeout.

    Raises :class:`CommandError` when the command cannot start, times out (after killing its
    process group), or, with ``check=True``, exits non-zero.

    Example::

        run_command(["/usr/bin/scontrol", "show", "node", "-o", "n1"], timeout=10)
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("run_command takes an argv list, not a shell string")
    argv = [str(a) for a in argv]
    if timeout <= 0:
        raise CommandError(argv, None, timed_out=True, timeout=timeout)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise CommandError(argv, None, str(exc)) from None
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise CommandError(argv, None, timed_out=True, timeout=timeout) from None
    duration = time.monotonic() - start
    result = CommandResult(tuple(argv), proc.returncode, out, err, duration)
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, err or out)
    return result


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=_REAP_GRACE)
    except subprocess.TimeoutExpired:
        # Stuck in D state: leave it; the kernel reaps it when the I/O completes.
        pass
    for stream in (proc.stdout, proc.stderr, proc.stdin):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
