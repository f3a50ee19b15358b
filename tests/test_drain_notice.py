"""A job that loses a node loses no work: drain a node under a running 2-node training job on
the real 3-node cluster; the job's wrapper learns it within seconds (from serve, or from Slurm
when serve is down), the job checkpoints at once, the run ends and is requeued without that
node, and the next run resumes from that checkpoint and ends in the state of an
uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.drain_notice import Job, Setup, reference_state, sg
from support.requeue_support import log_lines

pytestmark = pytest.mark.slurm
STEPS, EVERY = 60, 20


@pytest.mark.parametrize("actor,reason", [
    ("hook", "slurmguard: gpu-xid: Xid 79 on GPU 3"),  # as a health check drains its node
    ("admin", "maintenance: fan"),
    ("reconciler", "slurmguard: k8s: Node NotReady"),
])
def test_drain_notice_checkpoints_now_and_moves_on(slurm_cluster_factory: Any, tmp_path: Path,
                                                   actor: str, reason: str) -> None:
    s = Setup(slurm_cluster_factory, tmp_path)
    try:
        # No periodic save after step EVERY in this run: the checkpoint-now is the newest
        # save when the kill lands, however late (at load 1,000 the program, saving on the
        # notice and going on, passed step 40 and saved it before SIGTERM reached it).
        job = Job(s, "job", steps=STEPS, every=EVERY, train=f"--notice-poll --last-save {EVERY}")
        job.submit()
        job.wait_steps(EVERY + 4)  # past the first periodic checkpoint
        victim = job.victim()
        drained_at = job.drain(victim, reason)
        job.finish()
    finally:
        events = s.stop()
    runs = job.runs()
    assert [r["verdict"] for r in runs] == ["infra", "success"], job.output()
    first, second = runs
    # Told within seconds, through serve; one notice for the node (deduplicated).
    [told] = job.told_lines()
    assert told[0] == "poll" and told[2] - drained_at < 5
    [notice] = first["notices"]
    assert notice["node"] == victim and notice["via"] == "serve" and reason in notice["reason"]
    # The checkpoint-now ended the run, and the next run resumed from it without the node.
    end = first["ended_by_notice"]
    assert end["how"] == "checkpoint" and end["nodes"] == [victim]
    assert first["checkpoint_now"][0]["step"] == end["resume_step"] == second["resumed_from"]["step"]
    # Saved at the step the notice was seen, whatever its number.
    assert end["resume_step"] == told[1]
    assert victim not in {n for _, r, n in log_lines(job.log) if r == 1}
    assert any(e.get("event") == "requeue-expedite" for e in events), events
    # Work lost: only the steps made while the save was being checked (the wrapper's tick).
    # The wrapper counts a step every rank reported; rank 0 logs it after the barrier, so a
    # step another rank finished just before the run ended can be missing from rank 0's log
    # (CI saw 0 logged against 1 reported): the log's count is at most the wrapper's.
    assert job.redone() <= first["steps_to_redo"] <= 4
    assert second["recovery"]["steps_lost_at_least"] == first["steps_to_redo"]
    assert json.loads(job.final.read_text()) == reference_state(tmp_path, STEPS, EVERY)
    assert "drain notice: " + victim in job.output()
    # The job's figures in goodput: the notice, its latency, the save, the steps redone.
    r = sg(s, "goodput", "--job", job.jid, "--json")
    assert r.returncode == 0, r.stderr
    infra = json.loads(r.stdout)["infra"]
    assert infra["notices"] == 1 and infra["checkpoint_now"] == 1
    # goodput counts what the wrapper recorded (its frontier), not rank 0's log (above)
    assert infra["runs_ended_by_notice"] == 1 and infra["steps_redone"] == first["steps_to_redo"]
    assert 0 <= infra["notice_latency_max_s"] < 5
    r = sg(s, "goodput", "--job", job.jid)
    assert (f"infrastructure: {first['steps_to_redo']} step(s) redone; 1 drain notice(s), "
            "arrived in") in r.stdout


def test_serve_down_notice_arrives_through_slurm(slurm_cluster_factory: Any,
                                                 tmp_path: Path) -> None:
    s = Setup(slurm_cluster_factory, tmp_path, serve=False)
    try:
        job = Job(s, "job", steps=STEPS, every=EVERY, wrapper="--notice-signal USR1",
                  train="")  # the program checkpoints on SIGUSR1 and exits 75 itself
        job.submit()
        job.wait_steps(EVERY + 4)
        drained_at = job.drain(job.victim(), "slurmguard: gpu-xid: Xid 48")
        job.finish()
    finally:
        s.stop()
    first, second = job.runs()
    [notice] = first["notices"]
    assert notice["via"] == "slurm"
    # The program saved on SIGUSR1 and exited 75: the notice ended the run, whether the
    # program exited before the wrapper's next look (an idle host) or after it (a loaded one).
    end = first["ended_by_notice"]
    assert first["verdict"] == "infra" and end["how"] == "checkpoint", job.output()
    assert first["checkpoint_now"][0]["step"] == end["resume_step"] == second["resumed_from"]["step"]
    out = job.output()
    assert "drain state now from slurm (serve: serve unreachable" in out
    told = job.told_lines()[0]
    assert told[0] == "signal" and told[2] - drained_at < 3.0 + 5  # slurm_interval = 3
    assert job.redone() == 0  # saved and stopped in the same step


def test_no_checkpoint_to_resume_from_is_never_stopped(slurm_cluster_factory: Any,
                                                       tmp_path: Path) -> None:
    s = Setup(slurm_cluster_factory, tmp_path)
    try:
        # Saves only at step 1000: a drain finds nothing to resume from; the run goes on.
        job = Job(s, "job", steps=30, every=1000, train="", wrapper="--notice-timeout 1")
        job.submit()
        job.wait_steps(5)
        job.drain(job.victim(), "maintenance")
        job.finish()
    finally:
        s.stop()
    [run] = job.runs()
    assert run["verdict"] == "success" and run["ended_by_notice"] is None
    assert len(run["notices"]) == 1
    assert "no complete checkpoint to resume from: not stopping the run" in job.output()
    assert job.redone() == 0


def test_no_checkpoint_in_time_requeues_anyway_and_says_so(slurm_cluster_factory: Any,
                                                           tmp_path: Path) -> None:
    s = Setup(slurm_cluster_factory, tmp_path)
    try:
        # The program ignores the notice, and this run makes no save after step EVERY: no
        # checkpoint comes within the 1 s timeout however late the notice arrives (a periodic
        # save at step 2 x EVERY, ~4 s after the drain, was within it when a loaded host told
        # the notice late, and the run ended on that save, rightly).
        job = Job(s, "job", steps=STEPS, every=EVERY, train=f"--last-save {EVERY}",
                  wrapper="--notice-timeout 1")
        job.submit()
        job.wait_steps(EVERY + 4)
        job.drain(job.victim(), "slurmguard: gpu-ecc: uncorrectable")
        job.finish()
    finally:
        s.stop()
    first, second = job.runs()
    end = first["ended_by_notice"]
    assert end["how"] == "timeout" and end["resume_step"] == EVERY == second["resumed_from"]["step"]
    assert first["checkpoint_now"] == [] and first["verdict"] == "infra"
    assert "no checkpoint within 1s of the drain notice: ending the run at step" in job.output()
    # The lost work is counted to the run's real end: the frontier the wrapper decided on,
    # plus the steps the program (ignoring the notice) reported before the kill landed: a
    # step or two on a loaded CI box (13 steps to redo against a decision at 12 past the
    # checkpoint), four at load 1,000 beside the scale run (44 against 40). How long the
    # kill takes to land is the host's, so the bound is the run's: the wrapper did end it.
    assert first["steps_to_redo"] == first["frontier_step"] - EVERY > 0
    assert end["frontier_step"] <= first["frontier_step"] < STEPS
    # The program ignores the notice, so it keeps stepping (0.25 s a step) until the wrapper
    # has ended the run: rank 0's log can hold a step or two past the frontier the wrapper
    # ended on (CI saw 15 logged against 14), or lack the last one another rank reported.
    assert first["steps_to_redo"] - 1 <= job.redone() <= first["steps_to_redo"] + 2
