"""Planted truth for `slurmguard incident`: a week of a small fleet with known faults, written
through the code that writes a real store (hook records stored by ``record_results``, the
ledger events serve and repair write, a fleet alert opened and closed by the store's own
calls, jobs accounted by goodput's ``account`` from sacct-shaped allocations and run records,
with faults from ``store.goodput.node_faults``), then read back by the real CLI: every fault
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
from support.sgserve import new_store

from slurmguard.contract import CheckResult, Health
from slurmguard.goodput.account import Allocation, Fault, JobInputs, RunRecord, account
from slurmguard.node.record import make_record
from slurmguard.store import Store

T0 = float(int(time.time()) - 3 * 86400)  # three days ago: inside `--since 7d`
STEP = 10.0
GPUS_PER_NODE = 8


def record(store: Store, node: str, at: float, check: str = "", hook: str = "healthcheck",
           job: str | None = None) -> None:
    results = [CheckResult("gpu-count", Health.HEALTHY)]
    if check:
        results.append(CheckResult(check, Health.UNHEALTHY, f"{check} broke"))
    store.nodes.record_results(make_record(node, hook, results, "drain" if check else "pass",
                                           f"slurmguard: {check}: broke" if check else "",
                                           job_id=job, started=at, duration=0.1))


def drain(store: Store, node: str, at: float, check: str) -> None:
    # What serve's after_ingest writes for a hook's drain (serve/fleet.py), at the record's time.
    store.nodes.record_event(node, "drain", "slurmguard", f"slurmguard: {check}: broke",
                             source=check, at=at, details={"via": "healthcheck"})


def run_record(restart: int, start: float, first: int, last: int, resume: int | None,
               ckpt_every: int, verdict: str) -> RunRecord:
    """A wrapper's run: steps ``first..last`` every STEP seconds from ``start + 2 STEP``."""
    t = lambda n: start + 2 * STEP + (n - first) * STEP  # noqa: E731
    ckpts = tuple((t(n), n, 0.0) for n in range(first, last + 1) if n % ckpt_every == 0)
    return RunRecord(restart, start + 1.0, t(last) + 1, resume, verdict, (t(first), first),
                     (t(last), last), STEP, last - first, ckpts)


def account_job(store: Store, jid: str, allocs: list[Allocation], runs: list[RunRecord],
                state: str) -> dict[str, Any]:
    nodes = {n for a in allocs for n in a.nodes}
    faults = [Fault(n, at, why) for n, at, why in store.goodput.node_faults(
        nodes, since=allocs[0].start, until=allocs[-1].end + 3600)]
    b = account(JobInputs(jid, tuple(allocs), tuple(runs), tuple(faults), state=state)).to_dict()
    store.goodput.record([b])
    return b


