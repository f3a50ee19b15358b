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

        info = SlurmCLI.from_config(config.load(config_path)).node(node)
        return info.reason if info.drained and info.ours else None

    return probe


def _serve_url(cfg) -> str:  # type: ignore[no-untyped-def]
    url = str(cfg["notice.serve_url"] or "")
    first = str(cfg["hooks.report_url"] or next(iter(cfg["hooks.report_urls"]), ""))
    if not url and first:
        import urllib.parse

        u = urllib.parse.urlsplit(first)
        url = f"{u.scheme}://{u.netloc}"
    return url


def _load_config(config_path: str | None):  # type: ignore[no-untyped-def]
    """The config, or None (said once): a broken config turns notices off, never the job."""
    from slurmguard import config
    from slurmguard.errors import SlurmguardError

    try:
        return config.load(config_path)
    except SlurmguardError as exc:
        click.echo(f"slurmguard run: drain notices and slow-node reports off: {exc.message}",
                   err=True)
        return None


def _drain_watch(cfg, on: bool):  # type: ignore[no-untyped-def]
    """A factory of the run's drain watch (slurmguard.job.notice), or None when off."""
    import os

    from slurmguard.nodeset import expand

    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not on or cfg is None or not nodelist:
        return None
    try:
        nodes = expand(nodelist, source="SLURM_JOB_NODELIST")
    except InputError as exc:
        click.echo(f"slurmguard run: drain notices off: {exc.message}", err=True)
        return None
    from slurmguard.adapters.slurm.commands import SlurmCLI
    from slurmguard.job import notice

    askers = []
    url = _serve_url(cfg)
    if url:
        try:
            askers.append(("serve", notice.serve_asker(url, float(cfg["notice.timeout"]),
                                                       str(cfg["serve.tls_ca"]), _job_auth(cfg),
                                                       os.environ.get("SLURM_JOB_ID", "")),
                           float(cfg["notice.interval"])))
        except InputError as exc:
            click.echo(f"slurmguard run: {exc.message}; asking Slurm only", err=True)
    askers.append(("slurm", notice.slurm_asker(SlurmCLI.from_config(cfg)),
                   float(cfg["notice.slurm_interval"] if url else cfg["notice.interval"])))
    # A drain set a little before the wrapper started (the batch step's own start) counts.
    # serve configured but down: Slurm's reads spread out and slow down (notice.py)
    backoff = (max(float(cfg["notice.slurm_interval_max"]), float(cfg["notice.slurm_interval"]))
               if len(askers) > 1 else None)
    return lambda started: notice.NoticeWatch(nodes, started - 60.0, askers, backoff_max=backoff)


def _observes(cfg):  # type: ignore[no-untyped-def]
    """node -> does it observe (policy.mode)? None when nothing observes (or no config)."""
    if cfg is None:
        return None
    from slurmguard.observe import observer, observing_groups

    return observer(cfg) if observing_groups(cfg) else None


def _job_auth(cfg):  # type: ignore[no-untyped-def]
    """What the wrapper signs its requests to serve with: a MUNGE credential of the job's
    user (serve.auth = "munge"), else the job token (notice.job_token_file), else None (serve
    then refuses its reads of /drains and the wrapper asks Slurm)."""
    from slurmguard.adapters.serve_client import DeliveryError, munge_signer, read_token

    if str(cfg["serve.auth"]) == "munge":
        return munge_signer(str(cfg["hooks.munge_socket"]))
    try:
        return read_token(str(cfg["notice.job_token_file"])) if cfg["notice.job_token_file"] else None
    except DeliveryError as exc:
        click.echo(f"slurmguard run: {exc}; drain notices from Slurm only", err=True)
        return None


def _slow_reporter(cfg):  # type: ignore[no-untyped-def]
    """POST slow nodes to serve's /suspect, signed with a MUNGE credential of the job's user
    (serve.auth = "munge") or the job token, or None when not configured."""
    munge = cfg is not None and str(cfg["serve.auth"]) == "munge"  # node-key: the job token
    if cfg is None or not (munge or cfg["notice.job_token_file"]) or not _serve_url(cfg):
        return None
    url = _serve_url(cfg) + "/suspect"
    token_file, timeout = str(cfg["notice.job_token_file"]), float(cfg["notice.timeout"])
    ca = str(cfg["serve.tls_ca"])

    def report(evidence: dict) -> None:  # type: ignore[type-arg]
        from slurmguard.adapters.serve_client import (
            DeliveryError,
            munge_signer,
            post_json,
            read_token,
        )

        try:
            auth = munge_signer(str(cfg["hooks.munge_socket"])) if munge else read_token(token_file)
            post_json(url, auth, evidence, timeout, ca=ca)
        except DeliveryError as exc:
            raise RuntimeError(str(exc)) from None

    return report


def _signal(name: str) -> int | None:
    import signal

    return None if name == "none" else int(getattr(signal, f"SIG{name}"))


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
    cfg = _load_config((ctx.obj or {}).get("config_path"))
    opts = wrapper.RunOptions(
        command=list(command), checkpoint_dir=checkpoint_dir, resume=resume,
        max_requeues=max_requeues, stall_timeout=stall_timeout, stall_action=stall_action,
        grace=grace, progress_file=progress_file, scan_stderr=not no_stderr_scan,
        node_probe=_node_probe((ctx.obj or {}).get("config_path")),
        drain_watch=_drain_watch(cfg, drain_notice), notice_signal=_signal(notice_signal),
        notice_timeout=notice_timeout, report_slow=_slow_reporter(cfg),
        observes=_observes(cfg),
    )
    code = wrapper.run(opts)
    sys.stdout.flush()
    return code
