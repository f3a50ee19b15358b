"""A small fleet with planted faults for `slurmguard incident` (tests/test_incident_planted.py,
tests/test_incident_metrics.py), written through the code that writes a real store: hook
records stored by ``record_results``, the ledger events serve and repair write, a fleet alert
opened and closed by the store's own calls, and jobs accounted by goodput's ``account`` from
sacct-shaped allocations and run records, with faults from ``store.goodput.node_faults``.
``plant`` returns what each incident must be."""

from __future__ import annotations

import time
from typing import Any

from slurmguard.contract import CheckResult, Health
from slurmguard.goodput.account import Allocation, Fault, JobInputs, RunRecord, account
from slurmguard.node.record import make_record
from slurmguard.store import Store

T0 = float(int(time.time()) - 3 * 86400)  # three days ago: inside `--since 7d`
STEP = 10.0
GPUS_PER_NODE = 8


def record(store: Store, node: str, at: float, check: str = "", hook: str = "healthcheck",
           job: str | None = None, details: dict[str, Any] | None = None) -> None:
    results = [CheckResult("gpu-count", Health.HEALTHY)]
    if check:
        results.append(CheckResult(check, Health.UNHEALTHY, f"{check} broke", details or {}))
    store.nodes.record_results(make_record(node, hook, results, "drain" if check else "pass",
                                           f"slurmguard: {check}: broke" if check else "",
                                           job_id=job, started=at, duration=0.1))


def drain(store: Store, node: str, at: float, check: str) -> int:
    """What serve's after_ingest writes for a hook's drain (serve/fleet.py), at the record's
    time; the drain's ledger id (repair's steps name it as their ``episode``)."""
    return store.nodes.record_event(node, "drain", "slurmguard", f"slurmguard: {check}: broke",
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
    # the Xid line's kernel time, as the gpu-xid check keeps it: 30 s before the epilog read it
    xid = {"kind": "xid", "pci": "0000:3a:00", "xid": 79, "class": "drain", "at": T0 + 870,
           "message": "GPU has fallen off the bus."}
    record(store, "n01", T0 + 900, "gpu-xid", hook="epilog", job="101",
           details={"events": [xid], "new_xids": 1, "source": "kmsg"})
    record(store, "n01", T0 + 960, "gpu-xid")
    ep = drain(store, "n01", T0 + 960, "gpu-xid")
    # repair's steps as repair/loop.py writes them: each names its episode (the drain's id)
    for at, kind, why, more in (
            (T0 + 1100, "repair_start", "gpu-xid: evidence in /x", {"cause": "gpu-xid:79"}),
            (T0 + 1200, "repair_rung", "reboot (attempt 1)", {"rung": "reboot"}),
            (T0 + 1500, "repair_outcome", "reboot: proven: boot id changed",
             {"rung": "reboot", "result": "proven"}),
            (T0 + 1600, "repair_burnin", "quick burn-in: job 9 in r1", {"rung": "reboot"}),
            (T0 + 2400, "repair_return", "verified", {})):
        store.nodes.record_event("n01", kind, "slurmguard", why, at=at,
                                 details={"episode": ep, **more})
    # as repair's return does (repair/loop.py): the return event and probation, no "clear"
    store.nodes.return_node("n01", "slurmguard", "repair: verified", at=T0 + 2400)
    a = [Allocation(T0, T0 + 1000, ("n01", "n02"), 16, "NODE_FAIL"),
         Allocation(T0 + 1150, T0 + 3000, ("n03", "n04"), 16, "COMPLETED")]
    r = [run_record(0, T0, 1, 88, None, 20, "infra"),  # checkpoint at 80: 8 steps to redo
         run_record(1, T0 + 1150, 81, 250, 80, 20, "success")]
    account_job(store, "101", a, r, "COMPLETED")
    last0 = T0 + 2 * STEP + 87 * STEP  # run 0's last step: then the job hung on the fault
    truth["n01"] = {"cause": "gpu-xid", "first": T0 + 870, "drained": T0 + 960,
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
    ep = drain(store, "n06", T0 + 8000, "gpu-ecc")
    store.nodes.record_event("n06", "repair_ticket", "slurmguard", "permanent: ticket 77",
                             at=T0 + 8300, details={"episode": ep})
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
