"""docs/fleet-day.md and its plot, rendered from docs/fleet-day.json (what
`tests/scale/run.py --scenario fleet_day` measured; no figure is typed).
`python tests/scale/run.py --render` rewrites them; tests/test_fleet_day_doc.py checks the page
is the rendering of the JSON.

The JSON: {"runs": {"NODES-SEED": figures}}, the figures support/fleet_day_run.fleet_day
returned plus what run.py adds (:data:`RUN_KEYS` names every key a run may hold).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import fleet_day_shadow_doc as shadow_doc
from support.fleet_day_arms import ARMS, FAULT_KINDS, LABELS, can_see
from support.fleet_day_summary import FIGURES, across_seeds, by_size

GOAL_ETTR_512 = 0.97     # slurmguard's ETTR at 512 nodes
GOAL_LOST_SHARE = 0.5    # slurmguard's GPU time lost to node faults, at most this x NHC's
GOAL_OVERHEAD = 1.10     # slurmguard's overhead, at most NHC's + 10 %

HEAD = """# A fleet day: Slurm alone, Slurm with LBNL NHC, slurmguard, and an oracle

The same day of faults and jobs, four times at once on four real Slurm clusters of this host
(one per arm), from one start line: **Slurm alone** (no health check; a node that fails jobs
keeps taking them), **Slurm with LBNL NHC** as a site runs it (NHC's own scripts, unpatched:
`check_fs_mount_rw` for the required mounts, `check_hw_ib` for the IB ports,
`check_hw_physmem`, `check_nvsmi_healthmon`; NHC marks nodes offline and online itself),
**slurmguard** (Prolog, Epilog, PrologSlurmctld, every node's health check, jobs under
`slurmguard run`, serve's guard, drain notices and repair) and **the oracle** (Slurm alone
plus an instant, correct drain of the node a job failed on: the best any tool that reacts to
failed jobs can do; a reference row, not a competitor). Rendered from docs/fleet-day.json by
`python tests/scale/run.py --render`; measured by

    python tests/scale/run.py --nodes 128 --scenario fleet_day --seed 1 --day-s 300 --tick 15

