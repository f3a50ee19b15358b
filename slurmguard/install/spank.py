"""Build and install the SPANK plugin during `setup node`, when a C compiler and Slurm's
spank.h are on this host; otherwise say exactly what is missing and how to get it.

The build is deterministic (no debug info, so no build paths in the object): the same source
and compiler give the same bytes, and a second `setup` sees the installed plugin unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from slurmguard.install.steps import FileStep

PLUGIN = "slurmguard_spank.so"
INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


def find_toolchain() -> tuple[str | None, str | None]:
    """(compiler, include dir holding slurm/spank.h), either None when missing."""
    cc = shutil.which("gcc") or shutil.which("cc")
    inc = next((d for d in INCLUDE_DIRS if os.path.exists(f"{d}/slurm/spank.h")), None)
    return cc, inc


def plugin_dir(conf: dict[str, str], prefix: str) -> str:
    """Where slurmd and srun look for plugins: PluginDir, else the first existing default."""
    from slurmguard.install.paths import PLUGIN_DIRS, under

    value = conf.get("plugindir", "").split(":")[0]
    if not value:
        value = next((d for d in PLUGIN_DIRS if os.path.isdir(d)), PLUGIN_DIRS[0])
    return under(prefix, value)


def compile_c(cc: str, src: str, flags: list[str], what: str) -> bytes:
    """Compile one packaged C file in a temp dir; returns the output's bytes."""
    from slurmguard.errors import SlurmguardError
    from slurmguard.proc import run_command

    with tempfile.TemporaryDirectory(prefix="sg-build-") as tmp:
        out = os.path.join(tmp, "out")
        res = run_command([cc, "-O2", "-std=gnu11", "-Wall", *flags, "-o", out, src],
                          timeout=120, check=False)
        if res.rc != 0:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise SlurmguardError(f"setup: building {what} failed ({cc} exited {res.rc}: {last})")
        with open(out, "rb") as fh:
            return fh.read()


def build_plugin(cc: str, include: str) -> bytes:
    """Compile the packaged slurmguard_spank.c; returns the shared object's bytes."""
    from slurmguard.install.paths import data_dir

    return compile_c(cc, str(data_dir() / "spank" / "slurmguard_spank.c"),
                     ["-fPIC", "-shared", f"-I{include}"], "the SPANK plugin")


def agent_client() -> bytes | None:
    """The compiled hook client of the node agent (docs/agent.md); None without a compiler.
    Both clients include prolog/sg_client_common.h, found beside their source (package data)."""
    from slurmguard.install.paths import data_dir

    cc, _ = find_toolchain()
    src = data_dir() / "hooks" / "prolog" / "sg_agent_client.c"
    if cc is None or not src.exists():
        return None
    return compile_c(cc, str(src), [], "the agent client")


def gate_client() -> bytes | None:
    """The compiled PrologSlurmctld client (docs/serve.md "Gate fast path"); None without
    a compiler."""
    from slurmguard.install.paths import data_dir

    cc, _ = find_toolchain()
    src = data_dir() / "hooks" / "prolog" / "sg_gate_client.c"
    if cc is None or not src.exists():
        return None
    return compile_c(cc, str(src), [], "the gate client")


def add_steps(plan: Any, conf: dict[str, str], conf_path: str) -> None:
    """The plugin file step and the plugstack.conf line, or a note saying how to get there."""
    from slurmguard.adapters.slurm.conf import plugstack_path

    target = f"{plugin_dir(conf, plan.prefix)}/{PLUGIN}"
    plan.plugstack_file = plugstack_path(conf, conf_path)
    plan.plugstack_lines = [f"optional {target}"]
    cc, include = find_toolchain()
    if (cc is None or include is None) and not os.path.isfile(target):
        # Slurm loads every plugstack line in every sbatch/srun and slurmd: a line naming a
        # file that is not there prints two dlopen errors per command on the whole cluster.
        plan.plugstack_lines = [f"# optional {target}   (not built here: see below; "
                                "uncomment once setup node has built it)"]
    if cc is None or include is None:
        missing = []
        if cc is None:
            missing.append("a C compiler (apt-get install gcc)")
        if include is None:
            missing.append("Slurm's spank.h (apt-get install libslurm-dev)")
        plan.notes.append("SPANK plugin not built: missing " + " and ".join(missing)
                          + "; install them and run setup node again (the --guard-* options of "
                          "sbatch/srun need it; node checks do not)")
        return
    plan.steps.append(FileStep(target, build_plugin(cc, include), 0o755, what="SPANK plugin"))
