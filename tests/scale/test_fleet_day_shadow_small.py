"""The fleet day's shadow arm, small (docs/install.md "Rollout: observe, compare, act";
support/fleet_day_observe.py): one cluster of 16 real slurmd where LBNL NHC acts, as in the
small form's nhc arm, and slurmguard is installed observing (``[policy] mode = "observe"``:
its Prolog, Epilog, PrologSlurmctld and health check run, nothing of its changes Slurm), on
the small form's seed 27 (test_fleet_day_small.py): ECC at 7.9 s, IB link at 11.0, the filer
hangs at 19.8 for 12 s, thermal at 39.8 and a flapping NVLink; NHC can see the IB link and
the hang, not the rest.

After the day, `slurmguard shadow report --since 1d --json` on the cluster's store:

- its lists equal the day's truth (each fault and who saw it, from the checkers' own
  verdicts: NHC's runs, slurmguard's stored check results): ``only_slurmguard`` the faults NHC
  missed (its four blind ones), ``both`` those both saw (the IB link, the hang on each node
  where both read it), ``only_incumbent`` those only NHC saw (none on a quiet host); causes
  are slurmguard's check names, the plan's;
- no row on a node without a fault: a would-have-been-false row is a fault slurmguard alone
  saw after which every job on the node completed (the hang gone before the next job, a
  thermal fault that only slows), with only-slurmguard against the truth;
- the arm's own Slurm accounting (a slurmdbd the harness starts): the rows carry the jobs'
  GPU-hours and how they ended;
- slurmguard changed nothing: its Slurm tools (a shim) were asked for no change, every drain
  Slurm showed is NHC's; every health check exited 0, no prolog or epilog failed.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from support.fleet_day import fleet_spec
from support.fleet_day_observe import SHADOW, shadow_spec
from support.fleet_day_run import fleet_day
from support.nhc_node import SEES, require_nhc
from support.scaleharness import ScaleHarness, ScaleSpec, require_accounting, require_harness

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

NODES, SEED, DAY_S = 16, 27, 60.0  # the small form's day


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    require_harness()
    require_nhc()
    require_accounting()
    t0 = time.monotonic()
    h = ScaleHarness.start(tmp_path_factory.mktemp("shadowday") / "h",
                           shadow_spec(fleet_spec(ScaleSpec(nodes=NODES), slurmguard=True)))
    try:
        out = fleet_day(h, seed=SEED, day_s=DAY_S, tick=3.0, node_faults=3, parallel=8,
                        arms=(SHADOW,))
    finally:
        h.stop()
    out["wall_s"] = round(time.monotonic() - t0, 1)
    s = out[SHADOW]["shadow"]
    kept = tmp_path_factory.getbasetemp() / "shadow-day.json"  # with the ledger, to read later
    kept.write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"\nfleet day shadow arm: "
          f"{json.dumps({k: v for k, v in s.items() if k not in ('truth', 'ledger')})}\n"
          f"truth: {json.dumps(s['truth'])}\nNHC undetected: {out[SHADOW]['undetected']}\n"
          f"{out['wall_s']} s, load average {os.getloadavg()[0]:.1f}; all of it: {kept}")
    return out


def test_the_report_lists_equal_the_days_truth(day):
    s = day[SHADOW]["shadow"]
    assert s["diff"] == {}, s
    exp = s["expected"]
    # The seed's day holds each list's case: the equalities cannot pass on empty lists.
    blind = sorted((t["node"], t["cause"]) for t in s["truth"]
                   if t["kind"] != "shared-fs" and not SEES[t["kind"]][0])
    assert [c for _, c in blind] == ["gpu-thermal", "gpu-nvlink", "gpu-nvlink", "gpu-ecc"], blind
    assert [p for p in exp["only_slurmguard"] if p[1] != "fs-mount"] == blind, exp
    assert ("n2", "ib-link") in exp["both"] and ("n2", "ib-link") not in exp["only_incumbent"]
    # The hang, node by node: on a quiet host both see it on every node; on one loaded by
    # others a checker's every run on a node may read it outside the 12-s hang (its verdict
    # passed), and the report must then put that node where the truth does (above).
    hang = [p for name in ("both", "only_slurmguard", "only_incumbent") for p in exp[name]
            if p[1] == "fs-mount"]
    assert any(p[1] == "fs-mount" for p in exp["both"]) and len(hang) <= NODES, exp


def test_nhc_misses_exactly_what_its_table_says(day):
    truth = [t for t in day[SHADOW]["shadow"]["truth"] if t["kind"] != "shared-fs"]
    assert truth and all(t["slurmguard"] for t in truth), truth
    assert [t["nhc"] for t in truth] == [SEES[t["kind"]][0] for t in truth], truth
    # The day's own sampling of Slurm agrees: the faults NHC drained no node for.
    assert sorted(day[SHADOW]["undetected"]) == sorted(
        f"{t['kind']}@{t['node']}" for t in truth if not t["nhc"])


def test_no_row_on_a_node_without_a_fault(day):
    s = day[SHADOW]["shadow"]
    assert s["extra"] == [], s  # every row of both and only-slurmguard is a fault's
    # Every would-have-been-false row is a fault slurmguard alone saw after which every job
    # on the node completed (compare's false_on_fault), none a node without that fault.
    assert s["false"] == [], s["false"]


def test_the_report_counts_the_jobs_from_slurm_accounting(day):
    """The arm's own slurmdbd: the rows carry the GPU-hours of the jobs that ran on each
    node meanwhile and how they ended; rows with jobs have GPU-hours, one without has none."""
    s = day[SHADOW]["shadow"]
    assert s["report"]["jobs_from"] == "sacct", s["report"]
    hours = s["gpu_hours"]
    rows = hours["only_slurmguard"] + hours["would_have_been_false"]
    assert rows and any(ended for *_, ended in rows), hours  # the day's jobs ran on them
    # (a job that overlapped a row by a moment rounds to 0.0 GPU-hours: the sum is > 0)
    assert all(h == 0 for _, _, h, ended in rows if not ended), hours
    assert sum(h for _, _, h, ended in rows if ended) > 0, hours
    for node, cause, _, ended in hours["would_have_been_false"]:
        assert set(ended) == {"COMPLETED"}, (node, cause, ended)
    # The cost: the false rows' GPU-hours, less those of rows the blast cap refused.
    summary = s["report"]["summary"]
    assert 0 <= summary["cost_gpu_hours"] <= sum(
        r[2] for r in hours["would_have_been_false"]) + 1e-3, (summary, hours)
    assert all(r[2] is None for r in hours["only_incumbent"]), hours
    assert s["report"]["incumbent_from"] == "serve's node-state history"
    assert day[SHADOW]["healthy_drained_why"] == {}  # NHC drained no healthy node either


def test_slurmguard_changed_nothing_in_slurm(day):
    s = day[SHADOW]["shadow"]
    assert s["shim"]["changes"] == [] and s["shim"]["reads"] > 0, s["shim"]
    # Every out-of-service reason Slurm showed (serve's history holds each change) is NHC's.
    assert list(s["out_reasons"]) == ["NHC:"], s["out_reasons"]
    assert set(day[SHADOW]["drained_by"]) == {"NHC:"}, day[SHADOW]["drained_by"]


def test_every_hook_exited_0(day):
    s = day[SHADOW]["shadow"]
    assert s["healthchecks"]["runs"] > NODES and s["healthchecks"]["nonzero"] == [], s
    assert s["hook_failures_logged"] == [], s["hook_failures_logged"]
    assert {"healthcheck", "prolog", "epilog"} <= set(s["hook_runs"]), s["hook_runs"]
