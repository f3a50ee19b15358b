"""What slurmguard costs slurmctld a minute, quiet and under a shared fault, serve up and
every replica down, at N node entries (docs/slurm.md, "What slurmguard costs slurmctld a
minute"; its block is rendered from the JSON this writes by tests/support/slurm_cost_doc.py).

Run by hand, as root, with Slurm and munge (a stock slurmctld with N node entries and no
slurmd for them, as tests/bench/bench_slurm_node_reads.py starts it; every node stays
UNKNOWN, not responding, for the run: DOWN only after its 300-s SlurmdTimeout):

    python tests/bench/bench_slurm_cost.py [--entries 128,512,1024] [--json docs/slurm_cost.json]

Per N, with the cap's worth of nodes drained by slurmguard for one cause (a shared fault at
its cap, 10 % of the partition up to 50), in Slurm and in the store of a real `slurmguard
serve` (SQLite; its reader's one read at its start, outside the counted rounds: the reader's
cost a minute is computed from the full read's):

- **each read** by itself, R rounds of K calls (``sdiag --reset`` before each round): RPCs
  per call by type (over all rounds), and slurmctld's time per RPC by type (sdiag's
  total_time over the count), the median of the rounds: the full node table (serve's
  reader), the partition table and the drained nodes (the fallback's two reads), one node
  (a health check's own read when neither serve nor its saved record answers), and a
  partition's drained count (the narrowest sinfo, which the guard cannot use: it counts
  every drain, an admin's and an old one too, with no cause);
- **a health check's Slurm reads**, D health checks a round on nodes drawn at random
  (seeded), R rounds, the cases taking turns: its own node's state as the hook takes it
  (``node.ownstate.own_state``: serve, the node's saved record, Slurm) and, for a failing
  check, the hook's own drain (``node.ownstate.drain_guarded``: ``drainguard.guarded_drain`` with the
  hook's own Slurm read as its look, ``ServePermit`` to the live serve or to a dead port,
  then the fallback ``SlurmPermit`` with the hook's budget left, ``--left``, its wait
  skipped: the RPCs are the same). The cases: quiet (every check passes) and a shared fault
  at its cap (every check fails the one cause), serve up and every replica down (with the
  node's saved record, and without one: a record older than ``hooks.state_max_age``).
  RPCs per health check by type, over all rounds, and one price per RPC type (the median of
  all their rounds);
- **per minute**, from those measured costs: serve's reader (60 / its period: every ttl up
  to ``--entries-per-ttl`` entries, proportionally less often beyond) when serve is up, and
  every node's health check once per HealthCheckInterval (``--hc``, 300 s as the scale
  harness); every replica down, a node's saved record expires every ``--max-age`` s
  (hooks.state_max_age), when one of its checks reads Slurm, and a failing check reads the
  drained nodes in its window at the chance the fallback's arithmetic gives (the budget left
  over the cycle's windows; the measured checks, 30 at most, sample a chance of 1 in 400 as
  none or one). Before: every health check
  read its node (``sinfo -n``) whatever serve did. slurmctld's time a minute is the sum of
  count x time per call by RPC type.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "bench")]
from bench_slurm_node_reads import start  # noqa: E402
from support.sgserve import Serve, new_port, new_store, write_config  # noqa: E402

from slurmguard import config  # noqa: E402
from slurmguard.adapters.slurm.commands import SlurmCLI  # noqa: E402
from slurmguard.node import fallback, ownstate  # noqa: E402
from slurmguard.nodeset import names  # noqa: E402
from slurmguard.serve.slurmview import read_period  # noqa: E402
from slurmguard.store.api import Store  # noqa: E402

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


CASES = ("quiet_up", "quiet_down", "quiet_down_stale", "fault_up", "fault_down",
         "fault_down_stale")


def run_entries(entries: int, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="sg-cost-"))
    c = start(str(tmp), entries)
    serve = None
    try:
        cli = SlurmCLI(c.slurm_section, env=c.env)
        version = c.run("sinfo", "--version").stdout.strip()
        port = new_port()
        up_dir, down_dir = tmp / "up", tmp / "down"
        up_dir.mkdir()
        down_dir.mkdir()
        url = new_store(up_dir)
        # serve up: its view read once at its start (ttl an hour), the checks' only answer;
        # its full policy pass hourly too (it reads the node and job tables on its own
        # schedule: serve's cost, counted with its reader, not a health check's)
        up_path = write_config(up_dir, store_url=url, port=port, report_timeout=2.0,
                               serve_extra="slurm_view_ttl = 3600.0\npolicy_interval = 3600.0")
        down_path = write_config(down_dir, store_url=url, port=new_port(),  # nobody listens
                                 report_timeout=1.0)
        cfg_up = config.load(str(up_path), env={})
        cfg_down = config.load(str(down_path), env={})
        params = fallback.PolicyParams.from_section(cfg_up.section("policy"))
        cap = min(params.blast_max_nodes, max(1, entries * int(params.blast_max_percent) // 100))
        store = Store.open(url=url)
        try:
            for name in c.nodes[:cap]:  # the shared fault at its cap, in the blast window
                c.run("scontrol", "update", f"nodename={name}", "state=drain", f"reason={REASON}")
                store.nodes.record_event(name, "drain", "slurmguard", REASON, source=CAUSE,
                                         details={"via": "healthcheck"})
        finally:
            store.close()
        serve = Serve(up_path, port, env={"SLURM_CONF": c.env["SLURM_CONF"]}).start(
            timeout=120)
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
        sources: dict[str, dict[str, int]] = {}
        saved = {i.name: i for i in cli.nodes()}  # what a node saw last, kept before a check

        def healthcheck(case: str) -> Any:
            cfg = cfg_up if case.endswith("_up") else cfg_down

            def one() -> None:
                node = rng.choice(spared)
                if case.endswith("_down"):  # the node's record from its last answer
                    ownstate.keep(cfg, node, saved[node], time.time(), "serve")
                elif case.endswith("_stale"):
                    ownstate.forget(cfg, node)
                # As node/hooks.py: its own state (_slurm_view), then for a failing check
                # the one drain path (_act), the hook's own Slurm read taken as the look.
                own = ownstate.own_state(cfg, node, cli)
                by = sources.setdefault(case, {})
                by[own.source or "none"] = by.get(own.source or "none", 0) + 1
                if case.startswith("quiet"):
                    return
                left = time.monotonic() + args.left
                permit = fallback.SlurmPermit(cli, cfg, sleep=lambda s: None, deadline=left)
                done = ownstate.drain_guarded(cfg, cli, node, CAUSE, REASON, via="healthcheck",
                                              own=own, fallback=permit)
                key = done.result if "window is in" not in done.applied else "window past budget"
                got = outcomes.setdefault(case, {})
                got[key] = got.get(key, 0) + 1
            return one

        checks = interleaved(c, {case: healthcheck(case) for case in CASES}, args.decisions, r)
        # The fallback's window read is a chance (its window within the budget left): at
        # 10,000 nodes about 1 in 400 checks, which 30 checks sample as 0 or 1. The minute's
        # figure takes the fallback's own arithmetic for it (the first partition's size, as
        # the fallback ranks), the measured counts stay beside it.
        members = max((len(names(n, source="partition")) for n in cli.partitions().values()),
                      default=entries)
        hooks = cfg_down.section("hooks")
        slots = fallback.cycle_slots(members, int(hooks["fallback_slots"]),
                                     int(hooks["fallback_share"]))
        window_chance = min(1.0, args.left / (slots * float(hooks["fallback_slot"])))
        drained_now = sum(1 for i in cli.nodes() if i.drained)
    finally:
        if serve is not None:
            serve.stop()
        c.stop()
    return {"entries": entries, "slurm": version, "cap": cap, "states": sorted(states),
            "reads": reads, "checks": checks, "outcomes": outcomes, "sources": sources,
            "window_slots": slots, "window_chance": round(window_chance, 5),
            "drained_after": drained_now}


def per_minute(run: dict[str, Any], hc: float, ttl: float, max_age: float,
               entries_per_ttl: int = 4096) -> dict[str, Any]:
    """RPCs a minute by type and slurmctld's ms a minute per case, from one run's measured
    costs: serve's reader on its schedule (serve up), every node's health check once per
    ``hc``, and (every replica down) each node's record expiring every ``max_age``."""
    n = run["entries"]
    checks = n * 60.0 / hc
    expiring = n * 60.0 / max(max_age, hc)  # checks a minute whose record is too old
    reads, per = run["reads"], run["checks"]

    def cost(parts: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
        rpcs: dict[str, float] = {}
        ms = 0.0
        for times, call in parts:
            for kind, count in call["rpcs"].items():
                rpcs[kind] = rpcs.get(kind, 0.0) + times * count
                ms += times * count * call["ms_per_rpc"].get(kind, 0.0)
        return {"rpcs": {k: round(v, 1) for k, v in sorted(rpcs.items())},
                "total": round(sum(rpcs.values()), 1), "ctld_ms": round(ms, 1)}

    reader = (60.0 / read_period(ttl, n, entries_per_ttl), reads["full"])
    # A failing check in the outage: its measured reads less its window reads (each a
    # NODE_INFO and a PARTITION_INFO: the drained nodes), and the window read at its chance.
    expected = {}
    for case in ("fault_down", "fault_down_stale"):
        got = dict(per[case]["rpcs"])
        hits = got.pop("REQUEST_NODE_INFO", 0.0)
        got["REQUEST_PARTITION_INFO"] = round(got.get("REQUEST_PARTITION_INFO", 0.0) - hits, 3)
        expected[case] = {"rpcs": got, "ms_per_rpc": per[case]["ms_per_rpc"]}
    window = (run["window_chance"], reads["drained"])
    return {
        "quiet_up": cost([reader, (checks, per["quiet_up"])]),
        "quiet_up_before": cost([reader, (checks, reads["one_node"])]),
        "quiet_down": cost([(checks - expiring, per["quiet_down"]),
                            (expiring, per["quiet_down_stale"])]),
        "quiet_down_before": cost([(checks, reads["one_node"])]),
        "fault_up": cost([reader, (checks, per["fault_up"])]),
        "fault_up_before": cost([reader, (checks, reads["one_node"]), (checks, per["fault_up"])]),
        "fault_down": cost([(checks - expiring, expected["fault_down"]),
                            (expiring, expected["fault_down_stale"]),
                            (checks * window[0], window[1])]),
        "fault_down_before": cost([(checks, reads["one_node"]), (checks, expected["fault_down"]),
                                   (checks * window[0], window[1])]),
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
    ap.add_argument("--max-age", type=float, default=3600.0,
                    help="hooks.state_max_age: a node's saved record stands in this long, s")
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
                                           data["max_age"], args.entries_per_ttl)
        Path(args.recompute).write_text(json.dumps(data, indent=1) + "\n")
        return
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "load": [round(x, 1) for x in os.getloadavg()],
        "hc_interval": args.hc, "ttl": args.ttl, "max_age": args.max_age,
        "entries_per_ttl": args.entries_per_ttl,
        "left": args.left, "calls": args.calls, "rounds": args.rounds,
        "decisions": args.decisions, "runs": []}
    for n in (int(x) for x in args.entries.split(",")):
        run = run_entries(n, args)
        run["per_minute"] = per_minute(run, args.hc, args.ttl, args.max_age,
                                       args.entries_per_ttl)
        print(json.dumps({"entries": n, "per_minute": run["per_minute"],
                          "outcomes": run["outcomes"], "sources": run["sources"],
                          "states": run["states"]}), flush=True)
        for name, read in run["reads"].items():
            print(f"  {n} entries, {name}: {read}", flush=True)
        out["runs"].append(run)
        out["slurm"] = run["slurm"]
    out["load_after"] = [round(x, 1) for x in os.getloadavg()]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
