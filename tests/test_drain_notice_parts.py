"""The parts of drain notices that need no cluster: serve's answer as the wrapper reads it
(hostile or malformed answers refused in one line), the suspect report's checks, the suspect
rule, the progress API's should_checkpoint(), and the watch's "unknown is never clean"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import REPO

from slurmguard.errors import InputError
from slurmguard.job.notice import AskError, Drain, NoticeWatch, parse_serve_answer
from slurmguard.policy.suspect import suspects
from slurmguard.serve.drains import parse_query, parse_suspect
from slurmguard.store.api import EventRow

NOW = 1_800_000_000.0
ASKED = {"n1", "n2"}


def test_serve_answer_good() -> None:
    doc = {"drains": [{"node": "n2", "at": NOW - 3, "actor": "admin:bob", "reason": "fan"}],
           "complete": True}
    assert parse_serve_answer(doc, ASKED, NOW) == [Drain("n2", "fan", NOW - 3, "admin:bob", "serve")]
    assert parse_serve_answer({"drains": [], "complete": True}, ASKED, NOW) == []


@pytest.mark.parametrize("doc,field", [
    ({"drains": [{"node": "n9", "reason": "x"}]}, "drains[0].node: not a node of this job"),
    ({"drains": [{"node": "../etc", "reason": "x"}]}, "drains[0].node"),
    ({"drains": [{"node": "n1", "reason": "a\nb"}]}, "drains[0].reason: expected one line"),
    ({"drains": [{"node": "n1", "reason": "x" * 400}]}, "drains[0].reason"),
    ({"drains": [{"node": "n1", "reason": "x", "at": NOW + 3600}]}, "drains[0].at"),
    ({"drains": [{"node": "n1", "reason": "x", "at": float("nan")}]}, "drains[0].at"),
    ({"drains": [{"node": "n1", "reason": "x", "at": True}]}, "drains[0].at"),
    ({"drains": [{"node": "n1", "reason": 7}]}, "drains[0].reason: expected a string"),
    ({"drains": "n1"}, "serve /drains: expected"),
    ([], "serve /drains: expected"),
    ({"drains": [{"node": "n1", "reason": ""}] * 40}, "serve /drains: 40 drains"),
])
def test_serve_answer_hostile_or_malformed_is_refused(doc: Any, field: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_serve_answer(doc, ASKED, NOW)
    assert field in exc.value.message and "\n" not in exc.value.message


def test_serve_answer_incomplete_is_not_clean() -> None:
    with pytest.raises(AskError, match="could not ask Slurm"):
        parse_serve_answer({"drains": [], "complete": False, "error": "timeout"}, ASKED, NOW)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                          max_size=4),
                    max_leaves=20))
def test_serve_answer_any_json_is_an_answer_or_one_line(doc: Any) -> None:
    try:
        drains = parse_serve_answer(doc, ASKED, NOW)
    except (InputError, AskError) as exc:
        assert "\n" not in str(exc)
        return
    assert all(d.node in ASKED and "\n" not in d.reason for d in drains)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["job", "job_median_step_s", "nodes", "x"]),
                       st.none() | st.integers() | st.floats() | st.text(max_size=12)
                       | st.lists(st.dictionaries(
                           st.sampled_from(["node", "ratio", "median_step_s", "ranks"]),
                           st.integers() | st.floats() | st.text(max_size=8)
                           | st.lists(st.integers(), max_size=3)), max_size=3)))
def test_suspect_report_any_body_is_checked(body: dict[str, Any]) -> None:
    try:
        job, median, nodes = parse_suspect(body)
    except InputError as exc:
        assert "\n" not in exc.message
        return
    assert job.isdigit() and median >= 0 and all(n["ratio"] >= 1 for n in nodes)


def test_drains_query() -> None:
    assert parse_query({"nodes": ["n[1-3]"], "since": ["12.5"]}) == (["n1", "n2", "n3"], 12.5)
    for q, msg in [({"nodes": ["n1;reboot"]}, "nodes"), ({"nodes": ["n1"], "since": ["inf"]}, "since"),
                   ({"nodes": ["n1", "n2"]}, "nodes: give one")]:
        with pytest.raises(InputError, match=msg):
            parse_query(q)


def _ev(node: str, job: str, at: float) -> EventRow:
    return EventRow(1, at, node, "suspect", "slurmguard", "", "wrapper", "", {"job": job})


@pytest.mark.parametrize("events,burnin,want", [
    ([_ev("n2", "1", NOW - 10)], {}, {}),  # one job's word: nothing
    ([_ev("n2", "1", NOW - 10), _ev("n2", "1", NOW - 5)], {}, {}),  # the same job twice
    ([_ev("n2", "1", NOW - 10), _ev("n2", "2", NOW - 5)], {}, {"n2": ["1", "2"]}),
    ([_ev("n2", "1", NOW - 7200), _ev("n2", "2", NOW - 5)], {}, {}),  # outside the window
    ([_ev("n2", "1", NOW - 10), _ev("n2", "2", NOW - 5)], {"n2": NOW - 6}, {}),  # burn-in since
    ([_ev("n2", "1", NOW - 10), _ev("n3", "2", NOW - 5)], {}, {}),  # two nodes, one job each
])
def test_suspect_rule(events: list[EventRow], burnin: dict[str, float],
                      want: dict[str, list[str]]) -> None:
    assert suspects(events, burnin, jobs=2, window=3600, now=NOW) == want


def _poll(code: str, notice: Path | None, **env: str) -> str:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SLURMGUARD")}
    e.update(PYTHONPATH=str(REPO), **env)
    if notice is not None:
        e["SLURMGUARD_NOTICE"] = str(notice)
    r = subprocess.run([sys.executable, "-c", "from slurmguard import progress\n" + code],
                       env=e, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "sqlalchemy" not in r.stdout
    return r.stdout.strip()


def test_should_checkpoint(tmp_path: Path) -> None:
    n = tmp_path / "notice"
    code = ("import sys, time\nprint(progress.should_checkpoint())\n"
            "progress.checkpoint_saved('/c', 1, 0.0)\ntime.sleep(0.3)\n"
            "print(progress.should_checkpoint(), 'sqlalchemy' in sys.modules)\n")
    assert _poll(code, None) == "False\nFalse False"  # not under the wrapper
    assert _poll(code, n) == "False\nFalse False"  # no notice
    n.write_text(json.dumps({"t": time.time() + 5}))  # a notice after every save
    assert _poll(code, n) == "True\nTrue False"
    n.write_text(json.dumps({"t": time.time() - 5}))  # a save began after it: answered
    assert _poll(code, n) == "True\nFalse False"
    for junk in (b"", b"\xff\x00garbage", b"[1,2]", b'{"t": "soon"}'):
        n.write_bytes(junk)  # the file's existence is the notice; garbage never raises
        assert _poll(code, n).startswith("True")
    n.unlink()
    n.mkdir()  # a directory at the name: still no exception
    assert _poll(code, n).splitlines()[0] in ("True", "False")


def test_watch_unknown_is_never_clean_and_notices_are_deduplicated() -> None:
    answers: list[Any] = [AskError("serve unreachable"), AskError("Slurm: timeout")]
    drained: list[Drain] = []

    def serve(nodes: Any, since: float) -> list[Drain]:
        if answers:
            raise answers.pop(0)
        return list(drained)

    def slurm(nodes: Any, since: float) -> list[Drain]:
        raise AskError("Slurm: timeout")

    w = NoticeWatch(["n1", "n2"], NOW, [("serve", serve, 0.5), ("slurm", slurm, 3.0)])
    assert w.poll_once() == 0.5 and w.unknown  # neither answered
    notices, lines = w.take()
    assert notices == [] and len(lines) == 1 and "drain state unknown" in lines[0]
    assert "not taken as 'no drain'" in lines[0]
    w.poll_once()  # still unknown: said once per outage
    assert w.take() == ([], [])
    drained.append(Drain("n2", "fan", NOW, "admin", "serve"))
    for _ in range(3):
        w.poll_once()
    notices, lines = w.take()
    assert [n.drain.node for n in notices] == ["n2"] and not w.unknown
    assert lines == ["drain state now from serve"]


def test_goodput_counts_notices_saves_and_steps_redone() -> None:
    from slurmguard.goodput.account import Allocation, JobInputs, RunRecord, account

    t = NOW
    runs = (RunRecord(0, t, t + 100, 0, "infra", (t + 5, 1), (t + 95, 90), 1.0, 80,
                      ((t + 40, 35, 1.0), (t + 94, 88, 0.5)), notice_latencies=(0.8,),
                      checkpoint_now_s=(0.5,), ended_by_notice=True),
            RunRecord(1, t + 110, t + 130, 88, "success", (t + 112, 89), (t + 125, 100), 1.0, 10))
    allocs = (Allocation(t, t + 100, ("n1", "n2")), Allocation(t + 110, t + 130, ("n1", "n3")))
    b = account(JobInputs("9", allocs, runs, state="COMPLETED")).to_dict()
    assert b["infra"] == {"steps_redone": 2, "notices": 1, "notice_latency_median_s": 0.8,
                          "notice_latency_max_s": 0.8, "checkpoint_now": 1,
                          "checkpoint_now_s": 0.5, "runs_ended_by_notice": 1}
    assert b["runs"][0]["parts"]["drained_node"] > 0  # the end after the notice is the fault's
    assert sum(b["parts"].values()) == pytest.approx(b["wall_s"])


@pytest.mark.parametrize("env,said", [
    ({"SLURMGUARD_CONFIG": "/nonexistent/sg.toml", "SLURM_JOB_NODELIST": "n1"},
     "slurmguard run: drain notices and slow-node reports off: "),
    ({"SLURM_JOB_NODELIST": "n[1-;reboot"}, "slurmguard run: drain notices off: "),
])
def test_a_broken_notice_setup_turns_notices_off_never_the_job(tmp_path: Path, env: dict[str, str],
                                                               said: str) -> None:
    from support.helpers import sg_argv, sg_env

    e = sg_env(**env)
    e.pop("SLURM_RESTART_COUNT", None)
    r = subprocess.run(sg_argv("run", "--", sys.executable, "-c", "print('ran')"), env=e,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    [line] = [x for x in r.stderr.splitlines() if "off:" in x]
    assert line.startswith(said) and "Traceback" not in r.stderr


def test_serve_down_the_slurm_fallback_spreads_and_backs_off() -> None:
    """serve down: Slurm is asked first at a random point of slurm_interval, then after waits
    that double (times 0.75-1.25) up to slurm_interval_max; serve's answer starts over."""
    now = [0.0]
    serve_up = [False]
    asked: list[float] = []

    def serve(nodes: Any, since: float) -> list[Drain]:
        if not serve_up[0]:
            raise AskError("serve unreachable")
        return []

    def slurm(nodes: Any, since: float) -> list[Drain]:
        asked.append(now[0])
        return []

    w = NoticeWatch(["n1"], NOW, [("serve", serve, 2.0), ("slurm", slurm, 10.0)],
                    backoff_max=120.0, rng=lambda: 0.5, clock=lambda: now[0])
    while now[0] < 600:
        now[0] += max(0.01, w.poll_once())
    gaps = [round(b - a, 1) for a, b in zip(asked, asked[1:], strict=False)]
    assert round(asked[0]) == 5  # half of slurm_interval: rng 0.5
    assert gaps[:5] == [10.0, 20.0, 40.0, 80.0, 120.0] and set(gaps[4:]) == {120.0}
    serve_up[0] = True
    now[0] += w.poll_once()  # serve answers: the next outage starts over
    serve_up[0], asked[:] = False, []
    start = now[0]
    while now[0] < start + 40:
        now[0] += max(0.01, w.poll_once())
    assert [round(t - start) for t in asked][:2] == [5, 15]


