"""The exit mapping table (pure) and slow-node naming from progress events."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.job.exitmap import LIMIT_EXIT, REQUEUE_EXIT, RunEnd, decide, match_infra
from slurmguard.job.wrapper import Progress

BUS, KILL, SEGV = -signal.SIGBUS, -signal.SIGKILL, -signal.SIGSEGV


@pytest.mark.parametrize("end,kind,code", [
    (RunEnd(0), "success", 0),
    (RunEnd(0, stalled=True, stall_action="requeue"), "success", 0),
    (RunEnd(1), "app", 1),
    (RunEnd(SEGV), "app", 139),
    (RunEnd(KILL), "app", 137),  # the OOM killer: the job's own memory use
    (RunEnd(BUS), "infra", REQUEUE_EXIT),
    (RunEnd(1, stalled=True, stall_action="log"), "app", 1),
    (RunEnd(-signal.SIGTERM, stalled=True, stall_action="requeue"), "infra", REQUEUE_EXIT),
    (RunEnd(REQUEUE_EXIT), "requested", REQUEUE_EXIT),
    (RunEnd(3, got_signal=signal.SIGUSR1), "requested", REQUEUE_EXIT),
    (RunEnd(-signal.SIGTERM, got_signal=signal.SIGTERM), "cancelled", 143),
    (RunEnd(1, got_signal=signal.SIGINT, infra_line="NCCL error"), "cancelled", 1),
    (RunEnd(1, infra_line="ncclSystemError: unhandled system error"), "infra", REQUEUE_EXIT),
    (RunEnd(1, node_drained="slurmguard: gpu-xid: Xid 79"), "infra", REQUEUE_EXIT),
    (RunEnd(BUS, restart=3, max_requeues=3), "limit", LIMIT_EXIT),
    (RunEnd(BUS, restart=2, max_requeues=3), "infra", REQUEUE_EXIT),
    (RunEnd(1, restart=9, max_requeues=3), "app", 1),
    (RunEnd(REQUEUE_EXIT, max_requeues=0), "limit", LIMIT_EXIT),
])
def test_decide_table(end: RunEnd, kind: str, code: int) -> None:
    v = decide(end)
    assert (v.kind, v.exit_code) == (kind, code), v.reason
    assert v.requeue == (code == REQUEUE_EXIT)


@given(st.integers(-64, 255), st.integers(0, 10), st.integers(0, 10), st.booleans(),
       st.sampled_from([None, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1]),
       st.sampled_from([None, "Xid 79"]), st.sampled_from([None, "slurmguard: x: y"]))
def test_decide_never_requeues_past_cap_or_app_errors(rc: int, restart: int, cap: int, stalled: bool,
                                                      sig: int | None, infra: str | None,
                                                      drained: str | None) -> None:
    v = decide(RunEnd(rc, restart, cap, stalled, "requeue", sig, infra, drained))
    if v.requeue:
        assert restart < cap and rc != 0
    if rc not in (0, REQUEUE_EXIT, -signal.SIGBUS) and not stalled and sig is None \
            and infra is None and drained is None:
        assert v.kind == "app" and not v.requeue
    assert 0 <= v.exit_code <= 255


def test_infra_patterns() -> None:
    assert match_infra("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error")
    assert match_infra("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)")
    assert match_infra("NVRM: Xid (PCI:0000:3b:00): 79, pid=123, GPU has fallen off the bus.")
    assert match_infra("RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert not match_infra("ValueError: shapes (3,) and (4,) not aligned")
    assert not match_infra("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")


def test_slow_node_is_named() -> None:
    p = Progress(last_event=0.0)
    for i in range(10):
        p.feed({"ev": "step", "step": i, "t": 1.0 * i, "node": "n1", "rank": 0})
        p.feed({"ev": "step", "step": i, "t": 1.0 * i, "node": "n2", "rank": 1})
        p.feed({"ev": "step", "step": i, "t": 2.5 * i, "node": "n3", "rank": 2})
    p.feed({"ev": "ckpt", "step": 9, "path": "/c/9"})
    p.feed({"ev": "bogus"})
    assert p.slow_nodes() == ["n3"]
    assert p.node_medians()["n1"] == pytest.approx(1.0)
    assert p.last_ckpt == {"path": "/c/9", "step": 9} and p.steps == 30
    q = Progress(last_event=0.0)
    for i in range(10):
        q.feed({"ev": "step", "step": i, "t": float(i), "node": "n1", "rank": 0})
    assert q.slow_nodes() == []  # one node: nothing to compare with


def test_throttled_reports_give_time_per_step() -> None:
    p = Progress(last_event=0.0)
    for i, t in enumerate([0.0, 10.0, 20.0, 30.0]):
        p.feed({"ev": "step", "step": i * 10, "t": t, "node": "n1", "rank": 0})
        p.feed({"ev": "step", "step": i * 5, "t": t, "node": "n2", "rank": 0})
    assert p.node_medians() == {"n1": pytest.approx(1.0), "n2": pytest.approx(2.0)}
    p.feed({"ev": "step", "step": "garbage", "t": 40.0, "node": "n1", "rank": 0})  # ignored
    assert p.node_medians()["n1"] == pytest.approx(1.0)
