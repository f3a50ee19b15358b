"""`slurmguard run -- CMD`: resume from the newest complete checkpoint, watch progress, map the exit.

Runs as the job's user, usually as the batch step (``slurmguard run ... -- srun python train.py``)
or per task (``srun slurmguard run ... -- python train.py``). It:

1. refuses to start a run that is over the requeue cap (``SLURM_RESTART_COUNT`` > max);
2. finds the newest complete checkpoint (slurmguard.job.checkpoint) and exports
   ``SLURMGUARD_RESUME_FROM`` / ``SLURMGUARD_RESUME_STEP`` and ``SLURM_RESTART_COUNT`` (0 when
   Slurm did not set it);
3. starts the command in its own process group, forwards SIGTERM/SIGINT/SIGUSR1 to that group,
   and after SIGTERM/SIGINT waits at most the grace period before SIGKILL;
4. reads ``slurmguard.progress`` events from ``SLURMGUARD_PROGRESS``: a stall (no step for
   ``--stall-timeout`` s) is logged, and with ``--stall-action requeue`` ends the run for a
   requeue; per-node step times name a slow node;
5. copies the child's stderr through, noting lines that mean an infrastructure fault;
6. with a drain watch (slurmguard.job.notice), learns within seconds that a node of the job was
   drained, asks for a checkpoint now and ends the run for a requeue once it is complete
   (slurmguard.job.respond);
7. maps the end of the run to an exit code with :func:`slurmguard.job.exitmap.decide` and appends a
   one-line JSON record of the run to ``<checkpoint-dir>/.slurmguard/runs.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from slurmguard.errors import InputError, RefusedError
from slurmguard.job import checkpoint, exitmap
from slurmguard.job.notice import NoticeWatch
from slurmguard.job.progress_log import SLOW_FACTOR, Progress, Tail

__all__ = ["SLOW_FACTOR", "Progress", "RunOptions", "run", "last_run", "prepare_env"]
from slurmguard.job.respond import NoticeResponse

STATE_DIR = ".slurmguard"  # inside the checkpoint dir: shared by every node of the job
MAX_STALLS = 100


def _say(msg: str) -> None:
    print(f"slurmguard run: {msg}", file=sys.stderr, flush=True)


@dataclass
class RunOptions:
    command: Sequence[str]
    checkpoint_dir: str | None = None
    resume: str = "auto"  # auto | off
    max_requeues: int = 3
    stall_timeout: float = 0.0  # 0: no stall detection
    stall_action: str = "log"  # log | requeue
    grace: float = 60.0
    progress_file: str | None = None
    scan_stderr: bool = True
    node_probe: Callable[[], str | None] | None = None  # our drain reason on this node, if any
    drain_watch: Callable[[float], NoticeWatch] | None = None  # makes the run's drain watch
    notice_signal: int | None = None  # sent to the command on a drain notice (None: none)
    notice_timeout: float = 600.0  # s to wait for the checkpoint-now before ending anyway
    report_slow: Callable[[dict[str, Any]], None] | None = None  # slow nodes -> serve (suspect)
    observes: Callable[[str], bool] | None = None  # node -> observes (policy.mode): notices act not
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    # What the run needs only once its command is running (the config's drain watch, slow-node
    # reporter and observers): called after the command started, so the job's start never
    # waits for the config, serve's client or Slurm's (about 55 ms of the wrapper's 120 ms on
    # an idle node); returns RunOptions fields. If it fails, the run goes on without them.
    late: Callable[[], dict[str, Any]] | None = None


def _pump_stderr(src: IO[bytes], found: list[str]) -> None:
    for raw in iter(src.readline, b""):
        try:
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
        except (OSError, ValueError):
            pass
        if not found:
            line = raw.decode("utf-8", "replace")
            if exitmap.match_infra(line):
                found.append(line)


def prepare_env(opts: RunOptions) -> tuple[dict[str, str], checkpoint.Checkpoint | None, int]:
    """The child's environment, the checkpoint to resume from, and the restart count."""
    env = dict(opts.env)
    raw = env.get("SLURM_RESTART_COUNT", "") or "0"
    try:
        restart = int(raw)
        if restart < 0:
            raise ValueError
    except ValueError:
        raise InputError(f"SLURM_RESTART_COUNT: expected a count, got {raw!r}") from None
    env["SLURM_RESTART_COUNT"] = str(restart)
    if restart > opts.max_requeues:
        raise RefusedError(
            f"job was requeued {restart} times, more than --max-requeues {opts.max_requeues}: "
            "not starting it again (fix the cause, then resubmit or raise the limit)")
    env.pop("SLURMGUARD_RESUME_FROM", None)
    env.pop("SLURMGUARD_RESUME_STEP", None)
    best = None
    if opts.checkpoint_dir and opts.resume == "auto":
        best = checkpoint.find_latest(opts.checkpoint_dir)
        if best is not None:
            env["SLURMGUARD_RESUME_FROM"] = best.path
            if best.step is not None:
                env["SLURMGUARD_RESUME_STEP"] = str(best.step)
    return env, best, restart


