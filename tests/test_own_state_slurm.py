"""A health check's own node state, on a real Slurm cluster (slurmguard/node/ownstate.py,
docs/hooks.md "The node's own state").

Two nodes, a real `slurmguard serve` whose view of Slurm is read once at its start and then
every 30 s (`serve.slurm_view_ttl`), the real `slurmguard healthcheck` for each node:

- serve up: six health checks make no single-node read of Slurm (sdiag counts no
  REQUEST_NODE_INFO_SINGLE); each takes its node's state from serve's view.
- A mount goes missing on n1: its health check drains it (one look at the node, on the drain
  path). The mount is back: the next health check clears that drain at once, although serve's
  view, read before the drain, does not show it yet: the node's own record is newer.
- A drain of ours made past the node (an `scontrol update` with our reason) shows only when
  serve's view does: until then the health check leaves it (the price of not reading Slurm,
  one view period at most).
- Every replica down: the health checks take what the node saw last (no single-node read);
  with `hooks.state_max_age = 0` they read Slurm again.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_sg, sg_env
from support.sgserve import Serve, new_port, new_store, write_config

pytestmark = pytest.mark.slurm
OURS = "slurmguard: fs-mount: /shared missing (set by hand)"


def rpcs(c: Any) -> dict[str, int]:
    part = c.run("sdiag").stdout.split("by message type")[1].split("by user")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)\s*\(\s*\d+\)\s*count:(\d+)", part)}


def mount_table(path: Path, shared: Path, mounted: bool) -> None:
    """This host's mount table, with ``shared`` mounted (a copy of the root's line) or not."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    if mounted:
        root = next(ln.split() for ln in lines if ln.split()[4] == "/")
        lines.append(" ".join([str(10**6), *root[1:4], str(shared), *root[5:]]))
    path.write_text("\n".join(lines) + "\n")


def test_health_checks_take_their_state_from_serve_and_what_they_saw_last(
        slurm_cluster_factory: Any, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    mounts = tmp_path / "mountinfo"
    mount_table(mounts, shared, True)
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port, report_timeout=5.0,
                       extra=f"""
log_file = "{tmp_path}/hooks.log"
healthcheck = ["fs-mount"]
[checks.fs]
mounts = ["/", "{shared}"]
mountinfo = "{mounts}"
""", serve_extra="slurm_view_ttl = 30.0")
    c = slurm_cluster_factory(nodes=2)
    conf = c.env["SLURM_CONF"]
    serve = Serve(cfg, port, env={"SLURM_CONF": conf}).start()

    def healthcheck(node: str, config: Path = cfg) -> dict[str, Any]:
        p = run_sg("healthcheck", "--json", env=sg_env(SLURMGUARD_CONFIG=str(config),
                                                      SLURM_CONF=conf, SLURMD_NODENAME=node))
        assert p.stdout, p.stderr
        return json.loads(p.stdout)

    try:
        c.run("sdiag", "--reset")
        for node in ("n1", "n2", "n1", "n2", "n1", "n2"):
            assert healthcheck(node)["applied"] == "none"
        assert rpcs(c).get("REQUEST_NODE_INFO_SINGLE", 0) == 0, rpcs(c)

        # The node's own drain, then its own return before serve's view shows either.
        mount_table(mounts, shared, False)
        assert healthcheck("n1")["applied"] == "drained"
        assert c.node("n1").drained
        mount_table(mounts, shared, True)
        assert healthcheck("n1")["applied"] == "undrained"
        assert not c.node("n1").drained

        # A drain of ours made past the node: serve's view does not show it yet.
        c.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={OURS}")
        assert healthcheck("n2")["applied"] == "none"
        assert c.node("n2").drained

        serve.stop()  # every replica down
        c.run("sdiag", "--reset")
        for node in ("n1", "n2", "n1"):
            assert healthcheck(node)["applied"] == "none"
        assert rpcs(c).get("REQUEST_NODE_INFO_SINGLE", 0) == 0, rpcs(c)
        # Too old to stand in (max age 0): Slurm is read, and n2's drain of ours returns.
        fresh = tmp_path / "fresh.toml"
        fresh.write_text(cfg.read_text().replace("[hooks]", "[hooks]\nstate_max_age = 0.0", 1))
        c.run("sdiag", "--reset")
        assert healthcheck("n2", fresh)["applied"] == "undrained"
        assert rpcs(c).get("REQUEST_NODE_INFO_SINGLE", 0) >= 1, rpcs(c)
        assert not c.node("n2").drained
    finally:
        serve.stop()
        shutil.rmtree(tmp_path / "state", ignore_errors=True)