@given(st.lists(st.floats(0, 1), min_size=40, max_size=40))
def test_the_fallback_never_asks_slurm_faster_than_its_interval(draws: list[float]) -> None:
    now, asked, it = [0.0], [], iter(draws * 100)
    w = NoticeWatch(["n1"], NOW, [("serve", lambda n, s: (_ for _ in ()).throw(AskError("down")),
                                   2.0), ("slurm", lambda n, s: asked.append(now[0]) or [], 10.0)],
                    backoff_max=120.0, rng=lambda: next(it), clock=lambda: now[0])
    while now[0] < 3600:
        now[0] += max(0.01, w.poll_once())
    gaps = [b - a for a, b in zip(asked, asked[1:], strict=False)]
    assert asked[0] <= 10.0 + 2.0 and min(gaps) >= 0.75 * 10.0 - 2.0
    assert len(asked) <= 3600 / (0.75 * 120) + 6  # at most about one read per 90 s at length


def _setup_health_check_interval() -> float:
    from slurmguard.install.plan import conf_lines

    [line] = [x for x in conf_lines("/lib", 30.0, "node") if x.startswith("HealthCheckInterval=")]
    return float(line.split("=", 1)[1])


def test_with_the_defaults_a_serve_outage_costs_slurmctld_no_more_than_the_health_checks() -> None:
    """Every serve down, J wrappers (one job per node) on their default notice settings read
    Slurm no more often, in any first T seconds of the outage, than the health checks of J
    nodes at setup's HealthCheckInterval: each read and each health check is one node read,
    so slurmctld's rate at most doubles (the issue's goal; docs/requeue.md). Old defaults
    (first read within 10 s, waits 10, 20, 40 ... 120 s) made 16 reads per wrapper in the
    first 10 minutes against the health checks' 2."""
    import math
    import random

    from slurmguard import config

    notice = config.SCHEMA["notice"]
    first, most = float(notice["slurm_interval"].default), float(notice["slurm_interval_max"].default)
    hci, wrappers, horizon = _setup_health_check_interval(), 300, 3600.0
    reads: list[float] = []
    for seed in range(wrappers):
        now, rng = [0.0], random.Random(seed)

        def down(nodes: Any, since: float) -> list[Drain]:
            raise AskError("serve unreachable")

        def slurm(nodes: Any, since: float, now: list[float] = now) -> list[Drain]:
            reads.append(now[0])
            return []

        w = NoticeWatch(["n1"], NOW, [("serve", down, 2.0), ("slurm", slurm, first)],
                        backoff_max=max(most, first), rng=rng.random, clock=lambda now=now: now[0])
        while now[0] < horizon:
            now[0] += max(2.0, w.poll_once())  # serve's own pace; the fallback's wait is due
    reads.sort()
    for t in range(10, int(horizon) + 1, 10):
        hc = wrappers * t / hci  # health checks of as many nodes in the first t seconds
        got = sum(r <= t for r in reads)
        assert got <= 1.1 * hc + 4 * math.sqrt(hc) + 2, (t, got, hc)
    assert len(reads) >= 0.8 * wrappers * horizon / hci  # it does ask Slurm: notices go on