_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _safe_dir(d: Path) -> bool:
    """A directory we may create files in: a real directory (not a symlink) that is ours, or
    that nobody but its owner can write to (a shared checkpoint tree of our group)."""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    return st.st_uid == os.geteuid() or not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def open_progress(path: str, *, exclusive: bool = False) -> int:
    """Create or open the progress file for appending without following a symlink planted
    at its name (O_NOFOLLOW; with ``exclusive`` also O_EXCL); only a regular file or a FIFO
    is accepted. Returns the descriptor."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if exclusive:
        flags |= os.O_EXCL
    fd = os.open(path, flags, 0o600)
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        os.close(fd)
        raise OSError(f"{path}: not a regular file or FIFO")
    return fd


def _progress_path(opts: RunOptions, env: dict[str, str]) -> tuple[str, str | None]:
    """Where progress goes, and the private directory made for it (removed at the end).

    The file is never at a predictable name in a directory others can write to: in the
    checkpoint directory's ``.slurmguard/`` (ours, not a symlink), else in a fresh
    ``mkdtemp`` directory (mode 0700). A symlink planted at the name is refused
    (O_NOFOLLOW), not followed.
    """
    if opts.progress_file:
        return opts.progress_file, None
    job = env.get("SLURM_JOB_ID") or ""
    if not _JOB_ID.fullmatch(job) or job in (".", ".."):
        job = f"pid{os.getpid()}"  # a hostile SLURM_JOB_ID never becomes part of a path
    if opts.checkpoint_dir:
        d = Path(opts.checkpoint_dir) / STATE_DIR
        try:
            d.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            pass
        if _safe_dir(d):
            path = str(d / f"progress-{job}.jsonl")
            try:
                os.close(open_progress(path))
                return path, None
            except OSError as exc:
                _say(f"cannot use {path} for progress ({exc.strerror or exc}); using a private one")
    private = tempfile.mkdtemp(prefix="slurmguard-run-")
    path = os.path.join(private, f"progress-{job}.jsonl")
    os.close(open_progress(path, exclusive=True))
    return path, private


def run(opts: RunOptions) -> int:
    """Run the command as described in the module docstring; returns the wrapper's exit code.

    The steps, each a function below: prepare (cap, checkpoint, environment, progress file),
    start the child, watch it (signals, progress, stalls, grace), decide the exit code,
    report (log lines and the run record)."""
    if not opts.command:
        raise InputError("no command given: use `slurmguard run [OPTIONS] -- CMD ARGS...`")
    prep = _prepare(opts)
    child, pump, infra = _start(opts, prep)
    watch = _Watch(opts, child, Tail(prep.progress_path), Progress(last_event=prep.started),
                   prep.started)
    watch.arm()  # signals reach the child's group from here on, also while `late` runs
    if opts.late is not None:
        opts = watch.opts = _late(opts)
    if opts.drain_watch is not None:
        watch.watch_drains(opts.drain_watch(prep.started), NoticeResponse(
            notice_path=prep.env["SLURMGUARD_NOTICE"], checkpoint_dir=opts.checkpoint_dir,
            signum=opts.notice_signal, timeout=opts.notice_timeout,
            can_requeue=prep.restart < opts.max_requeues, child_pid=child.pid, say=_say,
            observes=opts.observes))
    rc = watch.run()
    if pump is not None:
        pump.join(timeout=2)
    ended = watch.finish(rc)
    if prep.private_dir:
        shutil.rmtree(prep.private_dir, ignore_errors=True)
    try:
        os.unlink(prep.env["SLURMGUARD_NOTICE"])
    except OSError:
        pass
    verdict = _decide(opts, prep, rc, watch, infra)
    _report(opts, prep, rc, watch, verdict, ended)
    return verdict.exit_code


def _late(opts: RunOptions) -> RunOptions:
    """``opts`` with what its ``late`` builds; a fault there is slurmguard's, never the job's:
    said once, and the run goes on without notices and slow-node reports."""
    try:
        return replace(opts, **opts.late())  # type: ignore[misc]
    except Exception as exc:  # noqa: BLE001 - the command is running: it must not be orphaned
        _say(f"drain notices and slow-node reports off: {type(exc).__name__}: {exc}")
        return opts


@dataclass
class _Prepared:
    """What a run starts from: the child's environment, the checkpoint it resumes from, the
    restart count, what the requeue cost, and where progress goes."""

    env: dict[str, str]
    best: checkpoint.Checkpoint | None
    restart: int
    recovery: dict[str, Any] | None
    progress_path: str
    private_dir: str | None  # made for the progress file; removed at the end
    started: float


def _prepare(opts: RunOptions) -> _Prepared:
    """Step 1: the requeue cap, the newest complete checkpoint, the environment, progress."""
    env, best, restart = prepare_env(opts)
    if opts.checkpoint_dir and opts.resume == "auto":
        _say(f"resuming from {best.path} (step {best.step}, {best.layout})" if best
             else f"no complete checkpoint in {opts.checkpoint_dir}: starting from the beginning")
    recovery = _recovery(opts, env, best, restart)
    ppath, private = _progress_path(opts, env)
    env["SLURMGUARD_PROGRESS"] = ppath
    # Beside the progress file (the same safe directory); a notice of a previous run of
    # this job must not reach this one.
    env["SLURMGUARD_NOTICE"] = ppath.removesuffix(".jsonl") + ".notice"
    try:
        os.unlink(env["SLURMGUARD_NOTICE"])
    except OSError:
        pass
    return _Prepared(env, best, restart, recovery, ppath, private, time.time())


def _start(opts: RunOptions,
           prep: _Prepared) -> tuple[subprocess.Popen[bytes], threading.Thread | None, list[str]]:
    """Step 2: the command in its own process group; its stderr copied through and scanned
    for infrastructure faults (the first such line lands in the returned list)."""
    try:
        child = subprocess.Popen(list(opts.command), env=prep.env, start_new_session=True,
                                 stderr=subprocess.PIPE if opts.scan_stderr else None)
    except OSError as exc:
        if prep.private_dir:
            shutil.rmtree(prep.private_dir, ignore_errors=True)
        raise InputError(f"cannot start {opts.command[0]!r}: {exc.strerror or exc}") from None
    infra: list[str] = []
    pump = None
    if child.stderr is not None:
        pump = threading.Thread(target=_pump_stderr, args=(child.stderr, infra), daemon=True)
        pump.start()
    return child, pump, infra


class _Watch:
    """Step 3: wait for the child while forwarding signals to its group, feeding progress
    events, noticing stalls (and acting on them), and enforcing the SIGTERM grace period."""

    def __init__(self, opts: RunOptions, child: subprocess.Popen[bytes], tail: Tail,
                 prog: Progress, started: float) -> None:
        self.opts, self.child, self.tail, self.prog, self.started = opts, child, tail, prog, started
        self.got: list[int] = []  # signals received, forwarded to the child's group
        self.stalled = False
        self.stall_from: float | None = None  # the current stall began after this step report
        self.kill_at: float | None = None
        self.drains: NoticeWatch | None = None
        self.response: NoticeResponse | None = None
        self.old_handlers: dict[int, Any] | None = None

    def watch_drains(self, drains: NoticeWatch, response: NoticeResponse) -> None:
        self.drains, self.response = drains, response
        drains.start()

    def _forward(self, signum: int, _frame: object) -> None:
        self.got.append(signum)
        _signal_group(self.child.pid, signum)

    def arm(self) -> None:
        """Forward SIGTERM, SIGINT and SIGUSR1 to the child's group (until :meth:`run` ends)."""
        if self.old_handlers is None:
            self.old_handlers = {s: signal.signal(s, self._forward)
                                 for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}

    def run(self) -> int:
        """The child's return code."""
        self.arm()
        old = self.old_handlers or {}
        try:
            while True:
                try:
                    return self.child.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
                self._tick()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            if self.drains is not None:
                self.drains.stop()

    def _tick(self) -> None:
        opts, prog = self.opts, self.prog
        for ev in self.tail.read():
            prog.feed(ev)
        now = time.time()
        if self.kill_at is None and self.got and self.got[-1] in (signal.SIGTERM, signal.SIGINT):
            self.kill_at = now + opts.grace
        if self.stall_from is not None and prog.frontier is not None \
                and prog.frontier[0] > self.stall_from:  # steps again: the stall ended
            prog.stalls.append([self.stall_from, prog.frontier[0]])
            del prog.stalls[:-MAX_STALLS]
            self.stall_from = None
            _say(f"stall over: step {prog.frontier[1]} reported")
        if self.stall_from is None and opts.stall_timeout > 0 \
                and now - prog.last_event > opts.stall_timeout:
            self.stalled = True
            self.stall_from = prog.frontier[0] if prog.frontier else self.started
            _say(f"stall: no step reported for {opts.stall_timeout:g}s "
                 f"(last step {prog.last_step} from {prog.last_node})")
            if opts.stall_action == "requeue":
                _signal_group(self.child.pid, signal.SIGTERM)
                self.kill_at = now + opts.grace
        if self.drains is not None and self.response is not None:
            self._drain_notices(now)
        if self.kill_at is not None and now >= self.kill_at:
            _say(f"the command did not stop within {opts.grace:g}s of SIGTERM: killing it")
            _signal_group(self.child.pid, signal.SIGKILL)
            self.kill_at = float("inf")

    def _drain_notices(self, now: float) -> None:
        """New drain notices to the job; end the run once the checkpoint-now is complete."""
        assert self.drains is not None and self.response is not None
        notices, lines = self.drains.take()
        for line in lines:
            _say(line)
        self.response.told(notices, now)
        why = self.response.tick(now, self.prog.checkpoints, self.prog.frontier)
        if why is not None and self.kill_at is None:
            _say(why)
            _signal_group(self.child.pid, signal.SIGTERM)
            self.kill_at = now + self.opts.grace

    def finish(self, rc: int) -> float:
        """Read the last progress events, take the drain response's last look (the child
        exited ``rc``) and close a stall still open; returns the end time."""
        prog = self.prog
        for ev in self.tail.read():
            prog.feed(ev)
        ended = time.time()
        if rc != 0 and self.response is not None:
            # The run ended between two ticks (a program that saves on the notice's signal
            # and exits 75 at once): the tick it did not live to see decides as it would
            # have, so how the run is recorded (and its verdict) does not depend on whether
            # the wrapper looked in the instant between the save and the exit.
            why = self.response.tick(ended, prog.checkpoints, prog.frontier)
            if why is not None:
                _say(why)
        if self.stall_from is not None:
            if prog.frontier is not None and prog.frontier[0] > self.stall_from:
                prog.stalls.append([self.stall_from, prog.frontier[0]])
            else:
                prog.stalls.append([self.stall_from, ended])
        return ended


