"""Median wall time of the prolog with all default prolog checks and 8 stand-in GPUs.

Run by hand: `python tests/bench/bench_prolog.py [ROUNDS]` (default 30). Each measurement is a
fresh process, exactly as slurmd starts it. One round runs, interleaved (so machine load hits
every variant alike):

* agent:       the compiled client (prolog/slurmguard-agent-client) asking a running
               `slurmguard agent` (NVML held open, kernel log followed, slow sources cached)
* agent, sh:   the same behind `/bin/sh -c exec`, as the entry script starts it
* stopped:     the client with the agent stopped (no socket): it runs `slurmguard prolog`
               in-process, the path every node takes when the agent is down
* in-process:  `python -m slurmguard prolog` alone (interpreter, imports, checks)
* check:       `python -m slurmguard check`, the same checks by hand (never drains)
* stopped, site venv: the client's fallback run by a venv the way a site installs slurmguard
               (a plain path on sys.path, as a wheel in site-packages gives it), where this
               checkout's dev venv (`pip install -e`) runs setuptools' editable-import finder
               at every interpreter start
* NHC:         LBNL NHC with its ten host checks (/work/shared/peers: nhc-src.tar.gz unpacked
               into a temp dir, nhc-ten-host-checks.conf), as its README runs it
* python:      `python -c pass`, the interpreter's own start

Every variant has $SLURMGUARD_STATE_DIR as the entry scripts export it (so the parsed-config
cache of docs/configuration.md is used). Healthy node, so Slurm is not called. Prints each median and the ratio agent / NHC of this
interleaved run.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

from fakehw.kmsg import write_gpu_tree  # noqa: E402
from fakehw.nvml import build_fake_nvml, default_config, write_config  # noqa: E402

PEERS = Path(os.environ.get("SLURMGUARD_PEERS", "/work/shared/peers"))


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
          ok: tuple[int, ...] = (0,)) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=cwd)
    dt = time.perf_counter() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{argv[0]} exited {p.returncode}: {p.stderr[-2000:]}")
    return dt


def site_venv(where: Path) -> str:
    """A venv whose site-packages holds this checkout as a plain path entry (what a wheel
    install amounts to for imports): no .pth import hooks, no editable finder. The hook path
    needs no third-party package."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True)
    (site,) = where.glob("lib/python*/site-packages")
    (site / "slurmguard-checkout.pth").write_text(f"{REPO}\n")
    return str(where / "bin" / "python")


def main(rounds: int = 30) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        libdir = build_fake_nvml(t / "lib")
        write_config(t / "nvml.json", default_config(8))
        gpus = write_gpu_tree(t / "gpus")
        (t / "kmsg").write_text("")
        sock = t / "run" / "agent.sock"
        (t / "sg.toml").write_text(f"""
[hooks]
state_dir = "{t}/state"
[agent]
socket = "{sock}"
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
file = "{t}/kmsg"
nvidia_proc_root = "{gpus}"
""")
        env = dict(os.environ, PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(t / "sg.toml"),
                   SLURMGUARD_STATE_DIR=str(t / "state"),
                   SLURMD_NODENAME="bench1", LD_LIBRARY_PATH=str(libdir),
                   FAKE_NVML_CONFIG=str(t / "nvml.json"), SLURMGUARD_AGENT_SOCKET=str(sock))
        build = t / "prolog"
        shutil.copytree(REPO / "prolog", build, ignore=shutil.ignore_patterns("slurmguard-*-client"))
        subprocess.run(["make", "-s", "-C", str(build), "slurmguard-agent-client"], check=True)
        client = str(build / "slurmguard-agent-client")
        prolog = [sys.executable, "-m", "slurmguard", "prolog"]
        site_python = site_venv(t / "site-venv")
        (t / "state").mkdir()
        with tarfile.open(PEERS / "nhc-src.tar.gz") as tf:
            tf.extractall(t / "nhc-src", filter="data")
        nhc_dir = t / "nhc-src"
        os.makedirs("/var/run/nhc", exist_ok=True)
        nhc = ["nhc/nhc", "-D", "nhc", "-c", str(PEERS / "nhc-ten-host-checks.conf"),
               "-l", "/dev/null", "-t", "30", "NHC_RM=slurm", "MARK_OFFLINE=0"]

        agent = subprocess.Popen([sys.executable, "-m", "slurmguard", "agent"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 start_new_session=True)
        try:
            if not (agent.stdout and agent.stdout.readline().startswith("ready")):
                raise SystemExit("the agent did not start")
            stopped_env = dict(env, SLURMGUARD_AGENT_SOCKET=str(t / "run" / "stopped.sock"))
            variants = {
                "agent (client -> slurmguard agent)": lambda: timed([client, "prolog", "--", *prolog], env),
                "agent, behind /bin/sh as the entry script": lambda: timed(
                    ["/bin/sh", "-c", 'exec "$@"', "sh", client, "prolog", "--", *prolog], env),
                "agent stopped (client falls back in-process)": lambda: timed(
                    [client, "prolog", "--", *prolog], stopped_env),
                "agent stopped, site venv (no editable finder)": lambda: timed(
                    [client, "prolog", "--", site_python, "-m", "slurmguard", "prolog"],
                    {k: v for k, v in stopped_env.items() if k != "PYTHONPATH"}),
                "in-process `python -m slurmguard prolog`": lambda: timed(prolog, env),
                "`python -m slurmguard check`": lambda: timed(
                    [sys.executable, "-m", "slurmguard", "check"], env),
                "LBNL NHC, ten host checks": lambda: timed(nhc, cwd=nhc_dir),
                "python -c pass (interpreter start alone)": lambda: timed([sys.executable, "-c", "pass"]),
            }
            for fn in variants.values():  # warm the page cache and the agent's caches
                fn()
            times: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(rounds):
                for name, fn in variants.items():
                    times[name].append(fn())
        finally:
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(15)

    def line(name: str, xs: list[float]) -> str:
        return (f"{name:<46} median {statistics.median(xs) * 1000:7.1f} ms  "
                f"(min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f}, n={len(xs)})")

    for name, xs in times.items():
        print(line(name, xs))
    med = {k: statistics.median(v) for k, v in times.items()}
    agent_ms = med["agent (client -> slurmguard agent)"]
    nhc_ms = med["LBNL NHC, ten host checks"]
    print(f"ratio agent / NHC (same interleaved run): {agent_ms / nhc_ms:.3f}; "
          f"agent stopped / NHC: {med['agent stopped (client falls back in-process)'] / nhc_ms:.2f}"
          f" (site venv: {med['agent stopped, site venv (no editable finder)'] / nhc_ms:.2f});"
          f" check / NHC: {med['`python -m slurmguard check`'] / nhc_ms:.2f}")
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (shared machine)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
