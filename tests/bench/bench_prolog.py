"""Median wall time of `slurmguard prolog` with all default prolog checks and 8 stand-in GPUs.

Run by hand: `python tests/bench/bench_prolog.py [ROUNDS]` (default 30). Each round is a
fresh process, exactly as slurmd starts it: interpreter start, imports, one NVML pass over 8
GPUs, kernel-log read, sysfs/proc reads, filesystem probes, decide, exit. Healthy node, so
Slurm is not called. Prints the median, min and max, and the same without NVML for contrast.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

from fakehw.kmsg import write_gpu_tree  # noqa: E402
from fakehw.nvml import build_fake_nvml, default_config, write_config  # noqa: E402


def measure(env: dict[str, str], rounds: int) -> list[float]:
    argv = [sys.executable, "-m", "slurmguard", "prolog"]
    subprocess.run(argv, env=env, capture_output=True, check=True)  # warm the page cache
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"prolog exited {p.returncode}: {p.stderr}")
    return times


def main(rounds: int = 30) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        libdir = build_fake_nvml(t / "lib")
        write_config(t / "nvml.json", default_config(8))
        gpus = write_gpu_tree(t / "gpus")
        (t / "kmsg").write_text("")
        (t / "sg.toml").write_text(f"""
[hooks]
state_dir = "{t}/state"
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
file = "{t}/kmsg"
nvidia_proc_root = "{gpus}"
""")
        env = dict(os.environ, PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(t / "sg.toml"),
                   SLURMD_NODENAME="bench1", LD_LIBRARY_PATH=str(libdir),
                   FAKE_NVML_CONFIG=str(t / "nvml.json"))
        with_gpus = measure(env, rounds)
        no_nvml = measure(dict(env, LD_LIBRARY_PATH="/nonexistent"), rounds)
        python_only = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            python_only.append(time.perf_counter() - t0)

    def line(name: str, xs: list[float]) -> str:
        return (f"{name:<44} median {statistics.median(xs) * 1000:7.1f} ms  "
                f"(min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f}, n={len(xs)})")

    print(line("slurmguard prolog, default checks, 8 GPUs", with_gpus))
    print(line("slurmguard prolog, no NVML library", no_nvml))
    print(line("python -c pass (interpreter start alone)", python_only))
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
