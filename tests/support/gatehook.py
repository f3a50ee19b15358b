"""A test cluster with `slurmguard gate` as its PrologSlurmctld, and the requeue watcher run
by hand: what the gate's real-cluster tests share."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from support import slurmcluster
from support.helpers import sg_argv, sg_env


def gate_cluster(factory: Callable[..., Any], tmp_path: Path, cfg: Path, nodes: int,
                 **cluster: Any) -> Any:
    """A ``nodes``-node cluster whose PrologSlurmctld runs `slurmguard gate` with ``cfg``
    (``cluster``: more of the factory's arguments, a ``prolog`` say).

    The gate's scontrol needs this cluster's SLURM_CONF, known only once it runs: the hook
    reads it from a file written after the start."""
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    hook = slurmcluster.write_shell_hook(tmp_path / "gate.sh", f"""
. {tmp_path}/gate.env
export SLURMGUARD_CONFIG={shlex.quote(str(cfg))} PYTHONPATH={shlex.quote(env["PYTHONPATH"])}
exec {" ".join(shlex.quote(a) for a in sg_argv("gate"))}
""")
    (tmp_path / "gate.env").write_text("")
    c = factory(nodes=nodes, prolog_slurmctld=hook, **cluster)
    (tmp_path / "gate.env").write_text(f"export SLURM_CONF={shlex.quote(c.env['SLURM_CONF'])}\n")
    return c


def watcher_expedited(env: Mapping[str, str], events: list[dict[str, Any]]) -> Callable[[], bool]:
    """A wait_for condition: one `requeue watch --once --json` pass, its events appended to
    ``events``; true once a job was expedited."""
    def expedited() -> bool:
        r = subprocess.run(sg_argv("requeue", "watch", "--once", "--json"), env=dict(env),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        events.extend(json.loads(x) for x in r.stdout.splitlines())
        return any(e["event"] == "requeue-expedite" for e in events)

    return expedited


def gate_heavy_imports(cfg: Path, job_env: Mapping[str, str]) -> tuple[int, list[str]]:
    """Run the gate's answer (``run_gate``) for ``job_env`` in a fresh interpreter with
    ``cfg``; return its exit code and the heavy modules it imported (none belong on the
    gate's SQLite path: it answers within PrologSlurmctld's time)."""
    code = ("import sys\n"
            "import slurmguard.gate.answer as g\n"
            "from slurmguard import config\n"
            f"o = g.run_gate(config.load(), {dict(job_env)!r})\n"
            "bad = [m for m in ('sqlalchemy', 'alembic', 'psycopg', 'click') if m in sys.modules]\n"
            "print(o.code, ','.join(bad))")
    p = subprocess.run([sg_argv()[0], "-c", code], env=sg_env(SLURMGUARD_CONFIG=str(cfg)),
                       capture_output=True, text=True, timeout=60)
    out = p.stdout.strip().split(" ")
    assert p.returncode == 0 and len(out) in (1, 2), (p.stdout, p.stderr)
    return int(out[0]), [m for m in (out[1] if len(out) == 2 else "").split(",") if m]
