"""`slurmguard run`: the checkpoint-aware job wrapper (thin over slurmguard.job.wrapper)."""

from __future__ import annotations

import sys

import click

from slurmguard.errors import InputError
from slurmguard.output import Result, emit


def _node_probe(config_path: str | None):  # type: ignore[no-untyped-def]
    """A callable returning our drain reason on this node, or None when unknown/not drained."""
    import os

    node = os.environ.get("SLURMD_NODENAME")
    if not node:
        return None

    def probe() -> str | None:
        try:
            from slurmguard.adapters.slurm.commands import SlurmCLI  # lands with the cluster issue
        except ImportError:
            return None
        from slurmguard import config

        info = SlurmCLI(config.load(config_path).section("slurm")).node(node)
        return info.reason if info.drained and info.ours else None

    return probe


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
@click.option("--show-checkpoint", is_flag=True,
              help="Only print the checkpoints found (JSON) and exit; no command is run.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run_cmd(ctx: click.Context, checkpoint_dir: str | None, resume: str, max_requeues: int,
            stall_timeout: float, stall_action: str, grace: float, progress_file: str | None,
            no_stderr_scan: bool, show_checkpoint: bool, command: tuple[str, ...]) -> int:
    """Run CMD, resuming from the newest complete checkpoint; exit 75 to requeue on
    infrastructure faults (slurm.conf RequeueExit=75), pass application errors through.

    \b
    Exports to CMD: SLURMGUARD_RESUME_FROM, SLURMGUARD_RESUME_STEP (when known),
    SLURM_RESTART_COUNT (0 on the first run), SLURMGUARD_PROGRESS (for slurmguard.progress).
    Exit codes: CMD's own; 75 requeue; 7 requeue limit reached (docs/requeue.md).

    \b
    Example (batch script):
      #SBATCH --requeue --signal=B:USR1@300
      slurmguard run --checkpoint-dir /shared/ckpt/run1 --max-requeues 3 \\
          -- srun python train.py
    \b
      slurmguard run --checkpoint-dir /shared/ckpt/run1 --show-checkpoint
    """
    from slurmguard.job import checkpoint, wrapper

    if checkpoint_dir is not None:
        if not checkpoint_dir.startswith("/"):
            raise InputError(f"--checkpoint-dir: expected an absolute path, got {checkpoint_dir!r}")
        import os

        if not os.path.isdir(checkpoint_dir):
            raise InputError(f"--checkpoint-dir: {checkpoint_dir} does not exist or is not a directory")
    if show_checkpoint:
        if not checkpoint_dir:
            raise InputError("--show-checkpoint needs --checkpoint-dir")
        emit(Result(checkpoint.scan(checkpoint_dir).to_dict()), as_json=True)
        return 0
    if command and command[0] == "--":
        command = command[1:]
    opts = wrapper.RunOptions(
        command=list(command), checkpoint_dir=checkpoint_dir, resume=resume,
        max_requeues=max_requeues, stall_timeout=stall_timeout, stall_action=stall_action,
        grace=grace, progress_file=progress_file, scan_stderr=not no_stderr_scan,
        node_probe=_node_probe((ctx.obj or {}).get("config_path")),
    )
    code = wrapper.run(opts)
    sys.stdout.flush()
    return code
