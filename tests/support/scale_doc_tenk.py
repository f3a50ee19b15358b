"""docs/scale.md's "Goals at 10,000 nodes" table: each goal of a 10,000-entry controller (one
slurmctld, N real `slurmd -N` and E emulated node entries, run.py --emulated) against the run
that measured it, rendered from docs/scale.json like the rest of the page (scale_doc.py).

A run is a 10,000-node run when its key is N+E with N + E >= 10,000; the newest such run that
measured a goal gives its row (its label and key in the row). The store's steady size comes
from docs/store_retention.json (docs/store.md, "Steady size"), the one place it is measured;
the cost of every node's own Slurm reads (which emulated nodes do not send) from
docs/slurm_cost.json (docs/slurm.md's bench at 10,000 entries).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import retention_doc

TENK = 10_000
CPU_GOAL_PCT = 1.0  # slurmguard's share of slurmctld's CPU, % of one core
RSS_GOAL_MB = 1024.0  # per serve replica
GATE_GOAL_MS = 1000.0  # a 1,024-node job's gate, p99
GATE_GOAL_NODES = 1024  # ... measured by a run whose job over every real node had that many
OUTAGE_GOAL = 2.0  # slurmguard's RPCs with every replica down over those with serve up
Row = tuple[str, str, bool | None]  # goal, measured, holds (None: not measured)
# The goals a 10,000-node run may not have measured, as the table names them when none did.
UNMEASURED = {
    "serve_up": "a shared fault on every node, serve up: drained at most the cap",
    "serve_down": "a shared fault on every node, every replica down: drained at most the cap",
    "outage": f"in the outage slurmguard's RPCs cost at most {OUTAGE_GOAL:g}x what they cost "
              "with serve up",
}
NOT_MEASURED = ("in tenk-read the shared fault ran this 23-GB host out of memory (1,024 slurmd "
                "holding a 10,000-entry table each, beside the fault's hooks) and the kernel "
                "killed slurmctld in its second pass, serve down; tenk stopped before it, when "
                "its gate's job over every real node ran the host out of memory")


def tenk_runs(data: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, key, figures) of the runs with N + E >= 10,000 entries, oldest first."""
    out = []
    for label, runs in data["runs"].items():
        for key, f in runs.items():
            n, plus, e = key.partition("+")
            if plus and n.isdigit() and e.isdigit() and int(n) + int(e) >= TENK:
                out.append((f.get("date", ""), label, key, f))
    return [(label, key, f) for _, label, key, f in sorted(out, key=lambda x: x[0])]


