"""The runner: budgets, hung/raising/absent sources, check bugs, saved state."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from slurmguard import config
from slurmguard.contract import Health
from slurmguard.errors import ConfigError
from slurmguard.node.runner import registry, run_checks, select_checks


def make_cfg(tmp_path: Path, extra: str = "") -> config.Config:
    p = tmp_path / "sg.toml"
    p.write_text(
        f"""
[hooks]
state_dir = "{tmp_path / 'state'}"
check_timeout = 1.0
check = ["fault-value", "fault-hang", "fault-gather-raises", "fault-check-raises",
         "fault-unsupported", "fault-counter"]
[checks]
site_modules = ["support.faultsite"]
{extra}
"""
    )
    return config.load(str(p), env={})


def run(cfg, hook="check", node="n1", **kw):
    available, sources = registry(cfg)
    checks = select_checks(cfg, hook, available=available)
    return run_checks(cfg, checks, hook=hook, node=node, sources=sources, **kw)


def test_each_fault_maps_to_its_health(tmp_path):
    cfg = make_cfg(tmp_path)
    t0 = time.monotonic()
    rep = run(cfg)
    elapsed = time.monotonic() - t0
    by = {r.name: r for r in rep.results}
    assert by["fault-value"].health is Health.HEALTHY
    assert by["fault-hang"].health is Health.ERROR
    assert "timed out" in by["fault-hang"].reason
    assert by["fault-gather-raises"].health is Health.ERROR
    assert "injected gather failure" in by["fault-gather-raises"].reason
    assert by["fault-check-raises"].health is Health.ERROR
    assert "ZeroDivisionError" in by["fault-check-raises"].reason
    assert by["fault-unsupported"].health is Health.UNSUPPORTED
    assert rep.abandoned == ("fault-hang",)
    # the hung source costs its timeout, not more
    assert 0.9 <= elapsed < 2.0


def test_deadline_caps_the_per_source_timeout(tmp_path):
    cfg = make_cfg(tmp_path)
    t0 = time.monotonic()
    rep = run(cfg, deadline=time.monotonic() + 0.3)
    assert time.monotonic() - t0 < 0.9
    assert {r.name for r in rep.results if "timed out" in r.reason} == {"fault-hang"}


def test_state_persists_between_runs(tmp_path):
    cfg = make_cfg(tmp_path)
    first = {r.name: r for r in run(cfg).results}["fault-counter"]
    second = {r.name: r for r in run(cfg).results}["fault-counter"]
    assert first.details["runs"] == 1 and second.details["runs"] == 2


def test_state_is_per_node_on_a_host_with_several_slurmd(tmp_path):
    # `slurmd -N n1` and `slurmd -N n2` on one host share hooks.state_dir: each node keeps
    # its own state (one node's latched Xid must not fail the other).
    import json

    from slurmguard.node.runner import forget_state

    cfg = make_cfg(tmp_path)
    runs = {n: {r.name: r for r in run(cfg, node=n).results}["fault-counter"].details["runs"]
            for n in ("n1", "n1", "n2")}
    assert runs == {"n1": 2, "n2": 1}
    state = tmp_path / "state"
    assert sorted(p.name for p in state.iterdir() if p.suffix == ".json") == ["state.n1.json",
                                                                         "state.n2.json"]
    assert forget_state(cfg, ["fault-counter"], "n2") == ["fault-counter"]
    assert json.loads((state / "state.n1.json").read_text())["fault-counter"]["runs"] == 2
    # A hostile name never becomes a path: the host's file is used.
    run(cfg, node="../x")
    assert (state / "state.json").exists() and not (tmp_path / "x.json").exists()


def test_a_hosts_old_state_file_is_carried_over_to_its_node(tmp_path):
    import json

    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps({"fault-counter": {"runs": 5}}))
    cfg = make_cfg(tmp_path)
    assert {r.name: r for r in run(cfg).results}["fault-counter"].details["runs"] == 6
    assert json.loads((state / "state.n1.json").read_text())["fault-counter"]["runs"] == 6


def test_unwritable_state_dir_is_a_warning_not_a_fault(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg = make_cfg(tmp_path, "")
    cfg._data["hooks"]["state_dir"] = str(blocker / "sub")
    rep = run(cfg)
    assert rep.warnings and "cannot save check state" in rep.warnings[0]
    assert {r.name: r for r in rep.results}["fault-counter"].health is Health.HEALTHY


def test_only_needed_sources_are_gathered(tmp_path, monkeypatch):
    cfg = make_cfg(tmp_path)
    available, sources = registry(cfg)
    checks = select_checks(cfg, "check", only=["fault-value"], available=available)
    before = threading.active_count()
    rep = run_checks(cfg, checks, hook="check", node="n1", sources=sources)
    assert [r.name for r in rep.results] == ["fault-value"]
    assert rep.abandoned == ()
    assert threading.active_count() <= before + 1


def test_unknown_check_names_are_config_errors(tmp_path):
    cfg = make_cfg(tmp_path)
    with pytest.raises(ConfigError, match="--only: unknown check 'nope'"):
        select_checks(cfg, "check", only=["nope"])
    cfg2 = make_cfg(tmp_path, 'disabled = ["ghost"]')
    with pytest.raises(ConfigError, match="checks.disabled: unknown check 'ghost'"):
        select_checks(cfg2, "check")


def test_disabled_checks_do_not_run(tmp_path):
    cfg = make_cfg(tmp_path, 'disabled = ["fault-hang"]')
    names = [c.name for c in select_checks(cfg, "check")]
    assert "fault-hang" not in names and "fault-value" in names


def test_site_module_that_cannot_import_is_a_config_error(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('[checks]\nsite_modules = ["no_such_module_xyz"]\n')
    cfg = config.load(str(p), env={})
    with pytest.raises(ConfigError, match="checks.site_modules: cannot import 'no_such_module_xyz'"):
        registry(cfg)


def test_a_run_loads_the_state_only_with_the_nodes_lock(tmp_path):
    """A prolog and a health check gathering at the same moment must not both count one change:
    a run loads, evaluates and saves its node's state holding the state lock, so it evaluates
    against what the other run saved (here 41 runs, written while the lock was held)."""
    import fcntl
    import json
    import os

    cfg = make_cfg(tmp_path)
    run(cfg)  # the state file and its lock exist
    state = tmp_path / "state" / "state.n1.json"
    fd = os.open(str(state) + ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run, mid-save
    out: list = []
    t = threading.Thread(target=lambda: out.append(run(cfg)))
    t.start()
    time.sleep(0.5)
    assert not out, "the run evaluated while another run held the node's state"
    state.write_text(json.dumps({"fault-counter": {"runs": 41}}))
    os.close(fd)
    t.join(5)
    (rep,) = out
    assert {r.name: r for r in rep.results}["fault-counter"].details["runs"] == 42
    assert not rep.warnings


def test_a_lock_held_too_long_is_a_warning_and_the_run_goes_on(tmp_path):
    import fcntl
    import os

    from slurmguard.node import runner

    cfg = make_cfg(tmp_path)
    run(cfg)
    fd = os.open(str(tmp_path / "state" / "state.n1.json") + ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a stuck run
    try:
        t0 = time.monotonic()
        rep = run(cfg)
        waited = time.monotonic() - t0
    finally:
        os.close(fd)
    assert runner.STATE_LOCK_WAIT <= waited < runner.STATE_LOCK_WAIT + 1.5
    assert any("locked by another run" in w for w in rep.warnings), rep.warnings
    assert {r.name: r for r in rep.results}["fault-counter"].details["runs"] == 2
