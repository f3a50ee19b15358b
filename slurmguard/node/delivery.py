"""Delivery of result records to `slurmguard serve`: send, or spool and replay later.

The node side uses the standard library only (it runs in every prolog). The I/O is in two
adapters: :mod:`slurmguard.adapters.serve_client` (HTTP) and :mod:`slurmguard.adapters.spool`
(the durable files). This module is the rule that joins them:

1. POST the record to ``hooks.report_url``, then each of ``hooks.report_urls`` (serve
   replicas) until one answers, signed as ``serve.auth`` says (a MUNGE credential over
   the body, or the shared token of test clusters: docs/security.md),
   within ``hooks.report_timeout`` seconds in all (each URL its share of what is left).
2. If serve cannot be reached (or answers 5xx, or the token is unreadable), write the record
   to the spool in ``hooks.spool_dir`` (at most ``hooks.spool_max`` records, oldest dropped).
3. After a successful send, replay the spool in batches (oldest first) within
   ``hooks.replay_timeout`` seconds of its own, cut to the hook's end (``until``): what the
   send left of ``report_timeout`` was too little for a serve slowed by the backlog it is
   taking in (128 nodes under load: one round stored 52 of 136 spooled records); a file is deleted only after serve answered that its record is stored (or was a
   duplicate, or was refused as malformed). Ingest is exactly-once by record ``id``, so a
   record sent twice (a crash between the answer and the unlink) is stored once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from slurmguard.adapters import spool
from slurmguard.adapters.serve_client import (
    Auth,
    DeliveryError,
    ingest_urls,
    node_auth,
    post_first,
    post_records,
)

if TYPE_CHECKING:
    from slurmguard.config import Config

_BATCH = 200  # records per replay request


def deliver(record: dict[str, Any], cfg: Config, *, replay: bool = True,
            until: float | None = None) -> str:
    """Send a record to serve, or spool it. Returns "sent", "spooled" or "skipped".

    Never raises for delivery problems (they must not change a hook's verdict); the caller
    may log the returned word. After a successful send the spool is replayed for at most
    ``hooks.replay_timeout`` seconds and never past ``until`` (time.monotonic(): the end of
    the hook's budget).
    """
    hooks = cfg.section("hooks")
    urls = ingest_urls(hooks)
    if not urls:
        return "skipped"
    timeout = float(hooks.get("report_timeout", 2.0))
    ca = str(cfg.section("serve").get("tls_ca") or "")
    try:
        token = node_auth(cfg, str(record.get("node", "")))  # the token, or signed per body
        # Replicas in order (report_url, then report_urls), each with its share of the time.
        url, answer = post_first(urls, token, {"records": [record]}, timeout, ca=ca)
    except DeliveryError as exc:
        said = _spool_or_say(record, hooks)
        # serve down is routine (the spool is for it); a refused certificate is a fault of
        # the installation that only an admin fixes: the hook's log line says it.
        return f"{said}: {exc}" if exc.tls else said
    if record.get("id") in answer.get("retry", ()):
        return _spool_or_say(record, hooks)
    end = time.monotonic() + float(hooks.get("replay_timeout", timeout))
    end = end if until is None else min(end, until)
    if replay and end > time.monotonic():
        try:
            replay_spool(url, token, str(hooks["spool_dir"]), deadline=end, ca=ca)
        except OSError:
            pass  # the spool is kept; the next run tries again
    return "sent"


def _spool_or_say(record: dict[str, Any], hooks: Any) -> str:
    try:
        _, dropped = spool.write_and_say(record, str(hooks["spool_dir"]), int(hooks["spool_max"]))
    except OSError as exc:  # a full or read-only disk: the record is lost, the hook goes on
        return f"lost: spool {hooks['spool_dir']}: {exc.strerror or exc}"
    return f"spooled; {dropped}" if dropped else "spooled"


def replay_spool(url: str, token: Auth, spool_dir: str, *, deadline: float,
                 batch: int = _BATCH, ca: str = "") -> int:
    """Send spooled records (oldest first) until the spool is empty or ``deadline``
    (time.monotonic()) passes; returns how many files were settled and removed.

    Only one process replays at a time (:func:`slurmguard.adapters.spool.replay_lock`).
    Raises OSError for a spool that is unsafe to use (a symlink, shared with others).
    """
    with spool.replay_lock(spool_dir) as mine:
        if not mine:
            return 0
        done = 0
        while time.monotonic() < deadline:
            taken = spool.oldest(spool_dir, batch)
            if taken is None:
                break
            if not taken:
                continue
            files = {str(rec["id"]): path for path, rec in taken}
            try:
                answer = post_records(url, token, [rec for _, rec in taken],
                                      max(0.05, deadline - time.monotonic()), ca=ca)
            except DeliveryError:
                break
            retry = set(answer.get("retry", ()))
            for rid, path in files.items():
                if rid not in retry:
                    spool.remove(path)
                    done += 1
            if retry and retry >= set(files):
                break  # serve takes nothing now; try on a later run
        return done
