"""docs/scale.md is the rendering of docs/scale.json, which only the scale harness writes
(tests/scale/run.py): no figure on the page is typed."""

from __future__ import annotations

import json

from support.helpers import REPO
from support.scale_doc import render

DOCS = REPO / "docs"


def test_scale_md_is_rendered_from_the_measured_json():
    data = json.loads((DOCS / "scale.json").read_text())
    plots = sorted(p.name for p in (DOCS / "scale").glob("*.png"))
    lines = [f"![{p[:-4]}](scale/{p})" for p in plots]
    assert (DOCS / "scale.md").read_text() == render(data, lines), (
        "docs/scale.md is stale: python tests/scale/run.py --render")


def test_every_run_holds_the_scenarios_the_page_shows():
    data = json.loads((DOCS / "scale.json").read_text())
    assert data["runs"]
    for label, runs in data["runs"].items():
        for n, f in runs.items():
            real, _, emulated = n.partition("+")  # N, or N+E with emulated entries
            assert f["nodes"] == int(real), (label, n)
            assert f.get("node_entries", f["nodes"]) == int(real) + int(emulated or 0), (label, n)
            for ph in f.get("steady", {}).get("phases", []):
                assert ph["jobs_completed"] == ph["jobs"], (label, n, ph)


def _repaired_wave(**over):
    w = {"limits": {"max_nodes": 4, "max_percent": 5.0, "slots": 1, "reboots_per_hour": 4,
                    "settle": 900.0, "policy_interval": 10.0},
         "faulted": 3, "drained_faulted": 3, "drained_healthy": [], "missed": [],
         "all_drained_s": 8.5, "returned": 3, "ticketed": 0, "unfinished": [], "reboots": 3,
         "max_reboots_per_node": 1, "rebooted_twice": [], "repaired_healthy": [],
         "max_concurrent": 1, "max_reboots_in_hour": 3, "drain_to_start_p50_s": 11.1,
         "drain_to_start_max_s": 21.0, "drain_to_return_p50_s": 19.1,
         "drain_to_return_max_s": 28.9, "repair_wait_s": 34.1}
    w.update(over)
    return {"runs": {"today": {"32": {"nodes": 32, "hc_interval": 300, "wave_repair": w}}}}


def test_the_repaired_wave_shows_its_figures_and_judges_its_limits():
    page = render(_repaired_wave(), [])
    assert "| Xid wave with repair: drain to return, p50 / max | 19.1 / 28.9 s |" in page
    assert "| Xid wave with repair: most repairs at once / most reboots in an hour | 1 / 3 |" in page
    assert "| today | 32 | Xid wave with repair: repairs at once within max_nodes / max_percent | " \
           "1 (at most 1) | yes |" in page
    assert "no run in docs/scale.json yet" not in page
    bad = render(_repaired_wave(max_concurrent=2, rebooted_twice=["n1"], max_reboots_per_node=2), [])
    assert "| 2 (at most 1) | no |" in bad and "| most 2 | no |" in bad


def _outage_phase(seconds: float, own: float, calls: dict[str, dict[str, int]]) -> dict:
    rpm = 2 * sum(sum(c.values()) for c in calls.values()) * 60 / seconds
    return {"seconds": seconds, "slurm_own_rpm": own, "slurmguard_rpm": rpm, "slurm_calls": calls}


def test_an_outage_ratio_without_the_hooks_reads_takes_out_a_pass_in_one_window_only():
    from support.scale_doc import _ratio_without_hooks

    wrappers = {"node/run": {"scontrol show node NAME": 120}}
    up = _outage_phase(120, 20.0, wrappers)  # 120 wrapper reads a 120 s: 120 RPCs/min
    down = _outage_phase(300, 20.0, {"node/run": {"scontrol show node NAME": 450},
                                     "node/healthcheck": {"sinfo node NAME": 1000}})
    o = {"serve_up": up, "serve_down": down}
    total = (down["slurm_own_rpm"] + down["slurmguard_rpm"]) / (up["slurm_own_rpm"] + up["slurmguard_rpm"])
    assert total > 2  # the health checks' pass, in the down window only
    assert _ratio_without_hooks(o) == round((20 + 180) / (20 + 120), 2)  # 1.43
    assert _ratio_without_hooks({"serve_up": {"seconds": 1}, "serve_down": down}) is None


