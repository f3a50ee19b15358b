"""One guard for every drain path (docs/policy.md, "Every drain path").

Structurally: no module of the package calls ``.drain(`` but slurmguard/drainguard.py, and
only the Slurm adapter spells ``state=drain``. Then a table over every path that drains,
each run for real against one 4-node Slurm partition (cap 2: ``blast_max_percent = 50``) and
a real store: with two nodes already drained for the path's cause the path does not drain a
third (one ``drain_refused``, one alert); with two drained for another cause it drains (a
cause's first node always may), and the ledger holds exactly one ``drain`` for it.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.helpers import REPO, run_sg, sg_env
from support.sgserve import Serve, new_port, new_store, write_config

PACKAGE = REPO / "slurmguard"
FAULT = "slurmguard: fault-value: injected node fault"


def test_no_drain_outside_the_guarded_path() -> None:
    calls, spelled = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "drain" and rel != "slurmguard/drainguard.py"):
                calls.append(f"{rel}:{node.lineno}")
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.lower() == "state=drain"
                    and rel != "slurmguard/adapters/slurm/commands.py"):
                spelled.append(f"{rel}:{node.lineno}")
    assert calls == [], "drain through slurmguard.drainguard.guarded_drain"
    assert spelled == []


@dataclass
class Site:
    d: Path
    cluster: Any
    cfg_path: Path
    cfg: Any
    store: Any
    port: int

    def env(self, **extra: str) -> dict[str, str]:
        return sg_env(SLURMGUARD_CONFIG=str(self.cfg_path), SLURM_CONF=self.cluster.env["SLURM_CONF"],
                      PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}", FAULT_VALUE="bad", **extra)


def _site(d: Path, cluster: Any) -> Site:
    from slurmguard import config
    from slurmguard.store import Store

    d.mkdir(parents=True)
    url = new_store(d)
    port = new_port()
    cfg_path = write_config(d, store_url=url, port=port, report_timeout=60.0, extra="""
