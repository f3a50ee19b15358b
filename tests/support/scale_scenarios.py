"""Scenarios of the scale harness (docs/scale.md): each is a function given the running
:class:`support.scaleharness.ScaleHarness` and its options; it returns the figures it measured
(a JSON-able dict) and leaves the fleet healthy and undrained for the next one. More scenarios
(a fleet day of faults and jobs) plug in through :data:`SCENARIOS`.

Measuring: each phase resets `sdiag` at its start and reads it at its end; while a phase runs,
the harness sends slurmctld nothing but the job submissions being measured (no polling), so
the client queries and updates counted are slurmguard's (footprint.SLURM_OWN names Slurm's own
traffic). CPU comes from /proc: slurmctld's own, its reaped children's (the gate), each
slurmd's reaped children's (Prolog, Epilog, HealthCheckProgram: the hooks, as slurmd waited for
them), the agents' (their own and their reaped children's: the fs probes and other commands a
source runs) and the serve replicas'.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from support import footprint
from support.scaleharness import ScaleHarness
from support.sgserve import Serve

Figures = dict[str, Any]


class Phase:
    """One measured phase: sdiag reset at start, RPCs and CPU deltas at :meth:`end`."""

    def __init__(self, h: ScaleHarness) -> None:
        self.h = h
        h.sdiag_reset()
        self.t0 = time.monotonic()
        self.wall0 = time.time()  # the tool recorders' clock
        self.ctld = footprint.proc_cpu(h.ctld_pid())
        self.scriptd = footprint.cpu_sum(footprint.children_of(h.ctld_pid()))
        self.agents = {n: footprint.proc_cpu(p.pid) for n, p in h.agents.items()}
        self.serves = [footprint.proc_cpu(s.proc.pid) if s.proc else None for s in h.serves]
        self.traffic = h.traffic.snapshot() if h.traffic is not None else None
        self.passes = _passes(h)

    def end(self) -> Figures:
        h, secs = self.h, time.monotonic() - self.t0
        rpcs = h.sdiag()
        own, client = footprint.split_rpcs(rpcs)
        by_side = footprint.calls_by_side(h.slurm_calls(self.wall0))
        node_side = min(client, footprint.node_side_rpcs(by_side))
        ctld = footprint.proc_cpu(h.ctld_pid())
        per_min = 60.0 / secs
        scriptd = footprint.cpu_sum(footprint.children_of(h.ctld_pid()))
        agent = [_d(now, self.agents.get(n)) + _d(now, self.agents.get(n), children=True)
                 for n, now in ((n, footprint.proc_cpu(p.pid)) for n, p in h.agents.items())]
        serves = []
        for s, before in zip(h.serves, self.serves, strict=True):
            if s.proc is None:
                continue
            serves.append({"cpu_s": round(_d(footprint.proc_cpu(s.proc.pid), before), 2),
                           "rss_mb": round(footprint.proc_rss_mb(s.proc.pid) or 0.0, 1)})
        from support.nodetraffic import diff

        return {
            "seconds": round(secs, 1),
            # What the emulated nodes sent meanwhile (support/nodetraffic.py), if any.
            **({"emulated": diff(self.traffic, h.traffic.snapshot())}
               if self.traffic is not None and h.traffic is not None else {}),
            "rpc_per_min": {t: round(c.count * per_min, 1) for t, c in sorted(rpcs.items())},
            "slurm_own_rpm": round(own * per_min, 1),
            "slurmguard_rpm": round(client * per_min, 1),
            "ctld_cpu_pct": round(100 * _d(ctld, self.ctld) / secs, 2),
            "slurmguard_rpcs": client,
            # slurmctld's server time in those RPCs (sdiag's total_time), by type and in all,
            # as a share of one core: slurmguard's part of slurmctld's CPU, apart from the
            # pings and registrations of a fleet's worth of node entries.
            "rpc_ms_per_min": {t: round(c.total_us / 1000 * per_min, 1)
                               for t, c in sorted(rpcs.items())},
            "slurmguard_ctld_pct": round(100 * footprint.client_rpc_us(rpcs) / 1e6 / secs, 3),
            # Who asked (the tool recorders): calls by side/subcommand and kind; the node
            # side's RPCs are its calls x footprint.RPCS_PER_CALL, the controller side's the
            # rest of sdiag's client RPCs (so whatever no recorder saw counts against it).
            "slurm_calls": by_side,
            "node_side_rpm": round(node_side * per_min, 1),
            "controller_rpm": round((client - node_side) * per_min, 1),
            # PrologSlurmctld runs under slurmscriptd (slurmctld's child): its reaped children.
            "gate_cpu_s": round(_d(ctld, self.ctld, children=True)
                                + scriptd.children - self.scriptd.children, 2),
            "agent_cpu_s_per_hour": round(3600.0 / secs * _mean(agent), 2),
            "serves": serves,
            # serve's policy passes in the phase, by kind: how many, and their mean seconds
            # (slurmguard_policy_pass_duration_seconds, summed over the replicas)
            "policy_passes": {k: {"count": int(c - c0),
                                  "mean_s": round((t - t0) / (c - c0), 3) if c > c0 else None}
                              for k, (c, t) in _passes(h).items()
                              for c0, t0 in [self.passes.get(k, (0.0, 0.0))]},
        }


def _passes(h: ScaleHarness) -> dict[str, tuple[float, float]]:
    """kind -> (policy passes, their seconds) so far, over the replicas that answer."""
    out: dict[str, tuple[float, float]] = {}
    for s in h.serves:
        if s.proc is None:
            continue
        for kind in ("full", "incremental"):
            try:
                c = s.metric("slurmguard_policy_pass_duration_seconds_count", kind=kind)
                t = s.metric("slurmguard_policy_pass_duration_seconds_sum", kind=kind)
            except OSError:  # a replica not answering: its passes are not in the figure
                continue
            c0, t0 = out.get(kind, (0.0, 0.0))
            out[kind] = (c0 + c, t0 + t)
    return out


def _d(now: footprint.Cpu | None, before: footprint.Cpu | None, children: bool = False) -> float:
    if now is None or before is None:
        return 0.0
    return (now.children - before.children) if children else (now.own - before.own)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def cap_of(h: ScaleHarness) -> int:
    """The blast-radius cap of one cause on the harness's one partition, as the guard counts
    it (policy/blast.py caps): every node entry, emulated ones included (Slurm lists them in
    the partition), policy.blast_max_percent of them and at most blast_max_nodes. Real
    nodes only, the percent alone, as the harness's runs before emulated nodes had it."""
    pct = max(1, math.floor(h.spec.nodes * h.spec.cap_percent / 100))
    if not h.emulated_nodes:
        return pct
    from slurmguard.policy.blast import caps, scopes
    from slurmguard.policy.params import PolicyParams

    params = PolicyParams(blast_max_percent=h.spec.cap_percent)
    return min(caps(scopes({n: ("gpu",) for n in h.all_nodes}), params).values())