def test_the_page_leads_with_each_cost_from_the_newest_run_that_measured_it():
    """"What a site gets": per size, each cell is the newest run (by its date) that measured
    that cost, named in the cell; a cost no run at that size measured is "–"."""
    from support.scale_doc import current

    def run(date: str, ctld: float) -> dict:
        ph = {"jobs_per_hour": 1200, "slurmguard_rpm": 10.0, "ctld_cpu_pct": ctld,
              "node_cpu_s_per_hour_agent": 1.0, "node_cpu_s_per_hour_fallback": 2.0,
              "seconds": 60.0, "serves": []}
        return {"date": date, "nodes": 128, "steady": {"phases": [ph]}}

    data = {"runs": {"old": {"128": run("2026-12-01 00:00 UTC", 9.0)},
                     "new": {"128": run("2026-12-05 00:00 UTC", 0.5)},
                     "gate-only": {"128": {"date": "2026-12-06 00:00 UTC", "nodes": 128,
                                           "gate": {"large_p99_ms": 80.0,
                                                    "large_job_nodes": 128}}}}}
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in current(data) if ln.startswith("| ")}
    assert rows["slurmctld: its CPU, every cause, steady at the higher job rate"].endswith(
        "| 0.5 % [new] |")
    assert rows["the gate: a job over every node, p99 (serve's socket)"].endswith(
        "| 80.0 ms (128 nodes) [gate-only] |")
    assert rows["a serve outage: slurmctld's RPC rate, down / up"].endswith("| – |")


def test_a_ten_thousand_node_run_has_its_column_and_its_goals_against_goal():
    """A run of N real and E emulated entries (N + E >= 10,000) is the last column of "What a
    site gets" and gives the rows of "Goals at 10,000 nodes", each judged against its goal;
    a smaller N+E run is neither."""
    from support.scale_doc import current

    def ph(rate: int, rpm: float, ctld: float) -> dict:
        return {"jobs_per_hour": rate, "slurmguard_rpm": rpm, "ctld_cpu_pct": 3.0,
                "slurmguard_ctld_pct": ctld, "node_cpu_s_per_hour_agent": 1.0,
                "node_cpu_s_per_hour_fallback": 2.0, "seconds": 120.0,
                "serves": [{"cpu_s": 6.0, "rss_mb": 300.0}, {"cpu_s": 1.2, "rss_mb": 1100.0}]}

    tenk = {"date": "2026-12-07 08:00 UTC", "nodes": 1024,
            "steady": {"phases": [ph(300, 50.0, 0.4), ph(1200, 52.0, 1.5)]},
            "gate": {"large_p99_ms": 420.0, "large_job_nodes": 1024, "burst": 500,
                     "burst_p50_ms": 80.0, "burst_p99_ms": 900.0, "burst_wall_s": 2.0,
                     "burst_fell_back": 3},
            "shared_fault": {"cap": 50, "outage_rpc_ratio": 2.5, "bound_serve_down": 51,
                             "serve_up": {"drained": 50, "slurmguard_rpcs": 1000,
                                          "slurmguard_ctld_pct": 0.5, "seconds": 600.0},
                             "serve_down": {"drained": 51, "slurmguard_rpcs": 2500,
                                            "slurmguard_ctld_pct": 0.3, "seconds": 1200.0}}}
    # A later 10,000-entry run whose job over every real node had 256: it measures the burst,
    # not the 1,024-node gate, whose row stays on tenk's.
    small = {"date": "2026-12-09 00:00 UTC", "nodes": 256,
             "gate": dict(tenk["gate"], large_job_nodes=256, large_p99_ms=99.0, burst_fell_back=0,
                          burst_p99_ms=300.0)}
    data = {"runs": {"tenk": {"1024+8976": tenk},
                     "middle": {"64+2000": dict(tenk, date="2026-12-08 00:00 UTC")},
                     "tenk-small": {"256+9744": small}}}
    lines = current(data)
    head = next(ln for ln in lines if ln.startswith("| cost |"))
    assert head.endswith("| 10,000 nodes (1,024 real) | 10,000 nodes (256 real) |")
    assert "2,064" not in head
    goals = {ln.split(" | ")[0].lstrip("| "): ln for ln in lines[lines.index(
        "## Goals at 10,000 nodes, 1,200 jobs an hour\n"):] if ln.startswith("| ")}

    def holds(start: str) -> str:
        (row,) = [v for k, v in goals.items()
                  if k.startswith(start) and "| tenk (1024+8976) |" in v]
        return row.rsplit("| ", 1)[-1].strip(" |")

    assert holds("slurmguard's share of slurmctld's CPU") == "no"  # 1.5 % > 1 %
    assert holds("slurmguard's RPCs a minute flat") == "yes"  # 52 <= 1.25 x 50 + 5
    assert holds("serve's RSS") == "no"  # 1,100 MB > 1 GB
    assert holds("the gate for a 1,024-node job") == "yes"
    (burst,) = [v for k, v in goals.items() if k.startswith("the gate for one-node jobs")]
    assert "| tenk-small (256+9744) | – |" in burst  # measured, no goal
    assert "p99 300.0 ms" in burst and "; 0 ran the Python gate" in burst
    assert holds("a shared fault on every node, serve up") == "yes"
    assert holds("a shared fault on every node, every replica down") == "no"  # 51 > 50
    # the outage's cost is slurmctld's server time over each pass (0.3 % x 1,200 s against
    # 0.5 % x 600 s: 1.2x), not the RPC count (2.5x)
    assert holds("in the outage") == "yes" and any(
        "| 1.2x (3.6 s / 3.0 s; RPCs 2,500 / 1,000) |" in v for v in goals.values())
