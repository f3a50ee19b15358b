"""The hooks as Slurm runs them: the environment, Slurm and NVML seen from inside it.

`slurmguard doctor` checks with these, not with the admin's shell (docs/install.md
"doctor"). slurmd starts HealthCheckProgram with next to no environment: no PATH of the
admin, no ``SLURM_CONF``, no ``LD_LIBRARY_PATH``. What the entry scripts then give
slurmguard is exactly what they export after sourcing /etc/default/slurmguard. On a site whose
slurm.conf is not at Slurm's compiled-in default, a defaults file without ``SLURM_CONF``
makes every scontrol of the hooks fail ("Could not establish a configuration source"):
the health check can neither drain nor return a node, while doctor, run from a shell
with SLURM_CONF set, saw nothing wrong.
"""

from __future__ import annotations

import json
import re
from typing import Any

from slurmguard.proc import run_command

HOOK_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # what every entry script sets
# The entry scripts' export line (the same in each; tests/test_entry_scripts.py).
_EXPORT_RE = re.compile(r"^export (SLURMGUARD_CONFIG\b(?:[^\n]*\\\n)*[^\n]*)$", re.M)


def exported_names() -> list[str]:
    """The variables the entry scripts export to slurmguard after sourcing the defaults."""
    from slurmguard.install.plan import entry_script

    text = entry_script("slurmguard-healthcheck", "/etc/default/slurmguard").decode()
    m = _EXPORT_RE.search(text)
    if m is None:  # the scripts changed shape: a bug of ours, said plainly
        raise RuntimeError("slurmguard-healthcheck has no 'export SLURMGUARD_CONFIG ...' line")
    return m.group(1).replace("\\\n", " ").split()


def hook_environment(defaults: str, node: str | None = None) -> dict[str, str]:
    """The environment slurmguard gets from an entry script run by slurmd: PATH as the
    scripts set it, ``defaults`` sourced, the scripts' exports; nothing of ours.
    ``node``: SLURMD_NODENAME, which slurmd sets."""
    names = " ".join(exported_names())
    script = (f"PATH={HOOK_PATH}; export PATH; "
              f'[ -r "$1" ] && . "$1" >/dev/null 2>&1; export {names}; exec env -0')
    r = run_command(["/bin/sh", "-c", script, "sh", defaults], timeout=10, check=False,
                    env={"SLURMD_NODENAME": node} if node else {})
    env = dict(item.split("=", 1) for item in r.stdout.split("\0") if "=" in item)
    env.pop("PWD", None)
    env.pop("SHLVL", None)
    env.pop("_", None)
    return env


def scontrol_ping(scontrol: str, env: dict[str, str], timeout: float) -> tuple[bool, str]:
    """``scontrol ping`` in ``env``: (slurmctld answered, the line that says so or why not)."""
    r = run_command([scontrol, "ping"], timeout=timeout, check=False, env=env)
    lines = (r.stdout + "\n" + r.stderr).strip().splitlines()
    last = lines[-1].strip() if lines else f"exited {r.rc}"
    return r.rc == 0 and "is UP" in r.stdout, last


def nvml_as_hooks(exe: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """The gpu-count check run by the hooks' slurmguard in the hooks' environment (so NVML
    is loaded as the hooks load it: checks.gpu.nvml_library of their config, their library
    path); its result (name, health, reason, details), or ``{"health": "error", ...}``."""
    r = run_command([exe, "check", "--only", "gpu-count", "--json"], timeout=timeout,
                    check=False, env=env)
    try:
        record = json.loads(r.stdout)
        return next(x for x in record["results"] if x["name"] == "gpu-count")
    except (ValueError, KeyError, TypeError, StopIteration):
        last = (r.stderr.strip().splitlines() or [r.stdout.strip() or "no output"])[-1]
        return {"name": "gpu-count", "health": "error", "details": {},
                "reason": f"{exe} check --only gpu-count exited {r.rc}: {last}"}
