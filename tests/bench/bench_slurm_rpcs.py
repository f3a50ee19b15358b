"""Who asks slurmctld what: RPCs by phase (`sdiag --reset` per phase) and Slurm tool calls by
caller (every Slurm tool behind a shim that logs its parent's command line).

Run by hand, as root, on a machine with Slurm and munge (tests/support/slurmcluster.py):
`python tests/bench/bench_slurm_rpcs.py OUT_DIR` with NODES (16), HCI (HealthCheckInterval,
20), PHASE_S (40) and PHASES (base,serve,watcher,jobs10,jobs40,servedown) in the environment.
Phases add, in order: the cluster with `slurmguard healthcheck` as HealthCheckProgram; serve;
the requeue watcher; N one-node jobs under `slurmguard run -- sleep`; serve stopped. Prints
one JSON line per phase: RPCs a minute by message type, tool calls a minute by caller.
docs/serve.md "What serve costs slurmctld" has a run.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
PHASE_S = float(os.environ.get("PHASE_S", "40"))
from support import slurmcluster  # noqa: E402
from support.helpers import sg_argv, sg_env  # noqa: E402
from support.sgserve import Serve, new_port, new_store, write_config  # noqa: E402

tmp = Path(sys.argv[1]).resolve()
shutil.rmtree(tmp, ignore_errors=True)
tmp.mkdir(parents=True)
shim = tmp / "shim"
shim.mkdir()
calls = tmp / "calls.log"
for tool in ("scontrol", "sinfo", "squeue", "sacct", "sbatch"):
    p = shim / tool
    p.write_text(f"""#!/bin/sh
echo "$(tr '\\0' ' ' </proc/$PPID/cmdline | cut -c1-160) :: {tool} $*" >> {calls}
exec /usr/bin/{tool} "$@"
""")
    p.chmod(0o755)
port = new_port()
url = new_store(tmp)
cfg = write_config(tmp, store_url=url, port=port, extra=f"""
healthcheck = ["fs-mount"]
log_file = "{tmp}/hooks.log"
[checks.fs]
mounts = ["/"]
[slurm]
scontrol = "{shim}/scontrol"
sinfo = "{shim}/sinfo"
squeue = "{shim}/squeue"
sacct = "{shim}/sacct"
sbatch = "{shim}/sbatch"
[requeue]
state_file = "{tmp}/watch.json"
[notice]
serve_url = "http://127.0.0.1:{port}"
""")
hc = slurmcluster.write_hook_script(tmp / "hc.sh", sg_argv("healthcheck"),
                                    {"PYTHONPATH": str(REPO), "SLURMGUARD_CONFIG": str(cfg), "SLURM_CONF": str(tmp / "c" / "slurm" / "etc" / "slurm.conf")})
NODES = int(os.environ.get("NODES", "16"))
c = slurmcluster.Cluster.start(tmp / "c", nodes=NODES, health_check_program=hc,
                               health_check_interval=int(os.environ.get("HCI", "20")),
                               gpu_partition="OverSubscribe=FORCE:32")
env = {"SLURM_CONF": str(c.conf_path)}
serve = Serve(cfg, port, env=env)
watcher = None
jobs = []

def sdiag() -> dict:
    out = subprocess.run(["/usr/bin/sdiag"], env={**os.environ, **env}, capture_output=True, text=True).stdout
    part = out.split("Remote Procedure Call statistics by message type")[1].split("Remote Procedure Call statistics by user")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"(REQUEST_\w+|MESSAGE_\w+|RESPONSE_\w+)\s*\(\s*\d+\)\s*count:(\d+)", part)}

def phase(name: str) -> None:
    subprocess.run(["/usr/bin/sdiag", "--reset"], env={**os.environ, **env}, check=True)
    calls.write_text("")
    time.sleep(PHASE_S)
    d = sdiag()
    lines = calls.read_text().splitlines()
    by = {}
    for line in lines:
        who, _, what = line.partition(" :: ")
        kind = ("healthcheck" if "healthcheck" in who else "serve" if " serve" in who else
                "watcher" if "requeue" in who else "wrapper" if " run " in who else who[:60])
        key = f"{kind}: {' '.join(what.split()[:3])}"
        by[key] = by.get(key, 0) + 1
    per_min = 60.0 / PHASE_S
    print(json.dumps({"phase": name, "rpc_per_min": {k: round(v * per_min) for k, v in sorted(d.items())},
                      "total_per_min": round(sum(d.values()) * per_min),
                      "calls_per_min": {k: round(v * per_min) for k, v in sorted(by.items())}}), flush=True)

def submit(n: int) -> None:
    for _ in range(n):
        script = f"#!/bin/sh\nexec {sys.executable} -m slurmguard run --no-stderr-scan -- sleep 3000\n"
        jobs.append(c.sbatch(script, "-N1", f"--output={tmp}/job-%j.out"))
    for j in jobs:
        c.wait_job(j, ["RUNNING"], timeout=120)
    time.sleep(10)

c.env.update(PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(cfg))
try:
    phases = os.environ.get("PHASES", "base,serve,watcher,jobs10,jobs40,servedown").split(",")
    for p in phases:
        if p == "serve":
            serve.start()
        if p == "watcher":
            watcher = subprocess.Popen(sg_argv("requeue", "watch", "--json"), env=sg_env(SLURMGUARD_CONFIG=str(cfg), **env),
                                       stdout=open(tmp / "watcher.out", "w"), stderr=subprocess.STDOUT)
        if p.startswith("jobs"):
            submit(int(p[4:]) - len(jobs))
        if p == "servedown":
            serve.stop()
        phase(p)
finally:
    for j in jobs:
        subprocess.run(["/usr/bin/scancel", j], env={**os.environ, **env})
    if watcher:
        watcher.terminate()
        watcher.wait(15)
    serve.stop()
    c.stop()
