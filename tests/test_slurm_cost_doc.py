"""docs/slurm.md's cost a minute (serve up and serve down) is the rendering of
docs/slurm_cost.json, which only tests/bench/bench_slurm_cost.py writes: no figure in that
block is typed, and what the figures must show is checked on them: one reader of the node
table whatever the replicas, a fallback that reads fewer node tables than before and drains
nothing past the cap, and a partition read that packs no node."""

from __future__ import annotations

import json

from support.slurm_cost_doc import BEGIN, DATA, END, PAGE, page_with

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
    for run in data["runs"]:
        m = run["per_minute"]
        # serve: one reader of the node table for every replica, every ttl up to
        # entries_per_ttl entries and proportionally less often beyond; each replica read
        # every ttl before
        reader = 60 / data["ttl"]
        every = round(60 / read_period(data["ttl"], run["entries"], data["entries_per_ttl"]), 1)
        assert m["serve_up"]["rpcs"]["REQUEST_NODE_INFO"] == every, run["entries"]
        assert (every < reader) == (run["entries"] > data["entries_per_ttl"])
        assert m["serve_up_before"]["rpcs"]["REQUEST_NODE_INFO"] == reader * data["replicas"]
        # the fallback: fewer node-table packs and less slurmctld time than before
        assert (m["serve_down"]["rpcs"].get("REQUEST_NODE_INFO", 0.0)  # none in the window
                < m["serve_down_before"]["rpcs"]["REQUEST_NODE_INFO"] / 2), run["entries"]
        assert m["serve_down"]["ctld_ms"] < m["serve_down_before"]["ctld_ms"], run["entries"]
        # the partition table packs no node; the narrow sinfo still packs the node table
        assert run["reads"]["partitions"]["rpcs"] == {"REQUEST_PARTITION_INFO": 1.0}
        assert run["reads"]["drained"]["rpcs"]["REQUEST_NODE_INFO"] == 1.0
        assert run["reads"]["drained_count"]["rpcs"]["REQUEST_NODE_INFO"] == 1.0
        # the shared fault stayed at its cap: every check refused or out of its window
        assert run["drained_after"] == run["cap"], run
        assert set(run["outcomes"]["now"]) <= {"refused", "window past budget"}, run["outcomes"]
        assert sum(run["outcomes"]["now"].values()) == data["rounds"] * data["decisions"]
