"""A Slurm shim for observe-mode tests: scontrol, sinfo, squeue, sacct and sbatch wrappers
that log every call and forward reads to the real tools, and refuse (exit 1, not forwarded)
every call that would change Slurm's state, logging it in ``changes.log``.

The shim's rule of what changes state is its own (a list of scontrol verbs, and sbatch),
written here apart from slurmguard's (slurmguard/observe.py), so a test of the choke point
does not take the choke point's word for it. Point a config's ``[slurm]`` tool paths at
:attr:`SlurmShim.tools`.
"""

from __future__ import annotations

from pathlib import Path

# scontrol's first words that change something (scontrol(1)); anything else is a read.
CHANGING = ("update", "reboot", "requeue", "requeuehold", "release", "hold", "uhold", "create",
            "delete", "suspend", "resume", "cancel_reboot", "reconfigure", "shutdown",
            "takeover", "notify", "top", "token")
TOOLS = ("scontrol", "sinfo", "squeue", "sacct", "sbatch")


class SlurmShim:
    def __init__(self, d: Path, real_bin: str = "/usr/bin") -> None:
        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        self.calls_log, self.changes_log = d / "calls.log", d / "changes.log"
        self.tools: dict[str, str] = {}
        verbs = "|".join(CHANGING)
        for tool in TOOLS:
            path = d / tool
            change = ('change=1\n' if tool == "sbatch" else
                      f'case "$1" in {verbs}) change=1;; esac\n' if tool == "scontrol" else "")
            path.write_text(
                "#!/bin/sh\n"
                f'printf "%s\\n" "{tool} $*" >> {self.calls_log}\n'
                "change=0\n" + change +
                'if [ "$change" = 1 ]; then\n'
                f'  printf "%s\\n" "{tool} $*" >> {self.changes_log}\n'
                '  echo "slurm shim: refused a state change in observe mode" >&2\n'
                "  exit 1\n"
                "fi\n"
                f'exec {real_bin}/{tool} "$@"\n')
            path.chmod(0o755)
            self.tools[tool] = str(path)

    def config(self) -> str:
        """The ``[slurm]`` section naming the shim's tools."""
        return "[slurm]\n" + "".join(f'{t} = "{p}"\n' for t, p in self.tools.items())

    def calls(self) -> list[str]:
        return self.calls_log.read_text().splitlines() if self.calls_log.exists() else []

    def changes(self) -> list[str]:
        return self.changes_log.read_text().splitlines() if self.changes_log.exists() else []