def emulated_note(h: ScaleHarness, what: str) -> dict[str, str]:
    """A scenario's word on the emulated nodes, where it has some (nothing without them)."""
    return {"emulated_nodes": what} if h.emulated_nodes else {}


def all_healthchecks(h: ScaleHarness, parallel: int) -> tuple[float, list[str]]:
    """Every node's installed HealthCheckProgram at once (``parallel`` at a time: the host's
    memory bounds it, ~40 MB a Python hook); wall seconds and each run's stderr."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        logs = list(pool.map(lambda n: h.run_entry("healthcheck", n).stderr, h.nodes))
    return time.monotonic() - t0, logs


def submit_spread(h: ScaleHarness, jobs: int, seconds: float) -> list[str]:
    """``jobs`` one-node jobs through `slurmguard run`, evenly over ``seconds``; their ids."""
    assert h.cluster is not None
    script = h.job_script("/bin/sleep 2")
    t0, ids = time.monotonic(), []
    for i in range(jobs):
        delay = i * seconds / jobs - (time.monotonic() - t0)
        if delay > 0:
            time.sleep(delay)
        ids.append(h.cluster.sbatch(script, "-N1", "--output=/dev/null"))
    return ids


def steady(h: ScaleHarness, minutes: float = 1.0, jobs_per_hour: tuple[int, ...] = (300, 1200),
           sample: int = 6, settle: float = 0.0,
           **_: Any) -> Figures:
    """Health checks at the configured interval (CYCLE), jobs arriving at each rate of
    ``jobs_per_hour`` in turn for ``minutes`` each, nothing failing. ``settle``: minutes of
    the same traffic at the first rate before the first phase, not measured (``settle_s``):
    the start-up burst (every node's first health check at once, the generator's first
    pass) is not the steady state."""
    assert h.cluster is not None
    out: Figures = {"phases": []}
    seconds = minutes * 60
    total = len(h.all_nodes)
    if settle > 0:
        if h.traffic is not None:
            h.traffic.set_job_rate(jobs_per_hour[0])
        t0 = time.monotonic()
        ids = submit_spread(h, max(1, round(jobs_per_hour[0] * settle / 60 * h.spec.nodes / total)),
                            settle * 60)
        time.sleep(max(0.0, settle * 60 - (time.monotonic() - t0)))
        for j in ids:
            h.cluster.wait_job(j, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=600)
        out["settle_s"] = round(time.monotonic() - t0, 1)
    for rate in jobs_per_hour:
        # The real nodes' share of the fleet's rate; the emulated nodes' share is sent by the
        # generator (its prologs each through the gate).
        jobs = max(1, round(rate * seconds / 3600 * h.spec.nodes / total))
        if h.traffic is not None:
            h.traffic.set_job_rate(rate)
        p = Phase(h)
        ids = submit_spread(h, jobs, seconds)
        rest = seconds - (time.monotonic() - p.t0)
        if rest > 0:
            time.sleep(rest)
        fig = p.end()
        fig.update(jobs_per_hour=rate, jobs=jobs, node_entries=total)
        done = [h.cluster.wait_job(j, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=600)
                for j in ids]
        fig["jobs_completed"] = sum(j["JobState"] == "COMPLETED" for j in done)
        fig["drained"] = len(h.drained())
        out["phases"].append(fig)
    out.update(hook_cost(h, sample))
    agent_h = _mean([ph["agent_cpu_s_per_hour"] for ph in out["phases"]])
    hc_per_h = 3600.0 / h.spec.hc_interval
    for ph in out["phases"]:
        job_hooks = ph["jobs_per_hour"] / total  # one-node jobs: a prolog and an epilog
        ph["node_cpu_s_per_hour_agent"] = round(
            agent_h + hc_per_h * out["healthcheck_cpu_s_agent"]
            + job_hooks * (out["prolog_cpu_s_agent"] + out["epilog_cpu_s_agent"]), 2)
        ph["node_cpu_s_per_hour_fallback"] = round(
            hc_per_h * out["healthcheck_cpu_s_fallback"]
            + job_hooks * (out["prolog_cpu_s_fallback"] + out["epilog_cpu_s_fallback"]), 2)
    return out


def hook_cost(h: ScaleHarness, sample: int = 6) -> Figures:
    """CPU seconds of one run of each installed entry script (and all it ran), on agent nodes
    and on fallback nodes: the mean over ``sample`` nodes of each kind, one run at a time, read
    as this process's reaped children's CPU (nothing else is reaped meanwhile)."""
    out: Figures = {}
    kinds = {"agent": h.agent_nodes[:sample],
             "fallback": [n for n in h.nodes if n not in h.agents][:sample]}
    for hook in ("healthcheck", "prolog", "epilog"):
        for kind, nodes in kinds.items():
            costs = []
            for n in nodes:
                before = footprint.rusage_children_cpu()
                h.run_entry(hook, n)
                costs.append(footprint.rusage_children_cpu() - before)
            out[f"{hook}_cpu_s_{kind}"] = round(_mean(costs), 3)
    return out


# What a spared node's hook says (node/hooks.py, drainguard.Drained.applied, the watchdog).
SPARED_SAYS = ("not drained", "drain failed", "already drained or down", "budget of")


def _unexplained(nodes: list[str], logs: list[str], drained: dict[str, str]) -> dict[str, str]:
    """Spared nodes whose hook said none of SPARED_SAYS -> the last 300 characters it wrote
    (kept so that a failure in CI names its cause)."""
    return {n: x[-300:] for n, x in zip(nodes, logs, strict=True)
            if n not in drained and not any(s in x for s in SPARED_SAYS)}


def shared_fault(h: ScaleHarness, parallel: int = 64,
                 modes: tuple[str, ...] = ("serve_up", "serve_down"), **_: Any) -> Figures:
    """A required mount gone on every node at once: every node's health check, first with
    serve up (the guard's cap holds), then with every replica down (the fallback's bound);
    ``modes`` picks them (a 1,024-node pass of either takes minutes here)."""
    out: Figures = {"cap": cap_of(h), "nodes": h.spec.nodes, **emulated_note(
        h, "every emulated node's health check fails fs-mount too, all at once beside the "
           "real ones', each drain through the hooks' guarded_drain: serve's /permit, or with "
           "serve down the fallback over Slurm's view, waiting at most "
           f"{h.traffic.spec.fallback_wait if h.traffic else 0} s for its window (a real hook "
           "waits up to its budget)")}
    h.lose_shared_mount()
    try:
        for mode in modes:
            h.undrain_all()
            if mode == "serve_down":
                for s in h.serves:
                    s.stop()
            p = Phase(h)
            wall, logs, emulated = _with_emulated(h, lambda: all_healthchecks(h, parallel),
                                                  "fs-mount", parallel)
            fig = p.end()
            drained = h.drained()
            if emulated is not None:
                real = set(h.nodes)
                fig.update(emulated_pass=emulated, drained_real=len(set(drained) & real),
                           drained_emulated=len(set(drained) - real))
            fig.update(wall_s=round(wall, 1), drained=len(drained),
                       drained_other=sorted(n for n, r in drained.items()
                                            if "fs-mount" not in r)[:5],
                       spared_lines=sum("not drained" in x for x in logs),
                       # Spared for this host's sake, not by a decision: the hook ran out of
                       # its budget (it fails open) or Slurm refused its drain under load.
                       spared_by_load=sum(1 for n, x in zip(h.nodes, logs, strict=True)
                                          if n not in drained and ("budget of" in x
                                                                   or "drain failed" in x)),
                       # Spared nodes that did not say why. Each must, in one of the hook's
                       # own lines: refused ("not drained: ..."), its drain failed, the node
                       # was already down, or the hook ran out of its budget (the watchdog's
                       # line: it fails open, under this host's load a window's wait can).
                       unexplained=_unexplained(h.nodes, logs, drained))
            out[mode] = fig
            if mode == "serve_down":
                for s in h.serves:
                    _restart(s)
    finally:
        h.restore_shared_mount(settle=True)
        for s in h.serves:
            if s.proc is None:
                _restart(s)
        h.undrain_all()
        if h.traffic is not None:  # their next check passes: the gate reads it, not the fault's
            out["emulated_healthy_pass"] = h.traffic.check_all(parallel, pass_budget(h.traffic))
    out["bound_serve_down_today"] = out["cap"] + math.ceil(h.spec.nodes / h.spec.fallback_slots) - 1
    out["bound_serve_down"] = fallback_bound(h)
    if "serve_up" in out and "serve_down" in out:
        up, down = out["serve_up"]["slurmguard_rpcs"], out["serve_down"]["slurmguard_rpcs"]
        out["outage_rpc_ratio"] = round(down / up, 2) if up else None
    return out


def pass_budget(traffic: Any) -> float:
    """Seconds a fleet-wide pass of the emulated checks may take: 10 minutes, or 0.1 s a
    node where that is more (a pass of 8,976 checks, each asking the guard's permit, outran
    10 minutes on this 2-core host beside a 1,024-slurmd fleet)."""
    return max(600.0, 0.1 * len(traffic.spec.nodes))


def _with_emulated(h: ScaleHarness, real: Callable[[], tuple[float, list[str]]], check: str,
                   parallel: int) -> tuple[float, list[str], Figures | None]:
    """``real()`` (every real node's health check) and, at the same time, every emulated
    node's with ``check`` failing (the generator's fault on for the phase)."""
    if h.traffic is None:
        return (*real(), None)
    traffic = h.traffic
    traffic.set_fault(check)
    try:
        with ThreadPoolExecutor(1) as one:
            emulated = one.submit(traffic.check_all, parallel, pass_budget(traffic))
            wall, logs = real()
            return wall, logs, emulated.result()
    finally:
        traffic.set_fault("")


def fallback_bound(h: ScaleHarness) -> int:
    """The stated bound on drains of a shared fault with every serve down, for the code in
    this checkout: cap + fallback_share - 1 where hooks.fallback_share exists (independent of
    N), else cap + ceil(N / fallback_slots) - 1 (the bound that grows with N)."""
    from slurmguard import config

    share = config.SCHEMA["hooks"].get("fallback_share")
    if share is not None:
        return cap_of(h) + int(share.default) - 1
    return cap_of(h) + math.ceil(h.spec.nodes / h.spec.fallback_slots) - 1


def _restart(s: Serve) -> None:
    s.proc = None
    s.start(timeout=60)


def wave_nodes(h: ScaleHarness, percent: float) -> list[str]:
    """``percent`` % of the nodes (at least one), spread evenly over the fleet."""
    k = max(1, round(h.spec.nodes * percent / 100))
    step = h.spec.nodes / k
    return [h.nodes[int(i * step)] for i in range(k)]


def wave(h: ScaleHarness, percent: float = 3.0, parallel: int = 64, **_: Any) -> Figures:
    """Xid 79 on ``percent`` % of the nodes at once (spread over the fleet), then one health
    check interval's runs: every faulted node drained, no healthy one."""
    faulted = wave_nodes(h, percent)
    note = emulated_note(h, "not in this scenario: the Xid wave runs on real nodes only (an "
                            "emulated node has no kernel log, and Slurm never runs a check on it)")
    h.undrain_all()
    t0 = time.monotonic()
    for n in faulted:
        h.inject_xid(n)
    p = Phase(h)
    wall, logs = all_healthchecks(h, parallel)
    fig = p.end()
    drained = h.drained()
    fig.update(faulted=len(faulted), wall_s=round(wall, 1),
               drained=len(drained), drained_faulted=len(set(drained) & set(faulted)),
               drained_healthy=sorted(set(drained) - set(faulted)),
               missed=sorted(set(faulted) - set(drained)),
               # What a missed node's check said (why it did not drain), its last lines.
               missed_logs={n: logs[h.nodes.index(n)][-600:] for n in set(faulted) - set(drained)},
               all_drained_s=round(time.monotonic() - t0, 1), **note)
    for n in faulted:  # what a reboot does to what the checks read (and to the agent)
        d = h.node_dir(n)
        (d / "kmsg").write_text("")
        (d / "boot_id").write_text(str(uuid.uuid4()) + "\n")
        if n in h.agents:
            h.restart_agent(n)
        # The booted node's first health check (slurmd runs it at registration): it stores a
        # healthy result, without which the gate reads the Xid one and refuses the node.
        h.run_entry("healthcheck", n)
    h.undrain_all()
    return fig


def fleet_day(h: ScaleHarness, **opts: Any) -> Figures:
    """A fleet day of jobs and faults, four arms at once: Slurm alone, Slurm with LBNL NHC,
    slurmguard, the oracle (support/fleet_day_run.py); the harness must be started with fleet_day.fleet_spec."""
    from support import fleet_day_run as fd

    return fd.fleet_day(h, **opts)


# In run order: the wave checks every node again after the shared fault (serve's store then
# holds each node's healthy result, which the gate reads), steady last. The fleet day needs a
# harness of its own (fleet_day.fleet_spec): run.py runs it alone, never by default.
SCENARIOS: dict[str, Callable[..., Figures]] = {
    "shared_fault": shared_fault,
    "wave": wave,
    "steady": steady,
    "fleet_day": fleet_day,
}
DEFAULT = ("shared_fault", "wave", "steady")
