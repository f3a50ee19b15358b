"""docs/scale.md and its plots, rendered from docs/scale.json (what tests/scale/run.py measured;
no figure is typed). `python tests/scale/run.py --render` rewrites them;
tests/test_scale_doc.py checks the page is the rendering of the JSON.

The JSON: {"runs": {LABEL: {N: {scenario: figures, ...}}}}; LABEL "today" is the code as it
was measured first, "after" a rerun once fixes landed, "agent" once the agent's refresh
loop gave way to reads on demand (its steady state only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NODE_GOAL = 3.6  # CPU-seconds per node per hour: 0.1 % of one core (the goal)
# Shorter steady phases than this see too few of the health checks (CYCLE over 300 s) for
# their RPC rates to say anything about jobs.
RPC_PHASE_MIN_S = 120.0
PLOTS = "scale"  # docs/scale/*.png


def _runs(data: dict[str, Any], label: str) -> list[tuple[int, dict[str, Any]]]:
    return sorted(((int(n), f) for n, f in data["runs"].get(label, {}).items()), key=lambda x: x[0])


def _g(f: dict[str, Any], *path: str | int, default: Any = "–") -> Any:
    for p in path:
        if isinstance(f, dict) and p in f:
            f = f[p]
        elif isinstance(f, list) and isinstance(p, int) and p < len(f):
            f = f[p]
        else:
            return default
    return f


def _split_rows(rate: int, ph: dict[str, Any]) -> list[str]:
    """The controller/node split and who called what, for runs that recorded the callers."""
    if "controller_rpm" not in ph:
        return []
    calls = "; ".join(f"{who} " + ", ".join(f"{k} {c}" for k, c in sorted(kinds.items()))
                      for who, kinds in sorted(ph["slurm_calls"].items()))
    return [f"| steady, {rate} jobs/h: of which controller side / node side | "
            f"{ph['controller_rpm']} / {ph['node_side_rpm']} |",
            f"| steady, {rate} jobs/h: Slurm calls in {ph['seconds']} s, by caller | {calls or 'none'} |"]


def table(n: int, f: dict[str, Any]) -> list[str]:
    rows = [f"### {n:,} nodes ({f.get('agents', 0)} with the agent; measured {f.get('date', '?')})",
            "", "| figure | value |", "|---|---|",
            f"| cluster start (setup excluded) | {_g(f, 'timings', 'cluster_start_s'):.1f} s |"
            if isinstance(_g(f, 'timings', 'cluster_start_s'), float) else "| cluster start | – |",
            f"| slurmd memory (RSS, all nodes; per node) | {_g(f, 'slurmd_rss_mb')} MB; "
            f"{round(_g(f, 'slurmd_rss_mb', default=0) / n, 1)} MB |",
            f"| slurmctld memory (RSS) | {_g(f, 'ctld_rss_mb')} MB |",
            f"| PostgreSQL store size at the end | {_g(f, 'pg_size_mb')} MB |"]
    for ph in _g(f, "steady", "phases", default=[]):
        rate = ph["jobs_per_hour"]
        rows += [
            f"| steady, {rate} jobs/h: slurmguard RPCs/min (client queries+updates) | {ph['slurmguard_rpm']} |",
            *_split_rows(rate, ph),
            f"| steady, {rate} jobs/h: Slurm's own RPCs/min | {ph['slurm_own_rpm']} |",
            f"| steady, {rate} jobs/h: slurmctld CPU | {ph['ctld_cpu_pct']} % |",
            f"| steady, {rate} jobs/h: gate CPU (PrologSlurmctld, reaped by slurmctld) | {ph['gate_cpu_s']} s in {ph['seconds']} s |",
            f"| steady, {rate} jobs/h: CPU-s per node per hour, agent nodes (agent's own: {ph['agent_cpu_s_per_hour']}) | {ph['node_cpu_s_per_hour_agent']} |",
            f"| steady, {rate} jobs/h: CPU-s per node per hour, fallback nodes | {ph['node_cpu_s_per_hour_fallback']} |",
            f"| steady, {rate} jobs/h: serve CPU-s / RSS per replica | "
            + ", ".join(f"{s['cpu_s']} s / {s['rss_mb']} MB" for s in ph["serves"]) + " |",
            f"| steady, {rate} jobs/h: jobs completed / submitted, nodes drained | "
            f"{ph['jobs_completed']} / {ph['jobs']}, {ph['drained']} |",
        ]
    st = f.get("steady", {})
    if "healthcheck_cpu_s_agent" in st:
        for hook in ("healthcheck", "prolog", "epilog"):
            rows.append(f"| CPU-s of one {hook} run: agent node / fallback node | "
                        f"{st[f'{hook}_cpu_s_agent']} / {st[f'{hook}_cpu_s_fallback']} |")
    sf = f.get("shared_fault")
    if sf:
        for mode, what in (("serve_up", "serve up"), ("serve_down", "every serve down")):
            if mode not in sf:
                continue
            m = sf[mode]
            rows.append(f"| shared fault, {what}: drained (cap {sf['cap']}) | {m['drained']} |")
            rows.append(f"| shared fault, {what}: all {n} health checks took | {m['wall_s']} s |")
            rows.append(f"| shared fault, {what}: slurmguard RPCs per node checked | "
                        f"{round(m['slurmguard_rpcs'] / n, 1)} |")
        rows.append(f"| shared fault, serve down: today's bound cap + ceil(N/slots) - 1 | {sf['bound_serve_down_today']} |")
        if "outage_rpc_ratio" in sf:
            rows.append(f"| shared fault: slurmguard RPCs serve down / serve up | {sf['outage_rpc_ratio']} |")
    w = f.get("wave")
    if w:
        rows += [f"| Xid 79 wave: faulted / drained of them / healthy drained | {w['faulted']} / "
                 f"{w['drained_faulted']} / {len(w['drained_healthy'])} |",
                 f"| Xid 79 wave: fault to every faulted node drained (one check of every node) | {w['all_drained_s']} s |",
                 f"| Xid 79 wave: slurmguard RPCs per node checked | {round(w['slurmguard_rpcs'] / n, 1)} |"]
    return rows + [""]


def _series(runs: list[tuple[int, dict[str, Any]]]) -> dict[str, tuple[str, list[Any]]]:
    def col(*path: str | int) -> list[Any]:
        return [_g(f, *path, default=None) for _, f in runs]

    return {
        "rpm": ("slurmguard RPCs/min at slurmctld (steady, 300 jobs/h)",
                col("steady", "phases", 0, "slurmguard_rpm")),
        "rpm_hi": ("... at 1,200 jobs/h", col("steady", "phases", 1, "slurmguard_rpm")),
        "node_cpu": ("CPU-s/node/hour, agent nodes", col("steady", "phases", 0, "node_cpu_s_per_hour_agent")),
        "node_cpu_fallback": ("CPU-s/node/hour, fallback nodes",
                              col("steady", "phases", 0, "node_cpu_s_per_hour_fallback")),
        "drained_down": ("shared fault, serve down: drained", col("shared_fault", "serve_down", "drained")),
        "cap": ("blast-radius cap", col("shared_fault", "cap")),
    }


def plots(data: dict[str, Any], outdir: Path) -> list[str]:
    """One PNG per cost against N (slurmguard.plotting), before and after; the Markdown
    lines naming them."""
    from slurmguard.plotting import pyplot, save_png

    if not _runs(data, "today"):
        return []
    plt = pyplot()
    outdir.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, keys in (("node_cpu", ["node_cpu", "node_cpu_fallback"]), ("rpm", ["rpm", "rpm_hi"]),
                       ("shared_fault", ["drained_down", "cap"])):  # by name: the doc test lists them so
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for label in sorted(data["runs"], reverse=True):
            runs = _runs(data, label)
            series = _series(runs)
            for k in keys:
                what, ys = series[k]
                pts = [(n, y) for (n, _), y in zip(runs, ys, strict=True) if isinstance(y, (int, float))]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                            linestyle="-" if label == "today" else "--", label=f"{label}: {what}")
        ax.set_xlabel("nodes")
        ax.legend(fontsize=6)
        save_png(fig, str(outdir / f"{name}.png"), dpi=80)
        lines.append(f"![{name}]({PLOTS}/{name}.png)")
    return lines


LABELS = {"today": "before: the code as it was (main at 1d9fc26)",
          "ctld-before": "before serve's view refresher (main at b5cbbf6), callers recorded, "
                         "jobs with the node's config",
          "ctld-after": "after serve's view refresher, callers recorded, jobs with the node's "
                        "config",
          "ctld-noconfig": "main at b5cbbf6, callers recorded, jobs without a config (as the "
                           "first runs had them: the wrapper polls Slurm itself)",
          "after": "after: with the scale fixes merged (fallback bound, wrapper back-off, serve's "
                   "shared Slurm view, hook fast path)",
          "agent": "agent: after the agent's refresh redesign (slow sources read when a hook "
                   "needs them, no 5-s loop; the stand-in NVML's event wait sleeps as the "
                   "driver's does; the agent's CPU counts its children's)"}


def goals(data: dict[str, Any]) -> list[str]:
    """The issue's goals against what was measured, one line each, per run."""
    out = ["## The goals, measured\n", "| run | N | goal | measured | holds |", "|---|---|---|---|---|"]
    for label in sorted(data["runs"], reverse=True):
        for n, f in _runs(data, label):
            phases = _g(f, "steady", "phases", default=[])
            if len(phases) >= 2:
                lo, hi = phases[0], phases[-1]
                # The controller side where the run recorded the callers, else every client
                # RPC (the first runs could not split them).
                key = "controller_rpm" if "controller_rpm" in lo else "slurmguard_rpm"
                what = "controller side" if key == "controller_rpm" else "all client RPCs, not split"
                ok = hi[key] <= 1.25 * lo[key] + 5
                if lo["seconds"] >= RPC_PHASE_MIN_S:
                    out.append(f"| {label} | {n} | controller RPCs/min do not grow with jobs ({what}) | "
                               f"{lo[key]} at {lo['jobs_per_hour']} jobs/h, "
                               f"{hi[key]} at {hi['jobs_per_hour']} | {'yes' if ok else 'no'} |")
                else:  # a few health checks more or less in one phase outweigh the jobs
                    out.append(f"| {label} | {n} | controller RPCs/min do not grow with jobs ({what}) | "
                               f"not compared: {lo['seconds']:.0f}-s phases | – |")
                a = lo["node_cpu_s_per_hour_agent"]
                out.append(f"| {label} | {n} | per node <= {NODE_GOAL} CPU-s/h with the agent | "
                           f"{a} (agent's own {lo['agent_cpu_s_per_hour']}); without: "
                           f"{lo['node_cpu_s_per_hour_fallback']} | {'yes' if a <= NODE_GOAL else 'no'} |")
            sf = f.get("shared_fault")
            if sf and "serve_up" in sf:
                up = sf["serve_up"]["drained"]
                out.append(f"| {label} | {n} | shared fault, serve up: drained <= cap | {up} (cap "
                           f"{sf['cap']}) | {'yes' if up <= sf['cap'] else 'no'} |")
            if sf and "serve_down" in sf:
                down = sf["serve_down"]["drained"]
                b = sf.get("bound_serve_down", sf["bound_serve_down_today"])
                out.append(f"| {label} | {n} | shared fault, serve down: drained <= stated bound "
                           f"| {down} (bound {b}) | {'yes' if down <= b else 'no'} |")
            w = f.get("wave")
            if w:
                ok = not w["missed"] and not w["drained_healthy"]
                out.append(f"| {label} | {n} | Xid wave: every faulted node drained, no healthy "
                           f"one | {w['drained_faulted']}/{w['faulted']}, healthy "
                           f"{len(w['drained_healthy'])} | {'yes' if ok else 'no'} |")
                hc = f.get("hc_interval", 300)
                out.append(f"| {label} | {n} | Xid wave: drained within one health-check interval "
                           f"({hc} s) | {w['all_drained_s']} s | {'yes' if w['all_drained_s'] <= hc else 'no'} |")
    return [*out, ""]


