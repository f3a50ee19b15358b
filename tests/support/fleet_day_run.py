"""The fleet day's four arms run at once on one seed (support/fleet_day_arms.py says what
each is; support/fleet_day.py is one arm's day): slurmguard on the harness the caller started,
each other arm on a harness of the same size started here, every arm's day from one start
line; then slurmguard's incident truth.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from support import fleet_day_observe as observe
from support import fleet_day_outcomes as outcomes
from support import fleet_day_plan as plan
from support.fleet_day import Day, job_steps
from support.fleet_day_arms import ARMS, StartLine
from support.helpers import sg_env
from support.nhc_node import NHCNodes
from support.scaleharness import ScaleHarness


def incidents(h: ScaleHarness) -> list[dict[str, Any]]:
    """`slurmguard incident list --json` on the run's store (serve's config)."""
    env = sg_env(SLURMGUARD_CONFIG=str(h.prefix / "etc/slurmguard/slurmguard.toml"),
                 SLURM_CONF=str(h.conf_path))
    r = subprocess.run([h.sg, "incident", "list", "--since", "1d", "--json"], env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"incident list: rc={r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["incidents"]


def fleet_day(h: ScaleHarness, seed: int = 1, day_s: float = 90.0, tick: float = 5.0,
              step_s: float = 0.5, every: int = 10, every_kind: bool | None = None,
              node_faults: int | None = None, parallel: int = 16,
              arms: tuple[str, ...] = ARMS, **_: Any) -> dict[str, Any]:
    """The four arms (or ``arms``) on one seed, at once: slurmguard on ``h``, each other arm on
    a harness of the same size started here (Slurm without slurmguard's hooks). ``h`` must
    have been started with :func:`fleet_spec` (run.py and the small form do), with
    slurmguard=False for a set of arms without it (its first arm then runs on ``h``: a half
    of a big day). ``arms`` may add the fifth, ``shadow`` (support/fleet_day_observe.py: NHC
    acting, slurmguard observing); an ``h`` started observing
    (:func:`~support.fleet_day_observe.shadow_spec`) runs it, when ``arms`` has no slurmguard
    arm."""
    if every_kind is None:
        every_kind = len(h.nodes) >= 64
    faults = plan.schedule(seed, h.nodes, day_s, every_kind=every_kind, node_faults=node_faults)
    out: dict[str, Any] = {
        "seed": seed, "day_s": day_s, "tick_s": tick, "step_s": step_s, "every_steps": every,
        "nodes": len(h.nodes), "acceleration": round(plan.acceleration(len(h.nodes), day_s)),
        "faults_per_fleet_day": round(plan.expected_faults_per_day(), 2),
        "faults": plan.fault_rows(faults), "job_mix": plan.job_mix(len(h.nodes)),
        "job_s": round(job_steps(day_s, step_s) * step_s), "arms": list(arms),
        "parallel": parallel,
    }
    # ``h`` plays slurmguard; else the shadow arm, if it observes; else (a half of a big day
    # without slurmguard: run.py --arms) the first arm named.
    own = ("slurmguard" if "slurmguard" in arms else
           observe.SHADOW if observe.observing(h) and observe.SHADOW in arms else arms[0])
    others = [a for a in arms if a != own]
    bare = replace(h.spec, slurmguard=False, repair=None, policy_mode="act")
    harness: dict[str, ScaleHarness] = {own: h}
    try:
        # The other arms' clusters started at once (each a few seconds to minutes).
        with ThreadPoolExecutor(max(1, len(others))) as pool:
            started = {a: pool.submit(_start, h.root.parent / f"{h.root.name}-{a}",
                                      observe.shadow_spec(bare) if a == observe.SHADOW else bare)
                       for a in others}
            errors = []
            for a, fut in started.items():
                try:
                    harness[a] = fut.result()
                except Exception as exc:  # the others started are stopped below
                    errors.append(f"{a}: {exc}")
            if errors:
                raise RuntimeError("; ".join(errors))
        line = StartLine(len(arms))
        days = {a: Day(harness[a], a, faults, day_s, tick, step_s, every, parallel,
                       nhc=NHCNodes(harness[a], harness[a].root / "nhc") if a == "nhc" else None,
                       start=line) if a != observe.SHADOW else
                observe.ShadowDay(harness[a], faults, day_s, tick, step_s, every, parallel,
                                  start=line)
                for a in arms}
        with ThreadPoolExecutor(len(arms)) as pool:
            done = {a: pool.submit(d.run) for a, d in days.items()}
            for a, fut in done.items():
                out[a] = fut.result()
        if observe.SHADOW in days:  # the shadow report against the day's truth
            shadow = days[observe.SHADOW]
            assert isinstance(shadow, observe.ShadowDay)
            out[observe.SHADOW]["shadow"] = shadow.after(f"{2 * tick:g}s")
        for a in others:
            _cancel_all(harness[a])
    finally:
        for a in others:
            if a in harness:
                harness[a].stop()
                shutil.rmtree(harness[a].root, ignore_errors=True)
    _cancel_all(h)
    if own != "slurmguard":
        return out
    # The flapping node's second fault waits for its return, which never comes when the
    # fleet policy drains it for flapping first: that drain is then the flap's second
    # incident (its episode's cause is the failing check, gpu-nvlink), matched to it.
    out["incidents"] = outcomes.incident_truth(faults, incidents(h))
    out["incidents"]["not_injected"] = [f"{f.kind}@{f.node}" for f in faults
                                        if f not in days["slurmguard"].on_at]
    return out


def _start(root: Any, spec: Any, tries: int = 3) -> ScaleHarness:
    """A harness started, again if its start failed: clusters started at once pick their
    ports at once, and one slurmctld lost the race for its port ("Address already in use",
    a 128-node run's Slurm-alone arm); each try begins by killing what the last one left."""
    for i in range(tries):
        try:
            return ScaleHarness.start(root, spec)
        except RuntimeError:
            if i == tries - 1:
                raise
    raise AssertionError("unreachable")


def _cancel_all(h: ScaleHarness) -> None:
    assert h.cluster is not None
    h.cluster.run("scancel", "--full", "-u", "root", check=False, timeout=60)
