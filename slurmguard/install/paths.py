"""Where setup finds its package data and puts things (shared by plan and spank)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm",
               "/usr/lib64/slurm", "/usr/lib/slurm", "/usr/local/lib/slurm")


def data_dir() -> Path:
    """The package data (entry scripts, units, SPANK source) of this installed slurmguard."""
    return Path(str(resources.files("slurmguard") / "data"))


def under(prefix: str, path: str) -> str:
    """``path`` below ``prefix`` (``/`` leaves it as is)."""
    if prefix in ("", "/"):
        return path
    return os.path.join(os.path.abspath(prefix), path.lstrip("/"))
