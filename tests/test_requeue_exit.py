"""The exit mapping with the real slurmctld: with `RequeueExit=75` (docs/requeue.md) an
infrastructure fault requeues the job and the next run resumes; an application error does not
requeue; past --max-requeues the job stops."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.helpers import REPO
from support.wait import wait_for

pytestmark = pytest.mark.slurm

TRAIN = REPO / "tests" / "train_job.py"


def _submit(c: Any, tmp: Path, fault: str, max_requeues: int = 2) -> tuple[str, Path]:
    ck = tmp / f"ckpt{fault}"
    ck.mkdir()
    train = (f"{sys.executable} {TRAIN} --steps 12 --every 3 --sleep 0.05 --ckpt-dir {ck} "
             f"--log {ck}/log --final {ck}/final.json {fault} 7")
    script = (f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --checkpoint-dir {ck} "
              f"--max-requeues {max_requeues} -- {train}\n")
    return c.sbatch(script, "-N1", "--requeue"), ck


def test_requeue_exit_in_real_slurm(slurm_cluster_factory: Any, tmp_path: Path) -> None:
    c = slurm_cluster_factory(nodes=2, extra_conf=["RequeueExit=75"])
    c.env["PYTHONPATH"] = str(REPO)
    infra, ck_infra = _submit(c, tmp_path, "--bus-at")
    app, ck_app = _submit(c, tmp_path, "--fail-at")
    capped, ck_cap = _submit(c, tmp_path, "--nccl-at", max_requeues=0)

    # SIGBUS -> exit 75 -> Slurm requeues it (and would wait ~121 s: the watcher's job).
    wait_for(lambda: (x := c.job(infra))["Restarts"] == "1" and x["JobState"] == "PENDING", 60,
             interval=0.3, what=f"job {infra} requeued and pending")
    eligible = c.cli().job(infra).eligible_time
    assert eligible is not None and eligible - time.time() > 60  # Slurm's ~121 s wait
    # In the next second, as the watcher does: a launch in the second the previous run's
    # credential was revoked is killed by slurmd ("Job credential revoked"; seen under load).
    time.sleep(1.02 - time.time() % 1)
    c.run("scontrol", "update", f"jobid={infra}", "EligibleTime=now")
    done = c.wait_job(infra, ["COMPLETED"], timeout=60)
    assert done["Restarts"] == "1"
    runs = [json.loads(x) for x in (ck_infra / ".slurmguard" / "runs.jsonl").read_text().splitlines()]
    assert [(r["restart"], r["verdict"], r["exit_code"]) for r in runs] == [(0, "infra", 75), (1, "success", 0)]
    assert runs[1]["resumed_from"]["step"] == 6
    assert json.loads((ck_infra / "final.json").read_text())["step"] == 12

    # An application error ends the job: FAILED with the program's code, never requeued.
    done = c.wait_job(app, ["FAILED"], timeout=60)
    assert done["Restarts"] == "0" and done["ExitCode"] == "1:0"

    # An infrastructure fault past the cap: exit 7, not requeued.
    done = c.wait_job(capped, ["FAILED"], timeout=60)
    assert done["Restarts"] == "0" and done["ExitCode"] == "7:0"
    out = (c.root / "log" / f"job-{capped}.out").read_text()
    assert "NCCL error" in out and "not requeueing again" in out


def test_failure_on_a_node_we_drained_is_infra(slurm_cluster_factory: Any, tmp_path: Path) -> None:
    c = slurm_cluster_factory(nodes=2, extra_conf=["RequeueExit=75"])
    c.env["PYTHONPATH"] = str(REPO)
    ck = tmp_path / "ck"
    ck.mkdir()
    go = tmp_path / "go"
    script = (f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --checkpoint-dir {ck} -- "
              f"sh -c 'while [ ! -e {go} ]; do sleep 0.1; done; exit 1'\n")
    jid = c.sbatch(script, "-N1", "--requeue")
    node = c.wait_job(jid, ["RUNNING"], timeout=60)["NodeList"]
    assert c.cli().drain(node, "slurmguard: gpu-xid: Xid 79 on GPU 0")
    go.touch()  # the program now fails, on a node slurmguard drained under it
    wait_for(lambda: c.job(jid)["Restarts"] == "1", 60, interval=0.3, what=f"job {jid} requeued")
    run = json.loads((ck / ".slurmguard" / "runs.jsonl").read_text().splitlines()[0])
    assert (run["verdict"], run["exit_code"]) == ("infra", 75)
    assert "this node was drained during the run: slurmguard: gpu-xid: Xid 79" in run["reason"]
