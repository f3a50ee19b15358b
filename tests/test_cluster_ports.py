"""Test clusters started at once get port blocks of their own (tests/support/slurmcluster.py
`free_port_block`): the fleet day starts three clusters in threads, and each probed the same
first block, found it free (no daemon had bound it yet) and took it."""

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
