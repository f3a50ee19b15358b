"""What an idle resident agent costs: CPU seconds per hour, per variant and per slow source.

Run by hand: `python tests/bench/bench_agent_idle.py [SECONDS] [WINDOWS] [HOOKS]` (default
30 s, 5 windows, 20 hooks). Every variant is its own `slurmguard agent` on its own simulated node (stand-in
NVML with 8 GPUs, a kernel-log file, the IB/sysfs/procfs fixtures of tests/test_agent.py),
all running at once; no hook is asked. CPU comes from /proc/PID/stat at each window's ends:
the agent's own (utime + stime of every thread) and its reaped children's (the fs probes,
`munge`, `chronyc` it runs). Running the variants side by side does not bias the figures:
CPU time is charged to the process that used it, whatever the load. Prints, per variant, the
median over the windows of CPU-s per hour (own, children, total) and, where the agent's
`SGA1 status` reports them, its source reads per hour. Then, one agent at a time, HOOKS
healthchecks asked back to back on its socket (dry run): the agent's CPU per answer, own and
children's, at max_age 10 (the first reads the slow sources, the rest use the kept values)
and at max_age 0 (every answer reads them: what each hook costs when hooks come further apart
than max_age, as a health check every 300 s does).

Variants:

* defaults:       no [agent] key set (what a site gets)
* loop 5 s:       the fixed background loop every slow source went through until the
                  refresh redesign (refresh = 5, max_age = 10, all five slow sources)
* loop 5 s, <s>:  the same loop over one slow source only (its share of the loop)
* no background:  nothing refreshed in the background, NVML events on (the idle floor)
* no events:      as "no background", and no NVML event thread (the stand-in NVML polls its
                  config every 2 ms inside nvmlEventSetWait, which a real driver does not)
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from fakehw.kmsg import write_gpu_tree  # noqa: E402
from fakehw.nvml import build_fake_nvml, default_config, write_config  # noqa: E402
from fakehw.sysfs import write_cpus, write_ib_fabric, write_meminfo  # noqa: E402
from support.footprint import proc_cpu  # noqa: E402
from support.helpers import sg_argv, sg_env  # noqa: E402

from slurmguard.node import agent as agent_mod  # noqa: E402

SLOW = ("fs", "ib", "procs", "timesync", "munge")
CHECKS = '["gpu-count", "gpu-xid", "fs-mount", "host-cpus", "ib-link", "host-daemons", ' \
         '"host-timesync", "host-munge"]'
OLD_LOOP = {"refresh": "5.0", "max_age": "10.0", "background": json.dumps(list(SLOW))}
VARIANTS: dict[str, dict[str, str]] = {
    "defaults": {},
    "loop 5 s": OLD_LOOP,
    **{f"loop 5 s, {s}": {**OLD_LOOP, "background": json.dumps([s])} for s in SLOW},
    "no background": {"background": "[]"},
    "no events": {"background": "[]", "nvml_events": "false"},
    "max_age 0": {"max_age": "0.0"},
}
PER_HOOK = ("defaults", "max_age 0")


def node_config(root: Path, libdir: Path, agent_keys: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    write_config(root / "nvml.json", default_config(8))
    (root / "kmsg").write_text("")
    (root / "boot_id").write_text("5b1c0a7e-0000-4000-8000-000000000001\n")
    gpus = write_gpu_tree(root / "gpus")
    ib = write_ib_fabric(root / "ib", 2)
    write_meminfo(root / "proc", 2 * 1024 * 1024 * 1024)
    write_cpus(root / "sys", "0-127")
    agent = "".join(f"{k} = {v}\n" for k, v in agent_keys.items())
    cfg = root / "sg.toml"
    cfg.write_text(f"""