(one run per seed; the CI form is tests/scale/test_fleet_day_small.py, 16 nodes and a 60-s
day, which asserts the arms' decisions). Wanted: at least 5 seeds at 128 nodes and 2 at 512,
the four arms at once up to 256 nodes; the tables across seeds below list what was
measured, and a size without a table was not. At 512 nodes four clusters at once do not fit
this 2-core host, so a day runs in two halves on the same seed and schedule, slurmguard with
NHC at once and then Slurm alone with the oracle (`--arms slurmguard,nhc`, then `--arms
slurm,oracle`); the second half joins the first's entry, and each run says which arms ran
together. Compare arms of one half directly; across halves, compare the load rows first.
The code: tests/support/fleet_day_plan.py (the
schedule and the arithmetic, pure), tests/support/fleet_day_arms.py (the arms),
tests/support/fleet_day.py (one arm's day on the scale harness, docs/scale.md),
tests/support/nhc_node.py (NHC with each node's view, docs/testing.md "LBNL NHC as a peer").

## How the day is built

- **Jobs**: tests/train_job.py (numbered steps, a checkpoint every few steps), batch jobs of
  1, 8 and (from 128 nodes) 64 nodes filling about 80 % of the fleet; a job that completes is
  followed by a new one of its size. With slurmguard they run under `slurmguard run`; in the
  other arms the program resumes from its own newest checkpoint, and a job that fails is
  submitted again.
- **Faults**: drawn by seed from docs/fleet.md's mix (Xid 79, GPU lost, uncorrectable ECC,
  IB link down, NVLink down, thermal slowdown), plus a flapping node (NVLink down, back,
  down again: two faults) and one shared filesystem hang on every node. They are injected
  where the checks read them (the stand-in NVML, the kernel log, IB sysfs, the mount table;
  NHC reads the same fixtures through a mount namespace per run); what they do to a job is
  train_job's `--fault-dir`: a crash (an NCCL error) for Xid, lost GPU, ECC and IB, steps
  slowed for NVLink and thermal, every step waiting while the filer hangs. The faults keep
  a clock of their own (a thread looking every 0.2 s); a fault whose time passes while this
  host is starved is injected late, keeping its planned length, and each arm records how
  late. With slurmguard a flapping node's second fault waits for the node's return, and a
  fault that goes away by itself does so once the checks saw it; the other arms keep time.
- **Health checks**: slurmguard's installed HealthCheckProgram and NHC each run on every
  node of their cluster each tick (slurmd's HealthCheckInterval, compressed), the same
  number of nodes at a time for both (run.py's `--parallel`, at most 16); each pass's
  seconds are recorded. One node's check on an idle host, slurmguard's against NHC's on the
  same node view (wall time, CPU time, the programs each starts):
  tests/bench/bench_healthcheck_vs_nhc.py.
- **Overhead, by who spent it**: a run's GPUs are charged from Slurm's allocation of its
  nodes (slurmctld's log, to the millisecond), so the gate (PrologSlurmctld) and the Prolog
  are paid for; then the batch script's start, the program's first instant (its own line)
  and its steps split the rest (tests/support/fleet_day_timeline.py). The Prolog's part is
  its own timer (its checks and decision, as stored); its Python start and its report to
  serve fall in "Slurm's launch and the gate", which for the other arms is Slurm's launch
  alone. Every part is CPU work
  or waiting on it, on a host whose load is in each run's table: at load L on 2 cores, a
  millisecond of CPU takes about L/2 ms of wall time, and every arm pays its own parts at
  the same load. On a node with idle cores these parts are their idle costs
  (tests/bench/bench_wrapper_start.py for the wrapper, bench_prolog.py and bench_gate.py).
- **The shared hang's cost is how busy the fleet was**: every running job waits while the
  filer hangs, so an arm loses the hang's length times the GPUs it had running then (the
  rows "GPUs running when the filer hung" and "GPU-hours the hang stalled":
  tests/support/fleet_day_plan.py `shared_stall`). An arm that kept more GPUs busy loses
  more to it, and its ETTR falls, while its useful GPU time may be the larger; the goals'
  table names these when the hang decides a comparison. A run the hang caught is charged
  to it whole ("lost by cause"), its start-up and checkpoints included; the stall is the
  part the hang itself took.
- **Repair** (slurmguard only): serve's repair in act mode with the wave_repair scenario's
  BMC and RebootProgram (tests/support/scale_repair.py), limits sized for a compressed day
  (tests/support/fleet_day_faults.py `day_limits`). A reboot does to a fault what the table
  below says. Nobody repairs in the other arms.
- **One window**: every figure of every arm is over the same [t0, t0 + day]: t0 is one
  instant for all four arms, the end is t0 + the day by the clock (not by the harness loop's
  pace); each run's allocated time is clipped to the window, only steps, completions and
  failures inside it count, and detect times run from the fault clock's injection to the
  node-table sampler's first look at the drain. What happens after the day's end (slurmguard's
  repairs finishing, a late drain) is reported apart and counted in no figure.
- **Figures**: ETTR = useful GPU time / allocated GPU time (useful: every step kept, at its
  nominal time; allocated: each run from Slurm's allocation of its nodes, to the
  millisecond in slurmctld's log, to its batch script's end, so the gate and the Prolog are
  paid for); goodput = useful /
  (all GPUs x the day); lost GPU-seconds by cause: each run's allocated less its useful,
  charged to the fault on one of its nodes during it, else to overhead (start-up,
  checkpoints, requeue waits); **lost to node faults**: every cause but the shared
  filesystem hang and overhead. A **healthy node drained**: one out of service while no
  fault is on it, a node counting as faulty from its fault's injection until a pass of the
  arm's checks that began after the fault cleared has finished and a hook's budget has
  passed (every node, for the shared hang): a node drained in the hang and not checked again
  by then counts.
- **NHC as configured here** runs the four checks above, from NHC's own scripts; a site may
  add its own (a DCGM diagnostic, say), which this page does not model.
- **Goals, on every seed**: ETTR with slurmguard at least NHC's, and NHC's at least Slurm
  alone's; GPU time lost to node faults with slurmguard at most 0.5x NHC's; slurmguard's
  overhead at most NHC's + 10 %; at 512 nodes, ETTR at least 0.97 with slurmguard.
- **What a reboot clears** (tests/support/fleet_day_plan.py `REBOOT_CLEARS`; a fault it does
  not clear is still there at boot, and repair must find that out and ticket the node):

{reboot_table}
- **What each arm can see at all** (tests/support/fleet_day_arms.py `can_see`; NHC's from
  tests/support/nhc_node.py `SEES`): a fault an arm cannot see keeps failing or slowing jobs
  on its node until the day ends.

{visibility_table}
- **Predictions**: what slurmguard said of a node before its fault's drain: the node risk
  score's flag, slow-node suspicion and probation. A prediction on a node that never faulted
  is false.
- **Incident truth**: `slurmguard incident list --json` on the slurmguard cluster's store:
  every injected fault must be exactly one incident of its cause, the shared hang one shared
  incident, and no incident may lack a fault.
- **A fifth arm, `shadow`** (`--arms ...,shadow`): NHC acting and slurmguard observing on one
  cluster with Slurm accounting, its `shadow report` held against the day's truth:
  docs/install.md, "The rollout on a test fleet". A shadow day run alone (`--arms shadow`) on
  a run's size, seed and schedule is stored with that run, and its section shows the report's
  GPU-hours beside the four arms' difference.

The two-arm runs this page showed before (slurmguard against today's oracle, then called the
baseline, at 16 and 512 nodes) measured each arm over a window of its own and carried a
hand-written note; they cannot be rendered in this schema and are not on this page (they are
in the history of docs/fleet-day.json).
"""

# Every key a run of docs/fleet-day.json may hold (support/fleet_day_run.fleet_day writes the
# first group, tests/scale/run.py the second; the arms' figures are support/fleet_day.Day's):
# the page's test checks no other key, typed by hand, is there.
RUN_KEYS = frozenset({
    "seed", "day_s", "tick_s", "step_s", "every_steps", "nodes", "acceleration",
    "faults_per_fleet_day", "faults", "job_mix", "job_s", "arms", "incidents", "parallel", *ARMS,
    "date", "cluster_start_s", "notice_interval_s", "label", "scenario_s", "halves",
    "shadow"})  # a `--arms shadow` day of the same schedule (support/fleet_day_shadow_doc.py)
SAME_DAY = ("seed", "day_s", "tick_s", "step_s", "every_steps", "nodes", "faults", "job_mix")


def join_halves(old: dict[str, Any] | None, day: dict[str, Any]) -> dict[str, Any]:
    """``day`` (run.py's entry of one run) joined to ``old``, the entry of the same size and
    seed, when ``old`` holds the other arms of the same day (same schedule and settings, no
    arm in common): a big day run in halves (docs/fleet-day.md). Else ``day`` replaces it."""
    half = {"arms": day["arms"], "date": day.get("date"), "scenario_s": day.get("scenario_s")}
    if old is None or any(old.get(k) != day.get(k) for k in SAME_DAY):
        return {**day, "halves": [half]}
    if set(old["arms"]) & set(day["arms"]):  # the same day again: a shadow day stays joined
        return {**day, "halves": [half], **({"shadow": old["shadow"]} if "shadow" in old else {})}
    joined = {**old, **{a: day[a] for a in day["arms"]}}
    joined["arms"] = [a for a in ARMS if a in old["arms"] or a in day["arms"]]
    joined["halves"] = [*old.get("halves", []), half]
    if "incidents" in day:
        joined["incidents"] = day["incidents"]
    return joined


def _visibility_table() -> str:
    rows = ["  | fault | " + " | ".join(LABELS[a] for a in ARMS) + " |",
            "  |---|" + "---|" * len(ARMS)]
    for k in FAULT_KINDS:
        rows.append(f"  | {k} | " + " | ".join(
            ("yes" if can_see(a, k)[0] else "no") + f": {can_see(a, k)[1]}" for a in ARMS) + " |")
    return "\n".join(rows) + "\n"


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


def _spread(xs: list[float]) -> str:
    if not xs:
        return "–"
    ys = sorted(xs)
    return f"{ys[len(ys) // 2]:.4g} / {ys[-1]:.4g}"


def section(key: str, f: dict[str, Any]) -> list[str]:
    arms = [a for a in ARMS if a in f]
    head = " | ".join(LABELS[a] for a in arms)
    sep = "|---|" + "---|" * len(arms)
    rows = [f"## {int(f['nodes']):,} nodes, seed {f['seed']}, a {f['day_s']:g}-s day "
            f"(measured {f.get('date', '?')})",
            "",
            f"A day of a 10,000-GPU fleet has {f['faults_per_fleet_day']} node faults at "
            f"docs/fleet.md's base rate; this day has {sum(1 for x in f['faults'] if x['node'])} "
            f"node faults and one shared hang on {f['nodes']} nodes, so a node here fails "
            f"{f['acceleration']:,} times faster than a real one. Checks every "
            f"{f['tick_s']:g} s"
            + (f" ({f['parallel']} nodes at a time)" if "parallel" in f else "")
            + f", steps of {f['step_s']:g} s, a checkpoint every "
            f"{f['every_steps']} steps"
            + (f", each job's drain poll of serve every {f['notice_interval_s']:g} s"
               if "notice_interval_s" in f else "")
            + f"; jobs: {_mix(f['job_mix'])}."
            + ("" if len(f.get("halves", [])) < 2 else " Run in halves on the same schedule, "
               "each half's arms at once: " + "; ".join(
                   f"{' and '.join(LABELS[a] for a in h['arms'])} at {h['date']}"
                   for h in f["halves"]) + "."),
            "", "| fault | at (s) | node | cause | gone by itself at (s) |", "|---|---|---|---|---|"]
    for x in f["faults"]:
        rows.append(f"| {x['kind']} | {x['at']:g} | {x['node'] or 'every node'} | {x['cause']} | "
                    f"{_fmt(x['clear_at'])} |")
    rows += ["", f"Every arm over the same {f[arms[0]]['window_s']:g} s from one start line:", "",
             f"| figure | {head} |", sep]
    for label, fig, _, fmt in FIGURES:
        rows.append(f"| {label} | " + " | ".join(
            "–" if fig(f[a]) is None else fmt.format(fig(f[a])) for a in arms) + " |")
    for label, get in (("job runs / jobs", lambda m: f"{m['runs']} / {m['jobs']}"),
                       ("steps redone", lambda m: _fmt(m["steps_redone"])),
                       ("jobs never started in the day", lambda m: _fmt(m["jobs_never_started"])),
                       ("GPUs running when the filer hung", lambda m: _fmt(
                           m["shared_fault"]["gpus_running"]) if m.get("shared_fault") else "–"),
                       ("GPU-hours the hang stalled", lambda m: _gpu_h(
                           m["shared_fault"]["stall_gpu_s"]) if m.get("shared_fault") else "–"),
                       ("drains in the day, by who", lambda m: _fmt(
                           [f"{k} {v}" for k, v in m["drained_by"].items()])),
                       ("which node faults were not drained in the day",
                        lambda m: _fmt(m["undetected"])),
                       ("healthy nodes drained", lambda m: _fmt(m["healthy_drained"]))):
        rows.append(f"| {label} | " + " | ".join(get(f[a]) for a in arms) + " |")
    causes = sorted({c for a in arms for c in f[a]["lost_gpu_s_by_cause"]}
                    | {c for a in arms for c in f[a]["detect_s_by_cause"]})
    rows += ["", "GPU-hours lost by cause, and the seconds from each fault to its node's drain "
             "(detect), by arm:", "",
             "| cause | " + " | ".join(f"lost, {LABELS[a]}" for a in arms) + " | "
             + " | ".join(f"detect, {LABELS[a]}" for a in arms) + " |",
             "|---|" + "---|" * (2 * len(arms))]
    for c in causes:
        rows.append(f"| {c} | " + " | ".join(_gpu_h(f[a]["lost_gpu_s_by_cause"].get(c, 0))
                                             for a in arms) + " | "
                    + " | ".join(_fmt(f[a]["detect_s_by_cause"].get(c)) for a in arms) + " |")
    parts = sorted({p for a in arms for p in f[a].get("overhead_gpu_s_by_part", {})})
    if parts:  # recorded from the runs that record it on
        rows += ["", "Overhead split by who spent it, in runs no fault touched (GPU-hours; "
                 "tests/support/fleet_day_plan.py `_overhead_parts`, from slurmctld's "
                 "allocation, the Prolog's own timer and the program's first instant: "
                 "tests/support/fleet_day_timeline.py):",
                 "", f"| part | {head} |", sep]
        rows += [f"| {p} | " + " | ".join(_gpu_h(f[a].get("overhead_gpu_s_by_part", {}).get(p, 0))
                                          for a in arms) + " |" for p in parts]
    rows += ["", "Each arm's load and its harness's limits in the day (load: this host's "
             "one-minute load average, all arms at once on one host; a pass: every node's "
             "check once):", "",
             f"| | {head} |", sep]
    for label, get in (
            ("load average, mean / max", lambda m: f"{_fmt(m['load_1m']['mean'])} / "
                                                   f"{_fmt(m['load_1m']['max'])}"),
            ("a pass of the checks (s), median / max", lambda m: _spread(m["hc_pass_s"])),
            ("passes of the checks", lambda m: str(len(m["hc_pass_s"]))),
            ("one node's NHC run (s), median / max", lambda m: (
                f"{_fmt(m['nhc_run_s']['median'])} / {_fmt(m['nhc_run_s']['max'])}"
                if "nhc_run_s" in m else "–")),
            ("the loop's stalls (at s: seconds)", lambda m: _fmt(
                [f"{a:g}: {b:g}" for a, b in m["loop_stalls"]])),
            ("gaps in the node-table samples (at s: seconds)", lambda m: _fmt(
                [f"{a:g}: {b:g}" for a, b in m["sample_gaps"]])),
            ("node-table samples missed", lambda m: str(len(m["missed_samples"]))),
            ("failed submissions, each submitted again (at s: error)", lambda m: _fmt(
                [f"{a:g}: {e}" for a, e in m.get("submit_failures", [])])),
            ("faults injected late (s)", lambda m: _fmt(
                [f"{k} +{v:g}" for k, v in m["injected_late_s"].items()])),
            ("faults never injected", lambda m: _fmt(m["not_injected"])),
            ("after the day: ran on (s)", lambda m: _fmt(m["after_day"]["ran_on_s"])),
            ("after the day: completions", lambda m: _fmt(m["after_day"]["completions"])),
            ("after the day: faults drained (s after injection)", lambda m: _fmt(
                [f"{k} {v:g}" for k, v in m["after_day"]["detected"].items()]))):
        rows.append(f"| {label} | " + " | ".join(get(f[a]) for a in arms) + " |")
    if "slurmguard" in f:
        rows += repair_rows(f["slurmguard"]) + prediction_rows(f["slurmguard"])
        inc = f["incidents"]
        rows += ["", f"**Incident truth** (slurmguard): {len(inc['matched'])} of "
                 f"{len(f['faults'])} injected faults matched one incident each; missing: "
                 f"{_fmt(inc['missing'])}; incidents without a fault: "
                 f"{_fmt([i['id'] for i in inc['unexplained']])}."]
    rows += shadow_doc.rows(f)
    rows += ["", "Fault times as injected, by arm (seconds into the day):", ""]
    rows += [f"- {LABELS[a]}: " + _fmt([f"{k}@{n or chr(42)} {t:g}-{_fmt(e)}"
                                       for k, n, t, e in f[a]["fault_times"]]) for a in arms]
    rows.append("")
    if (Path(__file__).resolve().parents[2] / "docs" / f"fleet-day-{key}.png").exists():
        rows += [f"![nodes out of service, {key}](fleet-day-{key}.png)", ""]
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
    out = [HEAD.replace("{reboot_table}", _reboot_table())
           .replace("{visibility_table}", _visibility_table())]
    groups = by_size(data["runs"])
    if groups:
        out += ["## Across seeds", ""]
        for n, fs in groups.items():
            out += across_seeds(n, fs) + [""]
    for key, f in sorted(data["runs"].items(), key=lambda x: (int(x[1]["nodes"]), x[1]["seed"])):
        out += section(key, f)
    return "\n".join(out).rstrip() + "\n"


def plot(key: str, f: dict[str, Any], path: Path) -> bool:
    """Nodes out of service over the day, every arm; False without matplotlib."""
    try:
        from slurmguard.plotting import pyplot

        plt = pyplot()
    except Exception:  # the plot extra is optional: the page renders without it
        return False
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for m in ARMS:
        s = f.get(m, {}).get("out_of_service_series", [])
        ax.step([x for x, _ in s], [y for _, y in s], where="post", label=LABELS[m])
    for x in f["faults"]:
        ax.axvline(x["at"], color="grey", lw=0.5, ls=":")
    ax.set_xlabel("seconds into the day")
    ax.set_ylabel("nodes drained or down")
    ax.set_title(f"{int(f['nodes']):,} nodes, seed {f['seed']}: faults dotted")
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
