"""The fleet day's fifth arm, ``shadow`` (docs/install.md "Rollout: observe, compare, act"):
LBNL NHC acting exactly as in the ``nhc`` arm, and slurmguard installed on the same cluster
observing (``[policy] mode = "observe"``): its Prolog, Epilog, PrologSlurmctld and, each tick
beside NHC, its health check run on every node, what it would have done goes to the ledger as
would-events, and nothing of slurmguard's changes Slurm. After the day, `slurmguard shadow
report --json` on the cluster's store is compared with the day's truth:

- the truth: each injected fault (each node's share of the shared hang a fault of its own)
  and who saw it, from the checkers' own verdicts, not from the ledger or the report: NHC saw
  it when one of its runs on the node while the fault was on failed on the check that reads
  it (NHC_CHECK; none for a kind it cannot see); slurmguard's checks saw it when a run of any
  hook of slurmguard's on the node (health check, prolog, epilog: the store's results) had
  the check the fault's cause names unhealthy while it was on (a run across the fault's
  start or end counts by its verdict: it says whether the run read the fault); where the
  guard held the node's drain for a second look (its ``drain_held`` event: many nodes
  failing one shared-service check at once), only such a run at least
  ``policy.second_look_delay`` after the hold counts, as acting would have drained only then;
- the report: ``only_slurmguard`` must be the faults NHC missed and slurmguard saw, ``both``
  those both saw, ``only_incumbent`` those only NHC saw, as (node, cause) pairs with the
  plan's causes (fleet_day_plan.KINDS) which are slurmguard's check names; a row of a cause no
  fault has (the fleet policy's ``flapping``, a check name NHC's reason maps to otherwise) is
  set apart with its node's fault (``mapped``; none on seed 27); no row of a node without a
  fault of that cause (``extra``);
- slurmguard changed nothing: its Slurm tools are a shim (support/slurmshim.py) that refuses
  and logs every change (NHC's helpers call the real tools, as on a site where each has its
  own), and every out-of-service reason serve's node-state history recorded is NHC's; every
  health check exited 0, and no prolog or epilog failed in slurmd's or slurmctld's log.

The arm's harness has Slurm accounting of its own (``ScaleSpec.accounting``: a slurmdbd on a
private MariaDB, 8 GPUs a node as a GRES, each job asking for its nodes' GPUs), so the
report's rows carry the GPU-hours of the jobs that ran on each node and how they ended, and
its summary what acting would have saved and cost. The incumbent's drains are read from
serve's node-state history (``--incumbent history``), what :meth:`ShadowDay.settle_history`
waits for: Slurm accounting's node events lag slurmctld, by slurmdbd's own schedule.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from support import fleet_day_plan as plan
from support.fleet_day import HOOK_BUDGET_S, Day
from support.fleet_day_arms import StartLine
from support.helpers import sg_env
from support.nhc_node import REASON_PREFIX, NHCNodes
from support.scaleharness import ScaleHarness, ScaleSpec
from support.slurmshim import SlurmShim
from support.wait import wait_for

SHADOW = "shadow"
LABEL = "Slurm + LBNL NHC, slurmguard observing"
# The NHC check (support/nhc_node.py site_conf) that reads each kind NHC can see.
NHC_CHECK = {"ib-link": "check_hw_ib", "gpu-lost": "check_nvsmi_healthmon",
             "shared-fs": "check_fs_mount"}
_FAILED = re.compile(r"Health check failed:\s+(\w+)")
# slurmd's and slurmctld's lines for a hook that failed (Slurm 22.05-25.x wording).
_HOOK_FAILED = re.compile(r"(prolog|epilog)[ _]?(slurmctld)?[^\n]*(failed|exit status [1-9])",
                          re.IGNORECASE)


def shadow_spec(spec: ScaleSpec) -> ScaleSpec:
    """The shadow arm's cluster: slurmguard's hooks in slurm.conf, observing; no repair; Slurm
    accounting (the report's jobs and GPU-hours)."""
    return replace(spec, slurmguard=True, repair=None, policy_mode="observe", accounting=True)


def observing(h: ScaleHarness) -> bool:
    return h.spec.policy_mode == "observe"


@dataclass(frozen=True)
class Look:
    """One run of a checker (``nhc`` or ``slurmguard``) on one node."""

    who: str
    node: str
    start: float
    end: float
    rc: int
    failed: str = ""  # NHC: the check that failed


class ShadowNHC(NHCNodes):
    """NHC as the nhc arm runs it, but its helpers call the real Slurm tools: the harness's
    bin/ is slurmguard's, a shim that refuses changes in this arm."""

    def env(self, node: str) -> dict[str, str]:
        return {**super().env(node), "SLURM_SINFO": "/usr/bin/sinfo",
                "SLURM_SCONTROL": "/usr/bin/scontrol"}


def install_shim(h: ScaleHarness) -> SlurmShim:
    """The harness's Slurm tools (what every slurmguard config names) replaced, each at once
    (a rename: serve reads through them all the while), by the observe-mode shim."""
    shim = SlurmShim(h.root / "shim")
    for tool in ("scontrol", "sinfo", "squeue"):
        tmp = h.root / "bin" / f".{tool}.shim"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(shim.tools[tool])
        os.replace(tmp, h.root / "bin" / tool)
    return shim


class ShadowDay(Day):
    """The nhc arm's day (NHC acts: the Day's mode is ``nhc``, so jobs run as without
    slurmguard and nobody repairs) with slurmguard's health check run after NHC on each node,
    each tick; both runs recorded (:class:`Look`)."""

    def __init__(self, h: ScaleHarness, faults: list[plan.Fault], day_s: float, tick: float,
                 step_s: float, every: int, parallel: int, start: StartLine | None = None) -> None:
        assert observing(h), "the shadow arm's harness observes (shadow_spec)"
        self.shim = install_shim(h)
        super().__init__(h, "nhc", faults, day_s, tick, step_s, every, parallel,
                         nhc=ShadowNHC(h, h.root / "nhc"), start=start)
        self.looks_done: list[Look] = []
        self.looks_lock = threading.Lock()

    def checks(self, stop: threading.Event) -> None:
        assert self.nhc is not None

        def one(n: str) -> None:
            t = time.time()
            r = self.nhc.run(n)  # type: ignore[union-attr]
            t1 = time.time()
            m = _FAILED.search(r.stdout + r.stderr)
            s = self.h.run_entry("healthcheck", n)
            t2 = time.time()
            with self.looks_lock:
                self.looks_done += [Look("nhc", n, t, t1, r.returncode, m.group(1) if m else ""),
                                    Look("slurmguard", n, t1, t2, s.returncode,
                                         (s.stderr or s.stdout)[-300:] if s.returncode else "")]

        self.passes(stop, one)

    def day_over(self, now: float, t_end: float, repair: bool) -> bool:
        """At the day's end once a pass of both checkers began after the last fault event
        (each fault had its look), at most grace_s later."""
        with self.lock:
            last = max([*self.on_at.values(), *self.off_at.values()], default=self.t0)
        done = any(start > last for start, _ in self.pass_spans)
        return now >= t_end + self.grace_s or (now >= t_end and done)

    # -- after the day -------------------------------------------------------------------------
    def truth(self) -> dict[str, list[dict[str, Any]]]:
        """Each fault on each node and who saw it (module docstring)."""
        with self.looks_lock:
            looks = list(self.looks_done)
        failed = failing_results(self.h, self.t0 - HOOK_BUDGET_S)
        held, delay = holds(self.h, self.t0 - HOOK_BUDGET_S)
        rows = []
        with self.lock:
            on = [(f, t, self.off_at.get(f)) for f, t in self.on_at.items()]
        for f, t_on, t_off in sorted(on, key=lambda x: x[1]):
            for n in [f.node] if f.node else self.h.nodes:
                mine = [x for x in looks if x.node == n]
                rows.append({"node": n, "cause": f.cause, "kind": f.kind,
                             "at": round(t_on - self.t0, 1),
                             "clear_at": None if t_off is None else round(t_off - self.t0, 1),
                             "nhc": nhc_saw(mine, t_on, t_off, NHC_CHECK.get(f.kind)),
                             "slurmguard": any(
                                 node == n and check == f.cause.split(":", 1)[0]
                                 and _overlaps(start, end, t_on, t_off)
                                 # held for a second look (the guard's drain_held): seen
                                 # only by a failing look at least the delay after the hold
                                 and ((n, f.cause) not in held
                                      or start >= held[(n, f.cause)] + delay)
                                 for node, check, start, end in failed)})
        return {"faults": rows}

    def after(self, match_window: str) -> dict[str, Any]:
        """`shadow report` on this arm's store, the truth, their comparison, and what shows
        that slurmguard changed nothing."""
        self.settle_history()
        if self.h.spec.accounting:
            self.settle_accounting()
        rep = shadow_report(self.h, match_window)
        truth = self.truth()["faults"]
        with self.looks_lock:
            sg = [x for x in self.looks_done if x.who == "slurmguard"]
        out = {"report": {k: rep[k] for k in ("summary", "incumbent_from", "jobs_from")},
               "lists": {k: _pairs(rep[k]) for k in ("both", "only_slurmguard", "only_incumbent",
                                                     "would_have_been_false")},
               "gpu_hours": {k: _hours(rep[k]) for k in ("both", "only_slurmguard",
                                                          "only_incumbent",
                                                          "would_have_been_false")},
               "truth": truth, "match_window": match_window,
               "healthchecks": {"runs": len(sg), "nonzero": [[x.node, x.rc, x.failed]
                                                             for x in sg if x.rc != 0]},
               "hook_failures_logged": hook_failures(self.h),
               "hook_runs": hook_runs(self.h, self.t0),
               "shim": {"changes": self.shim.changes(),
                        "reads": len(self.shim.calls()) - len(self.shim.changes())},
               "out_reasons": out_reasons(self.h),
               "ledger": ledger(self.h, self.t0)}
        out.update(compare(rep, truth))
        return out

    def settle_history(self, timeout: float = 60.0) -> None:
        """Wait until serve's node-state history (a view every slurm_view_ttl) holds the
        state of every node as Slurm has it now: the report's incumbent is that history."""
        from slurmguard.store import Store

        store = Store.open(url=self.h.store_url)
        try:
            def same() -> bool:
                now = self.h.drained()
                latest: dict[str, tuple[str, str]] = {}
                for e in store.nodes.events(kinds=["state_change"], limit=100_000):
                    if e.actor_kind == "slurm" and e.node not in latest:
                        latest[e.node] = (str(e.details.get("to")), e.reason)
                return all(latest.get(n, ("in", ""))[0] == ("out" if n in now else "in")
                           for n in self.h.nodes)
            wait_for(same, timeout, interval=1.0, what="serve's node-state history")
        finally:
            store.close()


    def settle_accounting(self, timeout: float = 60.0) -> None:
        """Wait until Slurm accounting holds an end for every run of the day's jobs that
        Slurm's queue no longer runs: slurmdbd lags slurmctld (a job ended in the queue read
        as RUNNING, without an end, in sacct; tests/test_shadow_cluster.py), and the report
        counts a job without an end as still running."""
        assert self.h.cluster is not None
        cli = self.h.cluster.cli()

        def ended() -> bool:
            running = {j.job_id for j in cli.jobs() if j.state in ("RUNNING", "COMPLETING")}
            return all(r.end is not None or r.job_id in running
                       for r in cli.accounting(since=self.t0 - 60) if r.start is not None)
        wait_for(ended, timeout, interval=1.0, what="Slurm accounting to end the day's jobs")


def _overlaps(start: float, end: float, t_on: float, t_off: float | None) -> bool:
    return end >= t_on and (t_off is None or start <= t_off)


def nhc_saw(looks: list[Look], t_on: float, t_off: float | None, check: str | None) -> bool:
    """Whether an NHC run on the node while the fault was on [t_on, t_off] failed on
    ``check`` (None: NHC has no check for the kind, and never sees it)."""
    return check is not None and any(
        x.who == "nhc" and x.rc != 0 and x.failed.startswith(check)
        and _overlaps(x.start, x.end, t_on, t_off) for x in looks)


def _pairs(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return sorted([r["node"], r.get("cause") or r.get("check") or "", round(r["at"], 1)]
                  for r in rows)


def _hours(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """[node, cause, GPU-hours, {end state: jobs}] of each row: the jobs on the node meanwhile
    (only slurmguard, would have been false), in slurmguard's lead (both); None and no jobs
    for the incumbent's alone (the report counts none)."""
    out = []
    for r in rows:
        h, ended = r.get("gpu_hours"), r.get("ended", {})
        if h is None and "jobs_in_lead" in r:
            h = round(sum(j["gpu_hours"] for j in r["jobs_in_lead"]), 4)
            ended = {}
            for j in r["jobs_in_lead"]:
                ended[j["state"]] = ended.get(j["state"], 0) + 1
        out.append([r["node"], r.get("cause") or r.get("check") or "", h, ended])
    return sorted(out, key=lambda x: (x[0], x[1]))


def compare(rep: dict[str, Any], truth: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's lists against the truth, as (node, cause) lists (with repeats: a node that
    failed twice is two episodes). A row whose cause no fault has (the fleet policy's
    ``flapping``, a drain of NHC's whose reason slurmguard's checks name otherwise) is set apart
    in ``mapped`` with its node's fault, when the node has one, and left out of the lists;
    ``extra``: rows of both and only-slurmguard on a node without a fault of that cause.

    The report splits what slurmguard alone saw by how the node's jobs ended (Slurm
    accounting): a fault after which every job there completed (the filer's hang gone
    before the next job, a thermal fault that only slows) is ``would_have_been_false``, not
    ``only_slurmguard``: the truth (who saw which fault) has no such split, so those rows,
    ``false_on_fault``, count with only-slurmguard against it; ``false`` is the rest, rows on
    a node without a fault of that cause: drains that would have been false indeed."""
    causes = {t["cause"] for t in truth}
    expect: dict[str, list[tuple[str, str]]] = {"both": [], "only_slurmguard": [],
                                               "only_incumbent": []}
    for t in truth:
        key = (t["node"], t["cause"])
        if t["slurmguard"] and t["nhc"]:
            expect["both"].append(key)
        elif t["slurmguard"]:
            expect["only_slurmguard"].append(key)
        elif t["nhc"]:
            expect["only_incumbent"].append(key)
    got: dict[str, list[tuple[str, str]]] = {}
    mapped = []
    faulty = {t["node"]: t["cause"] for t in truth}
    for name in ("both", "only_slurmguard", "only_incumbent", "would_have_been_false"):
        got[name] = []
        for r in rep[name]:
            cause = r.get("cause") or r.get("check") or ""
            if name == "only_incumbent":
                cause = r["check"]  # NHC's reason, named by the check of slurmguard's that reads it
            if cause not in causes and r["node"] in faulty:
                mapped.append([name, r["node"], cause, faulty[r["node"]]])
                continue
            got[name].append((r["node"], cause))
    known = {(t["node"], t["cause"]) for t in truth}
    extra = sorted({p for name in ("both", "only_slurmguard") for p in got[name]} - known)
    on_fault = [p for p in got["would_have_been_false"] if p in known]
    alone = {**got, "only_slurmguard": got["only_slurmguard"] + on_fault}
    diff = {}
    for name, want in expect.items():
        have = sorted(alone[name])
        if have != sorted(want):
            diff[name] = {"report": have, "truth": sorted(want)}
    return {"expected": {k: sorted(v) for k, v in expect.items()},
            "mapped": mapped, "extra": extra, "diff": diff, "false_on_fault": sorted(on_fault),
            "false": sorted(p for p in got["would_have_been_false"] if p not in known)}


def shadow_report(h: ScaleHarness, match_window: str) -> dict[str, Any]:
    """`slurmguard shadow report --since 1d --json --incumbent history` on the harness's store
    (serve's config; sacct for the jobs)."""
    env = sg_env(SLURMGUARD_CONFIG=str(h.prefix / "etc/slurmguard/slurmguard.toml"),
                 SLURM_CONF=str(h.conf_path))
    r = subprocess.run([h.sg, "shadow", "report", "--since", "1d", "--json",
                        "--match-window", match_window, "--incumbent", "history"], env=env, capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"shadow report: rc={r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def out_reasons(h: ScaleHarness) -> dict[str, int]:
    """Every out-of-service reason serve's node-state history holds (every change Slurm
    showed, NHC's re-marks too), counted by who: ``NHC:`` or anything else, word for word."""
    from slurmguard.store import Store

    store = Store.open(url=h.store_url)
    try:
        got: dict[str, int] = {}
        for e in store.nodes.events(kinds=["state_change"], limit=100_000):
            if e.details.get("to") == "out":
                who = REASON_PREFIX if e.reason.startswith(REASON_PREFIX) else e.reason
                got[who] = got.get(who, 0) + 1
        return got
    finally:
        store.close()


def failing_results(h: ScaleHarness, since: float) -> list[tuple[str, str, float, float]]:
    """(node, check, run start, run end) of every unhealthy result of slurmguard's hooks
    stored since ``since``: its checks' own verdicts, before serve's ledger."""
    from sqlalchemy import text

    from slurmguard.store import Store

    store = Store.open(url=h.store_url)
    try:
        with store.engine.connect() as c:
            rows = c.execute(text(
                "SELECT n.name, x.name, r.started, r.duration FROM results x "
                "JOIN runs r ON r.id = x.run_id JOIN nodes n ON n.id = r.node_id "
                "WHERE x.health = 'unhealthy' AND r.started >= :t"), {"t": since}).fetchall()
        return [(node, check, float(t), float(t) + float(d or 0.0)) for node, check, t, d in rows]
    finally:
        store.close()


def holds(h: ScaleHarness, since: float) -> tuple[dict[tuple[str, str], float], float]:
    """(node, cause) -> when the guard first held its drain for a second look (its
    ``drain_held`` events since ``since``; not a node already out for another fault), and
    ``policy.second_look_delay``: a held node's fault is acted on only if a look at least
    that much later fails too (docs/policy.md)."""
    from slurmguard import config
    from slurmguard.store import Store

    delay = float(config.load(str(h.prefix / "etc/slurmguard/slurmguard.toml"))[
        "policy.second_look_delay"])
    store = Store.open(url=h.store_url)
    try:
        evs = store.nodes.events(since=since, kinds=["drain_held", "would_drain", "would_end"],
                                 limit=100000)
    finally:
        store.close()
    out: dict[tuple[str, str], float] = {}
    for e in (e for e in evs if e.kind == "drain_held"):
        # a node already out (a would-drain of another fault open) is out whatever the hold
        opened = sum(1 for x in evs if x.node == e.node and x.kind == "would_drain" and x.at <= e.at)
        ended = sum(1 for x in evs if x.node == e.node and x.kind == "would_end" and x.at <= e.at)
        if opened > ended:
            continue
        key = (e.node, e.source)
        out[key] = min(e.at, out.get(key, e.at))
    return out, delay


def ledger(h: ScaleHarness, t0: float) -> dict[str, list[list[Any]]]:
    """Each node's would-events since ``t0``: [kind, source, seconds into the day, reason]."""
    from slurmguard.store import Store

    store = Store.open(url=h.store_url)
    try:
        out: dict[str, list[list[Any]]] = {}
        for e in sorted(store.nodes.events(since=t0, kinds=["would_drain", "would_drain_refused",
                                                            "would_end"], limit=100_000),
                        key=lambda e: (e.at, e.id)):
            out.setdefault(e.node, []).append([e.kind, e.source, round(e.at - t0, 2),
                                               e.reason[:60]])
        return out
    finally:
        store.close()


def hook_runs(h: ScaleHarness, since: float) -> dict[str, dict[str, int]]:
    """{hook: {action: runs}} stored since ``since``: the hooks ran, and what they recorded."""
    from sqlalchemy import text

    from slurmguard.store import Store

    store = Store.open(url=h.store_url)
    try:
        with store.engine.connect() as c:
            rows = c.execute(text("SELECT hook, action, count(*) FROM runs WHERE started >= :t "
                                  "GROUP BY hook, action"), {"t": since}).fetchall()
        out: dict[str, dict[str, int]] = {}
        for hook, action, n in rows:
            out.setdefault(hook, {})[action] = int(n)
        return out
    finally:
        store.close()


def hook_failures(h: ScaleHarness) -> list[str]:
    """Lines of slurmd's and slurmctld's logs saying a prolog or epilog failed."""
    assert h.cluster is not None
    out = []
    for p in sorted(Path(h.cluster.logdir).glob("slurm*.log")):
        out += [f"{p.name}: {ln[:200]}" for ln in p.read_text(errors="replace").splitlines()
                if _HOOK_FAILED.search(ln)]
    return out
