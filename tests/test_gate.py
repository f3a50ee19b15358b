"""The allocation gate: verdicts (table), the store read on SQLite and PostgreSQL, fail-open /
fail-closed, the real process, and a real slurmctld running it as PrologSlurmctld."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard import config
from slurmguard.contract import CheckResult, Health
from slurmguard.errors import EXIT_INPUT, EXIT_OK, EXIT_STORE, EXIT_UNHEALTHY, InputError
from slurmguard.gate import answer as gate
from slurmguard.gate.answer import NodeRow, refusal
from slurmguard.node.record import make_record
from slurmguard.store import Store

NOW = 1_800_000_000.0
LEMON = "slurmguard: lemon: 3 failures in 1h (gpu-xid)"


def row(**kw) -> NodeRow:
    base = dict(name="n1", last_seen=NOW - 10, last_health="healthy", last_reason="",
                lemon=False, lemon_reason=None, burnin_required=False)
    base.update(kw)
    return NodeRow(**base)


@pytest.mark.parametrize("r, expected", [
    (None, None),  # unknown to the store: allowed
    (row(), None),
    (row(lemon=True, lemon_reason=LEMON), LEMON),
    (row(lemon=True, lemon_reason=None), "slurmguard: lemon: flagged by fleet policy"),
    (row(burnin_required=True), "slurmguard: burn-in: awaiting burn-in"),
    (row(last_health="unhealthy", last_reason="slurmguard: gpu-xid: Xid 79"), "slurmguard: gpu-xid: Xid 79"),
    (row(last_health="unhealthy", last_reason="gpu-ecc: DBE"),
     "slurmguard: gate: unhealthy result 10s ago: gpu-ecc: DBE"),
    (row(last_health="unhealthy", last_seen=NOW - 901), None),  # stale
    # taken before the node's last return (repair's verified one, or a person's): history
    (row(last_health="unhealthy", last_reason="gpu-ecc: DBE", returned_at=NOW - 5), None),
    (row(last_health="unhealthy", last_reason="gpu-ecc: DBE", returned_at=NOW - 60),
     "slurmguard: gate: unhealthy result 10s ago: gpu-ecc: DBE"),
    (row(last_health="error"), None),  # checker errors never block a node
    (row(last_health="degraded"), None),
])
def test_refusal_table(r, expected) -> None:
    assert refusal(r, NOW, 900.0) == expected


def _cfg(tmp_path: Path, store_url: str, extra: str = "") -> config.Config:  # noqa: F811
    p = tmp_path / "sg.toml"
    p.write_text(f'[store]\nurl = "{store_url}"\n[gate]\ndrain = false\n{extra}')
    return config.load(str(p), env={})


def _fill(url: str) -> None:
    s = Store.open(url=url)
    now = time.time()
    ok = [CheckResult("gpu-count", Health.HEALTHY)]
    bad = ok + [CheckResult("gpu-xid", Health.UNHEALTHY, "Xid 79")]
    s.nodes.record_many([make_record("n1", "prolog", ok, "pass", "", started=now - 5),
                         make_record("n2", "prolog", bad, "drain", "slurmguard: gpu-xid: Xid 79",
                                      started=now - 5),
                   make_record("n3", "prolog", ok, "pass", "", started=now - 5)])
    s.nodes.set_flags("n3", lemon=True, lemon_reason=LEMON)
    s.close()


@pytest.mark.postgres
def test_gate_reads_the_store_and_refuses(store_url: str, tmp_path: Path) -> None:  # noqa: F811
    _fill(store_url)
    cfg = _cfg(tmp_path, store_url)
    out = gate.run_gate(cfg, {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-4]"})
    assert out.code == EXIT_UNHEALTHY
    assert out.refused == {"n2": "slurmguard: gpu-xid: Xid 79", "n3": LEMON}
    assert out.drained == []  # gate.drain = false
    assert "job 7: refused 2 of 4 nodes" in out.message
    ok = gate.run_gate(cfg, {"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "n1,n4"})
    assert ok.code == EXIT_OK and ok.refused == {}


def test_store_unreadable_fail_open_and_fail_closed(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n1"}
    missing = f"sqlite:///{tmp_path}/none.db"
    out = gate.run_gate(_cfg(tmp_path, missing), env)
    assert out.code == EXIT_OK and "fail-open" in out.message and "no such file" in out.message
    out = gate.run_gate(_cfg(tmp_path, missing, 'on_store_error = "closed"\n'), env)
    assert out.code == EXIT_STORE and "fail-closed" in out.message and out.drained == []
    # a store of a newer schema is unreadable too
    import sqlite3

    db = tmp_path / "new.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32))")
        conn.execute("INSERT INTO alembic_version VALUES ('9999')")
    out = gate.run_gate(_cfg(tmp_path, f"sqlite:///{db}"), env)
    assert out.code == EXIT_OK and "newer than this slurmguard" in out.message


def test_hostile_nodelist_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="SLURM_JOB_NODELIST"):
        gate.run_gate(_cfg(tmp_path, "sqlite:////x"), {"SLURM_JOB_NODELIST": "n[1-"})


def test_gate_process_exit_codes_and_log(tmp_path: Path) -> None:
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    url = f"sqlite:///{tmp_path}/s.db"
    e = make_engine({"url": url})
    upgrade(e)
    e.dispose()
    _fill(url)
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n[gate]\ndrain = false\nlog_file = "{tmp_path}/gate.log"\n')
    env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURM_JOB_ID="11", SLURM_JOB_NODELIST="n[1-3]")
    p = run_sg("gate", env=env)
    assert p.returncode == EXIT_UNHEALTHY, p.stderr
    assert p.stderr.count("\n") == 1 and "refused 2 of 3 nodes" in p.stderr
    assert "n3: " + LEMON in (tmp_path / "gate.log").read_text()
    p = run_sg("gate", env={**env, "SLURM_JOB_NODELIST": "n1"})
    assert p.returncode == EXIT_OK and p.stderr == ""
    p = run_sg("gate", env={**env, "SLURM_JOB_NODELIST": "n[1-"})
    assert p.returncode == EXIT_INPUT and p.stderr.startswith("slurmguard: error: SLURM_JOB_NODELIST")
    p = run_sg("gate", "--help", env=env)
    assert p.returncode == 0 and "PrologSlurmctld" in p.stdout and "Example" in p.stdout


def test_gate_does_not_import_sqlalchemy_on_the_sqlite_path(tmp_path: Path) -> None:
    from support.gatehook import gate_heavy_imports

    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path}/none.db"\n')
    assert gate_heavy_imports(cfg, {"SLURM_JOB_NODELIST": "n1"})[1] == []


@pytest.mark.slurm
def test_prolog_slurmctld_gate_refuses_a_lemon_and_slurm_requeues(slurm_cluster_factory,
                                                                 tmp_path: Path) -> None:
    from support.sgserve import new_store

    url = new_store(tmp_path, "s.db")
    s = Store.open(url=url)
    for n in ("n1", "n2"):
        s.nodes.set_flags(n, lemon=True, lemon_reason=LEMON)
    s.close()
    cfg = tmp_path / "sg.toml"
    (tmp_path / "textfile").mkdir()
    cfg.write_text(f'[store]\nurl = "{url}"\n[gate]\nlog_file = "{tmp_path}/gate.log"\n'
                   f'[metrics]\ntextfile_dir = "{tmp_path}/textfile"\n'
                   # two lemons of one cause (gpu-xid) in 3 nodes: a cap of 2 lets both drain
                   '[policy]\nblast_max_percent = 70.0\n')
    from support.gatehook import gate_cluster

    cluster = gate_cluster(slurm_cluster_factory, tmp_path, cfg, nodes=3)
    job = cluster.sbatch("sleep 1", "-N2")
    for n in ("n1", "n2"):
        info = cluster.wait_node(n, lambda i: i.drained, timeout=60, what="drained by the gate")
        assert info.reason == LEMON
    j = cluster.wait_job(job, states=("PENDING", "COMPLETED", "RUNNING"), timeout=60)
    assert j.get("JobState") in ("PENDING", "COMPLETED", "RUNNING")
    log = (tmp_path / "gate.log").read_text()
    assert f"job {job}: refused 2 of 2 nodes" in log
    ev = Store.open(url=url).nodes.events(kinds=["drain"])
    assert {e.node for e in ev} == {"n1", "n2"}
    assert all(e.source == "gpu-xid" and e.details["via"] == "gate" for e in ev)
    assert not cluster.node("n3").drained
    # the controller's textfile (docs/metrics.md): the drains by cause, the refused job
    prom = (tmp_path / "textfile" / "slurmguard_gate.prom").read_text()
    assert 'slurmguard_drains_total{cause="lemon",source="gate"} 2\n' in prom
    assert 'slurmguard_gate_refusals_total{cause="lemon"} ' in prom
    assert 'slurmguard_gate_jobs_total{result="refused"} ' in prom


def test_a_result_failed_in_a_shared_fault_refuses_the_job_but_drains_nothing(tmp_path: Path) -> None:
    """A filer hang left every node's result of that moment unhealthy (fs-mount); the guard
    called it shared (a fleet alert). The job is refused there (the mount may still be gone:
    tests/test_guard_cluster.py), but the node is not drained for it: the fleet day at 128
    nodes drained five healthy nodes so, minutes after the hang. With no Slurm here, a drain
    attempt would fail loudly. A node's own fault (gpu-xid), or fs-mount outside the alert's
    window, is refused as before."""
    from support.sgserve import new_store

    url = new_store(tmp_path)
    s = Store.open(url=url)
    now = time.time()
    ok = [CheckResult("gpu-count", Health.HEALTHY)]
    mount = ok + [CheckResult("fs-mount", Health.UNHEALTHY, "/shared is not mounted")]
    xid = ok + [CheckResult("gpu-xid", Health.UNHEALTHY, "Xid 79")]
    s.nodes.record_many([
        make_record("n1", "healthcheck", mount, "drain", "slurmguard: fs-mount: /shared is not "
                    "mounted", started=now - 200),  # in the hang, then no result
        make_record("n2", "healthcheck", xid, "drain", "slurmguard: gpu-xid: Xid 79",
                    started=now - 200),  # its own fault, at the same time
        make_record("n3", "healthcheck", mount, "drain", "slurmguard: fs-mount: /shared is not "
                    "mounted", started=now - 700)])  # before the alert's window
    s.nodes.open_alert("fs-mount", "fleet", ["n1", "n4", "n5"], "suspect shared cause",
                       now=now - 190, window=60.0)
    s.close()
    p = tmp_path / "sg.toml"
    p.write_text(f'[store]\nurl = "{url}"\n[gate]\ndrain = true\n[policy]\nblast_window = 60.0\n')
    cfg = config.load(str(p), env={})
    out = gate.run_gate(cfg, {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"})
    assert out.code == EXIT_UNHEALTHY and list(out.refused) == ["n1"] and out.drained == []
    assert "not drained, its result failed in a shared fault: n1 (fs-mount)" in out.message
    out = gate.run_gate(cfg, {"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "n[1-3]"},
                        dry_run=True)
    assert out.code == EXIT_UNHEALTHY
    assert out.refused == {"n1": "slurmguard: fs-mount: /shared is not mounted",
                           "n2": "slurmguard: gpu-xid: Xid 79",
                           "n3": "slurmguard: fs-mount: /shared is not mounted"}
    assert "not drained, its result failed in a shared fault: n1 (fs-mount)" in out.message
