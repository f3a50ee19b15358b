"""What `slurmguard run` does with a drain notice: checkpoint now, then move on.

On the first notice of a run (slurmguard.job.notice) the wrapper

1. writes the notice file (``SLURMGUARD_NOTICE``): ``progress.should_checkpoint()`` turns true
   in every training process that looks;
2. sends the signal the job asked for (``--notice-signal USR1``; none by default, because a
   program that does not handle SIGUSR1 dies of it);
3. waits for the next checkpoint: a ``progress`` checkpoint report made after the notice whose
   save is complete on disk (the same markers the wrapper resumes from). Then it ends the run
   (SIGTERM to the command's group, then the grace period) and exits 75, so Slurm requeues
   it; the drained node is not eligible, and the requeue watcher excludes it;
4. when no checkpoint comes within ``--notice-timeout`` seconds, ends the run anyway at the
   next safe point (the next step reported after the timeout: no save is being written) when
   there is a complete checkpoint to resume from, and says how many steps that will redo.

It never ends a run that could not resume: without ``--checkpoint-dir``, with no complete
checkpoint, or when a requeue would pass ``--max-requeues``, it warns once and lets the run go on.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

from slurmguard.job import checkpoint
from slurmguard.job.notice import Notice


class NoticeResponse:
    """The wrapper's side of drain notices for one run; :meth:`tick` says when to end it."""

    def __init__(self, *, notice_path: str, checkpoint_dir: str | None, signum: int | None,
                 timeout: float, can_requeue: bool, child_pid: int,
                 say: Callable[[str], None],
                 observes: Callable[[str], bool] | None = None) -> None:
        self.path, self.checkpoint_dir, self.signum = notice_path, checkpoint_dir, signum
        self.timeout, self.can_requeue, self.child_pid, self.say = (timeout, can_requeue,
                                                                     child_pid, say)
        self.notices: list[dict[str, Any]] = []
        self.saves: list[dict[str, Any]] = []  # checkpoint-now saves: step, seconds, waited
        self.ending: dict[str, Any] | None = None  # why and where the notice ended the run
        self.asked_at: float | None = None
        self._seen_ckpts = 0
        self._warned = False
        # Observe mode (policy.mode, docs/policy.md): node -> does it observe? A notice of an
        # observing node's drain is told and recorded, and changes nothing: no notice file,
        # no signal, the run is not ended (serve writes the would-event when it answers).
        self.observes = observes
        self.would: list[str] = []  # the observing nodes whose notices acted on nothing

    def told(self, notices: list[Notice], now: float) -> None:
        """Record new notices; on the first one, tell the training processes."""
        for n in notices:
            d = n.to_dict()
            self.notices.append(d)
            lat = f", {d['latency_s']:.1f}s after the drain" if "latency_s" in d else ""
            self.say(f"drain notice: {n.drain.node} drained ({n.drain.reason or 'no reason'}) "
                     f"seen via {n.drain.via}{lat}")
            if self.observes is not None and self.observes(n.drain.node):
                self.would.append(n.drain.node)
                self.say(f"drain notice: {n.drain.node} observes (policy.mode): would ask the "
                         "job for a checkpoint now and end the run for a requeue; the run goes on")
        if not notices or self.asked_at is not None:
            return
        if all(d["node"] in self.would for d in self.notices):
            return  # observe mode: nothing to act on yet
        self.asked_at = now
        self._write({"t": now, "nodes": [d["node"] for d in self.notices],
                     "reason": self.notices[0]["reason"]})
        if self.signum is not None:
            try:
                os.killpg(self.child_pid, self.signum)
            except ProcessLookupError:
                pass
        self.say("asked the job for a checkpoint now (progress.should_checkpoint()"
                 + (f", {signal.Signals(self.signum).name})" if self.signum else ")"))

    def _write(self, doc: dict[str, Any]) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as fh:
                json.dump(doc, fh)
            os.replace(tmp, self.path)  # whole or not at all: readers never see half
        except OSError as exc:
            self.say(f"could not write the notice file {self.path}: {exc}")

    def tick(self, now: float, checkpoints: list[list[Any]],
             frontier: tuple[float, int] | None) -> str | None:
        """The reason to end the run now, or None (keep going)."""
        if self.asked_at is None or self.ending is not None:
            return None
        fresh = [c for c in checkpoints[self._seen_ckpts:] if c[0] >= self.asked_at]
        self._seen_ckpts = len(checkpoints)
        if fresh and self._resumable(fresh[-1][1]):
            t, step, secs = fresh[-1]
            self.saves.append({"step": step, "seconds": secs, "done_at": t,
                               "after_notice_s": round(t - self.asked_at, 3)})
            return self._end("checkpoint", step, frontier,
                             f"checkpoint of step {step} complete {t - self.asked_at:.1f}s "
                             "after the drain notice")
        if now < self.asked_at + self.timeout:
            return None
        if frontier is None or frontier[0] <= self.asked_at + self.timeout:
            return None  # wait for the next safe point: a step reported after the timeout
        if self._warned and not fresh:
            return None  # nothing to resume from, and no new save since we looked
        best = self._latest()
        if best is None or best.step is None:
            return None
        return self._end("timeout", best.step, frontier,
                         f"no checkpoint within {self.timeout:g}s of the drain notice: "
                         f"ending the run at step {frontier[1]} anyway, resuming from step "
                         f"{best.step} ({frontier[1] - best.step} steps to redo)")

    def _end(self, how: str, step: int, frontier: tuple[float, int] | None,
             why: str) -> str:
        self.ending = {"how": how, "resume_step": step,
                       "frontier_step": frontier[1] if frontier else None,
                       "nodes": [d["node"] for d in self.notices]}
        return f"{why}; requeueing without {', '.join(self.ending['nodes'])}"

    def _resumable(self, step: int) -> bool:
        best = self._latest()
        return best is not None and best.step is not None and best.step >= step

    def _latest(self) -> checkpoint.Checkpoint | None:
        """The newest complete checkpoint when the run may be ended for it, else None (and a
        warning, once)."""
        why = None
        if not self.can_requeue:
            why = "a requeue would pass --max-requeues"
        elif not self.checkpoint_dir:
            why = "no --checkpoint-dir to resume from"
        best = checkpoint.find_latest(self.checkpoint_dir) if why is None else None
        if why is None and best is None:
            why = "no complete checkpoint to resume from"
        if why is not None and not self._warned:
            self._warned = True
            self.say(f"drain notice: {why}: not stopping the run (it goes on, on a drained node)")
        return best

    def record(self) -> dict[str, Any]:
        return {"notices": self.notices, "checkpoint_now": self.saves,
                "notice_asked_at": self.asked_at, "ended_by_notice": self.ending,
                "observed_notices": self.would}
