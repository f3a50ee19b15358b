"""Faults on the node side, with the real hook (`slurmguard prolog`/`epilog` subprocesses):
serve unreachable with the spool at its bound, a read-only spool directory and a full disk
(each a small tmpfs the test mounts). The hook must exit 0, drain nothing and say what
happened to its record in one log line; at the bound the documented record (the oldest) is
dropped, counted and logged, and every other record still reaches the store exactly once.

Slurm is absent on purpose: `scontrol` is a script that only appends its arguments to a
file, so "drains nothing" is checked by that file staying empty.

The hooks run in the mode a site runs, `munge`: each POST signed by this machine's munged,
the spool's replay signed anew (serve's stand-in node table puts n7 at 127.0.0.1,
docs/testing.md). Where the record never reaches serve (read-only spool, full disk, a hung
serve) the mode changes nothing: those rows say so.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.helpers import REPO, require, run_sg, sg_env
from support.loadgen import count_records
from support.reliability import record
from support.sgserve import Serve, munge_auth, new_port, new_store, write_config

from slurmguard import config
from slurmguard.adapters import spool
from slurmguard.node import delivery
from slurmguard.node.record import make_record

UNREACHED = "munge (any mode alike: the record never reaches serve)"


def _cfg(d: Path, spool_dir: Path, port: int, spool_max: int = 100) -> tuple[Path, Path]:
    calls = d / "scontrol-calls"
    scontrol = d / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> '{calls}'\nexit 1\n")
    scontrol.chmod(0o755)
    munge_auth()  # the hooks sign with this machine's munged
    cfg = d / "sg.toml"
    cfg.write_text(f"""
