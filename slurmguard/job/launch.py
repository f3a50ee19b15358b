"""`slurmguard run`'s start without click: the options parsed by hand where they are plain
(anything else, `--help` and every error included, goes to the click command in
slurmguard/cli/run.py, which parses the same options), and the run put together from them.

A job pays the wrapper's start before its first step, on every node and every requeue: click
and the CLI's modules are about 20 ms of it, and the config, serve's client and Slurm's are
built only once the command runs (wrapper.RunOptions.late). tests/test_wrapper_fast_argv.py
holds this parser to click's on generated command lines and environments.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from slurmguard.errors import InputError


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# option -> (parameter, kind, environment variable); kinds: "path", "count" (an int >= 0),
# "seconds" (a float >= 0), or the tuple of choices. The click command declares the same.
_OPTIONS: dict[str, tuple[str, Any, str | None]] = {
    "--checkpoint-dir": ("checkpoint_dir", "path", "SLURMGUARD_CHECKPOINT_DIR"),
    "--resume": ("resume", ("auto", "off"), "SLURMGUARD_RESUME"),
    "--max-requeues": ("max_requeues", "count", "SLURMGUARD_MAX_REQUEUES"),
    "--stall-timeout": ("stall_timeout", "seconds", "SLURMGUARD_STALL_TIMEOUT"),
    "--stall-action": ("stall_action", ("log", "requeue"), "SLURMGUARD_STALL_ACTION"),
    "--grace": ("grace", "seconds", "SLURMGUARD_GRACE"),
    "--progress-file": ("progress_file", "path", "SLURMGUARD_PROGRESS"),
    "--notice-signal": ("notice_signal", ("none", "USR1", "USR2", "INT", "TERM"),
                        "SLURMGUARD_NOTICE_SIGNAL"),
    "--notice-timeout": ("notice_timeout", "seconds", "SLURMGUARD_NOTICE_TIMEOUT"),
}
_FLAGS = {"--no-stderr-scan": ("no_stderr_scan", True), "--drain-notice": ("drain_notice", True),
          "--no-drain-notice": ("drain_notice", False)}
DEFAULTS: dict[str, Any] = {
    "checkpoint_dir": None, "resume": "auto", "max_requeues": 3, "stall_timeout": 0.0,
    "stall_action": "log", "grace": 60.0, "progress_file": None, "no_stderr_scan": False,
    "drain_notice": True, "notice_signal": "none", "notice_timeout": 600.0,
    "show_checkpoint": False}
_COUNT = re.compile(r"[0-9]{1,9}")
_SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{0,9})?")


def _value(kind: Any, raw: str) -> Any:
    """``raw`` as ``kind``, or None where click might read it otherwise (click decides)."""
    if kind == "path":
        return raw
    if kind == "count":
        return int(raw) if _COUNT.fullmatch(raw) else None
    if kind == "seconds":
        return float(raw) if _SECONDS.fullmatch(raw) else None
    return raw if raw in kind else None


def parse_fast(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """``slurmguard [-c PATH] run [OPTIONS] -- CMD...`` as run_cmd's parameters (and
    ``config_path``, ``command``), or None wherever click should parse: another command,
    ``--help``, ``--show-checkpoint``, a value click might read differently or refuse, a
    boolean environment variable."""
    args = list(argv)
    config = environ.get("SLURMGUARD_CONFIG") or None
    if args[:1] in (["-c"], ["--config"]) and len(args) > 2:
        config, args = args[1], args[2:]
    if args[:1] != ["run"] or environ.get("SLURMGUARD_DRAIN_NOTICE"):
        return None
    out = dict(DEFAULTS)
    for param, kind, env in _OPTIONS.values():
        raw = environ.get(env or "")
        if raw:  # click: an empty variable is no value
            v = _value(kind, raw)
            if v is None:
                return None
            out[param] = v
    rest = args[1:]
    while rest:
        a = rest.pop(0)
        if a == "--":
            break
        if not a.startswith("-") or a == "-":
            rest.insert(0, a)
            break
        name, eq, raw = a.partition("=")
        if name in _FLAGS and not eq:
            param, v = _FLAGS[name]
            out[param] = v
            continue
        if name not in _OPTIONS:
            return None
        if not eq:
            if not rest:
                return None
            raw = rest.pop(0)
        param, kind, _ = _OPTIONS[name]
        v = _value(kind, raw)
        if v is None:
            return None
        out[param] = v
    if not rest:
        return None  # no command: click says so
    out["command"], out["config_path"] = tuple(rest), config
    return out


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
        _say(f"slurmguard run: drain notices and slow-node reports off: {exc.message}")
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
        _say(f"slurmguard run: drain notices off: {exc.message}")
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
            _say(f"slurmguard run: {exc.message}; asking Slurm only")
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
        _say(f"slurmguard run: {exc}; drain notices from Slurm only")
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


def launch(*, config_path: str | None, checkpoint_dir: str | None, resume: str,
           max_requeues: int, stall_timeout: float, stall_action: str, grace: float,
           progress_file: str | None, no_stderr_scan: bool, drain_notice: bool,
           notice_signal: str, notice_timeout: float, command: Sequence[str],
           show_checkpoint: bool = False) -> int:
    """Run ``command`` under the wrapper (slurmguard.job.wrapper) with these options; the
    config and what hangs on it are built once the command runs."""
    from slurmguard.job import wrapper

    if checkpoint_dir is not None:
        if not checkpoint_dir.startswith("/"):
            raise InputError(f"--checkpoint-dir: expected an absolute path, got {checkpoint_dir!r}")
        if not os.path.isdir(checkpoint_dir):
            raise InputError(f"--checkpoint-dir: {checkpoint_dir} does not exist or is not a directory")
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]

    def late() -> dict[str, Any]:
        """Built once the command runs (wrapper.RunOptions.late): off the job's start."""
        cfg = _load_config(config_path)
        return {"drain_watch": _drain_watch(cfg, drain_notice),
                "report_slow": _slow_reporter(cfg), "observes": _observes(cfg)}

    opts = wrapper.RunOptions(
        command=command, checkpoint_dir=checkpoint_dir, resume=resume,
        max_requeues=max_requeues, stall_timeout=stall_timeout, stall_action=stall_action,
        grace=grace, progress_file=progress_file, scan_stderr=not no_stderr_scan,
        node_probe=_node_probe(config_path), notice_signal=_signal(notice_signal),
        notice_timeout=notice_timeout, late=late,
    )
    code = wrapper.run(opts)
    sys.stdout.flush()
    return code
