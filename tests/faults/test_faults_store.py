"""Store faults seen by the gate (PrologSlurmctld) and the admin commands, as real processes:
a SQLite store locked by another writer, and a corrupted store file. The gate must answer
within its budget, as `gate.on_store_error` says (open: exit 0, closed: exit 5, nothing
drained either way); admin commands must say what is wrong in one line with exit 5.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.reliability import record, setting
from support.sgserve import new_store

from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record
from slurmguard.store import Store

LOCK_SECONDS = setting("gate_lock_seconds", 8, 30)
BUSY = 1.0  # store.busy_timeout for these tests
BUDGET = BUSY + 4.0  # the gate's answer: busy_timeout plus process start-up, on a loaded box


def _store(d: Path) -> tuple[str, Path]:
    url = new_store(d)
    s = Store.open(url=url)
    bad = [CheckResult("gpu-xid", Health.UNHEALTHY, "Xid 79")]
    s.nodes.record_many([make_record("n2", "prolog", bad, "drain", "slurmguard: gpu-xid: Xid 79"),
                         make_record("n1", "prolog", [], "pass", "")])
    s.close()
    return url, Path(url[len("sqlite:///"):])


def _cfg(d: Path, db: Path, mode: str) -> Path:
    calls = d / "scontrol-calls"
    scontrol = d / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> '{calls}'\nexit 1\n")
    scontrol.chmod(0o755)
    p = d / f"gate-{mode}.toml"
    p.write_text(f"""
[slurm]
scontrol = "{scontrol}"
[store]
path = "{db}"
busy_timeout = {BUSY}
[gate]
on_store_error = "{mode}"
drain = true
""")
    return p


def _gate(cfg: Path) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = run_sg("-c", str(cfg), "gate", env=sg_env(SLURM_JOB_ID="42", SLURM_JOB_NODELIST="n[1-3]"),
               timeout=60)
    return p.returncode, p.stderr, time.monotonic() - t0


def _hold(db: Path, exclusive: bool, seconds: float, ready: threading.Event,
          done: threading.Event) -> None:
    conn = sqlite3.connect(str(db), timeout=5, isolation_level=None)
    try:
        if exclusive:
            # EXCLUSIVE locking mode: after its first write this connection keeps the file
            # locked against every other reader and writer until it closes.
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute("UPDATE nodes SET last_reason = last_reason WHERE 0")
            conn.execute("COMMIT")
            conn.execute("BEGIN EXCLUSIVE")
        else:
            conn.execute("BEGIN IMMEDIATE")  # an ordinary writer's transaction
            conn.execute("UPDATE nodes SET last_reason = last_reason")
        ready.set()
        done.wait(seconds)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


@pytest.mark.parametrize("exclusive", [False, True], ids=["writer", "exclusive"])
def test_gate_with_locked_store(tmp_path: Path, exclusive: bool) -> None:
    url, db = _store(tmp_path)
    cfgs = {m: _cfg(tmp_path, db, m) for m in ("open", "closed")}
    ready, done = threading.Event(), threading.Event()
    t = threading.Thread(target=_hold, args=(db, exclusive, LOCK_SECONDS, ready, done), daemon=True)
    t.start()
    assert ready.wait(10)
    answers = []
    end = time.monotonic() + LOCK_SECONDS - BUDGET
    try:
        for i in range(100):
            mode = ("open", "closed")[i % 2]
            rc, err, took = _gate(cfgs[mode])
            answers.append((mode, rc, err, took))
            if time.monotonic() >= end and len(answers) >= 2:
                break
        still_locked = t.is_alive()
    finally:
        done.set()
        t.join(10)
    assert still_locked, "the lock ended before the gates finished: the test proves nothing"
    for mode, rc, err, took in answers:
        assert took < BUDGET, (mode, took, err)
        if exclusive:
            assert rc == (0 if mode == "open" else 5), (mode, rc, err)
            assert "store unreadable" in err and ("fail-open" if mode == "open" else "fail-closed") in err
            assert "locked" in err and len(err.strip().splitlines()) == 1, err
        else:  # WAL: a writer never blocks the gate; n2's fresh Xid still refuses it
            assert rc == 1 and "n2: slurmguard: gpu-xid: Xid 79" in err, (mode, rc, err)
    calls = tmp_path / "scontrol-calls"
    if exclusive:  # a store fault is never a node fault: Slurm was not even asked
        assert not calls.exists(), calls.read_text()
    worst = max(a[3] for a in answers)
    what = "EXCLUSIVE-mode writer" if exclusive else "writer in a transaction (WAL)"
    record("gate-store-locked" + ("" if exclusive else "-wal"), store="SQLite",
           load=f"{len(answers)} gate runs while locked",
           faults=f"store locked by another {what} for {LOCK_SECONDS:g} s",
           figures=(f"every gate answered within {worst:.2f} s (budget {BUDGET:g} s = busy_timeout "
                    f"{BUSY:g} s + start-up); " + (
                        "open: exit 0, closed: exit 5, one line naming the lock, nothing drained"
                        if exclusive else "read as usual (WAL): n2 refused, exit 1")))


CORRUPTIONS = {
    "garbage header": lambda b: b"this is not sqlite" * 6 + b[108:],
    "truncated to half": lambda b: b[: len(b) // 2],
    "zero bytes": lambda b: b"",
}


def test_gate_and_admin_with_corrupt_store(tmp_path: Path) -> None:
    tried = []
    worst = 0.0
    for name, damage in CORRUPTIONS.items():
        d = tmp_path / name.replace(" ", "-")
        d.mkdir()
        url, db = _store(d)
        for extra in ("-wal", "-shm"):
            if os.path.exists(f"{db}{extra}"):
                os.unlink(f"{db}{extra}")
        db.write_bytes(damage(db.read_bytes()))
        for mode, want in (("open", 0), ("closed", 5)):
            rc, err, took = _gate(_cfg(d, db, mode))
            worst = max(worst, took)
            assert (rc, took < BUDGET) == (want, True), (name, mode, rc, took, err)
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
            assert "store" in err and ("fail-open" if mode == "open" else "fail-closed") in err
        cfg = _cfg(d, db, "open")
        admin = ([["db", "current"], ["events"], ["node", "show", "n1"], ["triage"]]
                 if name == "garbage header" else [["db", "current"]])
        for argv in admin:
            p = run_sg("-c", str(cfg), *argv, timeout=60)
            assert p.returncode == 5, (name, argv, p.returncode, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("slurmguard: error: store"), (name, argv, p.stderr)
        assert not (d / "scontrol-calls").exists()
        tried.append(name)
    assert tried == list(CORRUPTIONS)
    record("gate-store-corrupt", store="SQLite",
           faults="store file corrupted: " + ", ".join(tried),
           bad_inputs=("gate (open, closed) and db current on each; events, node show, triage "
                       "on the garbage header"),
           figures=(f"gate: open exit 0, closed exit 5, within {worst:.2f} s (budget {BUDGET:g} s); "
                    "admin commands exit 5 with one `slurmguard: error: store ...` line; nothing drained"))
