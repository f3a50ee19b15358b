"""serve's policy passes wait out ``serve.policy_min_gap`` (docs/serve.md, its row):
records that arrive in a stream are evaluated together, at most one incremental pass per gap,
where each ingest batch used to wake a pass of its own (at 10,000 nodes, 1,677 passes in two
minutes: most of serve's CPU).

A real serve on a SQLite store and a real slurmctld (its node table: support/replicas.py's
big partition); records POSTed one at a time for 3 s (at most 20 a second); the passes counted by
serve's own histogram (slurmguard_policy_pass_duration_seconds). With the gap at 0 the same
stream makes at least as many passes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.replicas import big_partition, start_replicas
from support.sgserve import TOKEN, new_store
from support.wait import wait_for

from slurmguard.adapters.serve_client import post_records
from slurmguard.contract import CheckResult, Health
from slurmguard.node.record import make_record

STREAM_S, RATE = 3.0, 20.0


def _stream(tmp: Path, conf: str, gap: float) -> tuple[int, float, int]:
    """(incremental passes, seconds from the stream's start to the count, records stored)."""
    (serve,) = start_replicas(tmp, new_store(tmp), conf, 1,
                              serve_extra=f"policy_interval = 60.0\npolicy_min_gap = {gap}")
    try:
        count = "slurmguard_policy_pass_duration_seconds_count"
        before = serve.metric(count, kind="incremental")
        t0, stored, i = time.monotonic(), 0, 0
        while time.monotonic() - t0 < STREAM_S:
            node = f"m{i % 100 + 1:03d}"
            rec = make_record(node, "healthcheck", [CheckResult("gpu-count", Health.HEALTHY)],
                              "pass", "")
            stored += len(post_records(serve.url + "/ingest", TOKEN, [rec], 30)["stored"])
            i += 1
            time.sleep(1 / RATE)
        # the last record's pass: at most one gap after it
        wait_for(lambda: serve.metric(count, kind="incremental") > before, gap + 10,
                 what="an incremental pass")
        time.sleep(gap + 0.5)
        return int(serve.metric(count, kind="incremental") - before), \
            time.monotonic() - t0, stored
    finally:
        serve.stop()


@pytest.mark.slurm
def test_a_stream_of_records_is_evaluated_in_at_most_one_pass_a_gap(
        slurm_cluster_factory, tmp_path: Path) -> None:
    conf = big_partition(slurm_cluster_factory)
    (tmp_path / "gap").mkdir()
    passes, seconds, stored = _stream(tmp_path / "gap", conf, 1.0)
    (tmp_path / "nogap").mkdir()
    passes0, _, stored0 = _stream(tmp_path / "nogap", conf, 0.0)
    print(f"\n{stored} records in {STREAM_S:.0f} s: {passes} incremental passes at "
          f"policy_min_gap 1 s ({seconds:.1f} s counted); {passes0} at 0")
    # a stream of records each time (one POST at a time, each answered once stored)
    assert stored >= 3 * STREAM_S and stored0 >= 3 * STREAM_S, (stored, stored0)
    assert 1 <= passes <= seconds / 1.0 + 1 < stored, (passes, seconds, stored)
    assert passes0 >= passes, (passes0, passes)
