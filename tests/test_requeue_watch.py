"""`slurmguard requeue watch` against the real cluster: a Prolog that drains its node and fails
leaves the job "launch failed requeued held" (without nohold_on_prolog_fail); the watcher
releases it, excludes the node and makes it eligible at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.gatehook import watcher_expedited
from support.helpers import sg_env
from support.slurmcluster import write_shell_hook
from support.wait import wait_for

pytestmark = pytest.mark.slurm


def test_launch_failure_hold_on_our_drain_is_released(slurm_cluster_factory: Any,
                                                      tmp_path: Path) -> None:
    conf_env = tmp_path / "conf.env"  # written once the cluster (and its conf path) exists
    prolog = write_shell_hook(tmp_path / "prolog.sh", f"""
if [ "$SLURMD_NODENAME" = n1 ]; then
  # long enough for a watcher poll (a Python start, slow on a loaded CI box) to see the job
  # on n1 before the prolog fails; with 2 s a loaded machine saw only "requeue-unknown"
  sleep 8
  . {conf_env}
  /usr/bin/scontrol update nodename=n1 state=drain reason="slurmguard: test-check: bad GPU"
  exit 1
fi
exit 0
""")
    # The later SchedulerParameters line wins: no nohold_on_prolog_fail, so Slurm holds the job.
    c = slurm_cluster_factory(nodes=3, prolog=prolog, extra_conf=["SchedulerParameters=defer"])
    conf_env.write_text(f"export SLURM_CONF={c.conf_path}\n")
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[requeue]\nstate_file = "{tmp_path / "w.json"}"\n'
                   f'[store]\npath = "{tmp_path / "none.db"}"\n')
    env = sg_env(SLURM_CONF=str(c.conf_path), SLURMGUARD_CONFIG=str(cfg))
    # lands on n1 first; the user's own exclusion (n3) must survive the watcher's, which it
    # reads from the job's full record (squeue -O, the watcher's queue read, has no such field)
    jid = c.sbatch("#!/bin/sh\necho ran on $SLURMD_NODENAME\n", "-N1", "--requeue", "-x", "n3")
    events: list[dict[str, Any]] = []
    wait_for(watcher_expedited(env, events), 90, interval=0.3, what="the watcher to expedite the requeue")
    exp = [e for e in events if e["event"] == "requeue-expedite"]
    assert exp, (events, c.job(jid))
    # released: the watcher saw the launch-failure hold (it acts in the same poll, so the
    # held state is rarely visible from outside).
    assert exp[0]["failed_nodes"] == ["n1"] and exp[0]["released"] is True
    done = c.wait_job(jid, ["COMPLETED"], timeout=60)
    assert done["ExcNodeList"] == "n[1,3]" and done["NodeList"] == "n2"
    assert "ran on n2" in (c.root / "log" / f"job-{jid}.out").read_text()
    node = c.node("n1")
    assert node.drained and node.reason == "slurmguard: test-check: bad GPU"  # left as it was
