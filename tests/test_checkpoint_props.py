"""Property tests: whatever mix of finished and torn saves, the finder picks the newest finished
one and never a torn one, and never raises on hostile bytes."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmguard.job import checkpoint as ck

TEARS = ["none", "missing-shard", "wrong-checksum", "truncated", "manifest-first", "no-manifest"]

_settings = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def _build(root: Path, step: int, tear: str, payload: bytes) -> None:
    d = root / f"step-{step:08d}"
    d.mkdir()
    shards = [d / "model.bin", d / "optim.bin"]
    if tear == "manifest-first":
        # The bug the manifest exists to catch: manifest written before the shards are done.
        for s in shards:
            s.write_bytes(payload)
        ck.write_manifest(d, step)
        shards[1].write_bytes(payload[: len(payload) // 2])  # still being written
        if len(payload) < 2:
            shards[1].write_bytes(payload + b"more")
        return
    for s in shards:
        s.write_bytes(payload + s.name.encode())
    if tear == "no-manifest":
        return
    ck.write_manifest(d, step)
    if tear == "missing-shard":
        shards[0].unlink()
    elif tear == "wrong-checksum":
        data = bytearray(shards[1].read_bytes())
        data[-1] ^= 0x01
        shards[1].write_bytes(bytes(data))
    elif tear == "truncated":
        shards[0].write_bytes(shards[0].read_bytes()[:-1])


@_settings
@given(st.dictionaries(st.integers(0, 10**12), st.sampled_from(TEARS), max_size=6),
       st.binary(min_size=0, max_size=64))
def test_newest_complete_manifest_wins(saves: dict[int, str], payload: bytes) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        for step, tear in saves.items():
            _build(root, step, tear, payload)
        res = ck.scan(root)
        good = sorted((s for s, t in saves.items() if t == "none"), reverse=True)
        assert [c.step for c in res.complete] == good
        torn = {s for s, t in saves.items() if t not in ("none", "no-manifest")}
        assert {s.step for s in res.skipped} == torn
    finally:
        shutil.rmtree(root)


@_settings
@given(st.lists(st.integers(0, 10**6), max_size=5, unique=True),
       st.one_of(st.integers(0, 10**6).map(str), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))),
       st.sampled_from(["megatron", "deepspeed"]))
def test_tracker_layouts(iters: list[int], tracker: str, layout: str) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        for it in iters:
            (root / (f"iter_{it:07d}" if layout == "megatron" else f"global_step{it}")).mkdir()
        if layout == "megatron":
            (root / "latest_checkpointed_iteration.txt").write_text(tracker, encoding="latin-1")
        else:
            text = f"global_step{tracker}" if tracker.isdigit() else tracker
            (root / "latest").write_text(text, encoding="latin-1")
        res = ck.scan(root, [layout])  # must not raise on any bytes
        named = int(tracker) if tracker.isdigit() and tracker.isascii() else None
        assert all(Path(c.path).is_dir() for c in res.complete)
        if named is None:
            if not any(ch.isdigit() for ch in tracker):
                assert res.complete == []
        else:
            expect = sorted((i for i in iters if i <= named), reverse=True)
            assert [c.step for c in res.complete] == expect
            for c in res.complete:
                assert c.step is not None and c.step <= named
    finally:
        shutil.rmtree(root)


@_settings
@given(st.binary(max_size=300))
def test_garbage_manifest_never_raises_past_scan(blob: bytes) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        d = root / "step-1"
        d.mkdir()
        (d / ck.MANIFEST_NAME).write_bytes(blob)
        res = ck.scan(root)
        assert res.latest is None or res.latest.step is not None
    finally:
        shutil.rmtree(root)
