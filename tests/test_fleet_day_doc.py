"""docs/fleet-day.md is the rendering of docs/fleet-day.json, which only the fleet day writes
(`tests/scale/run.py --scenario fleet_day`): no figure on the page is typed."""

from __future__ import annotations

import json

from support.fleet_day_doc import MODES, render
from support.helpers import REPO

DOCS = REPO / "docs"


def test_fleet_day_md_is_rendered_from_the_measured_json():
    data = json.loads((DOCS / "fleet-day.json").read_text())
    assert (DOCS / "fleet-day.md").read_text() == render(data), (
        "docs/fleet-day.md is stale: python tests/scale/run.py --render")


def test_every_run_holds_both_modes_and_the_incident_truth():
    data = json.loads((DOCS / "fleet-day.json").read_text())
    assert data["runs"]
    for n, f in data["runs"].items():
        assert f["nodes"] == int(n)
        for m in MODES:
            assert 0 <= f[m]["ettr"] <= 1 and 0 <= f[m]["goodput"] <= 1, (n, m)
        inc = f["incidents"]
        assert len(inc["matched"]) + len(inc["missing"]) == len(f["faults"]), (n, inc)
