"""Planted truth for `slurmguard incident`: a small fleet with known faults
(tests/support/incidentgen.py), read back by the real CLI: every fault
is one incident of the right cause with the right first signal, drain and return, nothing
else is an incident, the costs are the planted arithmetic, and `incident list` adds up to
`goodput`'s badput for the same jobs and window within the stated tolerance."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_sg
from support.incidentgen import GPUS_PER_NODE, plant
from support.sgserve import new_store

from slurmguard.store import Store


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    d = tmp_path_factory.mktemp("incidents")
    url = new_store(d)
    cfg = d / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n[checks.gpu]\nexpected_count = {GPUS_PER_NODE}\n')
    store = Store.open(url=url)
    try:
        truth = plant(store)
    finally:
        store.close()
    return cfg, truth


def sg_json(cfg: Path, *args: str) -> Any:
    p = run_sg("-c", str(cfg), *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_every_fault_is_one_incident_with_its_cause_times_and_cost(site):
    cfg, truth = site
    doc = sg_json(cfg, "incident", "list", "--since", "7d")
    got = {("shared" if i["shared"] else i["nodes"][0]): i for i in doc["incidents"]}
    assert sorted(got) == sorted(truth)  # no incident without a fault, none missed
    for key, t in truth.items():
        i = got[key]
        assert (i["cause"], i["first_signal"]["at"], i["drained_at"], i["returned_at"],
                i["outcome"], i["jobs"]) == (t["cause"], t["first"], t["drained"], t["returned"],
                                              t["outcome"], t["jobs"]), key
        for part in ("redone", "detect", "waiting"):
            assert i["gpu_hours"][part] == pytest.approx(t[part] / 3600, abs=1e-4), (key, part)
        if t["out"] is not None:
            assert i["gpu_hours"]["out_of_service"] == pytest.approx(t["out"] / 3600, abs=1e-4)
        else:  # still out: from the drain to the window's end
            assert i["gpu_hours"]["out_of_service"] > (time.time() - 60 - t["drained"]) * 8 / 3600
    assert got["shared"]["nodes"] == ["n07", "n08", "n09"]
    # n01's first sign is the Xid line's kernel time; n05's the healthcheck that drained it
    assert got["n01"]["first_signal"]["source"] == "kernel log (gpu-xid result)"
    assert got["n05"]["first_signal"] == {
        "at": truth["n05"]["first"], "source": "store: runs",
        "what": "first failing run on n05: healthcheck (ib-link)"}


def test_list_adds_up_to_goodputs_badput_within_the_tolerance(site):
    cfg, truth = site
    doc = sg_json(cfg, "incident", "list", "--since", "7d")
    gp = sg_json(cfg, "goodput", "--since", "7d")
    badput = sum(v for k, v in gp["gpu_hours"].items() if k != "productive")
    g = doc["goodput"]
    assert g["jobs"] == gp["jobs"] == 3
    assert g["tolerance_gpu_hours"] == pytest.approx(3e-4)
    assert abs(g["badput_gpu_hours"] - badput) <= g["tolerance_gpu_hours"]
    planted = sum(t[p] for t in truth.values() for p in ("redone", "detect", "waiting")) / 3600
    assert abs(g["explained_gpu_hours"] - planted) <= g["tolerance_gpu_hours"]
    job_costs = sum(doc["total_gpu_hours"][p] for p in ("redone", "detect", "waiting"))
    assert abs(job_costs - g["explained_gpu_hours"]) <= g["tolerance_gpu_hours"]
    assert g["no_incident_gpu_hours"] > 0  # job 103's own crash, the jobs' start-ups
    by_cause = doc["by_cause"]
    assert set(by_cause) == {"gpu-xid", "ib-link", "gpu-ecc", "fs-mount"}
    assert sum(v["total"] for v in by_cause.values()) == pytest.approx(
        doc["total_gpu_hours"]["total"], abs=1e-3)
    assert sum(v["incidents"] for v in doc["by_week"].values()) == 4


def test_show_tells_the_story_in_order_with_its_sources(site, tmp_path):
    cfg, truth = site
    iid = f"n01-{int(truth['n01']['drained'])}"
    d = sg_json(cfg, "incident", "show", iid)
    steps = [(s["lane"], s["what"].split(":")[0].split(" (")[0], s["source"]) for s in d["timeline"]]
    node = [w for lane, w, _ in steps if lane == "node"]
    assert node == ["first bad signal", "drained by slurmguard", "repair", "repair rung",
                    "repair proof", "repair verification", "repair",
                    "probation started"], node  # repair's return closes it (no clear)
    job = [w for lane, w, _ in steps if lane == "job 101"]
    assert job[0] == "run 0 started on n01,n02" and job[-2].startswith("ran again on n03,n04")
    assert {src for _, _, src in steps} >= {"kernel log (gpu-xid result)", "store: ledger",
                                            "sacct", "wrapper"}
    # The figures docs/incidents.md's example prints, as the text shows them.
    text = run_sg("-c", str(cfg), "incident", "show", iid).stdout
    for part, gpu_h in (("redone", "0.36"), ("detect", "0.49"), ("waiting", "0.71"),
                        ("out of service", "3.20"), ("total", "4.76")):
        assert f"\n{part:<16}{gpu_h}\n" in text, (part, text)
    png = tmp_path / "n01.png"
    p = run_sg("-c", str(cfg), "incident", "show", iid, "--plot", str(png))
    if "--plot needs matplotlib" not in p.stderr:
        assert p.returncode == 0 and png.read_bytes()[:4] == b"\x89PNG", p.stderr


def test_a_shared_incident_shows_every_node(site):
    cfg, truth = site
    d = sg_json(cfg, "incident", "show", f"shared-fs-mount-{int(truth['shared']['drained'])}")
    assert d["nodes"] == ["n07", "n08", "n09"] and d["shared"] and d["outcome"] == "returned"
    drains = [s["what"] for s in d["timeline"] if "drained by" in s["what"]]
    assert [w.split(":")[0] for w in drains] == ["n07", "n08", "n09"]


def test_cause_filter(site):
    cfg, truth = site
    doc = sg_json(cfg, "incident", "list", "--since", "7d", "--cause", "gpu-xid",
                  "--cause", "fs-mount")
    assert sorted(i["cause"] for i in doc["incidents"]) == ["fs-mount", "gpu-xid"]


def test_bad_input_is_one_line_naming_the_value(site):
    cfg, _ = site
    p = run_sg("-c", str(cfg), "incident", "show", "nonsense")
    assert p.returncode == 6 and "ID: expected NODE-EPOCH" in p.stderr
    p = run_sg("-c", str(cfg), "incident", "show", "n01-12345")
    assert p.returncode == 6 and "no incident 'n01-12345'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_each_timeline_ends_where_the_nodes_next_incident_begins(tmp_path) -> None:
    """A generated fleet (tests/support/fleetgen.py, 200 nodes x 30 days, seed 777) where a
    node fails again within a week of its return: `incident show` of the first incident
    stops before the second's first signal (it once listed the second's "probation
    started", and its plot spanned both)."""
    from support.fleetgen import generate

    from slurmguard.cli._common import iso

    truth = generate(str(tmp_path / "f.db"), nodes=200, days=30, seed=777)
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path}/f.db"\n')
    doc = sg_json(cfg, "incident", "list", "--since", iso(truth.since), "--until",
                  iso(truth.until))
    by_node: dict[str, list[dict[str, Any]]] = {}
    for i in doc["incidents"]:
        for n in i["nodes"]:
            by_node.setdefault(n, []).append(i)
    pairs = []
    for incs in by_node.values():
        incs.sort(key=lambda i: i["first_signal"]["at"])
        pairs += list(zip(incs, incs[1:], strict=False))
    # the case: the next incident begins within the week of probation after a return
    close = [(a, b) for a, b in pairs if a["returned_at"] is not None
             and b["first_signal"]["at"] - a["returned_at"] < 7 * 86400]
    assert close, pairs
    for a, b in close:
        d = sg_json(cfg, "incident", "show", a["id"])
        late = [s for s in d["timeline"] if s["at"] >= b["first_signal"]["at"]]
        assert late == [], (a["id"], b["id"], late)
