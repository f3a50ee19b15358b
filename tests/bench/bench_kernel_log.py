"""Benchmark the kernel-log reader (run by hand: python tests/bench/bench_kernel_log.py).

For each timestamp form the reader accepts (raw /dev/kmsg records, dmesg, dmesg -r/-x/-T,
dmesg --time-format=iso, journalctl short/short-precise/short-iso, rsyslog RFC 3339), writes
a 100,000-line kernel log with 20 Xid/SXid/"fallen off the bus" lines spread through it, and
prints the median wall time of one gather + the gpu-xid check over it (target <= 50 ms each,
the prolog's share for the kernel log). ``checks.xid.max_bytes`` is raised so the whole file is
read (the default 8 MiB tail would read less than 100,000 lines of most forms).
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
from test_kernel_log_shapes import BTIME, MSG, _forms  # noqa: E402

from slurmguard import config  # noqa: E402
from slurmguard.adapters import kmsg  # noqa: E402
from slurmguard.checks.base import CheckContext  # noqa: E402
from slurmguard.checks.xid import gpu_xid  # noqa: E402
from slurmguard.sources import GatherContext  # noqa: E402

LINES = 100_000
FAULTS = (MSG, f"NVRM: GPU {DEFAULT_GPUS[3]}: GPU has fallen off the bus.",
          "nvidia-nvswitch2: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 31 LTSSM Fault Up")
NOISE = "usb 1-1.4: new high-speed USB device number 7 using xhci_hcd, idVendor=0bda idProduct=8153"


def median_ms(fn, n: int = 15) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def write_log(path: Path, form: str) -> None:
    t0 = time.time() - LINES * 0.01
    out = []
    for i in range(LINES):
        line = _forms(t0 + i * 0.01)[form]
        msg = FAULTS[i % 3] if i % (LINES // 20) == 7 else NOISE
        out.append(line.replace(MSG, msg))
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    forms = sorted(_forms(BTIME + 1.0))
    print(f"kernel-log reader: {LINES:,} lines, 20 fault lines, median of 15 (ms)")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        gpus = write_gpu_tree(root / "gpus")
        worst = 0.0
        for form in forms:
            log = root / "kern.log"
            write_log(log, form)
            cfg = config.load(str(write_config(root / "sg.toml", {
                "checks.xid.source": "file", "checks.xid.file": str(log),
                "checks.xid.max_bytes": 64 << 20, "checks.xid.nvidia_proc_root": str(gpus)})))
            params = cfg.section("checks.xid")

            def once(cfg=cfg, params=params) -> None:
                got = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 60))
                gpu_xid.run(CheckContext(params, {"kmsg": got}, {}, time.time()))

            got = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 60))
            assert got.scanned == LINES, (form, got.scanned)
            ms = median_ms(once)
            worst = max(worst, ms)
            print(f"  {form:34s} {ms:7.1f} ms  ({log.stat().st_size / 1e6:.1f} MB, "
                  f"{len(got.records)} records)")
        print(f"  worst form: {worst:.1f} ms (target <= 50 ms)")


if __name__ == "__main__":
    main()
