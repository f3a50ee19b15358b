"""Time one NVML gather over 8 stand-in GPUs (median of 30). Run: python tests/bench/bench_nvml.py"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))

from fakehw.nvml import build_fake_nvml, default_config, write_config  # noqa: E402

from slurmguard import config  # noqa: E402
from slurmguard.adapters import nvml  # noqa: E402
from slurmguard.checks.base import CheckContext  # noqa: E402
from slurmguard.checks.gpu import CHECKS  # noqa: E402
from slurmguard.sources import GatherContext  # noqa: E402


def main(rounds: int = 30) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        libdir = build_fake_nvml(Path(tmp) / "lib")
        os.environ["FAKE_NVML_CONFIG"] = str(write_config(Path(tmp) / "n.json", default_config(8)))
        toml = Path(tmp) / "sg.toml"
        toml.write_text(f'[checks.gpu]\nnvml_library = "{libdir / "libnvidia-ml.so.1"}"\n')
        cfg = config.load(str(toml), env={})
        ctx = GatherContext(node="bench", hook="check", deadline=time.monotonic() + 60)
        nvml.gather(cfg, ctx)  # warm: import pynvml, dlopen
        gathers, checks = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            snap = nvml.gather(cfg, ctx)
            t1 = time.perf_counter()
            for c in CHECKS:
                c.run(CheckContext(params=cfg.section("checks.gpu"), sources={"nvml": snap}))
            t2 = time.perf_counter()
            gathers.append(t1 - t0)
            checks.append(t2 - t1)
        assert len(snap.gpus) == 8
        print(f"nvml gather, 8 GPUs: median {statistics.median(gathers) * 1000:.2f} ms "
              f"(min {min(gathers) * 1000:.2f}, max {max(gathers) * 1000:.2f}, n={rounds})")
        print(f"8 GPU checks on the snapshot: median {statistics.median(checks) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
