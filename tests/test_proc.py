"""run_command: argv only, timeouts that kill the whole process group, one error type."""

from __future__ import annotations

import os
import time

import pytest
from support.wait import wait_for

from slurmguard.errors import CommandError
from slurmguard.proc import run_command


def test_runs_and_captures():
    r = run_command(["/bin/echo", "a b"], timeout=5)
    assert r.rc == 0 and r.stdout == "a b\n"


def test_refuses_shell_strings():
    with pytest.raises(TypeError):
        run_command("echo hi", timeout=5)  # type: ignore[arg-type]


def test_nonzero_exit_carries_argv_rc_stderr():
    with pytest.raises(CommandError) as ei:
        run_command(["/bin/sh", "-c", "echo oops >&2; exit 3"], timeout=5)
    e = ei.value
    assert e.rc == 3 and "oops" in e.stderr and e.argv[0] == "/bin/sh"
    assert str(e) == "/bin/sh: exited 3: oops"


def test_missing_tool():
    with pytest.raises(CommandError, match="could not start"):
        run_command(["/nonexistent/tool"], timeout=5)


def test_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    with pytest.raises(CommandError) as ei:
        run_command(["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=0.5)
    assert ei.value.timed_out and time.monotonic() - t0 < 2.0
    gc = int(pidfile.read_text())

    def gone() -> bool:
        try:
            os.kill(gc, 0)
        except ProcessLookupError:
            return True
        # a zombie reparented to init still answers kill(0): check its state
        try:
            with open(f"/proc/{gc}/stat") as fh:
                return fh.read().split(")")[-1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(gone, 2, interval=0.05, what="the grandchild to be gone after the timeout")


def test_check_false_returns_rc():
    r = run_command(["/bin/sh", "-c", "exit 4"], timeout=5, check=False)
    assert r.rc == 4
