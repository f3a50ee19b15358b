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

from support import scale_doc_repair, scale_doc_tenk
from support.scale_doc_text import HEAD, LABELS

NODE_GOAL = 3.6  # CPU-seconds per node per hour: 0.1 % of one core (the goal)
# Shorter steady phases than this see too few of the health checks (CYCLE over 300 s) for
# their RPC rates to say anything about jobs.
RPC_PHASE_MIN_S = 120.0
PLOTS = "scale"  # docs/scale/*.png


def _runs(data: dict[str, Any], label: str) -> list[tuple[int, dict[str, Any]]]:
    return sorted(((int(n), f) for n, f in _real(data["runs"].get(label, {}))), key=lambda x: x[0])


def _real(runs: dict[str, Any]) -> list[tuple[str, Any]]:
    """The runs of all-real nodes (key N); runs with emulated nodes (key N+E, run.py
    --emulated) are not in these tables yet (docs/scale.md "Emulated nodes")."""
    return [(n, f) for n, f in runs.items() if n.isdigit()]


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
    return rows + scale_doc_repair.table_rows(f) + controller_rows(n, f) + [""]


def _rpm(ph: dict[str, Any]) -> str:
    """A phase's RPCs per minute by message type, the largest first."""
    by = sorted(ph["rpc_per_min"].items(), key=lambda kv: -kv[1])
    return ", ".join(f"{t} {v}" for t, v in by if v)


def controller_rows(n: int, f: dict[str, Any]) -> list[str]:
    """The outage, gate and ingest scenarios' rows of one run's table."""
    rows = []
    o = f.get("outage")
    if o:
        up, down, nt = o["serve_up"], o["serve_down"], o.get("notice", {})
        rows += [
            f"| serve outage: jobs watching (one node each, under `slurmguard run`; wrapper RSS) | "
            f"{o['jobs']} ({o['wrapper_rss_mb']} MB each)"
            + (f"; {len(o['not_started'])} more not started in 300 s and cancelled: "
               f"{', '.join(sorted(set(o['not_started'].values())))}" if o.get("not_started") else "")
            + " |",
            f"| serve outage: serve up {o['up_s']:.0f} s, RPCs/min by type | {_rpm(up)} |",
            f"| serve outage: every serve down {o['down_s']:.0f} s, RPCs/min by type | {_rpm(down)} |",
            f"| serve outage: slurmctld's RPCs/min, serve up / down (ratio) | "
            f"{round(up['slurm_own_rpm'] + up['slurmguard_rpm'], 1)} / "
            f"{round(down['slurm_own_rpm'] + down['slurmguard_rpm'], 1)} ({o['ratio_total']}) |",
            f"| serve outage: a node drained in it, its job's notice (via; after the drain) | "
            f"{nt.get('via') or 'none'}; {nt.get('seen_after_s')} s |",
        ]
        if "pending" in o:  # counted after replay rounds until the spools were empty
            rows.append(f"| serve outage: records spooled in it / stored once after "
                        f"({o['replay_rounds']} replay rounds) / lost / duplicated | "
                        f"{o['spooled_during']} / {o['stored']} / {o['lost']} / {o['duplicated']} |")
    g = f.get("gate")
    if g:
        rows += [
            f"| gate (socket): one job of {g['large_job_nodes']} nodes, p50 / p99 ({g['large_runs']} runs) | "
            f"{g['large_p50_ms']} / {g['large_p99_ms']} ms |",
            f"| gate (socket): {g['burst']} one-node jobs at once, p50 / p99 (all done in) | "
            f"{g['burst_p50_ms']} / {g['burst_p99_ms']} ms ({g['burst_wall_s']} s"
            + (f"; {g['burst_fell_back']} ran the Python gate" if "burst_fell_back" in g else "")
            + ") |",
            f"| gate (Python, serve's socket down): one job of {g['large_job_nodes']} nodes, p50 / p99 "
            f"({g['python_runs']} runs) | {g['python_large_p50_ms']} / {g['python_large_p99_ms']} ms |",
        ]
        if "slurm_burst_all_ended_s" in g:  # left out beside emulated nodes (memory)
            rows += [
                f"| gate through Slurm: {g['burst']} one-node jobs, submit to all ended; completed | "
                f"{g['slurm_burst_all_ended_s']} s; {g['slurm_burst_completed']} |",
                f"| gate through Slurm: CPU per job (slurmctld's reaped children) | "
                f"{g['slurm_gate_cpu_ms_per_job']} ms |",
            ]
        if "slurm_large_job_s" in g:  # left out of a run where the job waited on a drain
            rows.append(f"| gate through Slurm: one batch job over every node, submit to end | "
                        f"{g['slurm_large_job_s']} s ({g['slurm_large_job_state']}) |")
    i = f.get("ingest")
    if i:
        rows += [
            f"| ingest: every node POSTs at once, POST to stored p50 / p99 ({i['posts']} POSTs, "
            f"{i['failed']} failed) | {i['p50_ms']} / {i['p99_ms']} ms |",
            f"| store: records a day ({n} nodes: health checks every {f.get('hc_interval', 300)} s, "
            f"a prolog and an epilog per job at 300 jobs/h) | {i['records_per_day']:,} |",
            f"| store: PostgreSQL growth a day (simulated days written through the store API; "
            f"bytes per record) | {i['growth_mb_per_day']} MB ({i['bytes_per_record']} B) |",
            f"| store: PostgreSQL size after a month (extrapolated: now + 30 x the last day) | "
            f"{i['month_mb']:,.0f} MB |",
        ]
    return rows


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
        for label in _labels(data):
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


