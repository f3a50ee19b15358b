"""Checkpoint finders: each layout's "finished" marker, torn saves skipped, hostile input."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from slurmguard.errors import InputError
from slurmguard.job import checkpoint as ck


def _manifest_ckpt(root: Path, step: int, shards: int = 2) -> Path:
    d = root / f"step-{step:06d}"
    d.mkdir()
    for i in range(shards):
        (d / f"shard{i}.bin").write_bytes(os.urandom(64) + str(step).encode())
    (d / "sub").mkdir()
    (d / "sub" / "extra.json").write_text(json.dumps({"step": step}))
    ck.write_manifest(d, step)
    return d


def test_manifest_roundtrip_and_newest(tmp_path: Path) -> None:
    for s in (10, 20, 30):
        _manifest_ckpt(tmp_path, s)
    best = ck.find_latest(tmp_path)
    assert best is not None and best.step == 30 and best.layout == "manifest"
    assert best.path == str(tmp_path / "step-000030")
    doc = json.loads((tmp_path / "step-000030" / ck.MANIFEST_NAME).read_text())
    assert sorted(f["path"] for f in doc["files"]) == ["shard0.bin", "shard1.bin", "sub/extra.json"]


@pytest.mark.parametrize("tear", ["missing", "checksum", "size", "manifest-garbage", "no-manifest"])
def test_manifest_torn_falls_back(tmp_path: Path, tear: str, caplog: pytest.LogCaptureFixture) -> None:
    _manifest_ckpt(tmp_path, 10)
    d = _manifest_ckpt(tmp_path, 20)
    if tear == "missing":
        (d / "shard1.bin").unlink()
    elif tear == "checksum":
        data = bytearray((d / "shard0.bin").read_bytes())
        data[0] ^= 0xFF
        (d / "shard0.bin").write_bytes(bytes(data))
    elif tear == "size":
        with open(d / "shard0.bin", "ab") as fh:
            fh.write(b"x")
    elif tear == "manifest-garbage":
        (d / ck.MANIFEST_NAME).write_text('{"version": 1, "step": ')
    elif tear == "no-manifest":
        (d / ck.MANIFEST_NAME).unlink()
    with caplog.at_level(logging.WARNING, logger="slurmguard.job.checkpoint"):
        best = ck.find_latest(tmp_path)
    assert best is not None and best.step == 10
    if tear != "no-manifest":  # a dir without any marker is simply not a checkpoint
        assert any("step-000020" in r.getMessage() for r in caplog.records)


def test_manifest_symlink_out_of_dir_is_torn(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    root = tmp_path / "ckpts"
    root.mkdir()
    d = root / "step-000005"
    d.mkdir()
    (d / "w.bin").write_text("w")
    ck.write_manifest(d, 5)
    doc = json.loads((d / ck.MANIFEST_NAME).read_text())
    doc["files"].append({"path": "link", "size": 1, "sha256": ck.sha256_file(outside / "secret")})
    (d / "link").symlink_to(outside / "secret")
    (d / ck.MANIFEST_NAME).write_text(json.dumps(doc))
    res = ck.scan(root)
    assert res.latest is None
    assert "outside" in res.skipped[0].reason
    # A whole checkpoint dir that is a symlink out of the checkpoint root is skipped too.
    (root / "step-000009").symlink_to(outside)
    res = ck.scan(root)
    assert any(s.path.endswith("step-000009") and "outside" in s.reason for s in res.skipped)


def test_manifest_hostile_entries(tmp_path: Path) -> None:
    d = tmp_path / "step-1"
    d.mkdir()
    for bad in ({"version": 1, "step": 2**64, "files": []},
                {"version": 1, "step": 1, "files": [{"path": "../x", "size": 1, "sha256": "0" * 64}]},
                {"version": 1, "step": 1, "files": [{"path": "/etc/passwd", "size": 1, "sha256": "0" * 64}]},
                {"version": 1, "step": True, "files": []},
                {"version": 2, "step": 1, "files": []},
                [1, 2]):
        (d / ck.MANIFEST_NAME).write_text(json.dumps(bad))
        with pytest.raises(InputError):
            ck.verify_manifest(d)
        assert ck.find_latest(tmp_path) is None


def test_dcp(tmp_path: Path) -> None:
    for step in (100, 200):
        d = tmp_path / f"step_{step}"
        d.mkdir()
        (d / "__0_0.distcp").write_bytes(b"a")
        (d / "__1_0.distcp").write_bytes(b"b")
        (d / ".metadata").write_bytes(b"meta")
    (tmp_path / "step_300").mkdir()
    (tmp_path / "step_300" / "__0_0.distcp").write_bytes(b"a")  # no .metadata: torn
    res = ck.scan(tmp_path)
    assert res.latest and res.latest.step == 200 and res.latest.layout == "dcp"
    assert [s.step for s in res.skipped] == [300]


def test_deepspeed(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        (tmp_path / f"global_step{step}").mkdir()
        (tmp_path / f"global_step{step}" / "mp_rank_00_model_states.pt").write_bytes(b"m")
    (tmp_path / "latest").write_text("global_step20")
    res = ck.scan(tmp_path)
    assert res.latest and res.latest.step == 20 and res.latest.layout == "deepspeed"
    assert [s.step for s in res.skipped] == [30]  # being written when the node died
    (tmp_path / "latest").write_text("global_step40\n")  # names a missing tag
    res = ck.scan(tmp_path)
    assert res.latest and res.latest.step == 30
    assert any("missing" in s.reason for s in res.skipped)
    (tmp_path / "latest").write_text("../../etc")
    res = ck.scan(tmp_path)
    assert res.latest is None and "expected a tag name" in res.skipped[0].reason


def test_megatron(tmp_path: Path) -> None:
    for it in (100, 200):
        (tmp_path / f"iter_{it:07d}").mkdir()
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    tracker.write_text("200")
    assert ck.find_latest(tmp_path).step == 200  # type: ignore[union-attr]
    tracker.write_text("300")  # iter_0000300 never appeared
    best = ck.find_latest(tmp_path)
    assert best and best.step == 200 and best.layout == "megatron"
    for garbage in ("banana", "9" * 40, "\x00\xff", "1e9", "-5"):
        tracker.write_bytes(garbage.encode("latin-1"))
        res = ck.scan(tmp_path)
        assert res.latest is None, garbage
        assert "latest_checkpointed_iteration.txt" in res.skipped[0].reason or res.skipped[0].path == str(tracker)
    tracker.write_bytes(b"1" * 10000)  # huge file: refused, not read whole
    assert "larger than" in ck.scan(tmp_path).skipped[0].reason


def test_megatron_dist_ckpt_needs_tracker(tmp_path: Path) -> None:
    # Megatron torch_dist saves are DCP dirs inside iter dirs: the tracker still rules.
    for it in (100, 200):
        d = tmp_path / f"iter_{it:07d}"
        d.mkdir()
        (d / "__0_0.distcp").write_bytes(b"x")
        (d / ".metadata").write_bytes(b"m")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    res = ck.scan(tmp_path)
    assert res.latest and res.latest.step == 100
    assert [c.path for c in res.complete].count(res.latest.path) == 1


def test_nemo(tmp_path: Path) -> None:
    (tmp_path / "megatron_gpt--val_loss=2.10-step=100-consumed_samples=800.0.ckpt").write_bytes(b"a")
    (tmp_path / "megatron_gpt--val_loss=2.00-step=200-consumed_samples=1600.0.ckpt").write_bytes(b"b")
    (tmp_path / "megatron_gpt--val_loss=2.00-step=200-consumed_samples=1600.0-unfinished").write_text("")
    (tmp_path / "megatron_gpt--val_loss=1.90-step=300-consumed_samples=2400.0").mkdir()  # dist dir
    (tmp_path / "megatron_gpt--val_loss=1.90-step=300-consumed_samples=2400.0-unfinished").write_text("")
    res = ck.scan(tmp_path, ["nemo"])
    assert res.latest and res.latest.step == 100 and res.latest.layout == "nemo"
    assert sorted(s.step for s in res.skipped) == [200, 300]


def test_bad_directory_arguments(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="absolute"):
        ck.scan("relative/dir")
    with pytest.raises(InputError, match="does not exist"):
        ck.scan(tmp_path / "nope")
    with pytest.raises(InputError, match="unknown checkpoint layout"):
        ck.scan(tmp_path, ["orbax"])
    assert ck.find_latest(tmp_path) is None  # empty: nothing to resume from, not an error


def test_parse_step() -> None:
    assert ck.parse_step("iter_0000100") == 100
    assert ck.parse_step("global_step7") == 7
    assert ck.parse_step("x--val_loss=2.10-step=300-consumed_samples=800.0.ckpt") == 300
    assert ck.parse_step("checkpoint-55") == 55
    assert ck.parse_step("latest") is None
    with pytest.raises(InputError):
        ck.parse_step("step_" + "9" * 25)


def test_write_manifest_refuses_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        ck.write_manifest(tmp_path / "missing", 1)
    with pytest.raises(InputError):
        ck.write_manifest(tmp_path, -1)
    with pytest.raises(InputError):
        ck.write_manifest(tmp_path, 1, files=["../escape"])
