"""Goodput sources and the `slurmguard goodput` command, without a cluster: sacct parsers on
captured output, a real `slurmguard run` of tests/train_job.py recording its runs, the command
reading them (no accounting: it says so), the store's fleet queries on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.helpers import REPO, run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.adapters.slurm.parse import parse_sacct_json, parse_sacct_parsable
from slurmguard.errors import ParseError
from slurmguard.goodput.account import PARTS, Allocation, JobInputs, RunRecord, account
from slurmguard.goodput.sources import run_from_record

DATA = REPO / "tests" / "data" / "slurm"
TRAIN = REPO / "tests" / "train_job.py"


def test_sacct_json_captured() -> None:
    recs = parse_sacct_json((DATA / "sacct-requeued-22.05.8.json").read_text())
    assert [r.state for r in recs] == ["REQUEUED", "COMPLETED"]
    assert all(r.job_id == "1" and r.nodes == "n[1-2]" and r.node_count == 2 for r in recs)
    assert recs[0].end <= recs[1].start and recs[1].end - recs[1].start == 2
    assert recs[0].workdir.endswith("/slurm") and recs[0].user == "root"


def test_sacct_json_gpus_and_24_11_numbers() -> None:
    doc = {"jobs": [{"job_id": 5, "state": {"current": ["NODE_FAIL"]}, "nodes": "g[1-2]",
                     "partition": "gpu", "user": "alice",
                     "time": {"start": {"set": True, "number": 100}, "end": 200, "submission": 90},
                     "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 16},
                                            {"type": "gres", "name": "gpu:h100", "count": 16},
                                            {"type": "node", "name": None, "count": 2}]}}]}
    (r,) = parse_sacct_json(json.dumps(doc))
    assert (r.state, r.gpus, r.start, r.end, r.node_count) == ("NODE_FAIL", 16, 100, 200, 2)


def test_sacct_parsable() -> None:
    text = ("12|NODE_FAIL|2026-12-03T06:00:00|2026-12-03T06:01:40|n[1-2]|gpu|bob|"
            "billing=2,cpu=2,gres/gpu=8,node=2|2026-12-03T05:59:00|sg1|/home/bob\n"
            "12|COMPLETED|2026-12-03T06:02:00|2026-12-03T06:05:00|n[1,3]|gpu|bob|"
            "cpu=2,node=2|2026-12-03T06:01:40|sg1|/home/bob|odd\n"
            "13|PENDING|Unknown|Unknown|None assigned|gpu|bob||2026-12-03T06:01:40|sg1|/x\n"
            "14|CANCELLED by 0|2026-12-03T06:02:00|2026-12-03T06:03:00|n1|gpu|bob|node=1|"
            "2026-12-03T06:01:40|sg1|/x\n")
    a, b, c, d = parse_sacct_parsable(text)
    assert a.end - a.start == 100 and a.gpus == 8 and a.state == "NODE_FAIL"
    assert b.workdir == "/home/bob|odd" and b.gpus == 0
    assert c.start is None and c.nodes == "" and d.state == "CANCELLED"


@pytest.mark.parametrize("bad, field", [
    ("x|COMPLETED|" + "|" * 9, "JobID"),
    ("1|COMPLETED|yesterday|||gpu|u||||/", "Start"),
    ("1|COMPLETED", "expected 11 fields"),
])
def test_sacct_parsable_garbage(bad: str, field: str) -> None:
    with pytest.raises(ParseError) as exc:
        parse_sacct_parsable(bad)
    assert field in exc.value.message and "\n" not in exc.value.message


@pytest.mark.parametrize("bad", ["[]", "{\"jobs\": 3}", "{\"jobs\": [{\"job_id\": \"x\"}]}",
                                 "{\"jobs\": [{\"job_id\": 1, \"state\": {\"current\": \"$\"}}]}",
                                 "{\"jobs\": [{\"job_id\": 1, \"state\": \"RUNNING\"}]}", "garbage"])
def test_sacct_json_garbage(bad: str) -> None:
    with pytest.raises(ParseError) as exc:
        parse_sacct_json(bad)
    assert exc.value.message.startswith("sacct --json") and "\n" not in exc.value.message


def test_run_record_tolerates_garbage() -> None:
    assert run_from_record({"restart": "x", "started": 1}) is None
    r = run_from_record({"restart": 0, "started": 1.0, "first_step": ["a", 1],
                         "checkpoints": [[1, 2], "x", [5.0, 3, None]], "stalls": [[1, None]],
                         "node_median_step_s": {"n1": "slow"}})
    assert r is not None and r.first_step is None and r.checkpoints == ((5.0, 3, None),)
    assert r.stalls == () and r.node_median_step_s == {}


def _wrapped_job(tmp: Path, job_id: str, **env: str) -> Path:
    ck = tmp / "ckpt"
    ck.mkdir()
    e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    e.update(sg_env(SLURM_JOB_ID=job_id, SLURMGUARD_PROGRESS_INTERVAL="0", SLURMD_NODENAME="n9", **env))
    r = run_sg("run", "--checkpoint-dir", str(ck), "--", sys.executable, str(TRAIN),
               "--steps", "12", "--every", "4", "--sleep", "0.1", "--ckpt-dir", str(ck),
               "--log", str(tmp / "log"), "--final", str(tmp / "final.json"), env=e)
    assert r.returncode == 0, r.stderr
    return ck


def test_wrapper_records_what_accounting_needs(tmp_path: Path) -> None:
    ck = _wrapped_job(tmp_path, "41")
    (rec,) = [json.loads(x) for x in (ck / ".slurmguard" / "runs.jsonl").read_text().splitlines()]
    assert rec["first_step"][1] == 1 and rec["frontier_step"] == 12
    assert rec["first_step"][0] < rec["last_step_t"] <= rec["ended"]
    assert 0.08 < rec["median_step_s"] < 1.0 and rec["step_samples"] == 11
    assert [c[1] for c in rec["checkpoints"]] == [4, 8, 12]
    assert all(c[2] is not None and c[2] >= 0 for c in rec["checkpoints"])  # progress.saving
    run = run_from_record(rec)
    b = account(JobInputs("41", (Allocation(rec["started"], rec["ended"]),), (run,), (),
                          state="COMPLETED"))
    assert math.isclose(sum(b.parts.values()), b.wall_s)
    assert b.parts["productive"] > 0.8 and b.parts["lost_work"] == 0


def _cfg(tmp: Path, url: str | None = None) -> Path:
    cfg = tmp / "sg.toml"
    store = f'url = "{url}"\n' if url else f'path = "{tmp / "sg.db"}"\n'
    cfg.write_text(f"[store]\n{store}[slurm]\nsacct = \"{tmp / 'no-sacct'}\"\n"
                   f"[goodput]\nrun_dirs = [\"{tmp}/ck*\"]\n")
    r = run_sg("db", "upgrade", env=sg_env(SLURMGUARD_CONFIG=str(cfg)))
    assert r.returncode == 0, r.stderr
    return cfg


def test_goodput_job_without_accounting(tmp_path: Path) -> None:
    _wrapped_job(tmp_path, "42")
    cfg = _cfg(tmp_path)
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    r = run_sg("goodput", "--job", "42", "--json", env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["parts"]) == set(PARTS)
    assert math.isclose(sum(d["parts"].values()), d["wall_s"], abs_tol=0.01)
    assert d["parts"]["productive"] > 0 and d["steps_lost"] == 0
    assert any("no Slurm accounting" in u for u in d["unknown"])  # said, not guessed
    # Stored: the fleet report finds it, in every split.
    r = run_sg("goodput", "--since", "1h", "--json", env=env)
    fleet = json.loads(r.stdout)
    assert r.returncode == 0 and fleet["jobs"] == 1 and fleet["jobs_with_unknown"] == 1
    assert math.isclose(fleet["parts"]["productive"], d["parts"]["productive"], abs_tol=0.01)
    for by in ("partition", "user", "node"):
        r = run_sg("goodput", "--since", "1h", "--by", by, env=env)
        assert r.returncode == 0 and "ETTR" in r.stdout, r.stderr
    r = run_sg("goodput", "--job", "42", env=env)
    assert r.returncode == 0 and "productive" in r.stdout and "unknown: no Slurm accounting" in r.stdout
    # A job nobody knows: no table of zeros, one line saying why, exit 6.
    r = run_sg("goodput", "--job", "999", "--json", env=env)
    assert r.returncode == 6 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "--job 999: nothing to account: no Slurm accounting (" in r.stderr
    assert "no wrapper record" in r.stderr
    # With one known job: the known one is shown, the unknown one named, exit 6.
    r = run_sg("goodput", "--job", "42", "--job", "999", "--json", env=env)
    assert r.returncode == 6 and json.loads(r.stdout)["job_id"] == "42"
    assert "--job 999: nothing to account" in r.stderr


def test_goodput_bad_input(tmp_path: Path) -> None:
    env = sg_env(SLURMGUARD_CONFIG=str(_cfg(tmp_path)))
    r = run_sg("goodput", "--job", "12;rm", env=env)
    assert r.returncode == 6 and "job id" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_sg("goodput", "--since", "soon", env=env)
    assert r.returncode == 6 and "--since" in r.stderr


def test_goodput_plot(tmp_path: Path) -> None:
    _wrapped_job(tmp_path, "43")
    env = sg_env(SLURMGUARD_CONFIG=str(_cfg(tmp_path)))
    assert run_sg("goodput", "--job", "43", env=env).returncode == 0
    png = tmp_path / "badput.png"
    r = run_sg("goodput", "--since", "1d", "--plot", str(png), env=env)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _breakdown(job: str, end: float, part: str, user: str, nodes: tuple[str, ...]) -> dict[str, Any]:
    b = account(JobInputs(job, (Allocation(end - 100, end, nodes, 4, "COMPLETED"),),
                          (RunRecord(0, end - 100, end, None, "success", (end - 90, 1),
                                     (end - 10, 80), 1.0, 79),), (), user=user, partition=part,
                          state="COMPLETED"))
    return b.to_dict()


@pytest.fixture
def store(store_url: str) -> Any:  # noqa: F811
    from slurmguard.store import Store

    s = Store.open(url=store_url)
    yield s
    s.close()


@pytest.mark.postgres
def test_store_fleet_queries(store: Any) -> None:
    now = time.time()
    rows = [_breakdown("1", now - 10, "gpu", "alice", ("n1", "n2")),
            _breakdown("2", now - 20, "gpu", "bob", ("n2",)),
            _breakdown("3", now - 86400 * 3, "cpu", "bob", ("n3",))]
    assert store.goodput.record(rows) == 3
    assert store.goodput.record(rows[:1]) == 1  # replaced, not doubled
    assert store.goodput.collected(["1", "2", "9"]) == {"1", "2"}
    (fleet,) = store.goodput.totals(since=now - 86400)
    assert fleet[1]["jobs"] == 2 and fleet[1]["parts"]["productive"] == 2 * 81
    assert fleet[1]["allocated_gpu_hours"] == round(200 * 4 / 3600, 4)
    users = dict(store.goodput.totals(since=now - 86400 * 7, by="user"))
    assert users["bob"]["jobs"] == 2 and users["alice"]["jobs"] == 1
    nodes = dict(store.goodput.totals(since=now - 86400, by="node"))
    assert nodes["n2"]["jobs"] == 2
    # a job on two nodes splits its GPUs over them: the fleet's GPU-hours are kept
    assert math.isclose(sum(t["allocated_gpu_hours"] for t in nodes.values()),
                        fleet[1]["allocated_gpu_hours"], abs_tol=1e-3)
    series = store.goodput.series(since=now - 86400 * 7)
    assert len(series) == 2 and all(set(v) == set(PARTS) for _, v in series)
    got = store.goodput.job("1")
    assert got["nodes"] == ["n1", "n2"] and got["parts"]["productive"] == 81
    assert store.goodput.job("nope") is None


def test_serve_exposes_goodput_gauges(tmp_path: Path) -> None:
    """A real `slurmguard serve` scrape: the goodput of stored jobs, per partition and part."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    from support.sgserve import Serve, new_port, new_store, write_config

    from slurmguard.store import Store

    url = new_store(tmp_path)
    st = Store.open(url=url)
    now = time.time()
    st.goodput.record([_breakdown("7", now - 60, "gpu", "alice", ("n1", "n2")),
                       _breakdown("8", now - 120, "gpu", "bob", ("n3",)),
                       _breakdown("9", now - 86400 * 2, "old", "bob", ("n3",))])  # outside 24 h
    st.close()
    port = new_port()
    serve = Serve(write_config(tmp_path, store_url=url, port=port), port, "--no-policy").start()
    try:
        with urllib.request.urlopen(serve.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        serve.stop()
    smp = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert smp[("slurmguard_goodput_jobs", (("partition", "gpu"),))] == 2
    assert ("slurmguard_goodput_jobs", (("partition", "old"),)) not in smp
    assert smp[("slurmguard_goodput_jobs_unknown", (("partition", "gpu"),))] == 0
    assert smp[("slurmguard_goodput_ettr", (("partition", "gpu"),))] == pytest.approx(0.81)
    key = (("part", "productive"), ("partition", "gpu"))
    assert smp[("slurmguard_goodput_seconds", key)] == pytest.approx(162)
    assert smp[("slurmguard_goodput_gpu_seconds", key)] == pytest.approx(162 * 4, rel=1e-3)
    parts = {dict(k[1])["part"] for k in smp if k[0] == "slurmguard_goodput_seconds"}
    assert parts == set(PARTS)


def test_a_run_without_record_is_read_from_the_progress_file(tmp_path: Path) -> None:
    """The wrapper died with its batch node: no run record for that allocation, but the
    ranks' progress events are in the file; the accounting reads them (and says so)."""
    from slurmguard.adapters.slurm.parse import AcctRecord
    from slurmguard.goodput.sources import job_inputs, progress_files, read_runs

    d = tmp_path / "ck" / ".slurmguard"
    d.mkdir(parents=True)
    events = [{"ev": "step", "step": n, "t": 100.0 + 5 + n, "node": "n1", "rank": 0}
              for n in range(1, 21)]
    events.insert(10, {"ev": "ckpt", "step": 10, "t": 115.5, "seconds": 0.5, "path": "x"})
    events += [{"ev": "step", "step": n, "t": 200.0 + 5 + (n - 10), "node": "n1", "rank": 0}
               for n in range(11, 41)]
    (d / "progress-9.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\ngarbage\n")
    rec = {"job_id": "9", "restart": 1, "started": 201.0, "ended": 249.0, "verdict": "success",
           "resumed_from": {"step": 10}, "first_step": [206.0, 11], "last_step_t": 235.0,
           "frontier_step": 40, "median_step_s": 1.0, "step_samples": 29, "checkpoints": [],
           "stalls": []}
    (d / "runs.jsonl").write_text(json.dumps(rec) + "\n")
    records = read_runs([d / "runs.jsonl"])["9"]
    acct = [AcctRecord("9", "NODE_FAIL", 100.0, 150.0, "n[1-2]", gpus=8),
            AcctRecord("9", "COMPLETED", 200.0, 250.0, "n[1,3]", gpus=8)]
    job = job_inputs("9", acct, records, [], progress=progress_files("9", records))
    b = account(job)
    assert len(job.runs) == 2 and any("progress file" in u for u in b.unknown)
    assert b.parts["unknown"] == 0 and b.steps_lost == 10  # steps 11-20 were redone
    assert b.parts["lost_work"] == pytest.approx(10.0)
    assert b.parts["checkpoint_save"] == pytest.approx(0.5)
    assert math.isclose(sum(b.parts.values()), b.wall_s)
