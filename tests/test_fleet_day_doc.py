"""docs/fleet-day.md is the rendering of docs/fleet-day.json, which only the fleet day writes
(`tests/scale/run.py --scenario fleet_day`): no key of the JSON is typed (each is one the run
writes), and every number on the page comes from the JSON or from the page's fixed text."""

from __future__ import annotations

import json
import re
from typing import Any

from support.fleet_day_arms import ARMS
from support.fleet_day_doc import RUN_KEYS, render
from support.helpers import REPO

DOCS = REPO / "docs"
# A number on its own (not part of a name such as n7, mlx5_1 or ecc@n12).
NUMBER = re.compile(r"(?<![\w@.-])\d+(?:[.,]\d+)*(?![\w@])")


def _data() -> dict[str, Any]:
    return json.loads((DOCS / "fleet-day.json").read_text())


def test_fleet_day_md_is_rendered_from_the_measured_json():
    assert (DOCS / "fleet-day.md").read_text() == render(_data()), (
        "docs/fleet-day.md is stale: python tests/scale/run.py --render")


def test_every_key_of_every_run_is_one_the_run_writes():
    data = _data()
    assert set(data) == {"runs"}
    for key, f in data["runs"].items():
        assert set(f) <= RUN_KEYS, (key, sorted(set(f) - RUN_KEYS))
        assert key == f"{f['nodes']}-{f['seed']}"
        for a in f["arms"]:
            m = f[a]
            assert 0 <= m["ettr"] <= 1 and 0 <= m["goodput"] <= 1, (key, a)
            assert m["window_s"] == f["day_s"], (key, a)  # every arm over the same window
        for half in f.get("halves") or [{"arms": f["arms"]}]:  # from one start line (a half's)
            assert len({f[a]["t0"] for a in half["arms"]}) == 1, (key, half["arms"])
        inc = f["incidents"]
        assert len(inc["matched"]) + len(inc["missing"]) == len(f["faults"]), (key, inc)


