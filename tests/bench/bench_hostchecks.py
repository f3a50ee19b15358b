"""Benchmark the hostchecks sources and checks (run by hand: python tests/bench/bench_hostchecks.py).

Prints medians of: each real gather on this machine (kmsg ring buffer, fs probes, /proc scan,
host), the gpu-xid check over an 8 MiB kernel-log file holding 10,000 Xid lines, and the Xid
line parser alone.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(HERE.parent), str(HERE)]

from fakehw.kmsg import DEFAULT_GPUS, write_gpu_tree  # noqa: E402
from fakehw.sysfs import write_config  # noqa: E402

from slurmguard import config  # noqa: E402
from slurmguard.adapters import fs, host, kmsg  # noqa: E402
from slurmguard.checks.base import CheckContext  # noqa: E402
from slurmguard.checks.xid import gpu_xid  # noqa: E402
from slurmguard.errors import Unsupported  # noqa: E402
from slurmguard.sources import GatherContext  # noqa: E402
from slurmguard.sources.xidline import parse_xid_line  # noqa: E402


def median_ms(fn, n: int = 15) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ctx = GatherContext("n1", "check", time.monotonic() + 3600)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gpus = write_gpu_tree(tmp / "gpus")
        cfg = config.load(str(write_config(tmp / "a.toml", {"checks.xid.nvidia_proc_root": str(gpus)})))
        log = kmsg.gather(cfg, ctx)
        print(f"kmsg gather (/dev/kmsg, {log.scanned} records): {median_ms(lambda: kmsg.gather(cfg, ctx)):.2f} ms")
        print(f"fs gather (/ and /tmp, stat -f probes): {median_ms(lambda: fs.gather(cfg, ctx)):.2f} ms")
        print(f"procs gather (/proc scan): {median_ms(lambda: host.gather_procs(cfg, ctx)):.2f} ms")
        print(f"host gather (meminfo, cpus, edac): {median_ms(lambda: host.gather(cfg, ctx)):.2f} ms")
        try:
            print(f"munge gather (round trip): {median_ms(lambda: host.gather_munge(cfg, ctx), 7):.2f} ms")
        except Unsupported as exc:
            print(f"munge: {exc}")

        big = tmp / "kern.log"
        line = ("4,{seq},{usec},-;NVRM: Xid (PCI:{pci}): 13, pid=1234, name=python3, "
                "Graphics Exception: ESR 0x404600=0x80000002\n")
        noise = "6,{seq},{usec},-;" + "x" * 200 + "\n"
        with open(big, "w") as fh:
            seq = 0
            while fh.tell() < 8 << 20:
                fh.write(line.format(seq=seq, usec=seq, pci=DEFAULT_GPUS[seq % 8][:-2]))
                for _ in range(3):
                    seq += 1
                    fh.write(noise.format(seq=seq, usec=seq))
                seq += 1
        fcfg = config.load(str(write_config(tmp / "b.toml", {
            "checks.xid.source": "file", "checks.xid.file": str(big),
            "checks.xid.nvidia_proc_root": str(gpus), "checks.xid.window": 1e12})))
        flog = kmsg.gather(fcfg, ctx)

        def run_check() -> None:
            c = CheckContext(fcfg.section("checks.xid"), {"kmsg": flog}, {}, time.time())
            gpu_xid.run(c)

        print(f"file gather (8 MiB, {len(flog.records)} Xid lines): "
              f"{median_ms(lambda: kmsg.gather(fcfg, ctx), 7):.2f} ms")
        print(f"gpu-xid check over those lines (first run): {median_ms(run_check, 7):.2f} ms")
        texts = [r.text for r in flog.records[:10000]]
        per = median_ms(lambda: [parse_xid_line(t) for t in texts], 7) / len(texts) * 1000
        print(f"parse_xid_line: {per:.2f} us/line")


if __name__ == "__main__":
    main()
