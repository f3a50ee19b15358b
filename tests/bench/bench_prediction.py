"""Prediction quality on many seeds of the project's generators (run by hand, prints medians).

    .venv/bin/python tests/bench/bench_prediction.py --risk-seeds 101-110 --nodes 2000 --days 60
    .venv/bin/python tests/bench/bench_prediction.py --risk-seeds 0 --burnin-seeds 1-8

Node risk (slurmguard/fleet/risk.py) at its default level against the planted lemons and
degrading nodes of tests/support/fleetgen.py: precision, recall and the lead time of each
planted degrading node's first flag before its planted failure.

burn-in's ``degrading`` verdict (``--burnin-seeds``) judged night after night on the wearing
fleets of tests/support/burnin_truth.py (``wearing``), Gaussian, Student-t 5 and 4 noise:
precision, recall (named 2 nights or more before the drain) and the median lead, each true
prediction's lead listed (docs/burnin.md, "Degrading"). ``--trend KEY=VALUE`` tries other
StatParams (e.g. trend_sigmas=4).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.burnin_truth import wearing  # noqa: E402
from support.fleetgen import DAY, generate  # noqa: E402
from support.wear_outcome import judge_nightly  # noqa: E402

from slurmguard.burnin.stats import StatParams  # noqa: E402
from slurmguard.fleet import episodes  # noqa: E402
from slurmguard.fleet.params import RiskParams  # noqa: E402
from slurmguard.fleet.replay import risk_flags  # noqa: E402
from slurmguard.store import Store  # noqa: E402
from slurmguard.store.fleet import load_history  # noqa: E402


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def risk_rates(seed: int, nodes: int, days: int, rp: RiskParams) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/fleet.db"
        truth = generate(path, nodes=nodes, days=days, seed=seed)
        store = Store.open(url=f"sqlite:///{path}")
        try:
            h = load_history(store.engine, since=truth.since, until=truth.until,
                             lookback=rp.lookback_days * DAY)
        finally:
            store.close()
    flags = risk_flags(h, episodes.build(h), rp)
    flagged, planted = set(flags), truth.planted
    hit = len(flagged & planted)
    fail_at = {f[0]: f[2] for f in truth.failures if f[0] in truth.degrading}
    leads = [(fail_at[n] - flags[n][0][0]) / DAY for n in truth.degrading & flagged if n in fail_at]
    return {"flagged": len(flagged), "planted": len(planted),
            "precision": hit / len(flagged) if flagged else 0.0, "recall": hit / len(planted),
            "lemon_recall": len(flagged & truth.lemons) / len(truth.lemons),
            "degrading_recall": len(flagged & truth.degrading) / len(truth.degrading),
            "lead_days_median": statistics.median(leads) if leads else float("nan")}


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--risk-seeds", default="101-110")
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--weight", action="append", default=[], metavar="FACTOR=POINTS",
                    help="try another weight (e.g. failures=15)")
    ap.add_argument("--burnin-seeds", default="", help="e.g. 1-8; empty: no burn-in part")
    ap.add_argument("--burnin-nodes", type=int, default=4000)
    ap.add_argument("--trend", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    if a.burnin_seeds:
        burnin(seeds(a.burnin_seeds), a.burnin_nodes, a.trend)
    rp = RiskParams.from_section({"weights": {k: float(v) for k, v in (w.split("=") for w in a.weight)}})
    rows = []
    for s in seeds(a.risk_seeds) if a.risk_seeds != "0" else ():
        t0 = time.monotonic()
        r = risk_rates(s, a.nodes, a.days, rp)
        rows.append(r)
        print(f"risk seed {s}: flagged {r['flagged']} planted {r['planted']} precision "
              f"{r['precision']:.2f} recall {r['recall']:.2f} (lemons {r['lemon_recall']:.2f}, "
              f"degrading {r['degrading_recall']:.2f}), lead {r['lead_days_median']:.1f} d "
              f"[{time.monotonic() - t0:.1f} s]", flush=True)
    for k in ("precision", "recall", "lead_days_median") if rows else ():
        vals = [r[k] for r in rows]
        print(f"risk {k}: median {statistics.median(vals):.2f} min {min(vals):.2f} max {max(vals):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
