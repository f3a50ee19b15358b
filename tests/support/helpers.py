"""Shared test helpers: how to run this checkout's slurmguard, and CI's no-silent-skip rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"


def sg_env(**extra: str) -> dict[str, str]:
    """Environment that makes `python -m slurmguard` use this checkout (not an installed copy)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def sg_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurmguard", *args]


def run_sg(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
           input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run this checkout's `slurmguard ARGS` as a real subprocess."""
    return subprocess.run(sg_argv(*args), env=env or sg_env(), capture_output=True, text=True,
                          timeout=timeout, input=input)


def require(condition: bool, why: str) -> None:
    """Skip when a real component is missing locally; under CI=true, fail instead of skipping."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required component missing under CI=true: {why}")
    pytest.skip(why)


def standin_slurm(tmp_path: Path, node: str) -> str:
    """A Slurm that takes every drain, for hook tests that need no slurmctld: ``sinfo`` prints
    ``node`` idle as real ``sinfo -h -N -n NODE -O`` does (the hooks' one-node read), and
    ``scontrol`` appends its arguments to ``tmp_path/scontrol.log`` and succeeds. Returns the
    config's ``[slurm]`` lines. (The hooks exit 1 only when their drain is made, docs/hooks.md.)"""
    sinfo, scontrol = tmp_path / "sinfo", tmp_path / "scontrol"
    sinfo.write_text(f"#!/bin/sh\necho '{node}|idle|Unknown|Unknown|(null)|gpu|(null)|(null)|none'\n")
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >>'{tmp_path / 'scontrol.log'}'\n")
    for f in (sinfo, scontrol):
        f.chmod(0o755)
    return f'scontrol = "{scontrol}"\nsinfo = "{sinfo}"'