def plant(store: Store) -> dict[str, dict[str, Any]]:
    """The faults, with what each incident must be; healthy noise around them."""
    for i in range(1, 11):
        for k in range(12):  # a healthcheck every 6 h on every node
            record(store, f"n{i:02d}", T0 - 86400 + k * 21600 + i)
    truth: dict[str, dict[str, Any]] = {}
    # 1. gpu-xid on n01 under a 2-node job: its epilog sees it first, the healthcheck drains;
    #    repair reboots, verifies and returns the node on probation.
    record(store, "n01", T0 + 900, "gpu-xid", hook="epilog", job="101")
    record(store, "n01", T0 + 960, "gpu-xid")
    drain(store, "n01", T0 + 960, "gpu-xid")
    for at, kind, why in ((T0 + 1100, "repair_start", "gpu-xid: evidence in /x"),
                          (T0 + 1200, "repair_rung", "reboot (attempt 1)"),
                          (T0 + 1500, "repair_outcome", "reboot: proven: boot id changed"),
                          (T0 + 1600, "repair_burnin", "quick burn-in: job 9 in r1"),
                          (T0 + 2400, "repair_return", "verified")):
        store.nodes.record_event("n01", kind, "slurmguard", why, at=at)
    store.nodes.record_event("n01", "clear", "slurmguard", "repair: verified", at=T0 + 2400)
    store.nodes.return_node("n01", "slurmguard", "repair: verified", at=T0 + 2400)
    a = [Allocation(T0, T0 + 1000, ("n01", "n02"), 16, "NODE_FAIL"),
         Allocation(T0 + 1150, T0 + 3000, ("n03", "n04"), 16, "COMPLETED")]
    r = [run_record(0, T0, 1, 88, None, 20, "infra"),  # checkpoint at 80: 8 steps to redo
         run_record(1, T0 + 1150, 81, 250, 80, 20, "success")]
    account_job(store, "101", a, r, "COMPLETED")
    last0 = T0 + 2 * STEP + 87 * STEP  # run 0's last step: then the job hung on the fault
    truth["n01"] = {"cause": "gpu-xid", "first": T0 + 900, "drained": T0 + 960,
                    "returned": T0 + 2400, "outcome": "returned", "jobs": ["101"],
                    "redone": 8 * STEP * 16, "detect": (T0 + 1000 - last0) * 16,
                    "waiting": (150 + STEP) * 16, "out": 1440 * GPUS_PER_NODE}
    # 2. ib-link on n05, no job on it; an admin returns it 6 h later.
    record(store, "n05", T0 + 5000, "ib-link")
    drain(store, "n05", T0 + 5000, "ib-link")
    store.nodes.record_event("n05", "clear", "admin:alice", "cable reseated", at=T0 + 5000 + 21600)
    truth["n05"] = {"cause": "ib-link", "first": T0 + 5000, "drained": T0 + 5000,
                    "returned": T0 + 26600, "outcome": "returned", "jobs": [],
                    "redone": 0.0, "detect": 0.0, "waiting": 0.0, "out": 21600 * GPUS_PER_NODE}
    # 3. gpu-ecc on n06 ends a 1-node job for good (no requeue); repair tickets it: still out.
    record(store, "n06", T0 + 8000, "gpu-ecc")
    drain(store, "n06", T0 + 8000, "gpu-ecc")
    store.nodes.record_event("n06", "repair_ticket", "slurmguard", "permanent: ticket 77", at=T0 + 8300)
    account_job(store, "102", [Allocation(T0 + 7000, T0 + 8050, ("n06",), 8, "FAILED")],
                [run_record(0, T0 + 7000, 1, 100, None, 30, "failed")], "FAILED")
    truth["n06"] = {"cause": "gpu-ecc", "first": T0 + 8000, "drained": T0 + 8000,
                    "returned": None, "outcome": "ticket", "jobs": ["102"],
                    "redone": 10 * STEP * 8, "detect": (T0 + 8050 - (T0 + 7000 + 101 * STEP)) * 8,
                    "waiting": 0.0, "out": None}
    # 4. A shared cause: fs-mount on n07-n09 at once; the guard's fleet alert; all returned.
    for k, n in enumerate(("n07", "n08", "n09")):
        record(store, n, T0 + 20000 + k, "fs-mount")
        drain(store, n, T0 + 20000 + k, "fs-mount")
        store.nodes.record_event(n, "clear", "admin:bob", "filesystem back", at=T0 + 24000)
    alert, _ = store.nodes.open_alert("fs-mount", "fleet", ["n07", "n08", "n09"], "shared",
                                      now=T0 + 20002)
    store.nodes.close_alert(alert.id, now=T0 + 24000)
    truth["shared"] = {"cause": "fs-mount", "first": T0 + 20000, "drained": T0 + 20000,
                       "returned": T0 + 24000, "outcome": "returned", "jobs": [],
                       "redone": 0.0, "detect": 0.0, "waiting": 0.0,
                       "out": sum(4000 - k for k in range(3)) * GPUS_PER_NODE}
    # Noise that is no incident: a job's own crash on n10, a failing run that drained nothing.
    account_job(store, "103", [Allocation(T0 + 30000, T0 + 31000, ("n10",), 8, "FAILED")],
                [run_record(0, T0 + 30000, 1, 90, None, 40, "failed")], "FAILED")
    record(store, "n10", T0 + 30500, "gpu-thermal")
    return truth


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
                    "repair proof", "repair verification", "repair", "returned",
                    "probation started"], node
    job = [w for lane, w, _ in steps if lane == "job 101"]
    assert job[0] == "run 0 started on n01,n02" and job[-2].startswith("ran again on n03,n04")
    assert {src for _, _, src in steps} >= {"store: runs", "store: ledger", "sacct", "wrapper"}
    png = tmp_path / "n01.png"
    p = run_sg("-c", str(cfg), "incident", "show", iid, "--plot", str(png))
    if "--plot needs matplotlib" not in p.stderr:
        assert p.returncode == 0 and png.read_bytes()[:4] == b"\x89PNG", p.stderr


def test_bad_input_is_one_line_naming_the_value(site):
    cfg, _ = site
    p = run_sg("-c", str(cfg), "incident", "show", "nonsense")
    assert p.returncode == 6 and "ID: expected NODE-EPOCH" in p.stderr
    p = run_sg("-c", str(cfg), "incident", "show", "n01-12345")
    assert p.returncode == 6 and "no incident 'n01-12345'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
