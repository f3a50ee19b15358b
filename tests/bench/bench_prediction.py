"""Prediction quality on many seeds of the project's generators (run by hand, prints medians).

    .venv/bin/python tests/bench/bench_prediction.py --risk-seeds 101-110 --nodes 2000 --days 60
    .venv/bin/python tests/bench/bench_prediction.py --generator blind --risk-seeds judged
    .venv/bin/python tests/bench/bench_prediction.py --risk-seeds 0 --burnin-seeds 1-8
    .venv/bin/python tests/bench/bench_prediction.py --level-rule

Node risk (slurmguard/fleet/risk.py) at its default level (or ``--risk level=30``) on the
fleets of tests/support/fleetgen.py or tests/support/fleetgen_blind.py, counted with the one
scorer (slurmguard/fleet/scoring.py, through tests/support/risk_eval.py): precision, recall,
recall a day ahead and the median lead, per seed; ``--level-rule`` scores every level of
``fleet risk --curve`` on the TUNING seeds of both generators and prints the level the
default's rule picks (risk_eval.level_rule; docs/fleet.md); ``--json`` keeps the rows
(tests/data/risk/before.json was written so, at the score before inputs with meaning).

burn-in's ``degrading`` verdict (``--burnin-seeds``) judged night after night on the wearing
fleets of tests/support/burnin_truth.py (``wearing``), Gaussian, Student-t 5 and 4 noise:
precision, recall (named 2 nights or more before the drain) and the median lead, each true
prediction's lead listed (docs/burnin.md, "Degrading"). ``--trend KEY=VALUE`` tries other
StatParams (e.g. trend_sigmas=4).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.burnin_truth import wearing  # noqa: E402
from support.risk_eval import (  # noqa: E402
    JUDGED,
    LEVEL_FLOORS,
    TUNING,
    judge,
    level_rule,
    line,
    make_case,
)
from support.wear_outcome import judge_nightly  # noqa: E402

from slurmguard.burnin.stats import StatParams  # noqa: E402
from slurmguard.fleet.curve import LEVELS  # noqa: E402
from slurmguard.fleet.params import RiskParams  # noqa: E402


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def risk_rates(generator: str, seed: int, nodes: int, days: int,
               rp: RiskParams) -> dict[str, Any]:
    """The one scorer's figures for the default level on one generated fleet."""
    with tempfile.TemporaryDirectory() as d:
        case = make_case(generator, seed, Path(d) / "fleet.db", nodes=nodes, days=days)
    return judge(case, rp)


def burnin(seed_list: list[int], nodes: int, trend: list[str]) -> None:
    p = StatParams.from_section({k: float(v) if "." in v else int(v)
                                 for k, v in (t.split("=") for t in trend)})
    for shape in ("gauss", "t5", "t4"):
        rows = []
        for s in seed_list:
            t0 = time.monotonic()
            o = judge_nightly(wearing(seed=s, nodes=nodes, shape=shape), p)
            precision, recall, lead, named, planted = o.figures()
            rows.append((precision, recall, lead))
            leads = sorted(v for v in o.leads().values() if v is not None)
            print(f"burnin {shape} seed {s}: named {named} planted {planted} precision "
                  f"{precision:.2f} recall {recall:.2f} median lead {lead:g} nights, leads "
                  f"{leads} [{time.monotonic() - t0:.1f} s]", flush=True)
        for i, k in enumerate(("precision", "recall", "lead_nights_median")):
            vals = [r[i] for r in rows]
            print(f"burnin {shape} {k}: median {statistics.median(vals):.2f} "
                  f"min {min(vals):.2f} max {max(vals):.2f}")


def level_curve(nodes: int, days: int) -> None:
    """Every curve level on the tuning seeds; the level the default's rule picks."""
    rows = []
    for gen, seed_list in TUNING.items():
        for s in seed_list:
            t0 = time.monotonic()
            with tempfile.TemporaryDirectory() as d:
                case = make_case(gen, s, Path(d) / "fleet.db", nodes=nodes, days=days)
                for lv in LEVELS:
                    rows.append({**judge(case, RiskParams(level=float(lv))), "generator": gen,
                                 "seed": s, "level": float(lv)})
            print(f"# {gen} seed {s} [{time.monotonic() - t0:.1f} s]", flush=True)
    for gen in TUNING:
        for lv in LEVELS:
            rs = [r for r in rows if r["generator"] == gen and r["level"] == lv]
            ps = [r["precision"] for r in rs if r["precision"] is not None]
            true, false = sum(r["true"] for r in rs), sum(r["false"] for r in rs)
            print(f"level {gen} {lv}: a day ahead {sum(r['ahead'] for r in rs)} of "
                  f"{sum(r['failures'] for r in rs)}, precision "
                  f"{true / (true + false) if true + false else 0:.2f} (lowest seed "
                  f"{min(ps) if len(ps) == len(rs) else 0:.2f}), median over seeds "
                  f"{statistics.median(ps) if ps else 0:.2f}")
    print(f"level rule (floors {LEVEL_FLOORS}): {level_rule(rows)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generator", choices=["fleetgen", "blind"], default="fleetgen")
    ap.add_argument("--risk-seeds", default="101-110", help="e.g. 101-110, or 'judged'")
    ap.add_argument("--risk", action="append", default=[], metavar="KEY=VALUE",
                    help="another [risk] value (e.g. level=30)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--weight", action="append", default=[], metavar="FACTOR=POINTS",
                    help="try another weight (e.g. failures=15)")
    ap.add_argument("--burnin-seeds", default="", help="e.g. 1-8; empty: no burn-in part")
    ap.add_argument("--burnin-nodes", type=int, default=4000)
    ap.add_argument("--trend", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--level-rule", action="store_true",
                    help="every curve level on the tuning seeds, and the default's rule")
    a = ap.parse_args()
    if a.level_rule:
        level_curve(a.nodes, a.days)
        return 0
    if a.burnin_seeds:
        burnin(seeds(a.burnin_seeds), a.burnin_nodes, a.trend)
    rp = RiskParams.from_section({"weights": {k: float(v) for k, v in (w.split("=") for w in a.weight)},
                                  **{k: float(v) for k, v in (x.split("=") for x in a.risk)}})
    rows = []
    seed_list = (list(JUDGED[a.generator]) if a.risk_seeds == "judged" else
                 seeds(a.risk_seeds) if a.risk_seeds != "0" else [])
    for s in seed_list:
        t0 = time.monotonic()
        r = risk_rates(a.generator, s, a.nodes, a.days, rp)
        rows.append(r)
        print(f"risk {a.generator} seed {s}: {json.dumps(r)} [{time.monotonic() - t0:.1f} s]",
              flush=True)
    if rows:
        print(line(a.generator, rows))
    if a.json:
        Path(a.json).write_text(json.dumps({"generator": a.generator, "seeds": seed_list,
                                            "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
