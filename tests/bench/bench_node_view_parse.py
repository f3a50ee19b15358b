"""serve's parse of one node-table read (run by hand, prints medians): `scontrol show node -o`
of N nodes, parsed whole and with the memo of the read before (only the records that changed
parsed; slurmguard/adapters/slurm/commands.py ``nodes_from_text``) at several shares of
changed records.

    .venv/bin/python tests/bench/bench_node_view_parse.py [--nodes 10000] [--n 7]
    .venv/bin/python tests/bench/bench_node_view_parse.py --text /tmp/a.txt --then /tmp/b.txt

The table is built from a record Slurm 22.05 printed (tests/data/slurm/show-node-idle-22.05.8.txt),
one per node name; a changed record has another CPULoad and FreeMem, as a node's ping
changes them. ``--text`` / ``--then`` parse two real reads instead (two `scontrol show node
-o` of a cluster, taken a few seconds apart), the second with the first's memo.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurmguard.adapters.slurm.commands import nodes_from_text  # noqa: E402

SAMPLE = REPO / "tests" / "data" / "slurm" / "show-node-idle-22.05.8.txt"


def table(nodes: int, changed: float, round_: int) -> str:
    """N records; the first ``changed`` share with this round's CPULoad and FreeMem."""
    rec = SAMPLE.read_text().splitlines()[0]
    name = re.match(r"NodeName=(\S+)", rec)
    assert name is not None
    lines = []
    for i in range(nodes):
        line = rec.replace(f"NodeName={name.group(1)} ", f"NodeName=n{i + 1} ", 1)
        if i < changed * nodes:
            line = re.sub(r"CPULoad=\S+", f"CPULoad={round_ % 100 / 10:.2f}", line)
            line = re.sub(r"FreeMem=\S+", f"FreeMem={1000 + round_}", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def cpu(f) -> float:  # type: ignore[no-untyped-def]
    t = time.process_time()
    f()
    return time.process_time() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--n", type=int, default=7, help="rounds (medians)")
    ap.add_argument("--text", help="a real read")
    ap.add_argument("--then", help="a later real read, parsed with --text's memo")
    a = ap.parse_args()
    if a.text and a.then:
        first, then = Path(a.text).read_text(), Path(a.then).read_text()
        seen = set(first.splitlines())
        recs = then.splitlines()
        whole = [cpu(lambda: nodes_from_text(then)) for _ in range(a.n)]
        memo_s = []
        for _ in range(a.n):
            memo: dict = {}
            nodes_from_text(first, memo)
            memo_s.append(cpu(lambda m=memo: nodes_from_text(then, m)))
        print(f"real reads: {len(recs)} records, {sum(r not in seen for r in recs)} changed; "
              f"whole parse median {statistics.median(whole):.3f} s, with the memo "
              f"{statistics.median(memo_s):.3f} s CPU")
        return 0
    base = table(a.nodes, 0.0, 0)
    whole = [cpu(lambda: nodes_from_text(base)) for _ in range(a.n)]
    print(f"{a.nodes} records: whole parse median {statistics.median(whole):.3f} s CPU")
    for share in (0.0, 0.01, 0.05, 0.25, 1.0):
        got = []
        for r in range(a.n):
            memo = {}
            nodes_from_text(table(a.nodes, share, 2 * r), memo)
            text = table(a.nodes, share, 2 * r + 1)
            got.append(cpu(lambda m=memo, t=text: nodes_from_text(t, m)))
        print(f"  with the memo, {share:.0%} of the records changed: median "
              f"{statistics.median(got):.3f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