[slurm]
scontrol = "{scontrol}"
[serve]
auth = "munge"
[hooks]
state_dir = "{d}/state"
log_file = "{d}/hooks.log"
report_url = "http://127.0.0.1:{port}/ingest"
spool_dir = "{spool_dir}"
spool_max = {spool_max}
report_timeout = 1.0
budget = 10.0
prolog = ["fault-value"]
epilog = ["fault-value"]
[checks]
site_modules = ["support.faultsite"]
""")
    return cfg, calls


def _hook(cfg: Path, hook: str = "prolog") -> subprocess.CompletedProcess[str]:
    env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME="n7", SLURM_JOB_ID="99")
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(REPO / "tests")
    return run_sg(hook, env=env, timeout=60)


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 256 KiB tmpfs mounted for this test (root only), unmounted afterwards."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    d = Path(tempfile.mkdtemp(prefix="sg-fs-"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(d)],
                       capture_output=True, text=True, timeout=30)
    require(r.returncode == 0, f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, timeout=30)
        os.rmdir(d)


def test_spool_bound_drops_oldest_and_says_so(tmp_path: Path) -> None:
    url = new_store(tmp_path)
    port = new_port()  # nobody listens there yet: serve is "down"
    sdir = tmp_path / "spool"
    cfg, calls = _cfg(tmp_path, sdir, port, spool_max=3)
    early = [make_record("n7", "prolog", [], "pass", "") for _ in range(3)]
    for r in early:
        spool.write(r, str(sdir), 3)
    outs = [_hook(cfg) for _ in range(2)]  # two more records: the two oldest must go
    for p in outs:
        assert p.returncode == 0, p.stderr
        assert "dropped the oldest 1 record(s)" in p.stderr
    log = (tmp_path / "hooks.log").read_text().splitlines()
    assert len(log) == 2 and all("report spooled; spool" in line and "full (spool_max 3)" in line
                                 for line in log), log
    assert early[0]["id"] in outs[0].stderr and early[1]["id"] in outs[1].stderr
    assert spool.dropped_count(str(sdir)) == 2
    kept = spool.pending(str(sdir))
    assert len(kept) == 3 and not any(early[0]["id"] in n or early[1]["id"] in n for n in kept)
    # What must reach the store: the 3 spooled records (read back from the spool as the
    # replay will send them) and the record that triggers the replay, each with its results.
    spooled = {rec["id"]: rec for _, rec in spool.oldest(str(sdir), 10) or []}
    assert len(spooled) == 3 and early[2]["id"] in spooled
    last = make_record("n7", "prolog", [], "pass", "")
    made = {rid: len(rec["results"]) for rid, rec in {**spooled, last["id"]: last}.items()}
    # serve comes back: the next record replays the spool; only the dropped two are missing.
    (tmp_path / "serve").mkdir()
    wcfg = write_config(tmp_path / "serve", store_url=url, port=port, auth="munge", nodes=["n7"])
    serve = Serve(wcfg, port, "--no-policy").start()
    try:
        assert delivery.deliver(last, config.load(str(cfg), env={})) == "sent"
        # The replay again, as a node whose answer was lost would send it: a duplicate
        # would show as a second row of one id.
        assert delivery.deliver(last, config.load(str(cfg), env={})) == "sent"
    finally:
        serve.stop()
    assert spool.pending(str(sdir)) == []
    lost, dup, stored = count_records(url, made)
    dropped_lost, _, _ = count_records(url, {early[0]["id"]: 0, early[1]["id"]: 0})
    runs_total = _runs(url)
    assert (lost, dup, stored, dropped_lost, runs_total) == (0, 0, 4, 2, 4), \
        (lost, dup, stored, dropped_lost, runs_total)
    assert not calls.exists() or calls.read_text() == ""
    record("spool-full", mode="munge", store="SQLite", load="serve down, spool_max 3, 5 records",
           faults="spool at its bound",
           lost=lost, duplicated=dup,
           figures=(f"the {dropped_lost} oldest dropped as documented, each named on stderr and "
                    "in the hook's log line, .dropped = 2; the other 3 + 1 replayed (the last "
                    f"one sent twice), {stored} of {len(made)} stored, one row each, "
                    f"{runs_total} rows in all; hooks exit 0"))


def _runs(url: str) -> int:
    from sqlalchemy import text

    from slurmguard.store.engine import make_engine

    eng = make_engine({"url": url})
    try:
        with eng.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM runs")).scalar_one())
    finally:
        eng.dispose()


def _assert_survived(p: subprocess.CompletedProcess[str], calls: Path, log: Path, why: str) -> str:
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert not calls.exists() or calls.read_text() == "", "the hook asked Slurm to do something"
    line = log.read_text().splitlines()[-1]
    assert "report lost: spool" in line and why in line, line
    return line


def test_hook_with_read_only_spool(tmp_path: Path, small_fs: Path) -> None:
    sdir = small_fs / "spool"
    sdir.mkdir(mode=0o700)
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True,
                       text=True, timeout=30)
    require(r.returncode == 0, f"cannot remount read-only: {r.stderr.strip()}")
    cfg, calls = _cfg(tmp_path, sdir, new_port())
    lines = []
    for hook in ("prolog", "epilog"):
        lines.append(_assert_survived(_hook(cfg, hook), calls, tmp_path / "hooks.log",
                                      "Read-only file system"))
    assert os.listdir(sdir) == []
    record("spool-read-only", mode=UNREACHED, load="serve down; prolog + epilog",
           faults="spool on a read-only tmpfs (root cannot write either)",
           figures=f"exit 0, nothing drained, log line: ...{lines[0].split(';', 1)[1][:90]}")


def test_hook_with_full_disk(tmp_path: Path, small_fs: Path) -> None:
    sdir = small_fs / "spool"
    sdir.mkdir(mode=0o700)
    filler = small_fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:  # fill the file system to the last block
        for _ in range(10_000):
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    cfg, calls = _cfg(tmp_path, sdir, new_port())
    lines = []
    for hook in ("prolog", "epilog"):
        lines.append(_assert_survived(_hook(cfg, hook), calls, tmp_path / "hooks.log",
                                      "No space left on device"))
    assert [n for n in os.listdir(sdir) if not n.startswith(".lock")] == [], os.listdir(sdir)
    record("spool-disk-full", mode=UNREACHED, load="serve down; prolog + epilog",
           faults="spool on a full tmpfs (256 KiB, filled)",
           figures=(f"exit 0, nothing drained, no partial file left, log line: "
                    f"...{lines[0].split(';', 1)[1][:90]}"))


def test_hook_with_hung_serve(tmp_path: Path) -> None:
    """serve accepts the connection but never answers (hung, or a stopped process): the hook
    waits hooks.report_timeout at most, spools the record, exits 0 and drains nothing."""
    import socket
    import time

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # the kernel completes handshakes; nobody ever reads or answers
    port = hung.getsockname()[1]
    sdir = tmp_path / "spool"
    cfg, calls = _cfg(tmp_path, sdir, port)
    try:
        t0 = time.monotonic()
        p = _hook(cfg)
        took = time.monotonic() - t0
    finally:
        hung.close()
    assert p.returncode == 0, p.stderr
    assert not calls.exists() or calls.read_text() == ""
    assert len(spool.pending(str(sdir))) == 1
    # report_timeout is 1 s; the rest is interpreter start-up and the checks (loaded machine)
    assert took < 1.0 + 8.0, took
    record("serve-hung", mode=UNREACHED, load="serve accepts but never answers; prolog",
           faults="hung serve (connection accepted, no answer)",
           figures=(f"prolog exit 0 in {took:.1f} s (report_timeout 1 s + start-up), record "
                    "spooled, nothing drained"))