def test_a_program_that_saves_and_exits_75_on_the_notice_is_ended_by_the_notice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The program saves on the notice's SIGUSR1 and exits 75 at once, mostly before the
    wrapper's next look: the run is recorded as the wrapper would have ended it a tick later
    (the save is the checkpoint-now, the notice ended the run, verdict infra), not as a
    requeue the program asked for on its own; the cluster test's 'requested' was the luck of
    an unloaded host, 'infra' that of a loaded one."""
    import signal

    from slurmguard.job import wrapper

    ckpt, log = tmp_path / "ckpt", tmp_path / "steps.log"
    ckpt.mkdir()
    train = [sys.executable, str(REPO / "tests" / "train_job.py"), "--steps", "400",
             "--every", "1000", "--sleep", "0.02", "--ckpt-dir", str(ckpt), "--log", str(log),
             "--final", str(tmp_path / "final")]

    def serve(nodes: Any, since: float) -> list[Drain]:  # n2 drained once 5 steps are done
        steps = log.read_text().count("\n") if log.exists() else 0
        return [Drain("n2", "maintenance", time.time(), "admin", "serve")] if steps >= 5 else []

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SLURMGUARD"))}
    code = wrapper.run(wrapper.RunOptions(
        command=train, checkpoint_dir=str(ckpt), notice_signal=signal.SIGUSR1,
        drain_watch=lambda since: NoticeWatch(["n1", "n2"], since, [("serve", serve, 0.1)]),
        env=dict(env, SLURM_JOB_ID="7", SLURMGUARD_PROGRESS_INTERVAL="0")))
    [run] = [json.loads(x) for x in (ckpt / ".slurmguard" / "runs.jsonl").read_text().splitlines()]
    err = capsys.readouterr().err
    assert code == 75 and run["returncode"] == 75, err
    [save] = run["checkpoint_now"]
    assert run["ended_by_notice"] == {"how": "checkpoint", "resume_step": save["step"],
                                      "frontier_step": save["step"], "nodes": ["n2"]}
    assert run["verdict"] == "infra" and save["step"] == run["last_step"] >= 5
    assert run["steps_to_redo"] == 0
    assert f"drain notice for n2: checkpointed at step {save['step']}" in run["reason"]