healthcheck = ["fault-value"]
[checks]
site_modules = ["support.faultsite"]
[policy]
blast_max_percent = 50.0
""")
    return Site(d, cluster, cfg_path, config.load(str(cfg_path), env={}), Store.open(url=url), port)


def _fault_record(node: str, hook: str = "healthcheck", fail: bool = True) -> dict:
    from slurmguard.contract import CheckResult, Health
    from slurmguard.node.record import make_record

    health = Health.UNHEALTHY if fail else Health.HEALTHY
    return make_record(node, hook, [CheckResult("fault-value", health, "injected node fault")],
                       "drain" if fail else "pass", FAULT if fail else "")


# -- the paths: each tries to drain `node` its own way, for real ---------------------------------

def hooks(s: Site, node: str) -> str:
    serve = Serve(s.cfg_path, s.port, env={"SLURM_CONF": s.cluster.env["SLURM_CONF"]}).start()
    try:
        p = run_sg("healthcheck", env=s.env(SLURMD_NODENAME=node))
        assert p.returncode in (0, 1), p
    finally:
        serve.stop()
    return "fault-value"


def gate(s: Site, node: str) -> str:
    s.store.nodes.record_results(_fault_record(node))
    p = run_sg("gate", env=s.env(SLURM_JOB_ID="77", SLURM_JOB_NODELIST=node))
    assert p.returncode == 1, p  # the job is refused on the node either way
    return "fault-value"


def policy_pass(s: Site, node: str) -> str:
    from slurmguard.serve.fleet import Fleet

    for i in range(3):  # three separate incidents: a lemon
        s.store.nodes.record_results({**_fault_record(node), "started": 1000.0 + i})
        s.store.nodes.record_results({**_fault_record(node, fail=False), "started": 1000.5 + i})
    s.store.nodes.record_results({**_fault_record(node), "started": 1004.0})
    views = s.store.nodes.policy_views([node], window=3600, now=1005.0)
    assert views[node].samples
    Fleet(s.cfg, s.store, slurm=s.cluster.cli()).evaluate([node], now=1005.0)
    return "fault-value"


def burnin_apply(s: Site, node: str) -> str:
    from slurmguard.burnin.apply import apply
    from slurmguard.burnin.verdict import NodeVerdict, Report
    from slurmguard.store.burnin_read import BurninRunRow

    run = BurninRunRow(9, node, "9", "quick", "n", "", 1.0, 1.0, 2.0, "complete", "", "", None)
    v = NodeVerdict(node, "", 9, "complete", "failed", "slurmguard: burnin: gpu-burn: 0 GFLOP/s",
                    "gpu-burn: 0 GFLOP/s")
    apply(s.cfg, s.store, Report({node: v}, (), {}), {node: run}, s.cluster.cli())
    return "burnin-gpu-burn"


def reconciler(s: Site, node: str) -> str:
    from slurmguard.reconcile.apply import Reconciler
    from slurmguard.reconcile.plan import SLURM_DRAIN, Action

    rec = Reconciler(s.cfg.section("reconcile"), s.cluster.cli(), None,
                     policy=s.cfg.section("policy"), store=s.store)
    out = rec.slurm_drain(Action(node, SLURM_DRAIN, "Kubernetes: NotReady",
                                 reason="slurmguard: k8s: NotReady"), 0.0)
    assert out.ok, out
    return "k8s-NotReady"


def admin(s: Site, node: str) -> str:
    p = run_sg("drain", node, "--reason", "replacing a fan", env=s.env(SUDO_USER="alice"))
    assert p.returncode == 0, p
    return "admin"


@pytest.mark.parametrize("path, guarded", [
    (hooks, True), (gate, True), (policy_pass, True), (burnin_apply, True), (reconciler, True),
    (admin, False),  # a human decision: never capped, but through the same path and ledger
], ids=lambda x: getattr(x, "__name__", str(x)))
def test_every_drain_path_asks_the_one_guard(slurm_cluster, tmp_path: Path,
                                             path: Callable[[Site, str], str], guarded: bool) -> None:
    cli = slurm_cluster.cli()
    cause = {"hooks": "fault-value", "gate": "fault-value", "policy_pass": "fault-value",
             "burnin_apply": "burnin-gpu-burn", "reconciler": "k8s-NotReady",
             "admin": "admin"}[path.__name__]
    for phase, seeded in (("same", cause), ("other", "ib-link")):
        for n in slurm_cluster.nodes:  # (an UNDRAIN sets NOT_RESPONDING until the next ping)
            if slurm_cluster.node(n).drained:
                slurm_cluster.run("scontrol", "update", f"nodename={n}", "state=undrain")
        s = _site(tmp_path / phase, slurm_cluster)
        try:
            for n in ("n1", "n2"):  # the cap's worth already drained for `seeded`
                assert cli.drain(n, f"slurmguard: {seeded}: seeded")
                s.store.nodes.record_event(n, "drain", "slurmguard", "seeded", source=seeded)
            assert path(s, "n3") == cause
            drained = slurm_cluster.node("n3").drained
            ours = [e for e in s.store.nodes.events(node="n3") if e.who == "slurmguard"]
            if phase == "same" and guarded:
                assert not drained, (path.__name__, ours)
                assert [e.kind for e in ours if e.kind in ("drain", "permit")] == []
                assert [e.source for e in ours if e.kind == "drain_refused"] == [cause]
                (alert,) = s.store.nodes.alerts()
                assert alert.cause == cause and "shared cause" in alert.message
            else:
                assert drained, (path.__name__, phase, ours, slurm_cluster.node("n3"))
                kinds = [e.kind for e in s.store.nodes.events(node="n3", kinds=["drain"])]
                assert kinds == ["drain"], kinds  # exactly one, and only because Slurm took it
                assert not s.store.nodes.events(kinds=["drain_refused"])
        finally:
            s.store.close()