def _labels(data: dict[str, Any]) -> list[str]:
    """The runs in the order the work went: LABELS' order (the first runs, the fixes one by
    one, the fleet-size runs with all of them), then any other label by name."""
    order = list(LABELS)
    return sorted(data["runs"], key=lambda x: (order.index(x) if x in order else len(order), x))


def goals(data: dict[str, Any]) -> list[str]:
    """The issue's goals against what was measured, one line each, per run."""
    out = ["## The goals, measured\n", "| run | N | goal | measured | holds |", "|---|---|---|---|---|"]
    for label in _labels(data):
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
            o = f.get("outage")
            if o:
                r, nt = o["ratio_total"], o.get("notice", {})
                out.append(f"| {label} | {n} | serve outage ({o['down_s'] / 60:g} min, {o['jobs']} "
                           f"jobs watching): slurmctld's RPC rate at most doubles | {r}x | "
                           f"{'yes' if r is not None and r <= 2 else 'no'} |")
                rh = _ratio_without_hooks(o)
                if rh is not None and r is not None and r > 2:
                    out.append(f"| {label} | {n} | serve outage: the same, less the hooks' and "
                               f"agents' reads (they read Slurm every health check whether serve "
                               f"is up or not; a pass of every node fell in one window only) | "
                               f"{rh}x | {'yes' if rh <= 2 else 'no'} |")
                if "pending" in o:
                    whole = (o["lost"], o["duplicated"], o["pending"]) == (0, 0, 0) and o["stored"] > 0
                    out.append(f"| {label} | {n} | serve outage: every record stored once | "
                               f"{o['stored']} of {o['spooled_during']}, duplicated "
                               f"{o['duplicated']} | {'yes' if whole else 'no'} |")
                if o["down_s"] >= 120:  # a short form does not wait for the notice
                    out.append(f"| {label} | {n} | serve outage: a drain's notice reaches the job "
                               f"through Slurm | {nt.get('via') or 'none'}, {nt.get('seen_after_s')} s | "
                               f"{'yes' if nt.get('via') == 'slurm' else 'no'} |")
            w = f.get("wave")
            if w:
                ok = not w["missed"] and not w["drained_healthy"]
                out.append(f"| {label} | {n} | Xid wave: every faulted node drained, no healthy "
                           f"one | {w['drained_faulted']}/{w['faulted']}, healthy "
                           f"{len(w['drained_healthy'])} | {'yes' if ok else 'no'} |")
                hc = f.get("hc_interval", 300)
                out.append(f"| {label} | {n} | Xid wave: drained within one health-check interval "
                           f"({hc} s) | {w['all_drained_s']} s | {'yes' if w['all_drained_s'] <= hc else 'no'} |")
            out += scale_doc_repair.goal_rows(label, n, f)
    return [*out, ""]


