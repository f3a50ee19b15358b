"""docs/store.md's steady size with the default retention is the rendering of
docs/store_retention.json, which only tests/bench/bench_store_retention.py writes: no figure in
that block is typed, and the goal (at most 100 GB at 10,000 nodes) is checked on the figures."""

from __future__ import annotations

import json

from support.retention_doc import BEGIN, DATA, END, GOAL_GB, PAGE, page_with, rows_per_day, steady


def test_the_page_block_is_rendered_from_the_measured_json():
    data = json.loads(DATA.read_text())
    page = PAGE.read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    assert page == page_with(data, page), (
        "docs/store.md's retention figures are stale: cd tests && "
        "../.venv/bin/python -m support.retention_doc")


def test_the_measured_run_covers_every_kind_and_the_goal_holds():
    data = json.loads(DATA.read_text())
    assert data["nodes"] == 1024 and data["days"] >= 30
    for name, e in data["engines"].items():
        exp = e["ingest"]["expiry"]
        # the expiry ran with the defaults over the month: passing results past a week went,
        # every other kind stayed (runs 60 days, the rest 400), and nothing was cut short
        assert exp["deleted"].get("results", 0) > 0 and not exp["stopped"], name
        assert set(exp["deleted"]) == {"results"}, (name, exp["deleted"])
        for t in ("runs", "results", "events", "goodput_jobs", "goodput_job_nodes"):
            assert e["rows"][t] > 0 and e["bytes"][t] > 0, (name, t)
        assert e["ingest"]["during_ms"]["batches"] >= 5, name
        s = steady(data, name)
        assert s["steady_gb"]["10000"] <= GOAL_GB, (name, s["steady_gb"])
        assert s["steady_gb"]["10000"] < s["year_unexpired_gb"]["10000"] / 5, name


def test_the_arithmetic_scales_by_node_and_by_job():
    data = {"hc_interval": 300, "jobs_per_hour": 1200, "fail_rate": 0.0035}
    r1, r10 = rows_per_day(data, 1000), rows_per_day(data, 10000)
    # healthchecks scale with nodes, jobs with the job rate only
    assert r10["runs_healthy"] - r1["runs_healthy"] == 9000 * 288
    assert r1["goodput_jobs"] == r10["goodput_jobs"] == 28800
    assert r10["results_passing"] == 10000 * 288 * 6 + 2 * 28800 * 4 + 35 * 5