def _phases(f: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(f.get("steady", {}).get("phases", []), key=lambda ph: ph["jobs_per_hour"])


def _rows(f: dict[str, Any]) -> list[tuple[str, Row]]:
    """(goal id, row) for every goal this run measured."""
    out: list[tuple[str, Row]] = []
    ph = _phases(f)
    if ph:
        hi, lo = ph[-1], ph[0]
        if "slurmguard_ctld_pct" in hi:
            v = hi["slurmguard_ctld_pct"]
            out.append(("cpu", (
                f"slurmguard's share of slurmctld's CPU at {hi['jobs_per_hour']:,} jobs/h, two "
                f"replicas: at most {CPU_GOAL_PCT:g} % of one core (sdiag's server time in "
                "slurmguard's RPCs)",
                f"{v} % (slurmctld's CPU, every cause: {hi['ctld_cpu_pct']} %)",
                v <= CPU_GOAL_PCT)))
        if len(ph) >= 2:
            ok = hi["slurmguard_rpm"] <= 1.25 * lo["slurmguard_rpm"] + 5
            out.append(("flat", (
                "slurmguard's RPCs a minute flat in the job rate",
                f"{lo['slurmguard_rpm']} at {lo['jobs_per_hour']:,} jobs/h, "
                f"{hi['slurmguard_rpm']} at {hi['jobs_per_hour']:,}", ok)))
        rss = [s["rss_mb"] for p in ph for s in p.get("serves", [])]
        if rss:
            out.append(("rss", (f"serve's RSS at most {RSS_GOAL_MB / 1024:g} GB per replica",
                                f"at most {max(rss)} MB", max(rss) <= RSS_GOAL_MB)))
    g = f.get("gate")
    if g and g["large_job_nodes"] >= GATE_GOAL_NODES:  # a smaller job does not measure it
        out.append(("gate", (
            f"the gate for a {GATE_GOAL_NODES:,}-node job, p99: at most "
            f"{GATE_GOAL_MS / 1000:g} s",
            f"{g['large_p99_ms']} ms ({g['large_job_nodes']:,} nodes)",
            g["large_p99_ms"] <= GATE_GOAL_MS)))
    if g and "burst" in g:  # asked for by the issue, with no goal of its own
        out.append(("gate_burst", (
            "the gate for one-node jobs started at once (measured; no goal)",
            f"{g['burst']} jobs: p50 {g['burst_p50_ms']} ms, p99 {g['burst_p99_ms']} ms, all "
            f"done in {g['burst_wall_s']} s"
            + (f"; {g['burst_fell_back']} ran the Python gate" if "burst_fell_back" in g
               else ""), None)))
    sf = f.get("shared_fault", {})
    for mode, what in (("serve_up", "serve up"), ("serve_down", "every replica down")):
        if mode in sf:
            d = sf[mode]["drained"]
            out.append((mode, (f"a shared fault on every node, {what}: drained at most the cap",
                               f"{d} (cap {sf['cap']})", d <= sf["cap"])))
    r = sf.get("outage_rpc_ratio")
    up, down = sf.get("serve_up", {}), sf.get("serve_down", {})
    if "emulated_pass" in up and "emulated_pass" in down:
        # Per failing health check: each phase checks as many nodes as its time allows (with
        # serve up a check waits on serve's answers, down it does not), so the phases' totals
        # count different numbers of checks; a fleet checks each node once an interval.
        n_up = up["emulated_pass"]["healthcheck"]["records"] + sf["nodes"]
        n_down = down["emulated_pass"]["healthcheck"]["records"] + sf["nodes"]
        rpc = round((down["slurmguard_rpcs"] / n_down) / (up["slurmguard_rpcs"] / n_up), 2)
        t_up, t_down = _server_s(up) / n_up, _server_s(down) / n_down
        ratio = round(t_down / t_up, 2) if t_up > 0 else None
        out.append(_outage(
            "per failing health check over the shared fault's pass, down / up: its RPCs, and "
            "slurmctld's server time in them",
            f"{rpc}x the RPCs ({down['slurmguard_rpcs'] / n_down:.2f} / "
            f"{up['slurmguard_rpcs'] / n_up:.2f} a check, {n_down:,} / {n_up:,} checks); "
            f"{ratio}x the server time ({1000 * t_down:.1f} / {1000 * t_up:.1f} ms a check)",
            rpc <= OUTAGE_GOAL and ratio is not None and ratio <= OUTAGE_GOAL))
    elif "slurmguard_ctld_pct" in up and "slurmguard_ctld_pct" in down:
        # the cost: slurmctld's server time in slurmguard's RPCs over each pass of every node
        t_up, t_down = _server_s(up), _server_s(down)
        ratio = round(t_down / t_up, 2) if t_up > 0 else None
        out.append(_outage(
            "slurmctld's server time in them over the shared fault's pass of every node, "
            "down / up",
            f"{ratio}x ({t_down:.1f} s / {t_up:.1f} s; RPCs {down['slurmguard_rpcs']:,} / "
            f"{up['slurmguard_rpcs']:,})", ratio is not None and ratio <= OUTAGE_GOAL))
    elif r is not None:
        out.append(_outage("the shared fault's pass, RPCs down / up",
                           f"{r}x ({down['slurmguard_rpcs']:,} / {up['slurmguard_rpcs']:,})",
                           r <= OUTAGE_GOAL))
    return out


def _outage(how: str, measured: str, ok: bool) -> tuple[str, Row]:
    """The outage goal's row, ``how`` saying what the run compared."""
    return ("outage", (f"in the outage slurmguard's RPCs cost at most {OUTAGE_GOAL:g}x what "
                       f"they cost with serve up ({how})", measured, ok))


def rows(data: dict[str, Any], retention: dict[str, Any] | None) -> list[str]:
    """The table's lines: per goal the newest 10,000-node run that measured it."""
    newest: dict[str, tuple[str, str, Row]] = {}
    for label, key, f in tenk_runs(data):
        for goal, row in _rows(f):
            newest[goal] = (label, key, row)
    lines = ["| goal | measured | run | holds |", "|---|---|---|---|"]
    for label, key, (goal, measured, ok) in newest.values():
        lines.append(f"| {goal} | {measured} | {label} ({key}) | "
                     f"{'–' if ok is None else 'yes' if ok else 'no'} |")
    for goal, what in UNMEASURED.items():  # a goal no 10,000-node run measured says so
        if goal not in newest:
            lines.append(f"| {what} | not measured: {NOT_MEASURED} | – | – |")
    cost = _slurm_cost()
    if cost is not None:  # docs/slurm.md's bench: every node's own reads counted
        up = cost["quiet_up"]["ctld_ms"]
        share = round(100 * up / 60000, 2)
        lines.append(f"| slurmguard's share of slurmctld's CPU, serve up, with every node's "
                     f"health check (one per node every 300 s, its state from serve): at most "
                     f"{CPU_GOAL_PCT:g} % of one core | {share} % ({up:,.0f} ms of server time "
                     f"a minute, {cost['quiet_up']['total']:,.0f} RPCs) | docs/slurm.md, the "
                     f"bench at 10,000 entries | {'yes' if share <= CPU_GOAL_PCT else 'no'} |")
        f_up, f_down = cost["fault_up"], cost["fault_down"]
        ratio = round(f_down["total"] / f_up["total"], 2) if f_up["total"] else None
        time_ratio = round(f_down["ctld_ms"] / f_up["ctld_ms"], 2) if f_up["ctld_ms"] else None
        lines.append(f"| in the outage slurmguard's RPCs cost at most {OUTAGE_GOAL:g}x what they "
                     f"cost with serve up (every node failing one shared cause at its cap, "
                     f"every replica down, against the same with serve up) | {ratio}x the RPCs "
                     f"({f_down['total']:,.0f} / {f_up['total']:,.0f} a minute); {time_ratio}x "
                     f"slurmctld's time | docs/slurm.md, the bench at 10,000 entries | "
                     f"{'yes' if ratio is not None and ratio <= OUTAGE_GOAL and (time_ratio or 0) <= OUTAGE_GOAL else 'no'} |")
    if retention is not None:
        gb = {e: retention_doc.steady(retention, e)["steady_gb"][str(TENK)]
              for e in retention["engines"]}
        measured = ", ".join(f"{v:g} GB ({e})" for e, v in sorted(gb.items()))
        lines.append(f"| the store's steady size with the default retention at 10,000 nodes: "
                     f"at most {retention_doc.GOAL_GB:g} GB | {measured} | docs/store.md, "
                     f"\"Steady size\" | {'yes' if max(gb.values()) <= retention_doc.GOAL_GB else 'no'} |")
    return lines


def _server_s(phase: dict[str, Any]) -> float:
    """slurmctld's server seconds in slurmguard's RPCs over a phase."""
    return float(phase["slurmguard_ctld_pct"]) * float(phase["seconds"]) / 100


def _slurm_cost() -> dict[str, Any] | None:
    """The per-minute costs at 10,000 entries from docs/slurm_cost.json, if measured."""
    path = retention_doc.REPO / "docs" / "slurm_cost.json"
    if not path.exists():
        return None
    runs = [r for r in json.loads(path.read_text())["runs"] if r["entries"] >= TENK]
    return runs[-1]["per_minute"] if runs else None


def section(data: dict[str, Any]) -> list[str]:
    """The page's section, after the table it leads with."""
    path = retention_doc.DATA
    retention = json.loads(Path(path).read_text()) if Path(path).exists() else None
    runs = tenk_runs(data)
    out = ["## Goals at 10,000 nodes, 1,200 jobs an hour\n"]
    if not runs:
        return [*out, "No 10,000-node run in docs/scale.json yet.\n"]
    out.append("One slurmctld with 10,000 node entries: N real `slurmd -N` with the "
               "installed hooks (1,024, or 256 in tenk-fixes) and emulated entries for the "
               "rest, whose records, permits and gates the node-traffic generator sends "
               "(\"Emulated nodes\" above says what they cannot show); two serve replicas on "
               "PostgreSQL.\n")
    out.append("What slurmguard's RPCs here count: serve's (the controller side) and the "
               "nodes' health checks'. In tenk, tenk-read and tenk-fixes each real node's "
               "health check read its own node (`sinfo -n`: a NODE_INFO_SINGLE and a "
               "PARTITION_INFO) and the emulated nodes read nothing, so the node side of "
               "10,000 nodes (10,000 x 2 RPCs per 300 s, 4,000 a minute) was not in their "
               "figures; from tenk-own on, every health check, real or emulated, takes its "
               "node's state from serve (docs/hooks.md, \"The node's own state\") and reads "
               "Slurm only to look at its node before a drain. And with 10,000 entries Slurm's "
               "HealthCheckNodeState=CYCLE walks the entries in order, so the real nodes (the "
               "first entries) run their checks in one burst per interval: a two-minute phase "
               "holds that burst or not (tenk-fixes' 1,200 jobs/h phase did, its 300 jobs/h "
               "phase did not), which the job rate has nothing to do with. tenk-steady's "
               "phases are one interval long (5 minutes), so each holds one burst, after 5 "
               "minutes of the same traffic unmeasured: the first burst after the start, when "
               "every node checks at once and the generator makes its first pass, is not the "
               "steady state.\n")
    return [*out, *rows(data, retention), "", *steady_rows(data), "", *reads_rows()]


READS = retention_doc.REPO / "docs" / "fleet_reads.json"


def reads_rows() -> list[str]:
    """An admin's reads over a month of a 10,000-node fleet's history, from
    tests/bench/bench_fleet_reads.py's JSON (docs/fleet_reads.json), if measured."""
    if not READS.exists():
        return ["An admin's reads over a month of a 10,000-node fleet's history (`nodes`, "
                "`incident list`, `fleet report`, `goodput`): not measured yet "
                "(tests/bench/bench_fleet_reads.py).", ""]
    d = json.loads(READS.read_text())
    engines = sorted(d["engines"])
    first = d["engines"][engines[0]]["rows"]
    lines = [f"An admin's reads over a month of a {d['nodes']:,}-node fleet's history "
             f"(tests/bench/bench_fleet_reads.py, {d['date']}; the real CLI, median of "
             f"{d['n']} runs, seconds): {d['days']} days written through the store API, the "
             f"health checks compressed {d['compress']}x ({first['runs']:,} runs, "
             f"{first['results']:,} results), failures at the real rate ({first['events']:,} "
             f"ledger events), goodput's jobs at the real rate ({first['goodput_jobs']:,} at "
             f"{d['jobs_per_hour']:,} jobs an hour); Slurm not asked.\n",
             "| read | " + " | ".join(f"{e} (load {d['engines'][e]['load'][0]})"
                                      for e in engines) + " |",
             "|---|" + "---|" * len(engines)]
    for cmd in d["engines"][engines[0]]["commands"]:
        name, comma, how = cmd.partition(", ")  # "incident list, GPUs per node set"
        lines.append(f"| `{name}`{comma}{how} | " + " | ".join(
            f"{d['engines'][e]['commands'][cmd]['median_s']:g}" for e in engines) + " |")
    missing = sorted({"sqlite", "postgresql"} - set(engines))
    return [*lines, "",
            "`incident list` reads the jobs near each episode in full, and the times of every "
            "job on a node with an episode in the window to find them (docs/incidents.md); "
            "with `checks.gpu.expected_count` unset it also parses every such job's runs, for "
            "the most GPUs a job had on each node (its out-of-service cost). The others read "
            "aggregates or one row a node."
            + (f" Not measured on {', '.join(missing)}." if missing else ""), ""]


def steady_rows(data: dict[str, Any]) -> list[str]:
    """Each 10,000-node run's steady phases: what its goals rows summarise."""
    lines = ["Each 10,000-node run's steady state (its minutes per job rate, and the minutes "
             "it ran before its first phase, unmeasured, where it settled first):\n",
             "| run | jobs/h | slurmguard's RPCs/min (node-table reads) | slurmctld CPU, every "
             "cause | slurmguard's server time (share of a core) | serve replicas: CPU (share "
             "of a core) / RSS | policy passes: full (mean s), incremental (mean s) |",
             "|---|---|---|---|---|---|---|"]
    for label, key, f in tenk_runs(data):
        for ph in _phases(f):
            serves = ", ".join(f"{100 * s['cpu_s'] / ph['seconds']:.1f} % / {s['rss_mb']} MB"
                               for s in ph.get("serves", []))
            pp = ph.get("policy_passes")
            passes = "–" if not pp else ", ".join(
                f"{k} {v['count']} ({v['mean_s'] if v['mean_s'] is not None else '–'})"
                for k, v in sorted(pp.items()))
            share = ph.get("slurmguard_ctld_pct")
            settled = f.get("steady", {}).get("settle_s")
            how = f"{ph['seconds'] / 60:g} min" + (f", settled {settled / 60:.0f} min first"
                                                   if settled else "")
            lines.append(
                f"| {label} ({key}; {how}) | {ph['jobs_per_hour']:,} | {ph['slurmguard_rpm']} "
                f"({ph.get('rpc_per_min', {}).get('REQUEST_NODE_INFO', 0)}) | {ph['ctld_cpu_pct']} % | "
                f"{'–' if share is None else f'{share} %'} | {serves} | {passes} |")
    return lines
