"""Admin commands over the store alone (SQLite and a real PostgreSQL): events, triage, nodes
with Slurm unreachable, and the one-line errors. The Slurm side: test_cli_admin_slurm.py."""

from __future__ import annotations

import json
import time

import pytest
from support.helpers import run_sg, sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record
from slurmguard.store import Store

pytestmark = pytest.mark.postgres


def rec(node: str, started: float, *fails: str, hook: str = "healthcheck",
        duration: float = 0.5) -> dict:
    results = [CheckResult("gpu-count", Health.HEALTHY)]
    results += [CheckResult(f, Health.UNHEALTHY, f"{f} broke") for f in fails]
    return make_record(node, hook, results, "drain" if fails else "pass",
                       f"slurmguard: {fails[0]}: broke" if fails else "", started=started,
                       duration=duration)


@pytest.fixture
def fleet(store_url: str, tmp_path):  # noqa: F811
    """A store with a history: n1 healthy, n2 a lemon, n3 failing now, n4..n5 in an fs alert,
    n6 slow; plus a config file naming it and a Slurm that cannot be reached."""
    now = time.time()
    s = Store.open(url=store_url)
    for i, node in enumerate(["n1", "n2", "n3", "n4", "n5", "n6"]):
        s.nodes.record_results(rec(node, now - 7200 - i, duration=9.0 if node == "n6" else 0.5))
    for k in range(4):
        s.nodes.record_results(rec("n2", now - 3000 + k * 60, "gpu-xid"))
    s.nodes.record_results(rec("n3", now - 100, "ib-link"))
    for node in ("n4", "n5"):
        s.nodes.record_results(rec(node, now - 50, "fs-mount"))
    s.nodes.set_flags("n2", lemon=True, lemon_reason="4 failures in 1h", lemon_since=now - 2000)
    s.nodes.record_event("n2", "drain", "slurmguard", "slurmguard: lemon: 4 failures in 1h",
                         source="lemon", at=now - 1900)
    s.nodes.record_event("n1", "drain", "admin:carol", "bios update", source="admin", at=now - 10 * 86400)
    s.nodes.open_alert("fs-mount", "partition:gpu", ["n4", "n5"], "fs-mount failing on 2 nodes of gpu")
    s.close()
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{store_url}"\n'
                   f'[slurm]\nscontrol = "{tmp_path}/no-scontrol"\nsinfo = "{tmp_path}/no-sinfo"\n')
    return cfg


def sg(cfg, *args: str, **env: str):
    return run_sg("-c", str(cfg), *args, env=sg_env(**env), timeout=120)


def test_events_ledger_across_actors_and_since(fleet) -> None:
    r = sg(fleet, "events", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(e["node"], e["kind"], e["actor"]) for e in rows] == [("n2", "drain", "slurmguard")]
    r = sg(fleet, "events", "--since", "30d", "--json")
    assert {e["actor"] for e in json.loads(r.stdout)} == {"slurmguard", "admin:carol"}
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 11 * 86400))
    r = sg(fleet, "events", "--since", iso, "--node", "n1")
    assert r.returncode == 0 and "admin:carol" in r.stdout and "bios update" in r.stdout
    assert "n2" not in r.stdout


def test_bad_since_and_hostile_node_are_one_line(fleet) -> None:
    r = sg(fleet, "events", "--since", "yesterday-ish")
    assert r.returncode == 6 and r.stderr.count("\n") == 1 and "--since" in r.stderr
    r = sg(fleet, "node", "show", "n1;reboot")
    assert r.returncode == 6 and r.stderr.startswith("slurmguard: error: node name")


