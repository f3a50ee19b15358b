"""repair's kill switch (docs/repair.md, "Fleet safety"): `repair pause` turns on a switch in
the store, so every serve replica's repair pass sees it whichever host the admin typed it
on; a store that cannot be reached falls back to this host's pause file, says so, and exits
EXIT_STORE. Over SQLite and a real PostgreSQL."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard import config
from slurmguard.adapters.slurm.commands import SlurmCLI
from slurmguard.errors import EXIT_STORE
from slurmguard.repair.loop import RepairPass
from slurmguard.store import Store
from slurmguard.store.switches import REPAIR_PAUSED

pytestmark = pytest.mark.postgres


def host_cfg(tmp_path: Path, name: str, url: str) -> Path:
    """One controller host's config: the shared store, a pause file of its own."""
    d = tmp_path / name
    d.mkdir()
    p = d / "sg.toml"
    p.write_text(f'[store]\nurl = "{url}"\n[repair]\npause_file = "{d}/repair.paused"\n')
    return p


def repair_pass(cfg_path: Path) -> RepairPass:
    cfg = config.load(str(cfg_path), env={})
    return RepairPass(cfg, Store.open(cfg), SlurmCLI(cfg.section("slurm")))


def test_pause_on_one_host_holds_the_repair_pass_of_another(tmp_path: Path,
                                                            store_url: str) -> None:  # noqa: F811
    admin_host, serve_host = host_cfg(tmp_path, "ctl1", store_url), host_cfg(tmp_path, "ctl2", store_url)
    rp = repair_pass(serve_host)
    assert rp.paused() is None
    r = run_sg("-c", str(admin_host), "repair", "pause", "--reason", "firmware rollout",
               env=sg_env(SUDO_USER="carol"))
    assert r.returncode == 0 and r.stdout.strip() == "repair: paused (every serve replica)", r
    why = rp.paused()
    assert why is not None and why.startswith("paused by admin:carol at ")
    assert why.endswith(": firmware rollout")
    assert not (tmp_path / "ctl1" / "repair.paused").exists()  # no stray file on the admin's host
    r = run_sg("-c", str(admin_host), "repair", "pause", env=sg_env())
    assert r.returncode == 0 and r.stdout.strip() == "repair: already paused"
    assert rp.store.switches.get(REPAIR_PAUSED).actor == "admin:carol"  # the first setter kept
    r = run_sg("-c", str(serve_host), "repair", "resume", env=sg_env())
    assert r.returncode == 0 and r.stdout.strip() == "repair: resumed"
    assert rp.paused() is None
    # The host's own file still pauses that host's serve (the store-down route).
    (tmp_path / "ctl2" / "repair.paused").write_text("by hand\n")
    assert rp.paused() == f"paused by the file {tmp_path / 'ctl2' / 'repair.paused'}"
    rp.store.close()


def test_concurrent_pauses_turn_the_switch_on_once(store_url: str) -> None:  # noqa: F811
    store = Store.open(url=store_url)
    got: list[bool] = []
    go = threading.Barrier(8)

    def pause(i: int) -> None:
        go.wait()
        got.append(store.switches.turn_on(REPAIR_PAUSED, actor=f"admin:a{i}"))

    threads = [threading.Thread(target=pause, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert sorted(got) == [False] * 7 + [True]
        assert store.switches.turn_off(REPAIR_PAUSED) is True
        assert store.switches.turn_off(REPAIR_PAUSED) is False
        assert store.switches.get(REPAIR_PAUSED) is None
    finally:
        store.close()


def test_store_unreachable_pauses_this_host_by_file_and_says_so(tmp_path: Path) -> None:
    cfg = tmp_path / "sg.toml"
    pause_file = tmp_path / "repair.paused"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/no-such-dir/store.db"\n'
                   f'[repair]\npause_file = "{pause_file}"\n')
    r = run_sg("-c", str(cfg), "repair", "pause", env=sg_env(SUDO_USER="dave"))
    assert r.returncode == EXIT_STORE, r
    assert pause_file.read_text().endswith("paused by admin:dave: \n")
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "the store is unreachable" in lines[0]
    assert f"paused by the file {pause_file} on this host only" in lines[0]
