"""The scale harness's command line (docs/scale.md): one real slurmctld with N slurmd on this
host, wired by `slurmguard setup`, the scenarios run in turn, their figures merged into a JSON
file (docs/scale.json by default) that docs/scale.md is rendered from.

    python tests/scale/run.py --nodes 1024 --scenario steady --scenario shared_fault
    python tests/scale/run.py --render     # docs/scale.md and its plots from docs/scale.json
    python tests/scale/run.py --nodes 512 --scenario fleet_day --seed 1 --day-s 300
    python tests/scale/run.py --nodes 16 --scenario fleet_day --seed 27 --day-s 60 --tick 3 \
        --arms shadow --out /tmp/shadow-day.json
    python tests/scale/run.py --nodes 128 --scenario fleet_day --seed 1 --day-s 300 \
        --arms shadow      # the day of docs/fleet-day.json's 128-1, stored with it
    python tests/scale/run.py --nodes 1024 --scenario wave_repair --repair-reboots-per-hour 40
    python tests/scale/run.py --nodes 1024 --emulated 8976 --label tenk   # 10,000 node entries

The fleet day runs alone (its harness has more checks and no agent; it starts the harnesses
of its other arms itself: Slurm alone, Slurm with LBNL NHC, the oracle); so does wave_repair (its harness has repair in act mode and a RebootProgram,
which would repair the other scenarios' drains). wave_repair exits 1 when a decision it
checks failed (a node rebooted twice, a healthy node drained or repaired, a limit exceeded).

A run first kills what an earlier run on the same --root left (its pid files), and tears
everything down by pid at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from support import fleet_day_doc, fleet_day_shadow_doc, footprint, scale_doc  # noqa: E402
from support.fleet_day import fleet_spec  # noqa: E402
from support.fleet_day_arms import ARMS  # noqa: E402
from support.fleet_day_observe import SHADOW, shadow_spec  # noqa: E402
from support.scale_controller import SCENARIOS  # noqa: E402
from support.scale_repair_conf import RepairLimits  # noqa: E402
from support.scaleharness import ScaleHarness, ScaleSpec  # noqa: E402

# Every scenario but those that need a harness of their own (run alone).
ALONE = ("fleet_day", "wave_repair")
DEFAULT = tuple(s for s in SCENARIOS if s not in ALONE)

DOC_JSON = TESTS.parent / "docs" / "scale.json"
FLEET_JSON = TESTS.parent / "docs" / "fleet-day.json"  # the fleet day's page (docs/fleet-day.md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), default=[])
    ap.add_argument("--agents", type=int, default=32, help="nodes with the resident agent")
    ap.add_argument("--emulated", type=int, default=0,
                    help="node entries beyond the real ones, with no slurmd: the node-traffic "
                         "generator sends their records, permits and gates (docs/scale.md "
                         "'Emulated nodes'); stored under NODES+EMULATED, not in the tables")
    ap.add_argument("--emulated-no-own-state", action="store_true",
                    help="the emulated health checks do not take their node's state (serve's "
                         "/nodestate, the node's saved record, else Slurm) as an acting hook does")
    ap.add_argument("--start-wave", type=int, default=None,
                    help="start the slurmd this many at a time, each wave once the ones before "
                         "registered (default: 128 with --emulated, else all at once)")
    ap.add_argument("--hc-interval", type=int, default=300, help="HealthCheckInterval (s)")
    ap.add_argument("--minutes", type=float, default=2.0, help="steady: minutes per job rate")
    ap.add_argument("--settle-minutes", type=float, default=0.0,
                    help="steady: minutes of traffic at the first rate before the first phase, "
                         "not measured (the start-up burst: every node's first health check, "
                         "the generator's first pass)")
    ap.add_argument("--outage-minutes", type=float, default=5.0,
                    help="outage: minutes with every serve down (and as many with serve up before: "
                         "equal windows hold equal shares of a health-check pass)")
    ap.add_argument("--outage-jobs", type=int, default=0,
                    help="outage: wrapped one-node jobs (default one per node)")
    ap.add_argument("--parallel", type=int, default=64, help="hooks run at once (memory bound)")
    ap.add_argument("--in-order", action="store_true",
                    help="run the scenarios in the order given, not the harness's (a 10,000-"
                         "entry run: steady and gate first, the shared fault last)")
    ap.add_argument("--gate-burst", type=int, default=200,
                    help="gate: one-node jobs' gates started at once")
    ap.add_argument("--fault-mode", action="append", choices=["serve_up", "serve_down"],
                    default=[], help="shared_fault: only these phases (default both)")
    ap.add_argument("--seed", type=int, default=1, help="fleet_day: the fault schedule's seed")
    ap.add_argument("--day-s", type=float, default=300.0, help="fleet_day: the day in seconds")
    ap.add_argument("--tick", type=float, default=15.0,
                    help="fleet_day: seconds between every node's health check")
    ap.add_argument("--step-s", type=float, default=0.5,
                    help="fleet_day: a training step's nominal seconds")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help="fleet_day: the arms run at once, comma-separated, of "
                         + ", ".join((*ARMS, SHADOW)) + " (default the four; some of the four: "
                         "a half of a big day, which the other half, run later on the same "
                         f"seed, joins on the page; {SHADOW}: LBNL NHC acting and slurmguard "
                         "observing on one cluster with Slurm accounting, docs/install.md "
                         "'Rollout'; run alone on the size, seed and schedule of a run in "
                         "--out (docs/fleet-day.json by default) it is stored with that run "
                         "and shown in its section, else it goes to --out only)")
    ap.add_argument("--notice-interval", type=float, default=0.5,
                    help="fleet_day: seconds between each job's drain polls of serve")
    ap.add_argument("--percent", type=float, default=3.0,
                    help="wave_repair: percent of the nodes with Xid 79")
    ap.add_argument("--policy-interval", type=float, default=0.0,
                    help="serve.policy_interval, repair's pass (default 60; wave_repair 10; "
                         "fleet_day 2 up to 64 nodes, else 10)")
    lim = RepairLimits()
    ap.add_argument("--repair-max-nodes", type=int, default=lim.max_nodes)
    ap.add_argument("--repair-max-percent", type=float, default=lim.max_percent)
    ap.add_argument("--repair-reboots-per-hour", type=int, default=lim.reboots_per_hour,
                    help="wave_repair's limits (docs/repair.md's defaults: the 1,024-node wave's "
                         "31 reboots then take 8 hours of reboot budget)")
    ap.add_argument("--repair-settle", type=float, default=lim.settle)
    ap.add_argument("--repair-timeout", type=float, default=0.0,
                    help="wave_repair: most seconds to wait for every repair (0: from the limits)")
    ap.add_argument("--root", default="/tmp/sg-scale", help="the run's directory (pid files)")
    ap.add_argument("--out", default=str(DOC_JSON), help="JSON the figures are merged into")
    ap.add_argument("--label", default="", help="stored with the run (e.g. before/after)")
    ap.add_argument("--jobs-without-config", action="store_true",
                    help="jobs' `slurmguard run` without the node's config, as the first runs "
                         "had it (its drain watch then polls Slurm itself)")
    ap.add_argument("--render", action="store_true", help="only render docs/scale.md")
    a = ap.parse_args(argv)
    if a.render:
        scale_doc.write(Path(a.out))
        if FLEET_JSON.exists():
            fleet_day_doc.write(FLEET_JSON)
        return 0
    spec = ScaleSpec(nodes=a.nodes, agents=min(a.agents, a.nodes), hc_interval=a.hc_interval,
                     job_config=not a.jobs_without_config,
                     policy_interval=a.policy_interval or 60.0, emulated=a.emulated,
                     emulated_own_state=not a.emulated_no_own_state,
                     start_wave=a.start_wave if a.start_wave is not None else
                     (128 if a.emulated else 0))
    size = f"{a.nodes}+{a.emulated}" if a.emulated else str(a.nodes)  # its key in --out
    root = Path(a.root).resolve() / f"n{size}"
    if a.emulated and any(s in ALONE for s in a.scenario):
        ap.error("--emulated: not with " + ", ".join(ALONE) + " (real nodes only)")
    opts: dict = {"minutes": a.minutes, "settle": a.settle_minutes, "parallel": a.parallel, "outage_minutes": a.outage_minutes,
                  "outage_jobs": a.outage_jobs or None, "burst": a.gate_burst}
    if a.fault_mode:
        opts["modes"] = tuple(a.fault_mode)
    scenarios = ([s for s in SCENARIOS if s in a.scenario] if not a.in_order else
                 list(dict.fromkeys(a.scenario))) or list(DEFAULT)
    for alone in ALONE:
        if alone in scenarios and scenarios != [alone]:
            ap.error(f"--scenario {alone} runs alone")
    if scenarios == ["wave_repair"]:
        spec = replace(spec, policy_interval=a.policy_interval or 10.0, repair=RepairLimits(
            max_nodes=a.repair_max_nodes, max_percent=a.repair_max_percent,
            reboots_per_hour=a.repair_reboots_per_hour, settle=a.repair_settle))
        opts.update(percent=a.percent, repair_timeout=a.repair_timeout)
    if "fleet_day" in scenarios:
        # The day's repair passes compressed like the day (docs/fleet-day.md), fewer at size.
        named = {x.strip() for x in a.arms.split(",") if x.strip()}
        if not named or named - {*ARMS, SHADOW}:
            ap.error(f"--arms: each of {', '.join((*ARMS, SHADOW))}, got {a.arms!r}")
        arms = tuple(x for x in (*ARMS, SHADOW) if x in named)
        spec = fleet_spec(spec, slurmguard="slurmguard" in arms, notice_interval=a.notice_interval,
                          policy_interval=a.policy_interval or (2.0 if a.nodes <= 64 else 10.0))
        if SHADOW in arms and "slurmguard" not in arms:  # the harness started here runs it
            spec = shadow_spec(spec)
        opts.update(seed=a.seed, day_s=a.day_s, tick=a.tick, step_s=a.step_s,
                    parallel=min(a.parallel, 16), arms=arms)
    if scenarios != ["fleet_day"]:
        # Each scenario's figures are stored as it ends: a later one that fails (a 512-node run
        # lost four scenarios' figures to the fifth's error) loses only its own.
        opts["save"] = lambda figures: _merge(Path(a.out), a.label, size, figures)
    figures = run(root, spec, scenarios, **opts)
    figures["label"] = a.label
    if scenarios == ["fleet_day"] and SHADOW in opts["arms"]:
        out = FLEET_JSON if a.out == str(DOC_JSON) else Path(a.out)
        data = json.loads(out.read_text()) if out.exists() else {"runs": {}}
        key = f"{a.nodes}-{a.seed}"  # the page's entry of this size and seed
        joined = (fleet_day_shadow_doc.join(data["runs"].get(key), figures["fleet_day"],
                                            figures["date"])
                  if opts["arms"] == (SHADOW,) else None)
        if joined is not None:  # the page's day, run alone with NHC acting: stored with it
            data["runs"][key] = joined
            out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            fleet_day_doc.write(out)
            print(json.dumps(joined["shadow"], indent=1, sort_keys=True))
            return 0
        page = out.exists() and "runs" in data  # a page's JSON is never overwritten by a day
        print(f"fleet_day: no run {key} of the same schedule in {out}: the shadow day is not "
              "stored with a run" + (", nor written there" if page else ""), file=sys.stderr)
        if a.out != str(DOC_JSON) and not page:  # not the page's day: to --out only
            Path(a.out).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
        print(json.dumps(figures["fleet_day"], indent=1, sort_keys=True))
        return 0
    if scenarios == ["fleet_day"]:  # its own page: docs/fleet-day.json -> docs/fleet-day.md
        out = FLEET_JSON if a.out == str(DOC_JSON) else Path(a.out)
        data = json.loads(out.read_text()) if out.exists() else {"runs": {}}
        day = figures["fleet_day"]
        day.update(date=figures["date"], cluster_start_s=round(figures["timings"]["start_s"], 1),
                   notice_interval_s=a.notice_interval)
        key = f"{a.nodes}-{a.seed}"  # one entry per size and seed
        data["runs"][key] = fleet_day_doc.join_halves(data["runs"].get(key), day)
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        fleet_day_doc.write(out)
        print(json.dumps({k: v for k, v in day.items() if k not in ARMS}, indent=1))
        return 0
    _merge(Path(a.out), a.label, size, figures)
    print(json.dumps(figures, indent=1, sort_keys=True))
    broken = figures.get("wave_repair", {}).get("failures")
    if broken:
        print("wave_repair: " + "; ".join(broken), file=sys.stderr)
        return 1
    return 0


def _merge(out: Path, label: str, size: str, figures: dict) -> None:
    """``figures`` into the run's entry of ``out`` (docs/scale.json), its other scenarios kept;
    ``size``: N, or N+E with emulated nodes (scale_doc leaves those out of the tables)."""
    data = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    data["runs"].setdefault(label or "today", {}).setdefault(size, {}).update(
        figures, label=label)
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def run(root: Path, spec: ScaleSpec, scenarios: list[str], save: Any = None,
        **opts: object) -> dict:
    """Start the harness, run ``scenarios`` in turn, stop; every figure measured. ``save``
    (if given) is called with the figures so far after each scenario."""
    h = ScaleHarness.start(root, spec)
    try:
        rss = sum(footprint.proc_rss_mb(p) or 0.0 for p in h.slurmd_pids())
        figures: dict = {"nodes": spec.nodes, "agents": spec.agents, "emulated": spec.emulated,
                         "node_entries": spec.nodes + spec.emulated,
                         "hc_interval": spec.hc_interval, "timings": h.timings,
                         "job_config": spec.job_config,
                         "slurmd_rss_mb": round(rss), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                             time.gmtime())}
        for name in scenarios:
            t0 = time.monotonic()
            print(f"scale: {name} on {spec.nodes} nodes"
                  + (f" and {spec.emulated} emulated" if spec.emulated else "") + " ...",
                  file=sys.stderr, flush=True)
            figures[name] = SCENARIOS[name](h, **opts)
            figures[name]["scenario_s"] = round(time.monotonic() - t0, 1)
            if save is not None:
                save(figures)
        if h.traffic is not None:  # everything the emulated nodes sent, and what arrived
            figures["emulated_traffic"] = emulated_arrival(h)
        figures["ctld_rss_mb"] = round(footprint.proc_rss_mb(h.ctld_pid()) or 0.0)
        figures["pg_size_mb"] = round(h.store_size_mb(), 1)
        return figures
    finally:
        h.stop()


def emulated_arrival(h: ScaleHarness) -> dict:
    """The generator's figures since it started, the Slurm state of its nodes, and its
    records counted in serve's store by id (stored, lost, duplicated)."""
    from support.loadgen import count_records

    assert h.traffic is not None and h.cluster is not None
    made = h.traffic.made()
    out = h.traffic.figures()
    lost, dup, stored = count_records(h.store_url, made)
    states = Counter(f"{n.state}+{'+'.join(sorted(n.flags))}" if n.flags else n.state
                     for n in h.cluster.cli().nodes() if n.name in set(h.emulated_nodes))
    out.update(records=len(made), stored=stored, lost=lost, duplicated=dup,
               slurm_states=dict(states))
    return out


if __name__ == "__main__":
    sys.exit(main())
