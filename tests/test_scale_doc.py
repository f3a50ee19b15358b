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
    for label, runs in data["runs"].items():
        for n, f in runs.items():
            assert f["nodes"] == int(n), (label, n)
            for ph in f.get("steady", {}).get("phases", []):
                assert ph["jobs_completed"] == ph["jobs"], (label, n, ph)
