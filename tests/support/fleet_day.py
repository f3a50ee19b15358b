"""The fleet day on the scale harness (docs/scale.md "A fleet day"): training jobs
(tests/train_job.py, checkpointing) keep the fleet ~80 % busy while a seeded schedule of faults
(support/fleet_day_plan.py) hits it through the stand-in NVML, kernel log, IB sysfs and mount
table; four arms on the same seed and schedule at once, each on a cluster of its own
(support/fleet_day_arms.py): ``slurm`` (Slurm alone), ``nhc`` (LBNL NHC each tick,
support/nhc_node.py), ``slurmguard`` and ``oracle`` (an instant correct drain of the node a
job failed on; a reference).

- **slurmguard**: the installed Prolog, Epilog and PrologSlurmctld, every node's health check
  each ``tick`` seconds (the harness runs the installed HealthCheckProgram, as slurmd would on
  HealthCheckInterval, compressed), jobs under `slurmguard run` (drain notice through serve,
  requeue on exit 75), slurmguard's own UNDRAIN when a fault goes away;
- the other arms: no slurmguard hook in slurm.conf, the program resumes from its own newest
  checkpoint, a job that fails is resubmitted.

Every figure of every arm is over the same window [t0, t0 + day_s]: t0 is one instant for all
arms (fleet_day_arms.StartLine), the day's end is t0 + day_s whatever the harness loop's pace,
runs are clipped to it and only what ended inside it counts; detect times are the fault
clock's injection to the node-table sampler's first look at the drain. What happens after the
day's end (slurmguard's repairs finishing) is reported apart (``after_day``, ``repair``).

What a fault does to a job is train_job's --fault-dir (a crash as an NCCL error, a slowdown, a
stall while the shared filesystem hangs): the stand-in for what the hardware does to CUDA.
With slurmguard, serve's repair acts (the wave_repair scenario's BMC and RebootProgram,
support/scale_repair.py, with :func:`~support.fleet_day_faults.day_limits`): a reboot clears
what the plan's REBOOT_CLEARS says it clears. In the other arms nobody repairs: a fault that
does not go away by itself keeps its node out (or, unseen, failing jobs) until the day ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from slurmguard.errors import SlurmguardError
from support import fleet_day_outcomes as outcomes
from support import fleet_day_plan as plan
from support import fleet_day_timeline as timeline
from support.fleet_day_arms import StartLine, load_summary, spread, stalls
from support.fleet_day_faults import RebootPhysics, clear, day_limits, effect, inject
from support.fleet_day_reads import policy_predictions, repairs, risk_flags
from support.helpers import REPO
from support.nhc_node import NHCNodes
from support.repairrig import BMC
from support.scale_repair_conf import bmc_dir
from support.scaleharness import CHECKS, GPUS_PER_NODE, ScaleHarness, ScaleSpec
from support.slurmcluster import ClusterError

TRAIN = REPO / "tests" / "train_job.py"
SLURM_TIMEOUT = 180.0  # seconds a submission or a node-table read may take under load
FLEET_CHECKS = (*CHECKS, "gpu-nvlink", "gpu-thermal", "ib-link")
HOOK_BUDGET_S = 30.0  # [hooks] budget in the harness's config (scaleharness.common_config)
# A drain's reason that names the shared mount (slurmguard's check, NHC's).
SHARED_REASONS = ("fs-mount", "check_fs_mount")


def fleet_spec(spec: ScaleSpec, slurmguard: bool, notice_interval: float = 0.5,
               policy_interval: float = 2.0) -> ScaleSpec:
    """The harness's spec for the fleet day: every check a kind needs, IB ports to fail, no
    agent (a cleared fault is then seen by the next check, not after the agent's refresh),
    HealthCheckInterval long (the day drives the checks itself, compressed). Each running
    job's wrapper asks serve every ``notice_interval`` seconds: hundreds of jobs at 0.5 s are
    hundreds of requests a second, more than this 2-core host serves beside the day itself.
    With slurmguard, serve's repair in act mode (:func:`day_limits`), its pass every
    ``policy_interval`` seconds (compressed like the day: 60 s would be an hour of it)."""
    return replace(spec, agents=0, hc_interval=3600, slurmguard=slurmguard,
                   repair=day_limits(spec.nodes) if slurmguard else None,
                   policy_interval=policy_interval,
                   checks=FLEET_CHECKS, ib_ports=2,
                   extra_config=f"[notice]\ninterval = {notice_interval:g}\n",
                   # Slurm's own cycle compressed like the day: a requeued job waits for the
                   # next scheduling pass (60 s by default), the same in both modes.
                   slurm_extra=("SchedulerParameters=nohold_on_prolog_fail,sched_interval=2",))


class Day:
    """One arm's day on a started harness (``nhc``: that arm's NHC runner; ``start``: the
    arms' common clock)."""

    def __init__(self, h: ScaleHarness, mode: str, faults: list[plan.Fault], day_s: float,
                 tick: float, step_s: float, every: int, parallel: int,
                 nhc: NHCNodes | None = None, start: StartLine | None = None) -> None:
        self.h, self.mode, self.faults, self.day_s = h, mode, faults, day_s
        self.nhc, self.start = nhc, start or StartLine(1)
        self.loop_starts: list[float] = []  # when each pass of the day's loop began
        self.sample_times: list[float] = []  # when each look at Slurm's node table began
        self.load: list[tuple[float, float]] = []  # (when, 1-minute load average)
        self.t_done = 0.0  # when the loop ended (past the day's end with slurmguard's repairs)
        self.tick, self.step_s, self.every, self.parallel = tick, step_s, every, parallel
        # With accounting (the shadow arm) each job asks for its nodes' GPUs, as a site's do:
        # sacct then records them (AllocTRES gres/gpu) for `shadow report`'s GPU-hours.
        self.gres = [f"--gres=gpu:{GPUS_PER_NODE}"] if h.spec.accounting else []
        self.dir = h.root / "day"
        self.fault_dir = self.dir / "faults"
        self.fault_dir.mkdir(parents=True)
        self.jobs: dict[str, dict[str, Any]] = {}  # name -> nodes, slurm ids, done
        self.drains: dict[str, list[tuple[float, float | None]]] = {}
        self.series: list[tuple[float, int]] = []
        self.healthy_drained: dict[str, str] = {}  # node -> when and why (the first time)
        self.downed: set[str] = set()
        self.hc_pass_s: list[float] = []  # wall time of each pass of every node's check
        self.passes_done: list[float] = []  # when each finished pass started
        self.pass_spans: list[tuple[float, float]] = []  # and when it finished
        self.on_at: dict[plan.Fault, float] = {}   # when each fault was really injected
        self.off_at: dict[plan.Fault, float] = {}  # and cleared (both can be deferred)
        self.lock = threading.Lock()  # the BMC's thread clears faults at a reboot
        self.queue = plan.FaultQueue(faults)
        self.physics: RebootPhysics | None = None
        self.reboots: list[tuple[str, float]] = []
        self.grace_s = min(2 * day_s, 120.0)
        self.n = 0
        # The loop's period: each pass reads Slurm's node table (every node), which at 512
        # nodes costs slurmctld and this host more than a pass every 0.5 s can pay.
        self.period = max(0.5, len(h.nodes) / 256)
        self.missed_samples: list[str] = []
        self.reasons: dict[str, list[str]] = {}  # each drain span's reason, as first seen
        # (node, span index) -> when the span first showed a reason other than the shared
        # hang's: a node drained in the hang whose own fault then renamed the drain (NHC marks
        # an offline node again with its new failure's note) was detected for it then.
        self.own_from: dict[tuple[str, int], float] = {}
        self.drained_by: dict[str, int] = {}  # drains seen in the day, by their reason's first word
        self.submit_failures: list[list[Any]] = []  # [at s, the error's first line]
        self.resubmit: list[tuple[int, str]] = []  # (nodes, job name) to submit again
        self.t0 = 0.0

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, nodes: int, name: str | None = None) -> None:
        assert self.h.cluster is not None
        if name is None:
            self.n += 1
            name = f"j{self.n:03d}-{nodes}n"
            steps = job_steps(self.day_s, self.step_s)
            self.jobs[name] = {"nodes": nodes, "ids": [], "steps": steps, "seen": 0}
        j, d = self.jobs[name], self.dir / name
        (d / "ckpt").mkdir(parents=True, exist_ok=True)
        train = (f"{sys.executable} {TRAIN} --steps {j['steps']} --every {self.every} "
                 f"--sleep {self.step_s} --ckpt-dir {d}/ckpt --log {d}/steps.log "
                 f"--final {d}/final.json --fault-dir {self.fault_dir} --began {d}/began.log")
        if self.mode == "slurmguard":
            cmd = (f"{self.h.sg} run --checkpoint-dir {d}/ckpt --max-requeues 50 -- "
                   f"{train} --notice-poll")
        else:
            cmd = f"{train} --resume-latest"
        cfg = self.h.prefix / "etc/slurmguard/nodes"
        script = (
            "#!/bin/bash\n"
            f"export SLURMGUARD_CONFIG={cfg}/$SLURMD_NODENAME.toml PYTHONPATH={REPO}\n"
            f'echo "start $(date +%s.%N) $SLURM_JOB_ID ${{SLURM_RESTART_COUNT:-0}} '
            f'$SLURM_JOB_NODELIST" >> {d}/runs.log\n'
            f"{cmd}\nrc=$?\n"
            f'echo "end $(date +%s.%N) $SLURM_JOB_ID ${{SLURM_RESTART_COUNT:-0}} $rc" '
            f">> {d}/runs.log\nexit $rc\n")
        # slurmctld answers slowly at 512 nodes on this loaded host (a 30-s sbatch timeout
        # ended a 512-node day): a submission may wait as long as a user would.
        try:
            j["ids"].append(self.h.cluster.sbatch(script, f"-N{nodes}", "--requeue",
                                                  "--exclusive", *self.gres,
                                                  f"--output={d}/out-%j.txt",
                                                  timeout=SLURM_TIMEOUT))
        except (ClusterError, OSError, subprocess.SubprocessError) as exc:
            # One failed sbatch (seed 7 at 128 nodes: killed by SIGPIPE) ended a whole run:
            # the job is submitted again at the loop's next pass, and the page lists it.
            at = round(time.time() - self.t0, 1) if self.t0 else 0.0
            self.submit_failures.append([at, (str(exc).splitlines() or ["?"])[0][:160]])
            self.resubmit.append((nodes, name))

    def poll_jobs(self, now: float, day_over: bool) -> None:
        for name, j in list(self.jobs.items()):
            if j.get("done"):
                continue
            log = self.dir / name / "runs.log"
            lines = log.read_text().splitlines() if log.exists() else []
            ends = [ln.split() for ln in lines if ln.startswith("end ")]
            if len(ends) <= j["seen"]:
                continue
            j["seen"] = len(ends)
            rc = int(ends[-1][4])
            if rc == 0:
                j["done"] = True
                if not day_over:
                    self.submit(j["nodes"])
            elif rc != 75:  # failed, not requeued: the user submits it again
                starts = [ln.split() for ln in lines if ln.startswith("start ")]
                if self.mode == "oracle":
                    from slurmguard.nodeset import expand

                    self.take_out(expand(starts[-1][4]), now)
                if not day_over:
                    self.submit(j["nodes"], name)

    def take_out(self, nodes: list[str], now: float) -> None:
        """The oracle: the nodes of a failed job that carry a fault go out and stay out."""
        bad = {f.node for f in self.active(now) if f.node} & set(nodes)
        for n in sorted(bad - self.downed):
            # DRAIN, not DOWN: the test cluster's ReturnToService=2 brings a DOWN node back
            # at its next registration (seen once: a node back after 20 s).
            self.h.cluster.run("scontrol", "update", f"nodename={n}", "state=drain",  # type: ignore[union-attr]
                               "reason=oracle: a job failed on it", timeout=60)
            self.downed.add(n)

    def active(self, now: float) -> list[plan.Fault]:
        t = now - self.t0
        return [f for f in self.faults if f.at <= t and (f.clear_at is None or t < f.clear_at)]

    # -- the day -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        h = self.h
        # The checks in a thread of their own: a pass of every node takes seconds to tens of
        # seconds on this host, and the faults and jobs keep to their schedule meanwhile.
        stop = threading.Event()
        checker = threading.Thread(target=self.checks, args=(stop,), daemon=True)
        repair = self.mode == "slurmguard" and h.spec.repair is not None
        with ExitStack() as stack:
            # An arm that fails before the start line frees the others waiting there.
            stack.callback(self.start.abort)
            if repair:
                from slurmguard.store import Store

                self.physics = RebootPhysics(h, self.fault_dir, self.on_at, self.off_at, self.lock)
                bmc = stack.enter_context(BMC(h.cluster, bmc_dir(h), self.physics))
                self.store = Store.open(url=h.store_url)
                stack.callback(self.store.close)
            # Every arm's day starts at one instant: the same window for all.
            self.t0 = self.start.wait()
            if self.mode in ("slurmguard", "nhc"):
                checker.start()
            # The faults on a clock of their own: the loop below waits on Slurm (a node-table
            # read, an sbatch), which at 512 nodes on this host stalled it for minutes, and a
            # 12-s filer hang cleared by it lasted 142 s.
            clock = threading.Thread(target=self.fault_clock, args=(stop,), daemon=True)
            clock.start()
            looker = threading.Thread(target=self.looks, args=(stop,), daemon=True)
            looker.start()
            # The day's first jobs after the clock started: at 512 nodes their 235 sbatch
            # calls took 155 s, and the first fault, due at 135 s, waited for them.
            try:
                for size in plan.job_mix(len(h.nodes)):
                    self.submit(size)
                t_end = self.loop(repair)
            finally:
                stop.set()  # the threads end with the day, or with its error
            clock.join()
            looker.join()
            if checker.is_alive():
                checker.join()
            if repair:
                self.reboots = list(bmc.reboots)
                self.repairs = repairs(self.store, self.t0)
                self.risk = policy_predictions(self.store, self.t0) + risk_flags(
                    self.store, self.t0, t_end, self.tick, self.missed_samples)
        q = h.cluster.run("squeue", "-h", "-o", "%i %T %r %N", check=False, timeout=60)  # type: ignore[union-attr]
        self.queue_at_end = q.stdout.split("\n")[:20]
        return self.collect(t_end)

    def loop(self, repair: bool) -> float:
        """The day's jobs resubmitted as they end (the faults and Slurm's node table have
        threads of their own); past the day's end (its figures end there) slurmguard's checks go on, at most
        grace_s, until every node fault was seen, and with repair until every repair of the
        day's faults ended (returned or ticketed; at most the limits' settle more)."""
        t_end = self.t0 + self.day_s  # the day's end by the clock, not by this loop's pace
        while True:
            now = time.time()
            self.loop_starts.append(now)
            if now >= t_end and self.day_over(now, t_end, repair):
                self.t_done = now
                return t_end
            while self.resubmit and now < t_end:  # failed submissions, once a pass
                self.submit(*self.resubmit.pop(0))
            self.poll_jobs(now, now >= t_end)
            time.sleep(self.period)

    def looks(self, stop: threading.Event) -> None:
        """Slurm's node table sampled every loop period until the day's loop ends, in a thread
        of its own: the loop waits on sbatch, and at 512 nodes it missed a node's whole
        drain, reboot and return (36 s and 65 s) while it waited."""
        while True:
            self.sample_times.append(time.time())
            self.load.append((self.sample_times[-1], os.getloadavg()[0]))
            try:
                self.sample(self.sample_times[-1])
            except (SlurmguardError, subprocess.TimeoutExpired, OSError) as exc:
                # One missed look at Slurm's node table (slurmctld slow under load): the next
                # pass looks again; counted, so a day with many is seen for what it is.
                self.missed_samples.append(f"{time.time() - self.t0:.0f}s {type(exc).__name__}")
            if stop.wait(self.period):
                return

    def fault_clock(self, stop: threading.Event) -> None:
        """The faults as they fall due, every 0.2 s until the day's loop ends: one whose time
        passed while this host stalled comes late (FaultQueue keeps its length), never lost."""
        while True:
            now = time.time()
            with self.lock:
                for what, f in self.queue.due(now - self.t0, self.ready):
                    if what == "on":
                        inject(self.h, f)
                        effect(self.fault_dir, f, True)
                        self.on_at[f] = now
                    elif f not in self.off_at:  # a reboot may have cleared it first
                        clear(self.h, f)
                        effect(self.fault_dir, f, False)
                        self.off_at[f] = now
            if stop.wait(0.2):
                return

    def ready(self, what: str, f: plan.Fault) -> bool:
        """Whether a fault event may happen now (slurmguard only; the other arms keep time)."""
        if self.mode != "slurmguard" or not f.node:
            return True
        if what == "on":
            # The flapping node fails again once it is back in service: a second fault while
            # the first episode is still open would be the same episode.
            return self.back(f)
        # The link comes back once the node is out (drained, as a repair would take it), not
        # before this loaded host's checks saw the fault at all. The filer's hang is timed in
        # both modes (it stalls every job: a longer hang on one side would measure this host).
        return self.seen(f)

    def day_over(self, now: float, t_end: float, repair: bool) -> bool:
        if self.mode != "slurmguard":
            return True
        with self.lock:
            seen = all(self.seen(f) for f in self.on_at if f.node)
        if not repair:
            return now >= t_end + self.grace_s or seen
        limits = self.h.spec.repair
        assert limits is not None
        if now >= t_end + self.grace_s + limits.settle:
            return True
        if not seen or now < t_end + 2 * self.h.spec.policy_interval:
            return False
        # Seen in Slurm's node table is not enough with repair: a node coming back from its
        # repair flickers there (a 16-node day ended on that with the flapping node's late
        # second fault not drained yet); every fault still on needs a drain in the ledger.
        eps = repairs(self.store, self.t0)
        with self.lock:
            on = [(f, t) for f, t in self.on_at.items() if f.node and f not in self.off_at]
        if not all(any(r.node == f.node and r.drained_at is not None
                       and r.drained_at >= t - outcomes.STAMP_SLACK_S for r in eps)
                   for f, t in on):
            return False
        return not self.repairs_pending(eps)

    def repairs_pending(self, eps: list[Any] | None = None) -> list[str]:
        """The repairs under way, and the faults still on whose node's repair has not ended
        (returned or ticketed), from the repair ledger's one reader; but for a node the fleet
        policy drained as flapping or a lemon: repair leaves those to a person
        (docs/repair.md), so they end nothing."""
        eps = repairs(self.store, self.t0) if eps is None else eps
        out = [f"repair@{r.node}" for r in eps if r.outcome == "open"]
        with self.lock:
            faults = [(f, t) for f, t in self.on_at.items() if f.node and f not in self.off_at]
        for f, t in faults:
            mine = [r for r in eps if r.node == f.node and r.drained_at is not None
                    and r.drained_at >= t - outcomes.STAMP_SLACK_S]
            if any(r.outcome in ("returned", "ticketed") for r in mine):
                continue
            if any("flapping" in r.reason or "lemon" in r.reason for r in mine):
                continue
            out.append(f"{f.kind}@{f.node}")
        return out

    def checks(self, stop: threading.Event) -> None:
        """Every node's health check (``parallel`` at a time), a pass each tick: slurmguard's
        installed HealthCheckProgram, or NHC in the node's view (the nhc arm)."""
        def one(n: str) -> Any:
            return self.nhc.run(n) if self.nhc is not None else self.h.run_entry("healthcheck", n)

        self.passes(stop, one)

    def passes(self, stop: threading.Event, one: Any) -> None:
        """``one(node)`` on every node (``parallel`` at a time), a pass each tick until
        ``stop``; each pass's start, span and seconds recorded."""
        with ThreadPoolExecutor(self.parallel) as pool:
            while not stop.is_set():
                t = time.time()
                list(pool.map(one, self.h.nodes))
                self.passes_done.append(t)
                self.pass_spans.append((t, time.time()))
                self.hc_pass_s.append(round(time.time() - t, 1))
                stop.wait(max(0.0, self.tick - (time.time() - t)))

    def back(self, f: plan.Fault) -> bool:
        """No earlier fault of ``f``'s node is still on, and the node is in service."""
        for g in self.on_at:
            if g.node == f.node and g is not f and self.off_at.get(g) is None:
                return False
        spans = self.drains.get(f.node, [])
        return not spans or spans[-1][1] is not None

    def seen(self, f: plan.Fault) -> bool:
        since = self.t0 + f.at
        if not f.node:
            return any(start >= since for start in self.passes_done)
        return any(s >= since - 0.5 for s, _ in self.drains.get(f.node, []))

    def sample(self, now: float) -> None:
        assert self.h.cluster is not None
        table = {x.name: x for x in self.h.cluster.cli().nodes() if x.drained or x.down}
        out = set(table)
        for n in out:
            spans = self.drains.setdefault(n, [])
            if not spans or spans[-1][1] is not None:
                spans.append((now, None))
                self.reasons.setdefault(n, []).append(table[n].reason)
            if not any(w in table[n].reason for w in SHARED_REASONS):
                self.own_from.setdefault((n, len(spans) - 1), now)
                if now < self.t0 + self.day_s:  # who drained it: the reason's first word
                    who = (table[n].reason.split() or ["(none)"])[0]
                    self.drained_by[who] = self.drained_by.get(who, 0) + 1
        for n, spans in self.drains.items():
            if n not in out and spans and spans[-1][1] is None:
                spans[-1] = (spans[-1][0], now)
        # A node is faulty from its fault's injection until the first pass of checks that
        # started after the fault was cleared has finished and a hook's budget has passed (a
        # check started before may have read the fault and drain after the clear; under load
        # a pass takes tens of seconds); every node while the shared fault is on.
        faulted = set()
        with self.lock:
            on = [(f, t_on, self.off_at.get(f)) for f, t_on in self.on_at.items()]
        # A hook that read the fault before it cleared may act up to its budget later (seen
        # with four arms at load 20: an fs-mount drain 20 s after the filer came back).
        for f, t_on, t_off in on:
            if t_on <= now and (t_off is None or now < t_off + HOOK_BUDGET_S or not any(
                    start > t_off and end <= now for start, end in self.pass_spans)):
                faulted |= {f.node} if f.node else set(self.h.nodes)
        # The flapping node drained by the fleet policy for flapping is the policy's answer
        # to the scenario's flap (docs/policy.md), not a healthy node drained.
        flappy = {f.node for f in self.faults if f.node and f.clear_at is not None}
        faulted |= {n for n in flappy & out if "flapping:" in table[n].reason}
        # A node in repair's hands after its fault (rebooting, ticketed) is repair's: its
        # reboot's DOWN and its ticket's drain name repair, and the fault's node is known;
        # back from the reboot it is DOWN "reboot complete" (Slurm's reason for nextstate=DOWN)
        # until repair's verify returns it (seen once: sampled in between, a 16-node day).
        faulted |= {n for n in out if ("repair:" in table[n].reason
                                       or table[n].reason.startswith("reboot complete"))
                    and any(f.node == n for f, _, _ in on)}
        for n in sorted(out - faulted - self.downed - set(self.healthy_drained)):
            self.healthy_drained[n] = f"{now - self.t0:.1f}s {table[n].reason}"
        self.series.append((round(now - self.t0, 1), len(out)))

    def collect(self, t_end: float) -> dict[str, Any]:
        runs: list[plan.Run] = []
        for name in self.jobs:
            d = self.dir / name
            jr = plan.parse_runs(name, (d / "runs.log").read_text() if (d / "runs.log").exists() else "")
            plan.attach_steps(jr, (d / "steps.log").read_text() if (d / "steps.log").exists() else "")
            runs += jr
        # Slurm's allocation, the Prolog, the program's start: before each script's start.
        store = None
        if self.mode == "slurmguard":
            from slurmguard.store import Store

            store = Store.open(url=self.h.store_url)
        try:
            no_alloc = timeline.read(runs, self.h.cluster.root / "log" / "slurmctld.log",  # type: ignore[union-attr]
                                     [self.dir / n / "began.log" for n in self.jobs],
                                     store, since=self.t0 - 60)
        finally:
            if store is not None:
                store.close()
        real = [replace(f, at=round(self.on_at[f] - self.t0, 1),
                        clear_at=round(self.off_at[f] - self.t0, 1) if f in self.off_at else None)
                for f in self.faults if f in self.on_at]
        # A node's fault is detected by a drain for it, not by one for the shared hang that
        # came after it (NHC drains every node while the mount is gone).
        own = {n: [(self.own_from[(n, i)], sp[1]) for i, sp in enumerate(spans)
                   if (n, i) in self.own_from]
               for n, spans in self.drains.items()}
        fig = plan.figures(runs, real, self.t0, t_end, self.step_s, len(self.h.nodes),
                           self.drains, sorted(self.healthy_drained), detect_drains=own,
                           every=self.every)
        fig["t0"], fig["window_s"] = round(self.t0, 3), round(t_end - self.t0, 3)
        fig["runs_without_allocation_line"] = no_alloc
        fig["healthy_drained_why"] = self.healthy_drained
        fig["drained_by"] = dict(sorted(self.drained_by.items()))
        fig["out_of_service_series"] = self.series[:: max(1, len(self.series) // 120)]
        fig["jobs_never_started"] = sum(1 for n in self.jobs
                                        if not any(r.job == n and r.start < t_end for r in runs))
        fig["hc_pass_s"] = self.hc_pass_s
        if self.nhc is not None:  # one node's NHC run (seconds): what a pass is made of
            fig["nhc_run_s"] = spread(self.nhc.pass_s)
        fig["load_1m"] = load_summary(self.load, self.t0, t_end)
        fig["load_avg_1m_at_end"] = round(os.getloadavg()[0], 1)
        # The harness's own limits, measured: its loop's stalls (waiting on Slurm), gaps in
        # its looks at the node table, looks that failed; late and lost injections below.
        fig["loop_stalls"] = stalls([t for t in self.loop_starts if t <= t_end], self.t0,
                                    self.period)
        fig["sample_gaps"] = stalls([t for t in self.sample_times if t <= t_end], self.t0,
                                    self.period)
        fig["after_day"] = plan.after_day(runs, real, self.t0, t_end, own,
                                          round(max(0.0, self.t_done - t_end), 1))
        fig["missed_samples"] = self.missed_samples
        fig["submit_failures"] = self.submit_failures
        fig["queue_at_end"] = self.queue_at_end
        fig["fault_times"] = [[f.kind, f.node, round(t - self.t0, 1),
                               round(self.off_at[f] - self.t0, 1) if f in self.off_at else None]
                              for f, t in self.on_at.items()]
        # A fault whose time passed while the loop stalled came late, by so many seconds
        # (more than one loop period: within it, it is on time).
        fig["injected_late_s"] = {f"{f.kind}@{f.node or 'all'}": s
                                  for f, s in self.queue.late.items() if s > self.period + 1}
        fig["not_injected"] = [f"{f.kind}@{f.node or 'all'}" for f in self.faults
                               if f not in self.on_at]
        if self.physics is not None:
            injected = self.injected()
            fig["repair"] = outcomes.repair_figures(injected, self.repairs, self.reboots)
            fig["repair"]["limits"] = vars(self.h.spec.repair) | {
                "policy_interval": self.h.spec.policy_interval}
            fig["repair"]["boots"] = [[n, round(t - self.t0, 1), left]
                                      for n, t, left in self.physics.boots]
            drains = [(r.drained_at, r.node, "drain") for r in self.repairs
                      if r.drained_at is not None]
            fig["predictions"] = outcomes.lead_times(injected, drains, self.risk)
            fig["predictions"]["sources"] = ["risk", "slow-node suspicion", "probation"]
        return fig

    def injected(self) -> list[outcomes.Injected]:
        flappy = {f.node for f in self.faults if f.node and f.clear_at is not None}
        cleared = self.physics.cleared if self.physics is not None else {}
        return [outcomes.Injected(f.kind, f.node, t, self.off_at.get(f), f in cleared,
                                  f.node in flappy)
                for f, t in self.on_at.items() if f.node]


def job_steps(day_s: float, step_s: float) -> int:
    """A job's steps: about 30 % of the day (each fault then hits a job part-way through)."""
    return max(20, int(day_s * 0.3 / step_s))
