"""LBNL NHC, unpatched, with each node's view on a real 3-node Slurm (support/nhc_node.py): the
faults it can see drain the node with NHC's own reason through its own helper, the ones it
cannot see leave it in service, and NHC clears only its own marks (docs/testing.md, "LBNL NHC
as a peer"). The same injections the fleet day makes (support/fleet_day_faults.py)."""

from __future__ import annotations

import pytest
from fakehw.sysfs import write_ib_port
from support import fleet_day_plan as plan
from support.fleet_day import fleet_spec
from support.fleet_day_faults import clear, inject
from support.nhc_node import REASON_PREFIX, SEES, NHCNodes, require_nhc
from support.scaleharness import ScaleHarness, ScaleSpec, require_harness

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    require_harness()
    require_nhc()
    root = tmp_path_factory.mktemp("nhc")
    h = ScaleHarness.start(root / "h", fleet_spec(ScaleSpec(nodes=3, agents=0), slurmguard=False))
    try:
        yield h, NHCNodes(h, root / "nhc")
    finally:
        h.stop()


def _pass(h, nhc) -> dict[str, int]:
    return {n: nhc.run(n).returncode for n in h.nodes}


def test_a_healthy_node_passes_every_check_and_stays_in_service(site):
    h, nhc = site
    assert _pass(h, nhc) == {"n1": 0, "n2": 0, "n3": 0}
    assert h.drained() == {}
    assert "check_hw_ib 400 mlx5_1:1" in (nhc.confdir / "nhc.conf").read_text()
    assert max(nhc.pass_s) < 30  # one node's run (seconds), recorded


def test_faults_nhc_sees_drain_with_its_reason_and_an_xid_it_cannot_see_does_not(site):
    h, nhc = site
    faults = [plan.Fault(1, "ib-link", "n1", None), plan.Fault(1, "gpu-lost", "n2", None),
              plan.Fault(1, "xid79", "n3", None)]
    for f in faults:
        inject(h, f)
    try:
        assert _pass(h, nhc) == {"n1": 1, "n2": 1, "n3": 0}
        drained = h.drained()
        assert sorted(drained) == ["n1", "n2"], drained
        assert drained["n1"].startswith(f"{REASON_PREFIX} check_hw_ib"), drained
        assert "mlx5_1:1" in drained["n1"]
        assert drained["n2"].startswith(f"{REASON_PREFIX} check_nvsmi_healthmon"), drained
        assert "fallen off the bus" in drained["n2"]  # the stand-in's exit 15
        assert SEES["ib-link"][0] and SEES["gpu-lost"][0] and not SEES["xid79"][0]
    finally:
        clear(h, faults[1])
        clear(h, faults[2])
        write_ib_port(h.node_dir("n1") / "ib", "mlx5_1", 1)  # the link back (a new cable)
    # The faults gone: NHC's next run onlines the nodes it marked.
    assert _pass(h, nhc) == {"n1": 0, "n2": 0, "n3": 0}
    assert h.drained() == {}


def test_gpu_faults_nvidia_smi_does_not_report_leave_the_node_in_service(site):
    h, nhc = site
    faults = [plan.Fault(1, "ecc", "n1", None), plan.Fault(1, "nvlink", "n2", None),
              plan.Fault(1, "thermal", "n3", None)]
    for f in faults:
        inject(h, f)
    try:
        assert _pass(h, nhc) == {"n1": 0, "n2": 0, "n3": 0}
        assert h.drained() == {}
        assert not any(SEES[f.kind][0] for f in faults)
    finally:
        for f in faults:
            clear(h, f)


def test_the_shared_mount_lost_drains_and_nhc_clears_only_its_own_mark(site):
    h, nhc = site
    assert h.cluster is not None
    h.cluster.run("scontrol", "update", "nodename=n3", "state=drain",
                  "reason=slurmguard: someone else's drain", timeout=60)
    h.lose_shared_mount()
    try:
        assert _pass(h, nhc) == {"n1": 1, "n2": 1, "n3": 1}
        drained = h.drained()
        assert drained["n1"].startswith(f"{REASON_PREFIX} check_fs_mount"), drained
        assert str(h.shared) in drained["n2"]
        assert drained["n3"] == "slurmguard: someone else's drain"  # NHC keeps others' notes
    finally:
        h.restore_shared_mount()
    assert _pass(h, nhc) == {"n1": 0, "n2": 0, "n3": 0}
    assert h.drained() == {"n3": "slurmguard: someone else's drain"}  # not NHC's to clear
    h.undrain_all()
