"""Test clusters started at once get port blocks of their own (tests/support/slurmcluster.py
`free_port_block`): the fleet day starts three clusters in threads, and each probed the same
first block, found it free (no daemon had bound it yet) and took it. Clusters on one slurmdbd
register under names of their own, though a ctld port comes round again."""

from __future__ import annotations

import threading

from support.slurmcluster import free_port_block


def test_blocks_asked_for_at_once_do_not_overlap():
    got: list[int] = []
    go = threading.Barrier(4)

    def ask() -> None:
        go.wait()
        got.append(free_port_block(17, low=24000, high=32000))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4
    spans = sorted((b, b + 17) for b in got)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)), spans


def test_blocks_asked_for_by_processes_at_once_do_not_overlap(tmp_path):
    """Two pytest sessions on one host (CI's parts, engineers' worktrees) ask at once: the
    handed blocks live in one file under a lock, so no two processes get one block."""
    import os
    import subprocess
    import sys

    from support.helpers import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"),
               SLURMGUARD_TEST_PORTS=str(tmp_path / "ports.json"))
    code = ("import sys, time; from support.slurmcluster import free_port_block as f; "
            "time.sleep(max(0.0, float(sys.argv[1]) - time.time())); "
            "print(f(17, low=24000, high=32000))")
    import time
    at = str(time.time() + 1.5)
    procs = [subprocess.Popen([sys.executable, "-c", code, at], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    got = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    spans = sorted((b, b + 17) for b in got)
    assert len(set(got)) == 4, spans
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)), spans


def test_single_ports_are_handed_once_below_the_ephemeral_range(tmp_path, monkeypatch):
    """serve's, PostgreSQL's and sshd's ports (support/ports.py free_port): never a port the
    kernel could hand to an outgoing connection, never one handed already."""
    from support import ports

    monkeypatch.setattr(ports, "_HANDED_FILE", tmp_path / "ports.json")
    got = [ports.free_port() for _ in range(50)]
    assert len(set(got)) == 50
    assert all(15000 <= p < 20000 for p in got), got


def test_small_blocks_are_not_starved_by_the_hold(tmp_path, monkeypatch):
    """Forty small clusters inside one hold (a run beside another: CI's parts, a loop of the
    fleet day's four clusters) all get a block of their own; a step of 1,100 for every size
    left ten places and the eleventh failed."""
    from support import ports

    monkeypatch.setattr(ports, "_HANDED_FILE", tmp_path / "ports.json")
    got = [ports.free_port_block(17) for _ in range(40)]
    assert len(set(got)) == 40
    spans = sorted((b, b + 17) for b in got)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))


def test_clusters_on_one_slurmdbd_each_get_a_cluster_name_of_their_own(tmp_path):
    """The session's one slurmdbd (tests/conftest.py): a later cluster whose slurmctld got a
    port an earlier one had must not register under the earlier one's name (one job table:
    its sacct would show the other's jobs, whose ids also start at 1)."""
    from support.slurmdbd import SlurmDBD

    dbd = SlurmDBD(tmp_path, 0, 0)  # not started: names are handed out by the object alone
    assert [dbd.cluster_name(n) for n in ("sg20100", "sg20200", "sg20100", "sg20100")] == [
        "sg20100", "sg20200", "sg20100r1", "sg20100r2"]
