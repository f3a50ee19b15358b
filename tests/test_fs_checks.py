"""fs-mount: the real mount table and real probe subprocesses, including a probe that hangs."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from fakehw.sysfs import write_config
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wait import wait_for

from slurmguard import config
from slurmguard.adapters import fs
from slurmguard.checks.base import CheckContext
from slurmguard.checks.fs import fs_mount
from slurmguard.contract import Health
from slurmguard.sources import GatherContext


def run(tmp: Path, **params: Any):
    cfg = config.load(str(write_config(tmp / "fs.toml", {f"checks.fs.{k}": v
                                                         for k, v in params.items()})))
    t0 = time.monotonic()
    snap = fs.gather(cfg, GatherContext("n1", "check", time.monotonic() + 30))
    took = time.monotonic() - t0
    r = fs_mount.run(CheckContext(cfg.section("checks.fs"), {"fs": snap}, {}, time.time()))
    return r, snap, took


def test_parse_mountinfo_escapes_and_options() -> None:
    text = ("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
            "60 27 0:50 / /mnt/my\\040data ro,nosuid - nfs4 srv:/export/my\\040data rw,vers=4.2\n"
            "61 27 0:51 / /scratch rw shared:5 - lustre 10.0.0.1@o2ib:/scratch rw\n"
            "garbage line\n")
    mounts = fs.parse_mountinfo(text)
    assert [m.mountpoint for m in mounts] == ["/", "/mnt/my data", "/scratch"]
    assert mounts[1].read_only and mounts[1].source == "srv:/export/my data"
    assert not mounts[2].read_only and mounts[2].fstype == "lustre"
    snap = fs.FsSnapshot(mounts, {})
    assert snap.mount_of("/scratch/u/x").mountpoint == "/scratch"
    assert snap.mount_of("/scratchy").mountpoint == "/"


def test_plain_machine_defaults_are_healthy(tmp_path: Path) -> None:
    r, snap, _ = run(tmp_path)
    assert r.health is Health.HEALTHY, r.reason
    assert set(snap.probes) == {"/", "/tmp"} and all(p.ok for p in snap.probes.values())
    assert 0 < r.details["paths"]["/"]["free_pct"] <= 100


def test_not_a_mount_point(tmp_path: Path) -> None:
    r, _, _ = run(tmp_path, mounts=["/", str(tmp_path)])
    assert r.health is Health.UNHEALTHY and r.reason == f"{tmp_path} is not mounted"


def test_missing_dir_is_unhealthy(tmp_path: Path) -> None:
    r, _, _ = run(tmp_path, dirs=[str(tmp_path / "gone")])
    assert r.health is Health.UNHEALTHY
    assert r.reason.startswith(f"{tmp_path / 'gone'}: ")


def test_read_only_from_mount_table(tmp_path: Path) -> None:
    mi = tmp_path / "mountinfo"
    mi.write_text("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                  "70 27 0:60 / /tmp ro,relatime - ext4 /dev/vdb ro,errors=remount-ro\n")
    r, _, _ = run(tmp_path, mountinfo=str(mi), mounts=["/", "/tmp"], dirs=[])
    assert r.reason == "/tmp is mounted read-only (ext4 /dev/vdb)"
    r, _, _ = run(tmp_path, mountinfo=str(mi), mounts=["/", "/tmp"], dirs=[],
                  allow_read_only=["/tmp"])
    assert r.health is Health.HEALTHY


def _probe(tmp: Path, body: str) -> list[str]:
    """A probe program (a real executable) that prints statfs-like numbers."""
    script = tmp / "probe.sh"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return [str(script)]


# avail blocks, blocks, bsize, free inodes, inodes -> (health, reason)
SPACE_TABLE = [
    ("500 1000 4096 500 1000", Health.HEALTHY, ""),
    ("20 1000 4096 500 1000", Health.UNHEALTHY, "/tmp has 2.0% free space (< 3%)"),
    ("50 1000 4096 500 1000", Health.DEGRADED, "/tmp has 5.0% free space (< 10%)"),
    ("500 1000 4096 10 1000", Health.UNHEALTHY, "/tmp has 1.0% free inodes (< 3%)"),
    ("500 1000 4096 0 0", Health.HEALTHY, ""),  # no inode limit (btrfs): not checked
    ("garbage", Health.UNHEALTHY, "/tmp: unexpected probe output: 'garbage'"),
]


@pytest.mark.parametrize("out,health,reason", SPACE_TABLE)
def test_space_and_inodes(tmp_path: Path, out: str, health: Health, reason: str) -> None:
    probe = _probe(tmp_path, f'echo "{out}"')
    r, _, _ = run(tmp_path, mounts=[], dirs=["/tmp"], probe=probe)
    assert (r.health, r.reason) == (health, reason)


def _group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the process group?"""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_hung_probe_is_bounded_and_killed(tmp_path: Path) -> None:
    """A probe that blocks (cat on a FIFO nobody writes, plus a sleeping grandchild) for two
    paths: the gather returns within probe_timeout + slack, concurrently, and leaves no
    process of either probe's group behind."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    pids = tmp_path / "pids"
    probe = _probe(tmp_path, f'echo $$ >> {pids}\nsleep 60 &\nexec cat {fifo}')
    r, snap, took = run(tmp_path, mounts=[], dirs=["/tmp", "/"], probe=probe, probe_timeout=1.0)
    assert took < 1.0 + 1.5, f"gather took {took:.2f}s"  # concurrent: not 2 x 1 s + grace
    assert r.health is Health.UNHEALTHY
    assert r.reason == "/tmp not responding after 1s (+1 more)"
    assert all(p.timed_out for p in snap.probes.values())
    groups = [int(x) for x in pids.read_text().split()]
    assert len(groups) == 2
    wait_for(lambda: not any(_group_alive(g) for g in groups), 2, interval=0.05,
             what="the probe process groups to be gone")
    assert not any(_group_alive(g) for g in groups)


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_mountinfo_parser_never_raises(text: str) -> None:
    fs.parse_mountinfo(text)
    fs.parse_probe("/x", text, 0.0)


_path = st.lists(st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF,
                                       blacklist_characters="/\\"), min_size=1, max_size=8)
                 .map(lambda s: s.replace(" ", "")), min_size=1, max_size=4)


def _escape(path: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


@given(parts=_path, spaces=st.booleans(), ro=st.booleans())
@settings(max_examples=200, deadline=None)
def test_mountinfo_round_trip(parts: list[str], spaces: bool, ro: bool) -> None:
    path = "/" + "/".join(parts) + (" dir" if spaces else "")
    opt = "ro" if ro else "rw"
    line = f"61 27 0:51 / {_escape(path)} {opt},relatime shared:5 - nfs4 srv:{_escape(path)} rw\n"
    (m,) = fs.parse_mountinfo(line)
    assert (m.mountpoint, m.source, m.read_only, m.fstype) == (path, "srv:" + path, ro, "nfs4")
