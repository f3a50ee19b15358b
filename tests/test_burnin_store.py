"""The burn-in store API (SQLite and a real PostgreSQL) and `burnin report` over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.errors import InputError
from slurmguard.sources.burnin import BurninValue
from slurmguard.store import Store

pytestmark = pytest.mark.postgres
T0 = 1_800_000_000.0


@pytest.fixture
def store(store_url: str):  # noqa: F811
    s = Store.open(url=store_url)
    yield s
    s.close()


def _run(store: Store, node: str, value: float, *, night: str = "2027-01-14", at: float = T0,
         status: str = "complete", job: str | None = None, group: str = "8x H100") -> int:
    rid = store.burnin.submitted(node, job_id=job, level="quick", night=night, at=at)
    assert store.burnin.started(node, job_id=job, group_key=group, at=at + 1) == rid if job else True
    if not job:
        rid = store.burnin.started(node, job_id=None, group_key=group, night=night, at=at + 1)
    store.burnin.record(rid, [
        BurninValue("host-cpu", "ok", "host_cpu_gflops", value, "GFLOP/s"),
        BurninValue("disk-io", "ok", "disk_write_seconds", 10.0, "s", higher_is_better=False),
        BurninValue("gpu-matmul", "unsupported", reason="torch/cupy not importable"),
    ], at=at + 2)
    store.burnin.finish(rid, status, at=at + 3)
    return rid


def test_run_lifecycle_and_series(store: Store) -> None:
    rid = store.burnin.submitted("n1", job_id="41", level="full", night="2027-01-14", at=T0)
    assert store.burnin.open_runs()[0].status == "submitted"
    assert store.burnin.started("n1", job_id="41", group_key="8x H100", at=T0 + 5) == rid
    store.burnin.record(rid, [BurninValue("host-cpu", "ok", "host_cpu_gflops", 40.0, "GFLOP/s")],
                        at=T0 + 6)
    store.burnin.finish(rid, "complete", at=T0 + 7)
    (run,) = store.burnin.latest_runs(T0 - 1)
    assert (run.status, run.level, run.group_key, run.started, run.finished) == \
        ("complete", "full", "8x H100", T0 + 5, T0 + 7)
    (s,) = store.burnin.series(T0 - 1)
    assert (s.metric, s.last_value, s.last_run_id, s.last_night, s.recent) == \
        ("host_cpu_gflops", 40.0, rid, "2027-01-14", (40.0,))
    assert store.burnin.open_runs() == []
    assert store.counts()["burnin_results"] == 1


def _night(store: Store, night: str, value: float, keep: int = 4) -> None:
    rid = store.burnin.started("n1", job_id=None, group_key="g", night=night)
    store.burnin.record(rid, [BurninValue("host-cpu", "ok", "m", value, "u")])
    store.burnin.finish(rid, "complete", keep_nights=keep)


def test_series_keeps_one_value_per_night_gaps_and_at_most_keep(store: Store) -> None:
    for i in range(5):
        _night(store, f"2027-01-1{i}", float(i))
    _night(store, "2027-01-14", 9.0)  # a second run the same night replaces its value
    (s,) = store.burnin.series()
    assert (s.last_night, s.recent) == ("2027-01-14", (1.0, 2.0, 3.0, 9.0))
    _night(store, "2027-01-16", 5.0)  # a night without a run is nan
    _night(store, "2027-01-12", 7.0)  # an older night finishing late: history only
    (s,) = store.burnin.series()
    assert s.last_night == "2027-01-16" and s.recent[:2] == (3.0, 9.0) and s.recent[3] == 5.0
    assert s.recent[2] != s.recent[2]
    _night(store, "2027-02-28", 1.0)  # a long gap forgets the old nights
    (s,) = store.burnin.series()
    assert s.recent[-1] == 1.0 and len(s.recent) == 4 and all(v != v for v in s.recent[:-1])


def test_partial_and_failed_runs_do_not_touch_the_series(store: Store) -> None:
    _run(store, "n1", 40.0)
    _run(store, "n1", 1.0, status="partial", at=T0 + 100)
    _run(store, "n1", 2.0, status="failed", at=T0 + 200)
    (s,) = [x for x in store.burnin.series() if x.metric == "host_cpu_gflops"]
    assert s.last_value == 40.0
    assert store.burnin.latest_runs(T0 - 1)[0].status == "failed"


def test_a_run_marked_partial_is_not_revived_by_a_late_worker(store: Store) -> None:
    rid = store.burnin.submitted("n1", job_id="7", level="quick", night="2027-01-14")
    store.burnin.mark([rid], status="partial", reason="job 7 ended")
    store.burnin.finish(rid, "complete")
    (run,) = store.burnin.latest_runs(0)
    assert run.status == "partial" and run.reason == "job 7 ended"


def test_bad_input_is_refused_with_the_field(store: Store) -> None:
    rid = store.burnin.submitted("n1", job_id="1", level="quick", night="2027-01-14")
    with pytest.raises(InputError, match="burn-in night"):
        store.burnin.submitted("n1", job_id="1", level="quick", night="yesterday")
    with pytest.raises(InputError, match="burn-in result status"):
        store.burnin.record(rid, [BurninValue("x", "great")])
    with pytest.raises(InputError, match="burn-in status"):
        store.burnin.finish(rid, "running")
    with pytest.raises(InputError, match="node"):
        store.burnin.submitted("bad name;rm", job_id="1", level="quick", night="2027-01-14")
    assert store.counts()["burnin_results"] == 0


def test_history_lists_complete_runs_only(store: Store) -> None:
    _run(store, "n1", 40.0, at=T0)
    _run(store, "n1", 1.0, status="partial", at=T0 + 86400)
    _run(store, "n1", 38.0, at=T0 + 2 * 86400)
    assert [v for _, v in store.burnin.history("n1", "host_cpu_gflops")] == [40.0, 38.0]


# ----------------------------------------------------------------- `burnin report` (CLI)

def _config(tmp_path: Path, url: str, extra: str = "") -> Path:
    cfg = tmp_path / "sg.toml"
    # No Slurm here: scontrol points nowhere, so report works from the store alone.
    cfg.write_text(f'[store]\nurl = "{url}"\n[slurm]\nscontrol = "/nonexistent/scontrol"\n'
                   f'squeue = "/nonexistent/squeue"\n{extra}')
    return cfg


def test_report_cli_table_json_and_plot(tmp_path: Path) -> None:
    # The command on SQLite only: the store API under it runs on both engines above.
    cli_url = f"sqlite:///{tmp_path}/cli.db"
    Store.upgrade({"url": cli_url})
    store = Store.open(url=cli_url)
    now = __import__("time").time()
    for i in range(1, 8):
        _run(store, f"n{i}", 40.0 + 0.1 * i, at=now - 600)
    _run(store, "n8", 10.0, at=now - 600)
    _run(store, "n9", 40.0, at=now - 600, status="failed")
    store.burnin.mark([store.burnin.latest_runs(0, ["n9"])[0].id], reason="gpu-ecc: GPU 2 broke")
    cfg = _config(tmp_path, cli_url)
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    p = run_sg("burnin", "report", "--json", env=env)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    verdicts = {n["node"]: n["verdict"] for n in data["nodes"]}
    assert verdicts == {**{f"n{i}": "pass" for i in range(1, 8)}, "n8": "flagged", "n9": "failed"}
    n8 = next(n for n in data["nodes"] if n["node"] == "n8")
    assert n8["reason"] == "slurmguard: burnin: host_cpu_gflops 10 GFLOP/s = 0.25 of group median"
    assert data["counts"] == {"pass": 7, "flagged": 1, "failed": 1}
    assert "Slurm unavailable" in p.stderr
    g = next(g for g in data["groups"] if g["metric"] == "host_cpu_gflops")
    assert g["n"] == 8 and g["unit"] == "GFLOP/s"

    p = run_sg("burnin", "report", "--metric", "host_cpu_gflops", env=env)
    assert p.returncode == 0 and "n8" in p.stdout and "disk_write_seconds" not in p.stdout
    p = run_sg("burnin", "report", "--node", "n8", env=env)
    assert p.returncode == 0 and "score 0.25 < 0.90" in p.stdout

    png = tmp_path / "fleet.png"
    p = run_sg("burnin", "report", "--plot", str(png), env=env)
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png2 = tmp_path / "n8.png"
    p = run_sg("burnin", "report", "--node", "n8", "--plot", str(png2), env=env)
    assert p.returncode == 0 and png2.stat().st_size > 1000, p.stderr


def test_report_apply_needs_slurm_and_bad_since_is_one_line(tmp_path: Path) -> None:
    cli_url = f"sqlite:///{tmp_path}/cli.db"
    Store.upgrade({"url": cli_url})
    env = sg_env(SLURMGUARD_CONFIG=str(_config(tmp_path, cli_url)))
    p = run_sg("burnin", "report", "--apply", env=env)
    assert p.returncode != 0 and "Slurm is needed" in p.stderr and "Traceback" not in p.stderr
    p = run_sg("burnin", "report", "--since", "yesterday-ish", env=env)
    assert p.returncode == 6 and p.stderr.count("\n") == 1 and "--since" in p.stderr


def test_bad_burnin_config_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "sg.toml"
    cfg.write_text('[burnin]\ntime_limit = "an hour"\n')
    p = run_sg("burnin", "report", env=sg_env(SLURMGUARD_CONFIG=str(cfg)))
    assert p.returncode == 3 and "burnin.time_limit" in p.stderr
