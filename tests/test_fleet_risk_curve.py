"""`slurmguard fleet risk --curve` on generated fleets of both generators: every level's
precision, recall and lead, counted with the one scorer, the current level's row equal to
what `policy replay` says of the same level (docs/fleet.md, "Choosing the level"). The real
cluster's store is curved in tests/test_replay_guard.py."""

from __future__ import annotations

import json

import pytest
from support.helpers import run_sg, sg_env

from slurmguard.fleet.curve import LEVELS
from slurmguard.fleet.params import RiskParams
from slurmguard.output import iso

KEYS = ("true", "false", "late", "open", "precision", "recall", "recall_ahead", "failures")


_MADE: dict[str, tuple] = {}  # one fleet per generator for the module, whichever asks first


def _fleet(gen: str, tmp_path_factory) -> tuple:
    if gen not in _MADE:
        d = tmp_path_factory.mktemp(gen)
        if gen == "blind":
            from support.fleetgen_blind import generate
            truth = generate(str(d / "fleet.db"), nodes=500, days=60, seed=21)
        else:
            from support.fleetgen import generate
            truth = generate(str(d / "fleet.db"), nodes=300, days=45, seed=21)
        cfg = d / "sg.toml"
        cfg.write_text(f'[store]\npath = "{d}/fleet.db"\n[slurm]\nscontrol = "{d}/no-scontrol"\n'
                       f'sinfo = "{d}/no-sinfo"\n')
        _MADE[gen] = (truth, cfg)
    return _MADE[gen]


@pytest.fixture(scope="module", params=["blind", "fleetgen"])
def fleet(request, tmp_path_factory):
    return _fleet(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def blind_fleet(tmp_path_factory):
    """The blind generator's fleet: the one whose gpu-ecc runs carry their details
    (fleetgen.py's carry none; its gpu-remap warnings do)."""
    return _fleet("blind", tmp_path_factory)


def _history(truth, cfg):
    from slurmguard.store import Store
    from slurmguard.store.fleet import load_history

    store = Store.open(url=f"sqlite:///{cfg.parent}/fleet.db")
    try:
        return load_history(store.engine, since=truth.since, until=truth.until, healthy=False)
    finally:
        store.close()


def _sg(cfg, *args):
    p = run_sg("-c", str(cfg), *args, env=sg_env(), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def test_the_curve_counts_every_level_with_the_one_scorer(fleet) -> None:
    truth, cfg = fleet
    window = ["--since", iso(truth.since), "--until", iso(truth.until)]
    c = json.loads(_sg(cfg, "fleet", "risk", "--curve", *window, "--json").stdout)
    rows = c["levels"]
    level = RiskParams().level  # the default: the fleet's config does not set it
    assert [r["level"] for r in rows] == list(LEVELS) and c["current_level"] == level
    for lo, hi in zip(rows, rows[1:], strict=False):  # a higher level flags no more
        assert hi["nodes_flagged"] <= lo["nodes_flagged"] and hi["caught"] <= lo["caught"]
    assert rows[0]["nodes_flagged"] > rows[-1]["nodes_flagged"]
    assert any(r["true"] > 0 for r in rows) and rows[0]["failures"] > 0
    replay = json.loads(_sg(cfg, "policy", "replay", *window, "--json").stdout)["current"]["risk"]
    (at_level,) = [r for r in rows if r["level"] == level]
    assert {k: at_level[k] for k in KEYS} == {k: replay[k] for k in KEYS}
    text = _sg(cfg, "fleet", "risk", "--curve", *window).stdout
    assert text.startswith("risk curve ") and f"\n{level:g} *" in text and "a day ahead" in text


def test_fleet_risk_lists_the_nodes_at_risk_and_a_bad_window_names_the_flag(fleet) -> None:
    truth, cfg = fleet
    out = json.loads(_sg(cfg, "fleet", "risk", "--json").stdout)
    level = RiskParams().level
    assert out["level"] == level and all(v["risk"] >= level for v in out["nodes"].values())
    p = run_sg("-c", str(cfg), "fleet", "risk", "--curve", "--since", "2026-03-01",
               "--until", "2026-02-01", env=sg_env(), timeout=60)
    assert p.returncode == 6 and "--since:" in p.stderr, (p.returncode, p.stderr)


def test_the_history_carries_gpu_ecc_lifetime_counts_from_the_details(blind_fleet) -> None:
    truth, cfg = blind_fleet
    h = _history(truth, cfg)
    old = [n for n, kind in truth.benign.items() if kind == "old_ecc"]
    assert old
    for n in old:  # an old count: the same on every run, never zero, and not a warning unit
        counts = {dict(r.counts)["gpu-ecc"] for r in h.runs[n]}
        assert len(counts) == 1 and min(counts) >= 1, (n, counts)
        assert all(r.counts == (("gpu-ecc", min(counts)),) for r in h.runs[n])


def test_the_history_carries_gpu_remaps_newly_remapped_rows(tmp_path_factory) -> None:
    """fleetgen.py's row-remap warnings are gpu-remap's own results (one row newly remapped):
    the loader reads the growth from their details."""
    truth, cfg = _fleet("fleetgen", tmp_path_factory)
    remaps = [r for runs in _history(truth, cfg).runs.values() for r in runs
              if "gpu-remap" in r.warnings]
    assert remaps and all(r.counts == (("gpu-remap", 1),) for r in remaps)
