"""`slurmguard run`: the checkpoint-aware job wrapper (thin over slurmguard.job.launch, which
also parses these options without click for the common command lines: slurmguard/entry.py)."""

from __future__ import annotations

import click

from slurmguard.errors import InputError
from slurmguard.output import Result, emit


@click.command("run", context_settings={"allow_interspersed_args": False})
@click.option("--checkpoint-dir", metavar="DIR", envvar="SLURMGUARD_CHECKPOINT_DIR",
              help="Where the job writes checkpoints (absolute; env SLURMGUARD_CHECKPOINT_DIR, "
                   "set by `sbatch --guard-checkpoint-dir`).")
@click.option("--resume", type=click.Choice(["auto", "off"]), default="auto", show_default=True,
              envvar="SLURMGUARD_RESUME", help="Export the newest complete checkpoint, or not.")
@click.option("--max-requeues", type=click.IntRange(min=0), default=3, show_default=True,
              envvar="SLURMGUARD_MAX_REQUEUES", help="Infrastructure requeues allowed per job.")
@click.option("--stall-timeout", type=click.FloatRange(min=0), default=0, show_default=True,
              envvar="SLURMGUARD_STALL_TIMEOUT", metavar="SECONDS",
              help="A stall is no progress.step() for this long (0: off).")
@click.option("--stall-action", type=click.Choice(["log", "requeue"]), default="log",
              show_default=True, envvar="SLURMGUARD_STALL_ACTION",
              help="On a stall: only log it, or stop the run for a requeue.")
@click.option("--grace", type=click.FloatRange(min=0), default=60, show_default=True,
              envvar="SLURMGUARD_GRACE", metavar="SECONDS",
              help="After forwarding SIGTERM/SIGINT, wait this long before SIGKILL.")
@click.option("--progress-file", metavar="PATH", envvar="SLURMGUARD_PROGRESS",
              help="Where progress events go (default: DIR/.slurmguard/progress-JOBID.jsonl).")
@click.option("--no-stderr-scan", is_flag=True,
              help="Do not pipe the command's stderr to look for infrastructure errors.")
@click.option("--drain-notice/--no-drain-notice", default=True, show_default=True,
              envvar="SLURMGUARD_DRAIN_NOTICE",
              help="Watch the job's nodes for drains (serve, else Slurm) and checkpoint now.")
@click.option("--notice-signal", type=click.Choice(["none", "USR1", "USR2", "INT", "TERM"]),
              default="none", show_default=True, envvar="SLURMGUARD_NOTICE_SIGNAL",
              help="Also send this signal to CMD on a drain notice (USR1 by convention).")
@click.option("--notice-timeout", type=click.FloatRange(min=0), default=600, show_default=True,
              envvar="SLURMGUARD_NOTICE_TIMEOUT", metavar="SECONDS",
              help="No checkpoint this long after a drain notice: end the run at the next "
                   "step anyway (when there is a checkpoint to resume from).")
@click.option("--show-checkpoint", is_flag=True,
              help="Only print the checkpoints found (JSON) and exit; no command is run.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run_cmd(ctx: click.Context, checkpoint_dir: str | None, resume: str, max_requeues: int,
            stall_timeout: float, stall_action: str, grace: float, progress_file: str | None,
            no_stderr_scan: bool, drain_notice: bool, notice_signal: str,
            notice_timeout: float, show_checkpoint: bool, command: tuple[str, ...]) -> int:
    """Run CMD, resuming from the newest complete checkpoint; exit 75 to requeue on
    infrastructure faults (slurm.conf RequeueExit=75), pass application errors through.

    \b
    Exports to CMD: SLURMGUARD_RESUME_FROM, SLURMGUARD_RESUME_STEP (when known),
    SLURM_RESTART_COUNT (0 on the first run), SLURMGUARD_PROGRESS and SLURMGUARD_NOTICE
    (for slurmguard.progress). A drain of a node of the job makes
    progress.should_checkpoint() true; once that checkpoint is complete the run ends and
    exits 75, to be requeued without the node.
    Exit codes: CMD's own; 75 requeue; 7 requeue limit reached (docs/requeue.md).

    \b
    Example (batch script):
      #SBATCH --requeue --signal=B:USR1@300
      slurmguard run --checkpoint-dir /shared/ckpt/run1 --max-requeues 3 \\
          -- srun python train.py
    \b
      slurmguard run --checkpoint-dir /shared/ckpt/run1 --show-checkpoint
    """
    from slurmguard.job import checkpoint, launch

    if show_checkpoint:
        if not checkpoint_dir:
            raise InputError("--show-checkpoint needs --checkpoint-dir")
        if not checkpoint_dir.startswith("/"):
            raise InputError(f"--checkpoint-dir: expected an absolute path, got {checkpoint_dir!r}")
        import os

        if not os.path.isdir(checkpoint_dir):
            raise InputError(f"--checkpoint-dir: {checkpoint_dir} does not exist or is not a directory")
        emit(Result(checkpoint.scan(checkpoint_dir).to_dict()), as_json=True)
        return 0
    return launch.launch(
        config_path=(ctx.obj or {}).get("config_path"), checkpoint_dir=checkpoint_dir,
        resume=resume, max_requeues=max_requeues, stall_timeout=stall_timeout,
        stall_action=stall_action, grace=grace, progress_file=progress_file,
        no_stderr_scan=no_stderr_scan, drain_notice=drain_notice, notice_signal=notice_signal,
        notice_timeout=notice_timeout, command=command)