def _decide(opts: RunOptions, prep: _Prepared, rc: int, watch: _Watch,
            infra: list[str]) -> exitmap.Verdict:
    """Step 4: the wrapper's exit code (slurmguard.job.exitmap); a failed run asks whether this
    node was drained by us (then it is a node fault: requeue)."""
    drained = None
    if rc != 0 and opts.node_probe is not None:
        try:
            drained = opts.node_probe()
        except Exception as exc:  # a probe failure must not turn an app error into a requeue
            _say(f"could not check this node's state: {exc}")
    return exitmap.decide(exitmap.RunEnd(
        returncode=rc, restart=prep.restart, max_requeues=opts.max_requeues,
        stalled=watch.stalled, stall_action=opts.stall_action,
        got_signal=watch.got[-1] if watch.got else None,
        infra_line=infra[0] if infra else None, node_drained=drained,
        notice=_notice_reason(watch.response)))


def _notice_reason(resp: NoticeResponse | None) -> str | None:
    if resp is None or resp.ending is None:
        return None
    how = ("checkpointed at step" if resp.ending["how"] == "checkpoint"
           else "no checkpoint in time; resuming from step")
    return f"drain notice for {', '.join(resp.ending['nodes'])}: {how} {resp.ending['resume_step']}"


def _report(opts: RunOptions, prep: _Prepared, rc: int, watch: _Watch,
            verdict: exitmap.Verdict, ended: float) -> None:
    """Step 5: say what happened, and append the run record (runs.jsonl)."""
    prog, stalled = watch.prog, watch.stalled
    slow = prog.slow_nodes()
    if slow:
        meds = prog.node_medians()
        _say("slow node(s): " + ", ".join(f"{n} (median step {meds[n]:.3f}s)" for n in slow))
        _report_slow(opts, prep.env, prog)
    if verdict.kind != "success":
        _say(verdict.reason)
    env, best = prep.env, prep.best
    _record(opts, env, {
        "job_id": env.get("SLURM_JOB_ID"), "node": env.get("SLURMD_NODENAME"),
        "restart": prep.restart, "started": prep.started, "ended": ended,
        "resumed_from": best.to_dict() if best else None, "returncode": rc,
        "verdict": verdict.kind, "exit_code": verdict.exit_code, "reason": verdict.reason,
        "last_step": prog.last_step, "last_checkpoint": prog.last_ckpt, "stalled": stalled,
        "node_median_step_s": prog.node_medians(), "slow_nodes": slow, "recovery": prep.recovery,
        # For goodput accounting (slurmguard.goodput): the step frontier, saves, stalls.
        "progress_file": prep.progress_path, "steps_reported": prog.steps,
        "first_step": list(prog.first_step) if prog.first_step else None,
        "last_step_t": prog.frontier[0] if prog.frontier else None,
        "frontier_step": prog.frontier[1] if prog.frontier else None,
        "median_step_s": prog.median_step(), "step_samples": len(prog.step_times),
        "checkpoints": prog.checkpoints,
        "stalls": prog.stalls,
        # Drain notices: when each arrived, the checkpoint-now saves, how the run ended.
        **(watch.response.record() if watch.response else {}),
        # Steps after the newest checkpoint when the run ends for a requeue: lost work.
        "steps_to_redo": prog.steps_after_checkpoint() if verdict.requeue else None,
    })


