"""Benchmark `triage collect` over a real loopback sshd: wall time for N nodes, serial vs
parallel. Run by hand (as root): python tests/bench/bench_triage_collect.py [NODES] [ROUNDS]

The remote "slurmguard check" is `sh -c 'echo {}'` so the figure is slurmguard's own cost
(SSH handshake, 4 remote commands, one SFTP walk, bundle writing), not the checks'.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support import sshserver  # noqa: E402

from slurmguard.triage.bundle import Bundle  # noqa: E402
from slurmguard.triage.collect import CollectOptions, collect  # noqa: E402


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="bench-collect-"))
    server = sshserver.start_sshd(work / "sshd")
    names = [f"n{i}" for i in range(1, nodes + 1)]
    try:
        for parallel in (1, 4, 16):
            opts = CollectOptions(identity=str(server.identity),
                                  known_hosts=(str(server.known_hosts),),
                                  host_map={f"n[1-{nodes}]": f"127.0.0.1:{server.port}"},
                                  remote_slurmguard=("/bin/sh", "-c", "echo {}"),
                                  remote_sysfs=str(work), parallel=parallel)
            times = []
            for r in range(rounds):
                t0 = time.perf_counter()
                m = collect(names, opts, Bundle(str(work / f"b-{parallel}-{r}")), progress=False)
                times.append(time.perf_counter() - t0)
                assert m["summary"]["failed"] == 0, m["summary"]
            med = statistics.median(times)
            print(f"{nodes} nodes, parallel {parallel:2d}: median {med:.2f} s "
                  f"({med / nodes * 1000:.0f} ms/node) over {rounds} rounds")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