def _hi(f: dict[str, Any]) -> dict[str, Any] | None:
    """A run's steady phase at its highest job rate, or None."""
    phases = _g(f, "steady", "phases", default=[])
    return max(phases, key=lambda ph: ph["jobs_per_hour"]) if phases else None


def _lo(f: dict[str, Any]) -> dict[str, Any] | None:
    phases = _g(f, "steady", "phases", default=[])
    return min(phases, key=lambda ph: ph["jobs_per_hour"]) if phases else None


def _serve_cell(ph: dict[str, Any]) -> str:
    return ", ".join(f"{100 * s['cpu_s'] / ph['seconds']:.1f} % / {s['rss_mb']} MB" for s in ph["serves"])


# What a site gets, one row per cost: (what, the run's figure as text or None where the run
# did not measure it). Each cell of the table is the newest run at that N that measured it.
CURRENT: list[tuple[str, Any]] = [
    ("slurmctld: slurmguard's RPCs a minute, steady at the higher job rate (node side / "
     "controller side where split)",
     lambda f: (lambda ph: None if ph is None else (
         f"{ph['slurmguard_rpm']} ({ph['node_side_rpm']} / {ph['controller_rpm']}) at "
         f"{ph['jobs_per_hour']:,} jobs/h" if "controller_rpm" in ph else
         f"{ph['slurmguard_rpm']} at {ph['jobs_per_hour']:,} jobs/h"))(_hi(f))),
    ("slurmctld: its CPU, every cause, steady at the higher job rate",
     lambda f: (lambda ph: None if ph is None else f"{ph['ctld_cpu_pct']} %")(_hi(f))),
    ("slurmctld: the server time of slurmguard's RPCs (sdiag), share of one core, steady at "
     "the higher job rate",
     lambda f: (lambda ph: None if ph is None or "slurmguard_ctld_pct" not in ph else
                f"{ph['slurmguard_ctld_pct']} %")(_hi(f))),
    ("each node: CPU-s an hour with the agent / without it (steady, the lower job rate)",
     lambda f: (lambda ph: None if ph is None else
                f"{ph['node_cpu_s_per_hour_agent']} / {ph['node_cpu_s_per_hour_fallback']}")(_lo(f))),
    ("the controller: each serve replica's CPU (share of a core) / RSS, steady",
     lambda f: (lambda ph: None if ph is None or not ph.get("serves") else _serve_cell(ph))(_hi(f))),
    ("a shared fault, serve up: nodes drained (the cap)",
     lambda f: None if "serve_up" not in f.get("shared_fault", {}) else
     f"{f['shared_fault']['serve_up']['drained']} ({f['shared_fault']['cap']})"),
    ("a shared fault, every serve down: nodes drained (the stated bound)",
     lambda f: None if "serve_down" not in f.get("shared_fault", {}) else
     f"{f['shared_fault']['serve_down']['drained']} "
     f"({f['shared_fault'].get('bound_serve_down') or f['shared_fault']['bound_serve_down_today']})"),
    ("the gate: a job over every node, p99 (serve's socket)",
     lambda f: None if "gate" not in f else
     f"{f['gate']['large_p99_ms']} ms ({f['gate']['large_job_nodes']} nodes)"),
    ("a serve outage: slurmctld's RPC rate, down / up",
     lambda f: None if "outage" not in f else f"{f['outage']['ratio_total']}x"),
    ("the store: bytes a record / MB a day, before retention",
     lambda f: None if "ingest" not in f else
     f"{f['ingest']['bytes_per_record']:,} B / {f['ingest']['growth_mb_per_day']} MB"),
]


