"""What the judge says night after night on a wearing fleet (tests/support/burnin_truth.py,
:func:`~support.burnin_truth.wearing`): for each planted wearing node, the first night it is
named ``degrading`` and the first night it is drained as slow (``flagged``: tonight, or a
suspect confirmed by its re-run, the next night's run); the lead is the difference. Shared
by tests/test_burnin_degrading_lead.py and tests/bench/bench_prediction.py."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from slurmguard.burnin.stats import StatParams
from slurmguard.burnin.vector import judge_rows
from support.burnin_truth import Wearing

LEAD = 2  # nights: a prediction counts in recall when it came at least this long before the drain


@dataclass(frozen=True)
class Outcome:
    named: dict[str, int]  # node -> first night named degrading
    drained: dict[str, int]  # node -> first night flagged
    falling: frozenset[str]
    last: int  # the last night judged

    def leads(self) -> dict[str, int | None]:
        """Each prediction that came true (a planted wearing node named degrading): nights
        from its first naming to its first drain; None when not drained by the last night."""
        return {n: (self.drained[n] - t if n in self.drained else None)
                for n, t in sorted(self.named.items()) if n in self.falling}

    def early(self) -> set[str]:
        """The planted wearing nodes named at least :data:`LEAD` nights before their drain (or
        before the last night, when never drained)."""
        return {n for n, lead in self.leads().items()
                if (lead if lead is not None else self.last + 1 - self.named[n]) >= LEAD}

    def figures(self) -> tuple[float, float, float, int, int]:
        """(precision, recall with lead >= LEAD, median lead of the true predictions drained,
        nodes named, planted wearing nodes). Naming none has precision 0.0."""
        named = set(self.named)
        precision = len(named & self.falling) / len(named) if named else 0.0
        leads = [v for v in self.leads().values() if v is not None]
        return (precision, len(self.early()) / len(self.falling),
                float(statistics.median(leads)) if leads else float("nan"), len(named),
                len(self.falling))


def judge_nightly(w: Wearing, p: StatParams) -> Outcome:
    """Run the (columnar) judge on every night of ``w`` from its first full window on."""
    named: dict[str, int] = {}
    drained: dict[str, int] = {}
    nights = w.values.shape[2]
    for t in range(w.window - 1, nights):
        report = judge_rows(*w.night(t), p)
        assert report is not None
        for n, v in report.nodes.items():
            if v.verdict == "degrading":
                named.setdefault(n, t)
            elif v.verdict == "flagged":
                drained.setdefault(n, t)
    return Outcome(named, drained, w.falling, nights - 1)