def _perturbed(v: Any, in_list: bool = False) -> Any:
    """Every number of the JSON changed (zero stays zero, so what is shown stays shown), and
    every list of plain values that a key holds doubled (so a count of one, or a mean of
    counts, changes; a list inside a list is a tuple, such as [when, seconds], and stays)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v * 3
    if isinstance(v, float):
        return v * 1.37
    if isinstance(v, list):
        out = [_perturbed(x, in_list=True) for x in v]
        plain = all(isinstance(x, str | int | float) for x in v)
        return out * 2 if plain and not in_list else out
    return {k: _perturbed(x) for k, x in v.items()}


def _lengths(v: Any) -> set[str]:
    """How many items each list of the JSON holds (a count the page shows comes from one)."""
    if isinstance(v, list):
        return {str(len(v))} | set().union(*(_lengths(x) for x in v)) if v else {"0"}
    if isinstance(v, dict):
        return set().union(*(_lengths(x) for x in v.values())) if v else set()
    return set()


# A run's date, as run.py stamps it (a string of the JSON: the numbers in it are not figures).
DATE = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d UTC\b")


def typed_lines(data: dict[str, Any], extra: str = "") -> list[str]:
    """Lines of the page whose numbers stay put when every number of the JSON changes, but
    for the page's fixed text (rendered with no run at all), zeros and counts of the JSON's
    lists (``extra``: a line appended to both renderings, for the check's own test)."""
    page = (render(data) + extra).splitlines()
    other = (render({"runs": {k: _perturbed(f) for k, f in data["runs"].items()}})
             + extra).splitlines()
    fixed = set(render({"runs": {}}).splitlines())
    counts = _lengths(data)
    assert len(page) == len(other)
    return [a for a, b in zip(page, other, strict=True)
            if a == b and a not in fixed and not a.startswith("![")  # a plot, named by run
            and any(set(x) - {"0", ".", ","} and x not in counts
                    for x in NUMBER.findall(DATE.sub("", a.split("](")[0])))]


def test_every_number_on_the_page_comes_from_the_json_or_the_fixed_text():
    """Render from the JSON and from the JSON with every number changed: no line of the page
    keeps a number of its own, so none is typed into the renderer or the JSON."""
    data = _data()
    assert data["runs"], "no run on the page"
    assert typed_lines(data) == []
    # The check sees a number typed into the page (a stall worked out by hand, say).
    assert typed_lines(data, "The loop stalled 183.7 s here.\n") == [
        "The loop stalled 183.7 s here."]


def test_the_page_has_the_four_arms_and_the_goals():
    text = (DOCS / "fleet-day.md").read_text()
    for label in ("Slurm alone", "Slurm + LBNL NHC", "slurmguard", "oracle (reference)"):
        assert label in text
    assert "measured against goal" in text and "## Across seeds" in text
    assert all(a in _data()["runs"][k] for k in _data()["runs"] for a in ARMS)


def test_a_day_run_in_halves_joins_one_entry_and_a_different_day_replaces_it():
    from support.fleet_day_doc import join_halves

    base = {"seed": 1, "day_s": 300.0, "tick_s": 15.0, "step_s": 0.5, "every_steps": 10,
            "nodes": 512, "faults": [{"kind": "ecc"}], "job_mix": [8, 1]}
    first = {**base, "arms": ["nhc", "slurmguard"], "nhc": {"ettr": 0.9},
             "slurmguard": {"ettr": 0.95}, "incidents": {"n": 1}, "date": "d1", "scenario_s": 9}
    second = {**base, "arms": ["slurm", "oracle"], "slurm": {"ettr": 0.8},
              "oracle": {"ettr": 0.85}, "date": "d2", "scenario_s": 8}
    one = join_halves(None, first)
    both = join_halves(one, second)
    assert both["arms"] == [a for a in ARMS if a in ("nhc", "slurmguard", "slurm", "oracle")]
    assert [h["arms"] for h in both["halves"]] == [["nhc", "slurmguard"], ["slurm", "oracle"]]
    assert both["slurmguard"] == {"ettr": 0.95} and both["slurm"] == {"ettr": 0.8}
    assert both["incidents"] == {"n": 1} and both["date"] == "d1"
    other = join_halves(one, {**second, "faults": [{"kind": "xid79"}]})  # another schedule
    assert other["arms"] == ["slurm", "oracle"] and len(other["halves"]) == 1
    again = join_halves(both, first)  # the same arms again: the new run replaces the entry
    assert again["arms"] == ["nhc", "slurmguard"] and len(again["halves"]) == 1


def _shadow_day(base: dict[str, Any], diff: dict[str, Any]) -> dict[str, Any]:
    """A `--arms shadow` day's figures as fleet_day_run returns them, by hand."""
    hours = {"both": [["n2", "ib-link", 0.0, {}]],
             "only_slurmguard": [["n7", "gpu-ecc", 0.5, {"FAILED": 1}]],
             "only_incumbent": [["n3", "fs-mount", None, {}]],
             "would_have_been_false": [["n9", "fs-mount", 0.25, {"COMPLETED": 2}]]}
    report = {"summary": {"saved_gpu_hours": 0.5, "cost_gpu_hours": 0.25},
              "jobs_from": "sacct", "incumbent_from": "serve's node-state history"}
    return {**base, "arms": ["shadow"], "shadow": {"shadow": {
        "report": report, "gpu_hours": hours, "diff": diff, "extra": [], "mapped": [],
        "false_on_fault": [["n9", "fs-mount"]], "match_window": "30s"}}}


def test_a_shadow_day_joins_the_run_of_its_schedule_and_its_table_sits_beside_the_arms():
    from support import fleet_day_shadow_doc as shadow
    from support.fleet_day_doc import join_halves

    base = {"seed": 1, "day_s": 90.0, "tick_s": 15.0, "step_s": 0.5, "every_steps": 10,
            "nodes": 16, "faults": [{"kind": "ecc"}], "job_mix": [8, 1]}
    # GPU-seconds lost by cause: the shared hang and overhead are not node faults.
    run = {**base, "arms": ["nhc", "slurmguard"],
           "nhc": {"lost_gpu_s_by_cause": {"gpu-ecc": 5400.0, "fs-mount": 900.0}},
           "slurmguard": {"lost_gpu_s_by_cause": {"gpu-ecc": 1800.0, "overhead": 360.0}}}
    # (run, shadow day's diff, stored?, the table's last rows: difference, equal)
    cases = [
        (run, {}, True, ["| four arms: lost to node faults, Slurm + LBNL NHC minus slurmguard "
                         "| 1.0000 |", "| the report's lists equal the day's truth | yes |"]),
        (run, {"only_slurmguard": {"report": [], "truth": [["n7", "gpu-ecc"]]}}, True,
         ["| four arms: lost to node faults, Slurm + LBNL NHC minus slurmguard | 1.0000 |",
          "| the report's lists equal the day's truth | no: only_slurmguard |"]),
        ({k: v for k, v in run.items() if k != "nhc"} | {"arms": ["slurmguard"]}, {}, True,
         ["| four arms: lost to node faults, Slurm + LBNL NHC minus slurmguard | – |",
          "| the report's lists equal the day's truth | yes |"]),
        ({**run, "faults": [{"kind": "xid79"}]}, {}, False, []),  # another schedule
        (None, {}, False, []),  # no run of that size and seed
    ]
    for entry, diff, stored, tail in cases:
        joined = shadow.join(entry, _shadow_day(base, diff), "2026-12-06 21:00 UTC")
        assert (joined is not None) == stored, (entry, diff)
        if joined is None:
            continue
        assert set(joined["shadow"]) == shadow.KEYS
        assert joined["shadow"]["truth_equal"] == (diff == {})
        lines = shadow.rows(joined)
        assert "| shadow report: only slurmguard, the jobs on those nodes meanwhile (rows: 1) " \
               "| 0.5000 |" in lines, lines
        assert "| shadow report: would have been false, cost (rows: 1; on a real fault whose " \
               "jobs there all completed: 1) | 0.2500 |" in lines, lines
        assert lines[-4:-2] == tail, lines
        assert "n7 gpu-ecc 0.5 (FAILED 1)" in lines[-1] and "n3 fs-mount;" in lines[-1]
        # The run's four-arm rerun on the same schedule keeps the shadow day; another drops it.
        again = {**entry, "arms": ["nhc"], "nhc": {"lost_gpu_s_by_cause": {}}}
        assert join_halves(joined, again)["shadow"] == joined["shadow"]
        assert "shadow" not in join_halves(joined, {**again, "day_s": 60.0})
    assert shadow.rows(run) == []  # no shadow day: no table