def _report_slow(opts: RunOptions, env: dict[str, str], prog: Progress) -> None:
    """Slow nodes, with the evidence, to serve as suspects (burn-in decides, not one job)."""
    if opts.report_slow is None:
        return
    try:
        opts.report_slow(prog.slow_evidence(env.get("SLURM_JOB_ID") or ""))
    except Exception as exc:  # noqa: BLE001 -- a report failing never changes the run's end
        _say(f"could not report slow nodes to serve: {exc}")


def _recovery(opts: RunOptions, env: dict[str, str], best: checkpoint.Checkpoint | None,
              restart: int) -> dict[str, Any] | None:
    """What the requeue cost, from the previous run's record of this job (when it left one)."""
    job = env.get("SLURM_JOB_ID")
    if restart == 0 or not job or not opts.checkpoint_dir:
        return None
    prev = last_run(opts.checkpoint_dir, job)
    if prev is None:
        return None
    rec: dict[str, Any] = {"previous_restart": prev.get("restart"),
                           "previous_last_step": prev.get("last_step")}
    ended = prev.get("ended")
    if isinstance(ended, (int, float)):
        rec["seconds_since_previous_run"] = round(time.time() - ended, 1)
    last = prev.get("last_step")
    if isinstance(last, int):
        # Progress reports are throttled, so this is a lower bound.
        rec["steps_lost_at_least"] = max(0, last - ((best.step or 0) if best else 0))
    _say(f"recovering: previous run reached step {last}, resuming from "
         f"{best.step if best else 'the beginning'}; "
         f"{rec.get('steps_lost_at_least', '?')}+ steps to redo, "
         f"{rec.get('seconds_since_previous_run', '?')}s since the previous run ended")
    return rec


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _record(opts: RunOptions, env: dict[str, str], rec: dict[str, Any]) -> None:
    """Append the run's record where the requeue watcher and admins can find it."""
    if not opts.checkpoint_dir:
        return
    try:
        path = Path(opts.checkpoint_dir) / STATE_DIR / "runs.jsonl"
        path.parent.mkdir(mode=0o700, exist_ok=True)
        if not _safe_dir(path.parent):
            raise OSError(f"{path.parent} is a symlink or writable by others")
        fd = open_progress(str(path))  # the same rules: O_NOFOLLOW, a regular file
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    except OSError as exc:
        _say(f"could not record the run: {exc}")


def last_run(checkpoint_dir: str, job_id: str) -> dict[str, Any] | None:
    """The newest run record of ``job_id`` under ``checkpoint_dir`` (for the watcher's events)."""
    path = Path(checkpoint_dir) / STATE_DIR / "runs.jsonl"
    found = None
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and str(rec.get("job_id")) == str(job_id):
                    found = rec
    except OSError:
        return None
    return found
