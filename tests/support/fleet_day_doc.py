"""docs/fleet-day.md and its plot, rendered from docs/fleet-day.json (what
`tests/scale/run.py --scenario fleet_day` measured; no figure is typed).
`python tests/scale/run.py --render` rewrites them; tests/test_fleet_day_doc.py checks the page
is the rendering of the JSON.

The JSON: {"runs": {N: figures}}, the figures support/fleet_day.fleet_day returned.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODES = ("slurmguard", "baseline")
GOAL_ETTR = 0.97

HEAD = """# A fleet day, with and without slurmguard

The same day of faults and jobs, twice at once on two real Slurm clusters of this host: once
with slurmguard (Prolog, Epilog, PrologSlurmctld, every node's health check, jobs under
`slurmguard run`, serve's guard and drain notices) and once with Slurm alone. Rendered from
docs/fleet-day.json by `python tests/scale/run.py --render`; measured by

    python tests/scale/run.py --nodes 128 --scenario fleet_day --seed 1 --day-s 300 --tick 15
    python tests/scale/run.py --nodes 512 --scenario fleet_day --seed 1 --day-s 1200 --tick 120 --step-s 1 --notice-interval 5

(`--nodes 512` where the host allows; the CI form is tests/scale/test_fleet_day_small.py,
16 nodes and a 60-s day). The code: tests/support/fleet_day_plan.py (the schedule and the
arithmetic, pure), tests/support/fleet_day.py (the day on the scale harness, docs/scale.md).

## How the day is built

- **Jobs**: tests/train_job.py (numbered steps, a checkpoint every few steps), batch jobs of
  1, 8 and (from 128 nodes) 64 nodes filling about 80 % of the fleet; a job that completes is
  followed by a new one of its size. With slurmguard they run under `slurmguard run`; in the
  baseline the program resumes from its own newest checkpoint.
- **Faults**: drawn by seed from docs/fleet.md's mix (Xid 79, GPU lost, uncorrectable ECC,
  IB link down, NVLink down, thermal slowdown), plus a flapping node (NVLink down, back,
  down again: two faults) and one shared filesystem hang on every node. They are injected
  where the checks read them (the stand-in NVML, the kernel log, IB sysfs, the mount table);
  what they do to a job is train_job's `--fault-dir`: a crash (an NCCL error) for Xid, lost
  GPU, ECC and IB, steps slowed for NVLink and thermal, every step waiting while the filer hangs.
  The faults keep a clock of their own (a thread looking every 0.2 s), apart from the loop
  that reads Slurm's node table and submits jobs: in the first 512-node run that loop
  stalled for minutes on a slow slurmctld, and the filer hang it was to clear lasted 142 s
  instead of 12. A fault whose time passes while this host is starved is injected late,
  keeping its planned length, and the runs that record it say how late; before, a fault
  waiting for its node (the flapping node's second) held up every later one, which is how
  the first 512-node run lost its thermal fault.
- **With slurmguard**: every node's installed health check each tick (slurmd's
  HealthCheckInterval, compressed), the hooks' drains through serve's guard, the drain notice
  to running jobs (checkpoint now, requeue without the node), slurmguard's UNDRAIN when a
  fault went away. A fault that goes away by itself (the flap, the filer) does so once the
  checks saw it. **Repair in act mode** (from the runs that show its figures; the runs before
  it say "not in the loop"): serve's repair with the wave_repair scenario's BMC and
  RebootProgram (tests/support/scale_repair.py), its pass every 2 s up to 64 nodes and every
  10 s above, and limits sized for a compressed day (tests/support/fleet_day_faults.py
  `day_limits`: 4 nodes at once, 25 % of a partition, 16 reboots an hour, 120 s to prove a
  reboot; docs/repair.md's 5 % would repair one node of 16 at a time). A reboot does to a
  fault what the table below says, and the day goes on past its end until every repair has
  returned or ticketed its node. A node the fleet policy drained as flapping is left to a
  person, as docs/repair.md says.
- **Baseline**: no slurmguard hook in slurm.conf; a job that fails is submitted again and
  the faulty node it failed on is drained at once and stays out: an instant, correct
  diagnosis, which real sites rarely have. A fault that only slows jobs is never seen.
- **Figures**: ETTR = useful GPU time / allocated GPU time (useful: every step kept, at its
  nominal time; allocated: each run's batch script from start to end); goodput = useful /
  (all GPUs x the day); lost GPU-seconds by cause: each run's allocated less its useful,
  charged to the fault on one of its nodes during it, else to overhead (start-up,
  checkpoints, queue); detect: fault to drain (baseline: to its drain after a failed job); return: drain to UNDRAIN.
- **What a reboot clears** (tests/support/fleet_day_plan.py `REBOOT_CLEARS`; a fault it does
  not clear is still there at boot, and repair must find that out and ticket the node):

{reboot_table}
- **Predictions**: what slurmguard said of a node before its fault's drain: the node risk
  score's flag (score at or above `risk.level`, as serve would have computed it at each tick
  from the store as it was then), slow-node suspicion (`suspect` events) and probation (a
  node returned, watched). Burn-in does not run in the day. A prediction on a node that never
  faulted is false.
- **Incident truth**: `slurmguard incident list --json` on the slurmguard cluster's store:
  every injected fault must be exactly one incident of its cause, the shared hang one shared
  incident, and no incident may lack a fault.
"""


def _reboot_table() -> str:
    from support.fleet_day_plan import KINDS, REBOOT_CLEARS

    rows = ["  | fault | cause | a reboot clears it | why |", "  |---|---|---|---|"]
    rows += [f"  | {k} | {KINDS[k][1]} | {'yes' if c else 'no'} | {why} |"
             for k, (c, why) in REBOOT_CLEARS.items()]
    return "\n".join(rows) + "\n"


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v) or "–"
    return str(v)


def _mix(sizes: list[int]) -> str:
    """Job sizes as counts: "1 of 64 nodes, 16 of 8, 217 of 1" (a 512-node day has 234)."""
    counts = sorted({n: sizes.count(n) for n in sizes}.items(), reverse=True)
    return ", ".join(f"{c} of {n} node{'s' if n > 1 else ''}" for n, c in counts) or "none"


def _gpu_h(s: float) -> str:
    return f"{s / 3600:.3f}"


SHARED = "fs-mount"  # the shared filesystem hang's cause


def ettr_without(mode: dict[str, Any], cause: str) -> float | None:
    """ETTR with ``cause``'s lost GPU time taken out of the allocated time: what slurmguard's
    drains and notices can act on, apart from a fault that stops every job alike."""
    left = mode["allocated_gpu_s"] - mode["lost_gpu_s_by_cause"].get(cause, 0)
    return round(mode["useful_gpu_s"] / left, 4) if left > 0 else None


def _share(mode: dict[str, Any], cause: str) -> str:
    alloc = mode["allocated_gpu_s"]
    return f"{mode['lost_gpu_s_by_cause'].get(cause, 0) / alloc:.0%}" if alloc else "–"


def _hang(f: dict[str, Any]) -> str:
    """The shared hang's length, in the day and in a real day at the run's compression."""
    hang = next((x for x in f["faults"] if not x["node"] and x["clear_at"] is not None), None)
    if hang is None:
        return "its length not recorded"
    s = hang["clear_at"] - hang["at"]
    return (f"{s:.0f} s of a {f['day_s']:g}-s day, which at this compression is "
            f"{s * 86400 / f['day_s'] / 3600:.1f} hours of a real day")


def section(n: str, f: dict[str, Any]) -> list[str]:
    sg, base = f["slurmguard"], f["baseline"]
    rows = [f"## {int(n):,} nodes, seed {f['seed']}, a {f['day_s']:g}-s day (measured {f.get('date', '?')})",
            "",
            f"A day of a 10,000-GPU fleet has {f['faults_per_fleet_day']} node faults at "
            f"docs/fleet.md's base rate; this day has {sum(1 for x in f['faults'] if x['node'])} "
            f"node faults and one shared hang on {f['nodes']} nodes, so a node here fails "
            f"{f['acceleration']:,} times faster than a real one (the fleet's faults on "
            f"{f['nodes']} nodes, {86400 / f['day_s']:.0f}x compressed time). Checks every "
            f"{f['tick_s']:g} s, steps of {f['step_s']:g} s, a checkpoint every "
            f"{f['every_steps']} steps"
            + (f", each job's drain poll of serve every {f['notice_interval_s']:g} s"
               if "notice_interval_s" in f else "")
            + f"; jobs: {_mix(f['job_mix'])}.",
            "", "| fault | at (s) | node | cause | gone by itself at (s) |", "|---|---|---|---|---|"]
    for x in f["faults"]:
        rows.append(f"| {x['kind']} | {x['at']:g} | {x['node'] or 'every node'} | {x['cause']} | "
                    f"{_fmt(x['clear_at'])} |")
    if f.get("note"):  # what the run's own figures cannot say (e.g. the host it outran)
        rows += ["", f["note"]]
    rows += ["", "| figure | with slurmguard | Slurm alone |", "|---|---|---|"]
    for label, key in (("ETTR (useful / allocated GPU time)", "ettr"), ("goodput (useful / all GPU time)", "goodput"),
                       ("allocated GPU-hours", "allocated_gpu_s"), ("useful GPU-hours", "useful_gpu_s")):
        a, b = sg[key], base[key]
        if key.endswith("_gpu_s"):
            a, b = _gpu_h(a), _gpu_h(b)
        rows.append(f"| {label} | {_fmt(a)} | {_fmt(b)} |")
    for label, key in (("job runs / jobs", None), ("runs failed (not requeued)", "runs_failed"),
                       ("steps redone", "steps_redone"), ("jobs completed", "jobs_completed"),
                       ("jobs never started by the day's end", "jobs_never_started"),
                       ("node-seconds out of service", "node_s_out_of_service"),
                       ("healthy nodes drained", "healthy_drained"),
                       ("faults never detected", "undetected")):
        if key is None:
            rows.append(f"| {label} | {sg['runs']} / {sg['jobs']} | {base['runs']} / {base['jobs']} |")
        else:
            rows.append(f"| {label} | {_fmt(sg.get(key))} | {_fmt(base.get(key))} |")
    causes = sorted(set(sg["lost_gpu_s_by_cause"]) | set(base["lost_gpu_s_by_cause"]))
    rows += ["", "GPU-hours lost by cause, and the seconds from fault to drain (detect) and from",
             "drain to return, each fault's:", "",
             "| cause | lost, slurmguard | lost, Slurm alone | detect, slurmguard | detect, Slurm alone | return, slurmguard |",
             "|---|---|---|---|---|---|"]
    for c in causes + sorted(set(sg["detect_s_by_cause"]) - set(causes)):
        rows.append(f"| {c} | {_gpu_h(sg['lost_gpu_s_by_cause'].get(c, 0))} | "
                    f"{_gpu_h(base['lost_gpu_s_by_cause'].get(c, 0))} | "
                    f"{_fmt(sg['detect_s_by_cause'].get(c))} | {_fmt(base['detect_s_by_cause'].get(c))} | "
                    f"{_fmt(sg['return_s_by_cause'].get(c))} |")
    rows += repair_rows(sg) + prediction_rows(sg)
    inc = f["incidents"]
    rows += ["", f"**Incident truth**: {len(inc['matched'])} of {len(f['faults'])} injected faults "
             f"matched one incident each; missing: {_fmt(inc['missing'])}; incidents without a "
             f"fault: {_fmt([i['id'] for i in inc['unexplained']])}.", "",
             f"**The goal, ETTR >= {GOAL_ETTR:.0%} with slurmguard: "
             f"{'met' if (sg['ettr'] or 0) >= GOAL_ETTR else 'not met'}** ({_fmt(sg['ettr'])}). "
             f"{'Where the rest went' if (sg['ettr'] or 0) >= GOAL_ETTR else 'What held it below'}"
             f", from this run: the shared filer hang, on which no job makes "
             f"progress in either mode, {_gpu_h(sg['lost_gpu_s_by_cause'].get(SHARED, 0))} "
             f"GPU-hours ({_share(sg, SHARED)} of the allocated time: {_hang(f)}); without its "
             f"loss, ETTR would be "
             f"{_fmt(ettr_without(sg, SHARED))} with slurmguard and "
             f"{_fmt(ettr_without(base, SHARED))} with Slurm alone. Then "
             f"overhead (start-up, checkpoints, requeue waits) "
             f"{_gpu_h(sg['lost_gpu_s_by_cause'].get('overhead', 0))} GPU-hours of "
             f"{_gpu_h(sg['allocated_gpu_s'])} allocated, while a job lasts "
             f"{f.get('job_s', '?')} s here against hours on a real fleet, so every fixed latency "
             f"weighs far more; each pass of every node's check took "
             f"{_fmt(sg.get('hc_pass_s', [])[:12])} s on this shared host (load average "
             f"{_fmt(sg.get('load_avg_1m_at_end'))} at the day's end, 2 cores).", "",
             "Fault times as injected (seconds into the day; with slurmguard a flapping "
             "node's fault waits for its return, and its link for the drain):", "",
             f"- with slurmguard: {_fmt([f'{k}@{n or chr(42)} {a}-{_fmt(b)}' for k, n, a, b in sg.get('fault_times', [])])}",
             f"- Slurm alone: {_fmt([f'{k}@{n or chr(42)} {a}-{_fmt(b)}' for k, n, a, b in base.get('fault_times', [])])}",
             ""]
    for m, label in (("slurmguard", "with slurmguard"), ("baseline", "Slurm alone")):
        late, lost = f[m].get("injected_late_s"), f[m].get("not_injected")
        if late or lost:  # recorded from the runs that record them on
            rows += [f"Injected late {label} (the harness's loop behind the schedule, seconds "
                     f"late): {_fmt([f'{k} +{v:g}' for k, v in (late or {}).items()])}; never "
                     f"injected: {_fmt(lost)}.", ""]
    if (Path(__file__).resolve().parents[2] / "docs" / f"fleet-day-{n}.png").exists():
        rows += [f"![nodes out of service, {n} nodes](fleet-day-{n}.png)", ""]
    return rows


def repair_rows(sg: dict[str, Any]) -> list[str]:
    r = sg.get("repair")
    if not r:
        return ["", "**Repair**: not in the loop in this run (measured before repair was): a "
                "node drained for a fault that does not go away by itself stays out to the "
                "day's end."]
    rows = ["", f"**Repair** (act mode; {r['reboots']} reboots by the BMC): returned "
            f"{len(r['returned'])} ({_fmt(r['returned'])}), ticketed {len(r['ticketed'])} "
            f"({_fmt(r['ticketed'])}), still open {_fmt(r['open'])}; a node returned while its "
            f"fault persisted: {_fmt(r['returned_with_fault'])}; a node rebooted twice for one "
            f"fault: {_fmt(r['rebooted_twice'])}.", "",
            "| fault | a reboot clears it | outcome | reboots | drain to return or ticket (s) |",
            "|---|---|---|---|---|"]
    for x in r["by_fault"]:
        rows.append(f"| {x['fault']}{' (flapping)' if x['flap'] else ''} | "
                    f"{'yes' if x['reboot_clears'] else 'no'} | {x['outcome']} | {x['reboots']} | "
                    f"{_fmt(x['drain_to_end_s'])} |")
    rows += ["", "Drain to return through repair, by cause (s): " + (_fmt(
        [f"{c} {_fmt(v)}" for c, v in r["drain_to_return_s_by_cause"].items()]) + ".")]
    return rows


def prediction_rows(sg: dict[str, Any]) -> list[str]:
    p = sg.get("predictions")
    if p is None:
        return ["", "**Predictions**: not recorded in this run (measured before they were)."]
    if not p["by_source"]:
        head = ("**Predictions: none.** Nothing slurmguard watches (" + ", ".join(p["sources"])
                + ") named any node before its fault's drain, nor any node at all: this day's "
                "faults come at random with no precursor, so no lead time is the honest figure.")
    else:
        head = (f"**Predictions**: {p['predicted']} of {len(p['by_fault'])} node faults named "
                f"before their drain; false (a node that never faulted): {_fmt(p['false_nodes'])}. "
                + "; ".join(f"{src}: {s['made']} made, {s['came_true']} came true, {s['false']} "
                            f"false, {s['not_borne_out']} not borne out"
                            for src, s in sorted(p["by_source"].items())) + ".")
    rows = ["", head, "", "| fault | predicted by | lead time (s) |", "|---|---|---|"]
    rows += [f"| {x['fault']} | {_fmt(x['predicted_by'])} | {_fmt(x['lead_s'])} |"
             for x in p["by_fault"]]
    return rows


def render(data: dict[str, Any]) -> str:
    out = [HEAD.replace("{reboot_table}", _reboot_table())]
    for n, f in sorted(data["runs"].items(), key=lambda x: int(x[0])):
        out += section(n, f)
    return "\n".join(out).rstrip() + "\n"


def plot(n: str, f: dict[str, Any], path: Path) -> bool:
    """Nodes out of service over the day, both modes; False without matplotlib."""
    try:
        from slurmguard.plotting import pyplot

        plt = pyplot()
    except Exception:  # the plot extra is optional: the page renders without it
        return False
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for m in MODES:
        s = f[m].get("out_of_service_series", [])
        ax.step([x for x, _ in s], [y for _, y in s], where="post", label=m)
    for x in f["faults"]:
        ax.axvline(x["at"], color="grey", lw=0.5, ls=":")
    ax.set_xlabel("seconds into the day")
    ax.set_ylabel("nodes drained or down")
    ax.set_title(f"{int(n):,} nodes, seed {f['seed']}: faults dotted")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def write(json_path: Path) -> None:
    data = json.loads(json_path.read_text())
    docs = json_path.parent
    for n, f in data["runs"].items():
        plot(n, f, docs / f"fleet-day-{n}.png")
    (docs / "fleet-day.md").write_text(render(data))
