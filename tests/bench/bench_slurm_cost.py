"""What slurmguard costs slurmctld a minute, serve up and serve down, at N node entries
(docs/slurm.md, "What slurmguard costs slurmctld a minute"; its block is rendered from the
JSON this writes by tests/support/slurm_cost_doc.py).

Run by hand, as root, with Slurm and munge (a stock slurmctld with N node entries and no
slurmd for them, as tests/bench/bench_slurm_node_reads.py starts it; every node stays
UNKNOWN, not responding, for the run: DOWN only after its 300-s SlurmdTimeout):

    python tests/bench/bench_slurm_cost.py [--entries 128,512,1024] [--json docs/slurm_cost.json]

Per N, with the cap's worth of nodes drained by slurmguard for one cause (a shared fault at
its cap, 10 % of the partition up to 50):

- **each read** by itself, R rounds of K calls (``sdiag --reset`` before each round): RPCs
  per call by type (over all rounds), and slurmctld's time per RPC by type (sdiag's
  total_time over the count), the median of the rounds, printed: the full node table (serve's reader), the partition table and the
  drained nodes (the fallback's two reads now), one node (every health check's own read),
  and a partition's drained count (the narrowest sinfo, which the guard cannot use: it
  counts every drain, an admin's and an old one too, with no cause);
- **a failing node's health check with every serve replica down**, on D nodes drawn at
  random (seeded), with the real window arithmetic and the hook's default budget left
  (``--left``): the health check's own node read, then the one drain path
  (``drainguard.guarded_drain`` through ``ServePermit`` on a dead port to the fallback,
  ``SlurmPermit``), its wait skipped (the RPCs are the same). With this checkout's fallback
  and with the fallback of revision BEFORE (read from git: the whole node table on arrival
  and again in the window), their rounds taking turns. RPCs per health check by type, over
  all rounds, and one price per RPC type for both (the median of all their rounds);
- **per minute**, from those measured costs: serve up is serve's reader (60 / ttl full
  reads, once for every replica now; per replica before) and every node's health check
  once per HealthCheckInterval (``--hc``, 300 s as the scale harness) reading its node;
  serve down is every node failing one shared cause (the worst case) through the fallback.
  slurmctld's time a minute is the sum of count x time per call by RPC type.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "bench")]
from bench_slurm_node_reads import start  # noqa: E402
from support.sgserve import new_port, write_config  # noqa: E402

from slurmguard import config  # noqa: E402
from slurmguard.adapters.slurm.commands import SlurmCLI  # noqa: E402
from slurmguard.drainguard import ServePermit, guarded_drain  # noqa: E402
from slurmguard.node import fallback  # noqa: E402
from slurmguard.serve.slurmview import read_period  # noqa: E402

BEFORE = "407d58d"  # the last revision whose fallback read `scontrol show node` twice
RPC = re.compile(r"^\s*(REQUEST_\w+|RESPONSE_\w+|MESSAGE_\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+"
                 r"ave_time:\d+\s+total_time:(\d+)")
CAUSE, REASON = "fs-mount", "slurmguard: fs-mount: /shared missing"


def sdiag(c: Any) -> dict[str, tuple[int, int]]:
    """RPC type -> (count, total server microseconds) since the last reset; sdiag's own left
    out."""
    out = {}
    for line in c.run("sdiag").stdout.splitlines():
        m = RPC.match(line)
        if m and m.group(1) != "REQUEST_STATS_INFO":
            out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


def rounds(c: Any, call: Any, per_round: int, n_rounds: int) -> dict[str, Any]:
    """``call`` run ``per_round`` times per round: per call, the RPCs by type (all rounds'
    count over all calls: a health check's window read is a chance, which a median of rounds
    would round away) and slurmctld's time per RPC by type, ms (the median of the rounds)."""
    counts: dict[str, int] = {}
    ms: dict[str, list[float]] = {}
    walls = []
    for _ in range(n_rounds):
        c.run("sdiag", "--reset")
        t = time.perf_counter()
        for _ in range(per_round):
            call()
        walls.append((time.perf_counter() - t) / per_round)
        for kind, (n, us) in sdiag(c).items():
            counts[kind] = counts.get(kind, 0) + n
            if n:
                ms.setdefault(kind, []).append(us / n / 1000)
    calls = per_round * n_rounds
    return {"rpcs": {k: round(n / calls, 3) for k, n in sorted(counts.items()) if n},
            "ms_per_rpc": {k: round(statistics.median(v), 4) for k, v in sorted(ms.items())},
            "wall_ms": round(statistics.median(walls) * 1000, 1)}


