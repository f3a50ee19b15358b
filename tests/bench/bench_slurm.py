"""Benchmark the Slurm adapter and the test cluster (run by hand as root:
python tests/bench/bench_slurm.py).

Prints medians of: parsing `scontrol show node -o` and `sinfo --json` for 1,000 nodes (built
from the captured 22.05.8 records), starting a 4-node test cluster to all-idle, and one
node(), drain()+undrain() round trip and jobs() against that real cluster.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(HERE.parent), str(HERE)]

from support.slurmcluster import Cluster  # noqa: E402

from slurmguard.adapters.slurm.commands import (  # noqa: E402
    format_reason,
    node_info_from_show,
    parse_show_node_oneliner,
    parse_sinfo_json,
)

DATA = HERE / "data" / "slurm"


def median_ms(fn, n: int = 15) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    lines = (DATA / "show-node-states-22.05.8.txt").read_text().splitlines()
    text = "\n".join(lines[i % len(lines)].replace("NodeName=n", f"NodeName=x{i}n", 1)
                     for i in range(1000)) + "\n"
    doc = json.loads((DATA / "sinfo-states-22.05.8.json").read_text())
    nodes = doc["nodes"]
    doc["nodes"] = [{**nodes[i % len(nodes)], "name": f"x{i}"} for i in range(1000)]
    js = json.dumps(doc)
    print(f"parse scontrol show node -o, 1000 nodes: "
          f"{median_ms(lambda: [node_info_from_show(f) for f in parse_show_node_oneliner(text)]):.1f} ms")
    print(f"parse sinfo --json, 1000 nodes:          {median_ms(lambda: parse_sinfo_json(js)):.1f} ms")

    starts = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(5):
            c = Cluster.start(Path(d) / str(i), nodes=4)
            starts.append(c.startup_seconds)
            if i < 4:
                c.stop()
        try:
            cli = c.cli()
            reason = format_reason("bench", "drain round trip")

            def roundtrip() -> None:
                assert cli.drain("n1", reason) and cli.undrain("n1")

            print(f"test cluster start, 4 nodes to all idle: {statistics.median(starts) * 1000:.0f} ms")
            print(f"node('n1') (scontrol show node -o):      {median_ms(lambda: cli.node('n1')):.1f} ms")
            print(f"drain + undrain round trip:              {median_ms(roundtrip):.1f} ms")
            print(f"jobs() (squeue --json):                  {median_ms(cli.jobs):.1f} ms")
        finally:
            c.stop()


if __name__ == "__main__":
    main()