[slurm]
scontrol = "{root}/no-scontrol"
[hooks]
state_dir = "{root}/state"
prolog = {CHECKS}
epilog = {CHECKS}
healthcheck = {CHECKS}
[agent]
socket = "{root}/run/agent.sock"
{agent}
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
file = "{root}/kmsg"
nvidia_proc_root = "{gpus}"
boot_id_path = "{root}/boot_id"
[checks.ib]
sysfs_root = "{ib}"
expected_count = 2
[checks.host]
proc_root = "/proc"
sys_root = "{root}/sys"
[checks.fs]
mounts = ["/", "/tmp"]
""")
    return cfg


def start(root: Path, libdir: Path, cfg: Path) -> subprocess.Popen[str]:
    env = sg_env(SLURMGUARD_CONFIG=str(cfg), LD_LIBRARY_PATH=str(libdir),
                 FAKE_NVML_CONFIG=str(root / "nvml.json"))
    p = subprocess.Popen(sg_argv("agent", "--node", "n1"), env=env, stdout=subprocess.PIPE,
                         stderr=open(root / "agent.log", "ab"), text=True, start_new_session=True)
    line = p.stdout.readline() if p.stdout else ""
    if not line.startswith("ready"):
        raise SystemExit(f"agent in {root} did not start: {(root / 'agent.log').read_text()[-2000:]}")
    return p


def reads(sock: Path) -> int | None:
    """Slow-source reads so far, from `SGA1 status` (None where the agent does not say)."""
    raw = agent_mod.ask(str(sock), f"{agent_mod.PROTO} status", 5.0).decode()
    head, _, rest = raw.partition("\n")
    status = json.loads(rest[:int(head.split()[3])])
    counts = status.get("reads")
    return None if counts is None else sum(counts.get(s, 0) for s in SLOW)


def per_hook(root: Path, cfg: Path, pid: int, hooks: int) -> tuple[float, float]:
    """The agent's CPU seconds per healthcheck answered (own, children's), ``hooks`` asked
    back to back."""
    boot = (root / "boot_id").read_text().strip()
    line = (f"{agent_mod.PROTO} healthcheck node=n1 job= uid= boot={boot} json=0 dry=1 "
            f"config={cfg} started=")
    c0 = proc_cpu(pid)
    for _ in range(hooks):
        raw = agent_mod.ask(str(root / "run/agent.sock"), line + f"{time.time():.3f}", 30.0)
        assert raw.startswith(f"{agent_mod.PROTO} ".encode()) and b"unavailable" not in raw[:20], raw[:200]
    c1 = proc_cpu(pid)
    assert c0 is not None and c1 is not None
    return (c1.own - c0.own) / hooks, (c1.children - c0.children) / hooks


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    windows = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    hooks = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    with tempfile.TemporaryDirectory(prefix="sg-agent-idle-") as tmp:
        base = Path(tmp)
        libdir = build_fake_nvml(base / "fakenvml")
        procs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
        try:
            for i, (name, keys) in enumerate(VARIANTS.items()):
                root = base / f"v{i}"
                procs[name] = (start(root, libdir, node_config(root, libdir, keys)), root)
            time.sleep(3.0)  # past the start-up (imports, the first reads)
            per_hour: dict[str, list[tuple[float, float, float | None]]] = {n: [] for n in procs}
            for _ in range(windows):
                before = {n: (proc_cpu(p.pid), reads(r / "run/agent.sock"))
                          for n, (p, r) in procs.items()}
                t0 = time.monotonic()
                time.sleep(seconds)
                secs = time.monotonic() - t0
                for n, (p, r) in procs.items():
                    cpu, got = proc_cpu(p.pid), reads(r / "run/agent.sock")
                    (c0, n0) = before[n]
                    assert cpu is not None and c0 is not None, f"agent {n} is gone"
                    k = 3600.0 / secs
                    per_hour[n].append((k * (cpu.own - c0.own), k * (cpu.children - c0.children),
                                        None if got is None or n0 is None else k * (got - n0)))
            answers = {n: per_hook(procs[n][1], procs[n][1] / "sg.toml", procs[n][0].pid, hooks)
                       for n in PER_HOOK}
        finally:
            for p, _ in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(10)
    print(f"idle agent, {windows} windows of {seconds:.0f} s, load {os.getloadavg()[0]:.1f}; "
          "medians, CPU-s per hour")
    print(f"{'variant':<22} {'own':>8} {'children':>9} {'total':>8} {'reads/h':>8}")
    for n, rows in per_hour.items():
        own = statistics.median(r[0] for r in rows)
        kids = statistics.median(r[1] for r in rows)
        total = statistics.median(r[0] + r[1] for r in rows)
        rd = [r[2] for r in rows if r[2] is not None]
        rtxt = f"{statistics.median(rd):8.0f}" if rd else f"{'-':>8}"
        print(f"{n:<22} {own:8.2f} {kids:9.2f} {total:8.2f} {rtxt}")
    print(f"\nthe agent's CPU per healthcheck answered ({hooks} back to back), ms")
    for n, (own, kids) in answers.items():
        print(f"{n:<22} own {own * 1000:6.1f}  children {kids * 1000:6.1f}  "
              f"total {(own + kids) * 1000:6.1f}")


if __name__ == "__main__":
    main()