def interleaved(c: Any, calls: dict[str, Any], per_round: int, n_rounds: int) -> dict[str, Any]:
    """Each of ``calls`` run ``per_round`` times a round, the calls' rounds taking turns (the
    host's load falls on all alike): per call its RPCs by type over all rounds, and one price
    per RPC type for all of them (slurmctld's ms, the median of every round's): their
    difference is then their counts', not the moment each was measured."""
    counts: dict[str, dict[str, int]] = {label: {} for label in calls}
    ms: dict[str, list[float]] = {}
    for _ in range(n_rounds):
        for label, call in calls.items():
            c.run("sdiag", "--reset")
            for _ in range(per_round):
                call()
            for kind, (n, us) in sdiag(c).items():
                counts[label][kind] = counts[label].get(kind, 0) + n
                if n:
                    ms.setdefault(kind, []).append(us / n / 1000)
    price = {k: round(statistics.median(v), 4) for k, v in sorted(ms.items())}
    n = per_round * n_rounds
    return {label: {"rpcs": {k: round(v / n, 3) for k, v in sorted(got.items()) if v},
                    "ms_per_rpc": price} for label, got in counts.items()}


def before_fallback() -> Any:
    """node/fallback.py as revision BEFORE had it, loaded as a module of its own."""
    src = subprocess.run(["git", "-C", str(REPO), "show", f"{BEFORE}:slurmguard/node/fallback.py"],
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("fallback_before")
    exec(compile(src, f"{BEFORE}:slurmguard/node/fallback.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


def run_entries(entries: int, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="sg-cost-"))
    c = start(str(tmp), entries)
    try:
        cli = SlurmCLI(c.slurm_section, env=c.env)
        version = c.run("sinfo", "--version").stdout.strip()
        cfg_path = write_config(tmp, store_url=f"sqlite:///{tmp}/unused.db", port=new_port(),
                                report_timeout=1.0)  # nothing listens: serve is down
        cfg = config.load(str(cfg_path), env={})
        params = fallback.PolicyParams.from_section(cfg.section("policy"))
        cap = min(params.blast_max_nodes, max(1, entries * int(params.blast_max_percent) // 100))
        for name in c.nodes[:cap]:  # the shared fault at its cap, in the blast window
            c.run("scontrol", "update", f"nodename={name}", "state=drain", f"reason={REASON}")
        states = {i.state for i in cli.nodes()}
        k, r = args.calls, args.rounds
        reads = {
            "full": rounds(c, cli.nodes_text, k, r),
            "partitions": rounds(c, cli.partitions, k, r),
            "drained": rounds(c, cli.drained_nodes, k, r),
            "one_node": rounds(c, lambda: cli.node(c.nodes[-1]), k, r),
            "drained_count": rounds(c, lambda: c.run("sinfo", "-h", "-p", "gpu", "-t", "drain",
                                                     "-o", "%D"), k, r),
        }
        rng = random.Random(entries)
        spared = c.nodes[cap:]
        outcomes: dict[str, dict[str, int]] = {}

        def healthcheck(module: Any, label: str) -> Any:
            def one() -> None:
                node = rng.choice(spared)
                cli.node(node)  # the health check's own view of its node (hooks._slurm_view)
                left = time.monotonic() + args.left
                permit = ServePermit(cfg, module.SlurmPermit(cli, cfg, sleep=lambda s: None,
                                                             deadline=left))
                done = guarded_drain(cli, permit, node, CAUSE, REASON, via="healthcheck")
                key = done.result if "window is in" not in done.applied else "window past budget"
                outcomes.setdefault(label, {})[key] = outcomes.get(label, {}).get(key, 0) + 1
            return one

        serve_down = interleaved(c, {"now": healthcheck(fallback, "now"),
                                     "before": healthcheck(before_fallback(), "before")},
                                 args.decisions, r)
        drained_now = sum(1 for i in cli.nodes() if i.drained)
    finally:
        c.stop()
    return {"entries": entries, "slurm": version, "cap": cap, "states": sorted(states), "reads": reads,
            "serve_down_healthcheck": serve_down, "outcomes": outcomes,
            "drained_after": drained_now}


def per_minute(run: dict[str, Any], hc: float, ttl: float, replicas: int,
               entries_per_ttl: int = 4096) -> dict[str, Any]:
    """RPCs a minute by type and slurmctld's ms a minute, serve up and serve down, now and
    before, from one run's measured costs. serve's reader now reads every ttl x entries /
    entries_per_ttl for a table larger than that (serve.slurm_view_entries_per_ttl); before,
    every ttl on every replica."""
    n = run["entries"]
    checks = n * 60.0 / hc
    reads = run["reads"]

    def cost(parts: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
        rpcs: dict[str, float] = {}
        ms = 0.0
        for times, call in parts:
            for kind, per in call["rpcs"].items():
                rpcs[kind] = rpcs.get(kind, 0.0) + times * per
                ms += times * per * call["ms_per_rpc"].get(kind, 0.0)
        return {"rpcs": {k: round(v, 1) for k, v in sorted(rpcs.items())},
                "total": round(sum(rpcs.values()), 1), "ctld_ms": round(ms, 1)}

    reader = 60.0 / read_period(ttl, n, entries_per_ttl)  # serve's schedule, as serve runs it
    down = run["serve_down_healthcheck"]
    return {
        "serve_up": cost([(reader, reads["full"]), (checks, reads["one_node"])]),
        "serve_up_before": cost([(60.0 / ttl * replicas, reads["full"]),
                                 (checks, reads["one_node"])]),
        "serve_down": cost([(checks, down["now"])]),
        "serve_down_before": cost([(checks, down["before"])]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", default="128,512,1024")
    ap.add_argument("--calls", type=int, default=10, help="calls per round of each read")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--decisions", type=int, default=30, help="health checks per round")
    ap.add_argument("--left", type=float, default=13.0,
                    help="seconds of the hook's budget left to wait (docs/hooks.md: ~13 of 20)")
    ap.add_argument("--hc", type=float, default=300.0, help="HealthCheckInterval, s")
    ap.add_argument("--ttl", type=float, default=2.0, help="serve.slurm_view_ttl, s")
    ap.add_argument("--replicas", type=int, default=2, help="serve replicas (before: each read)")
    ap.add_argument("--entries-per-ttl", type=int, default=4096,
                    help="serve.slurm_view_entries_per_ttl (0: every ttl)")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--recompute", metavar="JSON",
                    help="only recompute each run's per-minute figures of JSON from its measured "
                         "costs (after a change of the reader's schedule), and write it back")
    args = ap.parse_args()
    if args.recompute:
        data = json.loads(Path(args.recompute).read_text())
        data["entries_per_ttl"] = args.entries_per_ttl
        for run in data["runs"]:
            run["per_minute"] = per_minute(run, data["hc_interval"], data["ttl"],
                                           data["replicas"], args.entries_per_ttl)
        Path(args.recompute).write_text(json.dumps(data, indent=1) + "\n")
        return
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "load": [round(x, 1) for x in os.getloadavg()],
        "before": BEFORE, "hc_interval": args.hc, "ttl": args.ttl, "replicas": args.replicas,
        "entries_per_ttl": args.entries_per_ttl,
        "left": args.left, "calls": args.calls, "rounds": args.rounds,
        "decisions": args.decisions, "runs": []}
    for n in (int(x) for x in args.entries.split(",")):
        run = run_entries(n, args)
        run["per_minute"] = per_minute(run, args.hc, args.ttl, args.replicas,
                                       args.entries_per_ttl)
        print(json.dumps({"entries": n, "per_minute": run["per_minute"],
                          "outcomes": run["outcomes"], "states": run["states"]}), flush=True)
        for name, read in run["reads"].items():
            print(f"  {n} entries, {name}: {read}", flush=True)
        out["runs"].append(run)
        out["slurm"] = run["slurm"]
    out["load_after"] = [round(x, 1) for x in os.getloadavg()]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
