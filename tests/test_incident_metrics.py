"""The lost-GPU-hours counter of serve's /metrics (slurmguard/serve/incident_metrics.py): only
closed incidents count, each once, the counter only goes up, and two replicas that take turns
leading count disjoint incidents (docs/incidents.md, "Prometheus"). On SQLite and a real
PostgreSQL: the incidents' store reads run on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.incidentgen import GPUS_PER_NODE, T0, drain, plant, record
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard import config
from slurmguard.metrics.registry import ServeMetrics
from slurmguard.serve.incident_metrics import LostGpuHours
from slurmguard.store import Store

pytestmark = pytest.mark.postgres
NAME = "slurmguard_incident_lost_gpu_hours_total"


@pytest.fixture
def site(tmp_path: Path, store_url: str) -> Any:  # noqa: F811
    url = store_url
    path = tmp_path / "sg.toml"
    path.write_text(f'[store]\nurl = "{url}"\n[checks.gpu]\nexpected_count = {GPUS_PER_NODE}\n')
    store = Store.open(url=url)
    plant(store)
    yield store, config.load(str(path), env={})
    store.close()


def values(m: ServeMetrics) -> dict[tuple[str, str], float]:
    out = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == NAME:
                out[(s.labels["cause"], s.labels["part"])] = s.value
    return out


def fault(store: Store, node: str, at: float, hours: float, check: str = "ib-link") -> float:
    """A closed incident with no job on the node: its loss is the node out of service."""
    record(store, node, at, check)
    drain(store, node, at, check)
    store.nodes.record_event(node, "clear", "admin:alice", "fixed", at=at + hours * 3600)
    return hours * GPUS_PER_NODE


def test_closed_incidents_count_once_and_the_counter_only_goes_up(site):
    store, cfg = site
    m = ServeMetrics()
    lost = LostGpuHours(m.incident_lost_gpu_hours, store, cfg, refresh=0.0)
    assert lost() == 0 and values(m) == {}  # the baseline: the planted past counts nowhere new
    want = fault(store, "n10", T0 + 40000, 1.0)
    assert lost() == 1
    got = values(m)
    # The planted jobs' incidents, read back from this engine: the store reads agree.
    from slurmguard.store.incidents import load

    incs = {i.id: i for i in load(store, since=T0 - 86400, until=T0 + 86400,
                                  gpus_per_node=GPUS_PER_NODE).incidents}
    assert sorted(i.cause for i in incs.values()) == ["fs-mount", "gpu-ecc", "gpu-xid", "ib-link",
                                                      "ib-link"]
    assert incs[f"n01-{int(T0 + 960)}"].first_signal.source == "kernel log (gpu-xid result)"
    assert got[("ib-link", "out_of_service")] == pytest.approx(want)
    assert got[("ib-link", "redone")] == 0.0
    assert lost() == 0 and values(m) == got  # counted once
    record(store, "n02", T0 + 50000, "gpu-ecc")  # an open incident: its cost is not final
    drain(store, "n02", T0 + 50000, "gpu-ecc")
    assert lost() == 0 and values(m) == got
    more = fault(store, "n04", T0 + 60000, 2.0)
    assert lost() == 1
    after = values(m)
    assert all(after[k] >= v for k, v in got.items())  # monotone
    assert after[("ib-link", "out_of_service")] == pytest.approx(want + more)


def test_replicas_taking_turns_count_disjoint_incidents(site):
    store, cfg = site
    a, b = ServeMetrics(), ServeMetrics()
    la = LostGpuHours(a.incident_lost_gpu_hours, store, cfg, refresh=0.0)
    lb = LostGpuHours(b.incident_lost_gpu_hours, store, cfg, refresh=0.0)
    la()  # a leads: baseline
    first = fault(store, "n10", T0 + 40000, 1.0)
    assert la() == 1
    lb.on_gain()  # b takes over (a's lease lapsed): b's baseline holds what a counted
    assert lb() == 0
    second = fault(store, "n04", T0 + 60000, 3.0)
    assert lb() == 1
    la.on_gain()  # a leads again: it must not count b's incident
    assert la() == 0
    total = sum(values(a).values()) + sum(values(b).values())
    assert total == pytest.approx(first + second)


def test_the_leaders_pass_runs_it_and_a_new_leadership_takes_a_new_baseline(site, tmp_path):
    from slurmguard.serve.fleet import Fleet

    store, cfg = site
    m = ServeMetrics()
    fleet = Fleet(cfg, store, metrics=m)
    lost = LostGpuHours(m.incident_lost_gpu_hours, store, cfg, refresh=0.0)
    fleet.periodic.append(lost)
    fleet.run_periodic(set(), full=True)  # the leader's full pass: the baseline
    fault(store, "n10", T0 + 40000, 1.0)
    fleet._on_gain()  # leadership (re)gained before the next pass: the closed one is not ours
    fleet.run_periodic(set(), full=True)
    assert values(m) == {}
    want = fault(store, "n04", T0 + 60000, 2.0)
    fleet.run_periodic(set(), full=True)
    assert values(m)[("ib-link", "out_of_service")] == pytest.approx(want)