def render(data: dict[str, Any], plot_lines: list[str]) -> str:
    out = [HEAD, *goals(data)]
    for label in sorted(data["runs"], reverse=True):
        out.append(f"## Measured, {LABELS.get(label, label)}\n")
        for n, f in _runs(data, label):
            out += table(n, f)
    out.append("## Each cost against N\n")
    out += [*plot_lines, ""]
    out.append(projection(data))
    return "\n".join(out) + "\n"


def projection(data: dict[str, Any]) -> str:
    runs = _runs(data, "today")
    if not runs:
        return ""
    n, f = runs[-1]
    lines = ["## Projected to 10,000 nodes\n",
             f"From the largest run ({n:,} nodes), scaled linearly in N (each figure below is "
             "per node or grows with N at most linearly in what was measured):", ""]
    rpm = _g(f, "steady", "phases", 0, "slurmguard_rpm", default=None)
    if isinstance(rpm, (int, float)):
        lines.append(f"- slurmguard RPCs/min at slurmctld: {rpm * 10000 / n:,.0f} "
                     f"({rpm} at {n:,} nodes).")
    for k, what in (("node_cpu_s_per_hour_agent", "with the agent"),
                    ("node_cpu_s_per_hour_fallback", "without it")):
        v = _g(f, "steady", "phases", 0, k, default=None)
        if isinstance(v, (int, float)):
            ok = "within" if v <= NODE_GOAL else "over"
            lines.append(f"- per node {what}: {v} CPU-s/hour ({ok} the {NODE_GOAL} goal); "
                         f"a per-node cost, the same at 10,000 nodes.")
    sf = f.get("shared_fault")
    if sf:
        cap10k = int(10000 * sf["cap"] / n)
        lines.append(f"- shared fault with every serve down, before the fix: bound cap + ceil(N/"
                     f"fallback_slots) - 1 = {cap10k + 1000 - 1:,} at 10,000 nodes (cap "
                     f"{cap10k:,}, 10 slots); after it, cap + fallback_share - 1 = "
                     f"{cap10k + 1:,} (fallback_share 2), whatever N.")
    lines += ["- several controller hosts: serve replicas share the ingest; the Slurm reads "
              "are the leader's and the hooks' own, so they do not multiply with replicas; "
              "slurmctld is one process whatever the hosts, and its RPC budget is the figure "
              "above."]
    return "\n".join(lines) + "\n"


