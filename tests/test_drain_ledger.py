"""The ledger is the truth (docs/policy.md, "The ledger"): an event ``drain`` only when Slurm
took it, ``drain_failed`` with Slurm's error, nothing for a node already drained; on a real
cluster, a real store, and a real serve for the records the hooks send."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.sgserve import Serve, new_port, new_store, write_config
from support.slurmcluster import write_shell_hook

from slurmguard import config
from slurmguard.adapters.slurm.commands import SlurmCLI
from slurmguard.contract import CheckResult, Health
from slurmguard.drainguard import StorePermit, guarded_drain, ledger_recent
from slurmguard.node import delivery
from slurmguard.node.record import make_record
from slurmguard.policy.params import PolicyParams
from slurmguard.store import Store

pytestmark = pytest.mark.slurm
REASON = "slurmguard: fs-mount: /shared is not mounted"


def test_a_drain_slurm_refuses_is_drain_failed_and_gives_its_slot_back(slurm_cluster,
                                                                       tmp_path: Path) -> None:
    store = Store.open(url=new_store(tmp_path))
    real = slurm_cluster.cli()
    # A real scontrol that answers `show` and fails every `update`, as a broken slurmctld
    # connection does mid-way (the error text is Slurm's own).
    broken_path = write_shell_hook(tmp_path / "scontrol", """
case "$1" in update) echo "slurm_update error: Unable to contact slurm controller" >&2; exit 1;; esac
exec /usr/bin/scontrol "$@"
""")
    broken = SlurmCLI({**slurm_cluster.slurm_section, "scontrol": broken_path}, env=slurm_cluster.env)
    scopes = {"fleet": frozenset(slurm_cluster.nodes), "partition:gpu": frozenset(slurm_cluster.nodes)}
    # cap 1 per cause in 4 nodes at 10 %
    permit = StorePermit(store, PolicyParams(), scopes, via="test")
    try:
        done = guarded_drain(broken, permit, "n1", "fs-mount", REASON, via="test", ledger=store)
        assert done.result == "failed" and "Unable to contact slurm controller" in done.detail
        assert not slurm_cluster.node("n1").drained
        (ev,) = store.nodes.events(node="n1", kinds=["drain", "drain_failed"])
        assert ev.kind == "drain_failed" and "Unable to contact" in ev.reason
        assert ledger_recent(store, 0) == {}  # the permit's slot was given back
        # so the cause's one drain is still there for a node Slurm can drain
        done = guarded_drain(real, permit, "n2", "fs-mount", REASON, via="test", ledger=store)
        assert done.result == "drained" and slurm_cluster.node("n2").drained
        # already drained (by us): nothing asked, nothing written
        before = store.counts()["events"]
        done = guarded_drain(real, permit, "n2", "fs-mount", REASON, via="test", ledger=store)
        assert done.result == "already" and store.counts()["events"] == before
        assert [e.kind for e in store.nodes.events(kinds=["drain"])] == ["drain"]
    finally:
        store.close()


@pytest.mark.parametrize("applied, kinds", [
    ("drained", ["drain"]),
    ("drain failed: scontrol: error: Unable to contact slurm controller", ["drain_failed"]),
    ("already drained or down", []),
    ("not drained: blast-radius guard: fs-mount failing on 3 nodes", []),
])
def test_serve_ledgers_what_the_hook_did(tmp_path: Path, applied: str, kinds: list[str]) -> None:
    url = new_store(tmp_path)
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=url, port=port)
    cfg = config.load(str(cfg_path), env={})
    serve = Serve(cfg_path, port, env={"SLURM_CONF": str(tmp_path / "no-slurm.conf")}).start()
    try:
        rec = make_record("n1", "prolog", [CheckResult("fs-mount", Health.UNHEALTHY, "gone")],
                          "drain", REASON)
        rec["applied"] = applied
        assert delivery.deliver(rec, cfg) == "sent"
        store = Store.open(url=url)
        evs = store.nodes.events(node="n1", kinds=["drain", "drain_failed", "permit"])
        assert [e.kind for e in evs] == kinds
        if kinds == ["drain_failed"]:
            assert "Unable to contact slurm controller" in evs[0].reason
        store.close()
    finally:
        serve.stop()
