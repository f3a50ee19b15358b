"""Counters of reconcile actions, written as a Prometheus text file (node_exporter textfile
collector format) after every round. Counts continue from the file left by the previous run,
so `slurmguard reconcile --once` from cron still yields monotonic counters."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections import Counter

_LINE = re.compile(r'^(slurmguard_reconcile_\w+)\{(.*)\} ([0-9.eE+-]+)$')

ACTIONS = "slurmguard_reconcile_actions_total"
ROUNDS = "slurmguard_reconcile_rounds_total"
LAST = "slurmguard_reconcile_last_round_timestamp_seconds"

_HELP = {
    ACTIONS: "Reconcile actions by kind (k8s-mark, slurm-drain, ...) and result (ok, failed, refused).",
    ROUNDS: "Reconcile rounds by result (ok, errors, failed_closed).",
}


class Metrics:
    """In-memory counters; :meth:`write` saves them atomically to ``path`` (if any)."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.counts: Counter[tuple[str, str]] = Counter()
        self.last_round = 0.0
        if path and os.path.exists(path):
            self._load(path)

    def _load(self, path: str) -> None:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                m = _LINE.match(line.strip())
                if m and m.group(1) in (ACTIONS, ROUNDS):
                    self.counts[(m.group(1), m.group(2))] += int(float(m.group(3)))

    def action(self, kind: str, result: str) -> None:
        self.counts[(ACTIONS, f'action="{kind}",result="{result}"')] += 1

    def round(self, result: str) -> None:
        self.counts[(ROUNDS, f'result="{result}"')] += 1
        self.last_round = time.time()

    def get(self, name: str, **labels: str) -> int:
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return self.counts.get((name, want), 0)

    def text(self) -> str:
        out: list[str] = []
        for name in (ACTIONS, ROUNDS):
            out += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} counter"]
            out += [f"{name}{{{labels}}} {value}"
                    for (n, labels), value in sorted(self.counts.items()) if n == name]
        out += [f"# HELP {LAST} Unix time of the last reconcile round.", f"# TYPE {LAST} gauge",
                f"{LAST} {self.last_round:.0f}"]
        return "\n".join(out) + "\n"

    def write(self) -> None:
        if not self.path:
            return
        d = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".reconcile-metrics.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.text())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)  # atomic: a scraper never reads half a file
        except BaseException:
            os.unlink(tmp)
            raise