HEAD = """# slurmguard at fleet size: one slurmctld, up to 1,024 nodes on one host

Everything here is measured by the scale harness (tests/support/scaleharness.py,
tests/support/scale_scenarios.py) and rendered from docs/scale.json by
tests/support/scale_doc.py; tests/test_scale_doc.py checks this page is that rendering.

    python tests/scale/run.py --nodes 1024 --scenario steady --scenario shared_fault --scenario wave
    python tests/scale/run.py --render

The harness: one real slurmctld (Slurm 22.05) with N `slurmd -N` on this host (SlurmdTimeout
120, TreeWidth 64, ports from a block below the ephemeral range), wired by `slurmguard setup
controller` and `setup node` into a prefix exactly as a site is (the installed entry scripts
as Prolog, Epilog, HealthCheckProgram and PrologSlurmctld; setup's slurm.conf lines), each
node with its own config, kernel log, boot id and stand-in NVML (8 GPUs); two `serve`
replicas on one PostgreSQL; the resident agent on the first nodes (32 at full size) and the
compiled client's fallback (`slurmguard HOOK` in-process) on the rest. CI runs a small form
(tests/scale/test_scale_small.py).

How it is measured:
- **RPCs**: `sdiag --reset` at each phase's start, `sdiag` at its end, by message type.
  While a phase runs the harness polls nothing; it sends only the job submissions being
  measured. Slurm's own traffic (node registrations, job submit/launch/complete, epilog
  completions, `sdiag` itself) is split from the client queries and updates (node/job/
  partition info, node updates): on this host, those come from slurmguard.
- **who asked**: every Slurm tool the harness's configs name (`[slurm] scontrol`, `sinfo`,
  `squeue`) is a shim that logs its caller's command line, then runs the real tool. The
  slurmguard subcommand of the caller gives the side: serve (which also answers the gate's
  socket), the gate, repair, the reconciler, the requeue watcher and burn-in are the
  controller side; the hooks, the agent and the jobs' `slurmguard run` the node side. The
  node side's RPCs are its calls times the RPCs one call costs (a node read: 2, REQUEST_NODE_
  INFO and REQUEST_PARTITION_INFO, counted by tests/test_slurm_rpc_load.py); the controller
  side is the rest of sdiag's client RPCs, so anything no shim saw counts against it. Runs
  since `ctld-*` give the jobs the node's config, as a site's /etc does (before, the jobs'
  wrappers had none, so their drain watch polled Slurm every 2 s: the per-job growth of the
  first runs, `ctld-noconfig` below).
- **slurmctld CPU**: utime+stime of its /proc/PID/stat over the phase; the gate
  (PrologSlurmctld) is its reaped children's CPU (cutime+cstime).
- **per node**: each slurmd's reaped children's CPU (cutime+cstime): Prolog, Epilog and
  HealthCheckProgram (the entry script, the compiled client and any `slurmguard` it ran),
  as slurmd waited for them; plus the agent's CPU on agent nodes (in the "agent" run its own
  and its reaped children's, the fs probes it runs; before, its own only); divided by the
  phase length, times 3,600. Jobs run under slurmstepd, which slurmd does not reap, so job
  CPU is not in it. The runs before "agent" charged each agent node the stand-in NVML's
  2-ms poll in its Xid event wait (about 15 of the 17 CPU-s/h; a real driver sleeps in the
  kernel, and the stand-in now sleeps on an inotify watch): docs/agent.md, "Tests and
  figures".
- **serve**: CPU and RSS of each replica's process.

The scenarios (shared fault and Xid wave run every node's installed HealthCheckProgram,
64 at a time, 128 at 1,024 nodes: each Python hook holds tens of MB, and a thousand at once
do not fit this host's memory next to the others' work; in steady state slurmctld's own
HealthCheckInterval runs them, CYCLE):
- **steady**: health checks at HealthCheckInterval 300 s (CYCLE), one-node jobs through
  `slurmguard run` at two rates (300 and 1,200 an hour), nothing failing; the per-node cost
  is each entry script's CPU per run (a sample of agent and fallback nodes, one run at a
  time, as the harness's reaped children's CPU) times its runs per hour (3,600 / interval
  health checks, a prolog and an epilog per one-node job), plus the agent's CPU;
- **shared_fault**: a required mount gone on every node (the nodes' mount table loses it),
  every node's health check with serve up, then with every replica down (at 1,024 nodes
  only the latter: a pass takes minutes here);
- **wave**: Xid 79 on 3 % of the nodes at once, then every node's health check.

What limited the machine: 2 cores shared with seven other engineers' work, and 24 GB. A
fleet-wide pass of Python hooks is CPU-bound here (the load average passed 70 during the
512-node passes), so "fault to drained" below is this host's time to check every node once,
not a real fleet's (where each node checks itself in parallel); memory bounds the hooks run
at once.

Not measured here (not built in the time): the serve outage with 500-1,000 jobs' wrappers
watching (the outage ratio goal), repair in act mode on the wave (RebootProgram and the BMC),
gate latency p50/p99 for a 512-node job and a 200-job burst, ingest p99 and the store after
a simulated month; the runs at 1,024 nodes are one each. Not done: the node side's one-node
read (`scontrol show node -o NAME`, REQUEST_NODE_INFO: the whole node table on 22.05) could
be `sinfo -n NAME` (REQUEST_NODE_INFO_SINGLE: that node only, the same two RPCs;
tests/test_slurm_rpc_load.py counts both), which needs a format-string parser on the hooks'
drain path.
"""


def write(json_path: Path) -> None:
    data = json.loads(json_path.read_text())
    docs = json_path.parent
    lines = plots(data, docs / PLOTS)
    (docs / "scale.md").write_text(render(data, lines))
