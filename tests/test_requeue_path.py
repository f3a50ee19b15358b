"""The requeue watcher's path: Slurm's expedited requeue (25.11+) where the running Slurm
has it on and the job asked for it, the watcher's own EligibleTime=now everywhere else."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_requeue_plan import NOW, J, N, nodes

from slurmguard.adapters.slurm.conf import parse_show_config
from slurmguard.adapters.slurm.parse import job_info_from_show, parse_show_job_oneliner
from slurmguard.job.requeue import JobMemory, plan
from slurmguard.job.requeue_path import job_expedited, requeue_path

DATA = Path(__file__).parent / "data" / "slurm"


@pytest.mark.parametrize("version,config,expedites,delay", [
    ((22, 5, 8), "show-config-docker-22.05.8.txt", False, None),
    ((24, 11, 5), "show-config-docker-24.11.5.txt", False, None),
    ((26, 5, 5), "show-config-docker-26.05.5.txt", False, None),  # there, but not enabled
    ((26, 5, 5), "show-config-newer-26.05.5.txt", True, None),  # enable_expedited_requeue
])
def test_path_from_the_real_config(version: tuple[int, int, int], config: str, expedites: bool,
                                   delay: int | None) -> None:
    p = requeue_path(version, parse_show_config((DATA / config).read_text()))
    assert (p.slurm_expedites, p.requeue_delay) == (expedites, delay)
    assert p.name == ("slurm-expedited" if expedites else "watcher")
    assert p.why.startswith(f"Slurm {'.'.join(map(str, version))}")


@pytest.mark.parametrize("conf,expedites,delay", [
    ({"slurmctldparameters": "enable_expedited_requeue,requeue_delay=15"}, True, 15),
    ({"slurmctldparameters": "requeue_delay=30"}, False, 30),
    ({"slurmctldparameters": "(null)"}, False, None),
    ({}, False, None),
])
def test_path_table(conf: dict[str, str], expedites: bool, delay: int | None) -> None:
    p = requeue_path((25, 11, 1), conf)
    assert (p.slurm_expedites, p.requeue_delay) == (expedites, delay)
    # before 25.11 the same settings mean nothing
    assert not requeue_path((25, 5, 3), conf).slurm_expedites


def test_job_flag_from_show_job() -> None:
    line = (DATA / "show-job-running-26.05.5.txt").read_text()
    plain = job_info_from_show(parse_show_job_oneliner(line)[0])
    assert not job_expedited(plain)
    flagged = job_info_from_show(parse_show_job_oneliner(
        line.replace("Requeue=1", "Requeue=1 ExpeditedRequeue=Yes"))[0])
    assert job_expedited(flagged)
    assert job_expedited(J("1", "PENDING", raw={"flags": ["EXPEDITED_REQUEUE"]}))


def _requeued(expedite: bool) -> J:
    return J("7", "PENDING", restart_count=1, eligible_time=NOW + 121,
             raw={"ExpeditedRequeue": "Yes"} if expedite else {})


def _plan(job: J, slurm_expedites: bool):
    mem = {"7": JobMemory(nodes="n2", run_of=0, restarts=0, handled=0)}
    failed = nodes(n2=N("n2", "down"))
    (a,), _ = plan([job], failed, mem, NOW, 3, slurm_expedites)
    return a


def test_slurm_expedites_a_flagged_job_the_watcher_still_excludes() -> None:
    a = _plan(_requeued(True), True)
    assert (a.kind, a.path, a.eligible_now, a.exclude) == ("expedite", "slurm-expedited", False,
                                                           "n2")


@pytest.mark.parametrize("flagged,slurm_on", [(False, True), (True, False), (False, False)])
def test_today_path_kept(flagged: bool, slurm_on: bool) -> None:
    a = _plan(_requeued(flagged), slurm_on)
    assert (a.kind, a.path, a.eligible_now, a.exclude) == ("expedite", "watcher", True, "n2")


@given(flagged=st.booleans(), slurm_on=st.booleans(), held=st.booleans())
def test_eligibility_left_to_slurm_only_when_both(flagged: bool, slurm_on: bool,
                                                  held: bool) -> None:
    job = J("7", "PENDING", restart_count=1, eligible_time=NOW + 121,
            priority=0 if held else 100,
            reason="launch_failed_requeued_held" if held else "",
            raw={"ExpeditedRequeue": "Yes"} if flagged else {})
    a = _plan(job, slurm_on)
    by_slurm = flagged and slurm_on
    assert a.path == ("slurm-expedited" if by_slurm else "watcher")
    assert a.eligible_now is (held or not by_slurm)  # a held job is released and made eligible
    assert a.exclude == "n2" and a.release is held


def test_real_expedited_requeue_of_2605_gets_the_exclusion() -> None:
    """What 26.05.5 really showed after slurmguard's epilog failed under a job submitted with
    --requeue=expedite: JobState=EXPEDITING, eligible at once, no ExcNodeList. The watcher
    leaves eligibility to Slurm and excludes the drained node."""
    text = (DATA / "show-job-expedite-requeued-26.05.5.txt").read_text()
    job = job_info_from_show(parse_show_job_oneliner(text)[0])
    assert (job.state, job.restart_count, job.exc_nodes) == ("EXPEDITING", 1, "")
    assert job_expedited(job)
    mem = {job.job_id: JobMemory(nodes="n1", run_of=0, restarts=0, handled=0)}
    drained = nodes(n1=N("n1", "idle", frozenset({"DRAIN"}), "slurmguard: gpu-xid: GPU 2 ..."))
    now = (job.eligible_time or 0) + 5
    (a,), _ = plan([job], drained, mem, now, 3, True)
    assert (a.kind, a.path, a.exclude, a.eligible_now, a.release) == (
        "expedite", "slurm-expedited", "n1", False, False)
    running = (DATA / "show-job-expedite-running-26.05.5.txt").read_text()
    assert job_expedited(job_info_from_show(parse_show_job_oneliner(running)[0]))
