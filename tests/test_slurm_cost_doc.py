"""docs/slurm.md's cost a minute (serve up and serve down) is the rendering of
docs/slurm_cost.json, which only tests/bench/bench_slurm_cost.py writes: no figure in that
block is typed, and what the figures must show is checked on them: one reader of the node
table whatever the replicas, health checks that read nothing of Slurm while serve (or, in an
outage, their saved record) answers, a failing check that looks at its node once, a shared
fault in an outage within 2x of the same with serve up, nothing drained past the cap, and a
partition read that packs no node."""

from __future__ import annotations

import json

from support.slurm_cost_doc import BEGIN, DATA, END, PAGE, outage_ratio, page_with

from slurmguard.node.fallback import cycle_slots
from slurmguard.serve.slurmview import read_period


def test_the_page_block_is_rendered_from_the_measured_json():
    data = json.loads(DATA.read_text())
    page = PAGE.read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    assert page == page_with(data, page), (
        "docs/slurm.md's slurmctld cost figures are stale: cd tests && "
        "../.venv/bin/python -m support.slurm_cost_doc")


def test_the_measured_runs_show_what_the_page_says():
    data = json.loads(DATA.read_text())
    assert [r["entries"] for r in data["runs"]] == [128, 512, 1024, 10000]
    checks = data["rounds"] * data["decisions"]
    for run in data["runs"]:
        n, m, per = run["entries"], run["per_minute"], run["checks"]
        # serve: one reader of the node table for every replica, every ttl up to
        # entries_per_ttl entries and proportionally less often beyond
        every = round(60 / read_period(data["ttl"], n, data["entries_per_ttl"]), 1)
        assert m["quiet_up"]["rpcs"]["REQUEST_NODE_INFO"] == every, n
        assert (every < 60 / data["ttl"]) == (n > data["entries_per_ttl"])
        # serve up, a passing health check reads nothing of Slurm: its state is serve's
        assert per["quiet_up"]["rpcs"] == {} and run["sources"]["quiet_up"] == {"serve": checks}
        # every replica down: the node's saved record stands in; too old, Slurm is read once
        assert per["quiet_down"]["rpcs"] == {} and run["sources"]["quiet_down"] == {"saved": checks}
        assert per["quiet_down_stale"]["rpcs"] == run["reads"]["one_node"]["rpcs"], n
        assert run["sources"]["quiet_down_stale"] == {"slurm": checks}
        # a failing check looks at its node once: the drain path's look, or its own read
        # taken as that look
        for case in ("fault_up", "fault_down", "fault_down_stale"):
            assert per[case]["rpcs"]["REQUEST_NODE_INFO_SINGLE"] == 1.0, (n, case)
        # cheaper than before in every case; a shared fault in the outage within the goal
        for case in ("quiet_up", "quiet_down", "fault_up", "fault_down"):
            assert m[case]["total"] < m[f"{case}_before"]["total"], (n, case)
            assert m[case]["ctld_ms"] < m[f"{case}_before"]["ctld_ms"], (n, case)
        # the window read's chance, as the fallback reckons it for the run's partition
        slots = cycle_slots(n, 10, 2)  # hooks.fallback_slots and fallback_share's defaults
        assert run["window_slots"] == slots, n
        assert run["window_chance"] == round(min(1.0, data["left"] / slots), 5), n
        ratio = outage_ratio(run)
        assert ratio["rpcs"] <= 2.0 and ratio["ms"] <= 2.0, (n, ratio)
        # the partition table packs no node; the narrow sinfo still packs the node table
        assert run["reads"]["partitions"]["rpcs"] == {"REQUEST_PARTITION_INFO": 1.0}
        assert run["reads"]["drained"]["rpcs"]["REQUEST_NODE_INFO"] == 1.0
        assert run["reads"]["drained_count"]["rpcs"]["REQUEST_NODE_INFO"] == 1.0
        # the shared fault stayed at its cap: every failing check refused or out of its window
        assert run["drained_after"] == run["cap"], run
        for case in ("fault_up", "fault_down", "fault_down_stale"):
            ends = run["outcomes"][case]
            assert set(ends) <= {"refused", "window past budget"}, (n, case, ends)
            assert sum(ends.values()) == checks, (n, case, ends)