def current(data: dict[str, Any]) -> list[str]:
    """The table the page leads with: what slurmguard costs slurmctld, each node, the
    controller and the store at each size measured, each figure from the newest run at that
    size that measured it (named in the cell); every run in full is under "History". A
    10,000-entry run (N real + E emulated) has the last column: its per-node figures are
    its real nodes'."""
    cols = [(str(n), f"{n:,} nodes") for n in sorted(
        {int(n) for runs in data["runs"].values() for n, _ in _real(runs) if int(n) >= 128})]
    tenk = sorted({key for _, key, _ in scale_doc_tenk.tenk_runs(data)})
    cols += [(k, f"{sum(map(int, k.split('+'))):,} nodes ({int(k.split('+')[0]):,} real)")
             for k in tenk]
    by_date = sorted(((f.get("date", ""), label, n, f) for label, runs in data["runs"].items()
                      for n, f in [*_real(runs), *((k, v) for k, v in runs.items() if k in tenk)]),
                     key=lambda x: x[0])
    out = ["## What a site gets\n",
           "Each figure is the newest run at that size that measured it (the run's label in "
           "brackets; every run in full is under \"History\" below)."
           + ("" if tenk else " 10,000 nodes are not measured yet: \"Projected to 10,000 "
              "nodes\" below scales these.") + "\n",
           "| cost | " + " | ".join(name for _, name in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for what, get in CURRENT:
        cells = []
        for key, _ in cols:
            got = [(label, v) for _, label, m, f in by_date if m == key
                   and (v := get(f)) is not None]
            cells.append(f"{got[-1][1]} [{got[-1][0]}]" if got else "–")
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    return [*out, "", *scale_doc_tenk.section(data)]


def render(data: dict[str, Any], plot_lines: list[str]) -> str:
    unmeasured = "" if scale_doc_repair.measured(data) else (
        "repair in act mode on the wave (wave_repair: no run in docs/scale.json yet); ")
    head = HEAD.replace("{UNMEASURED}", unmeasured).replace("{PACE}", scale_doc_repair.pace(1024))
    out = [head, *current(data), "# History: every run\n", *goals(data)]
    for label in _labels(data):
        out.append(f"## Measured, {LABELS.get(label, label)}\n")
        for n, f in _runs(data, label):
            out += table(n, f)
    out.append("## Each cost against N\n")
    out += [*plot_lines, ""]
    out.append(projection(data))
    return "\n".join(out) + "\n"


_HOOK_CALLERS = ("node/healthcheck", "node/prolog", "node/epilog", "node/agent")


def _ratio_without_hooks(o: dict[str, Any]) -> float | None:
    """The outage's slurmctld RPC rate ratio, down / up, less the hooks' and the agents' node
    reads (2 RPCs each, tests/test_slurm_rpc_load.py): None where the callers were not
    recorded."""
    rates = []
    for ph in (o.get("serve_up"), o.get("serve_down")):
        if not ph or "slurm_calls" not in ph:
            return None
        calls = sum(sum(ph["slurm_calls"].get(c, {}).values()) for c in _HOOK_CALLERS)
        rates.append(ph["slurm_own_rpm"] + ph["slurmguard_rpm"] - 2 * calls * 60 / ph["seconds"])
    up, down = rates
    return round(down / up, 2) if up > 0 else None


def projection(data: dict[str, Any]) -> str:
    # The largest run with every fix ("fleet"), else the first runs' ("today").
    label = next((x for x in ("fleet", "today") if _runs(data, x)), None)
    if label is None:
        return ""
    n, f = _runs(data, label)[-1]
    lines = ["## Projected to 10,000 nodes\n",
             f"From the largest run ({n:,} nodes, \"{label}\"), scaled linearly in N (each "
             "figure below is per node or grows with N at most linearly in what was measured):",
             ""]
    ph = _g(f, "steady", "phases", 0, default=None)
    # Steady state alone at fleet size, with serve's fixed-period refresher, where measured.
    alone = [r for r in _runs(data, "fleet-steady") if r[0] == n]
    ctl_ph = _g(alone[-1][1], "steady", "phases", default=None) if alone else None
    if isinstance(ph, dict) and "controller_rpm" in ph and ctl_ph:
        rates = ", ".join(f"{x['controller_rpm']} at {x['jobs_per_hour']:,} jobs/h" for x in ctl_ph)
        lines.append(f"- slurmguard RPCs/min at slurmctld: node side {ph['node_side_rpm'] * 10000 / n:,.0f}"
                     f" (one-node reads, each node's health check every interval: linear in N; "
                     f"{ph['node_side_rpm']} at {n:,} nodes); controller side {rates} at "
                     f"{n:,} nodes (\"fleet-steady\": two replicas, each reading Slurm's node "
                     "table once per `slurm_view_ttl`, R x 60 / ttl reads a minute, 2 RPCs each, "
                     "whatever the jobs and nodes: docs/serve.md); a rate that does not grow "
                     "with N, but each read packs the whole node table, so its bytes do.")
    elif isinstance(ph, dict) and "controller_rpm" in ph:
        lines.append(f"- slurmguard RPCs/min at slurmctld: node side {ph['node_side_rpm'] * 10000 / n:,.0f}"
                     f" (one-node reads, each node's health check every interval: linear in N; "
                     f"{ph['node_side_rpm']} at {n:,} nodes); controller side "
                     f"{ph['controller_rpm']} at {n:,} nodes, measured with serve's refresher "
                     "before its fixed period (now R replicas x 60 / ttl reads a minute, 2 RPCs "
                     "each, whatever the jobs and nodes: docs/serve.md); a rate that does not "
                     "grow with N, but each read packs the whole node table, so its bytes do.")
    elif isinstance(ph, dict):
        rpm = ph["slurmguard_rpm"]
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
    ctl = [r for r in _runs(data, "fleet-ctl") if "ingest" in r[1]] or _runs(data, "controller")
    ing = _g(ctl[-1][1], "ingest", default=None) if ctl else None
    if isinstance(ing, dict):
        hc = ctl[-1][1].get("hc_interval", 300)
        per_day = 10000 * 86400 // hc
        lines.append(f"- the store: {ing['bytes_per_record']:,} bytes a record (measured at "
                     f"{ctl[-1][0]:,} nodes); a health check per node every {hc} s at 10,000 "
                     f"nodes is {per_day:,} records a day, "
                     f"{per_day * ing['bytes_per_record'] * 30 / 2**30:,.0f} GB a month "
                     "if nothing expired; `store.retention` bounds it (its steady size with "
                     "the defaults, measured: docs/store.md, \"Retention\").")
    lines += ["- several controller hosts: serve replicas share the ingest and the nodes' "
              "permits; each replica reads Slurm's node table once per `slurm_view_ttl` "
              "(docs/serve.md), so the controller side's reads multiply with replicas, not "
              "with nodes or jobs: R replicas make R x 60 / ttl reads a minute (raise the ttl "
              "at 10,000 nodes, where each read packs ten times the table); slurmctld is one "
              "process whatever the hosts, and its RPC budget is the figures above."]
    return "\n".join(lines) + "\n"


def write(json_path: Path) -> None:
    data = json.loads(json_path.read_text())
    docs = json_path.parent
    lines = plots(data, docs / PLOTS)
    (docs / "scale.md").write_text(render(data, lines))