def test_triage_ranks_with_evidence(fleet) -> None:
    r = sg(fleet, "triage", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    order = [s["node"] for s in out["suspects"]]
    assert order[0] == "n2", order  # the lemon with 4 failures
    assert order.index("n3") < order.index("n4")  # alert members count half
    assert "n1" not in order
    n4 = next(s for s in out["suspects"] if s["node"] == "n4")
    assert any("shared cause" in e for e in n4["evidence"])
    n6 = next(s for s in out["suspects"] if s["node"] == "n6")
    assert any(e.startswith("slow: healthcheck") for e in n6["evidence"])
    assert out["alerts"][0]["cause"] == "fs-mount"
    table = sg(fleet, "triage").stdout
    assert table.index("Suspected shared causes") < table.index("rank")


def test_unknown_state_or_node_is_an_input_error_not_a_fault(fleet) -> None:
    r = sg(fleet, "nodes", "--state", "drained,bogus")
    assert r.returncode == 6 and r.stderr.count("\n") == 1, r.stderr
    assert "--state: not a node state: 'bogus' (one of: " in r.stderr and "lemon" in r.stderr
    r = sg(fleet, "node", "show", "nosuch7")
    assert r.returncode == 6 and r.stderr.count("\n") == 1, r.stderr
    assert "node: 'nosuch7' is known neither to Slurm (" in r.stderr
    # a node the store knows is shown without Slurm, with a warning
    r = sg(fleet, "node", "show", "n2")
    assert r.returncode == 0 and "Slurm state unavailable" in r.stderr


def test_nodes_without_slurm_shows_store_view(fleet) -> None:
    r = sg(fleet, "nodes", "--json")
    assert r.returncode == 0, r.stderr
    assert "Slurm state unavailable" in r.stderr
    data = json.loads(r.stdout)
    by = {n["name"]: n for n in data["nodes"]}
    assert by["n2"]["lemon"] and by["n2"]["failures_7d"] == 4 and by["n2"]["state"] == "?"
    assert by["n3"]["failing_checks"] == ["ib-link"] and by["n3"]["last_health"] == "unhealthy"
    assert data["alerts"][0]["nodes"] == "n[4-5]"
    r = sg(fleet, "nodes", "--state", "lemon,unhealthy", "--json")
    assert sorted(n["name"] for n in json.loads(r.stdout)["nodes"]) == ["n2", "n3", "n4", "n5"]
    text = sg(fleet, "nodes").stdout
    assert text.startswith("FLEET ALERT #") and "fs-mount" in text.splitlines()[0]


def test_nodes_lists_the_repair_under_way(fleet, store_url: str) -> None:  # noqa: F811
    """`nodes` shows each node's repair episode from the ledger (the same fold as `node
    show`): n3 is being rebooted; an episode older than 30 days is history, not listed."""
    now = time.time()
    s = Store.open(url=store_url)
    ep = {"episode": 1, "cause": "ib-link"}
    s.nodes.record_event("n3", "repair_start", "slurmguard", "ib-link: evidence in /x",
                         source="repair", at=now - 60, details={**ep, "evidence": "/x"})
    s.nodes.record_event("n3", "repair_rung", "slurmguard", "reboot (attempt 1)", source="repair",
                         at=now - 59, details={**ep, "rung": "reboot", "arg": "", "attempt": 1})
    s.nodes.record_event("n1", "repair_return", "slurmguard", "returned", source="repair",
                         at=now - 40 * 86400, details={"episode": 1, "cause": "gpu-xid"})
    s.close()
    r = sg(fleet, "nodes", "--json")
    assert r.returncode == 0, r.stderr
    by = {n["name"]: n for n in json.loads(r.stdout)["nodes"]}
    assert by["n3"]["repair"]["state"] == "proving" and by["n3"]["repair"]["rung"] == "reboot"
    assert by["n3"]["repair"]["cause"] == "ib-link" and by["n3"]["repair"]["attempt"] == 1
    assert by["n1"]["repair"] is None and by["n2"]["repair"] is None
    lines = sg(fleet, "nodes", "n3").stdout.splitlines()
    head = next(line for line in lines if line.startswith("node"))
    row = next(line for line in lines if line.startswith("n3 "))
    assert "repair" in head and "proving (reboot #1)" in row


def test_node_show_timeline(fleet) -> None:
    r = sg(fleet, "node", "show", "n2", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    kinds = [t["kind"] for t in data["timeline"]]
    assert kinds.count("result") == 5 and "drain" in kinds
    assert data["timeline"] == sorted(data["timeline"], key=lambda t: t["at"], reverse=True)
    assert data["node"]["lemon_reason"] == "4 failures in 1h"


def test_unreachable_store_is_one_line(tmp_path) -> None:
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path}/missing/dir/sg.db"\n')
    for args in (["events"], ["triage"], ["drain", "n1", "--reason", "x"], ["resume", "n1"]):
        r = sg(cfg, *args)
        assert r.returncode == 5, (args, r.stderr)
        assert r.stderr.startswith("slurmguard: error:") and r.stderr.count("\n") == 1
