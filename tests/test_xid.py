"""gpu-xid: the Xid parser, the classification table, and the check over real reads.

The kernel log is read by the real adapter from fixture files in /dev/kmsg record format (and
dmesg/syslog formats), and once from the real /dev/kmsg device.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from fakehw.kmsg import DEFAULT_GPUS, append_kmsg, inject_xid, write_gpu_tree
from fakehw.sysfs import write_config
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import require

from slurmguard import config
from slurmguard.adapters import kmsg
from slurmguard.checks.base import CheckContext
from slurmguard.checks.xid import gpu_xid
from slurmguard.checks.xid_table import XID_TABLE, XidClass, classify
from slurmguard.contract import Health
from slurmguard.errors import Unsupported
from slurmguard.sources import GatherContext
from slurmguard.sources.xidline import format_xid_line, normalize_pci, parse_xid_line

DATA = Path(__file__).parent / "data" / "kmsg"


def _cases() -> list[tuple[str, ...]]:
    out = []
    for line in (DATA / "xid-lines.txt").read_text().splitlines():
        if line.startswith("#") or "|||" not in line:
            continue
        want, raw = line.split("|||", 1)
        out.append((*want.split("|"), raw))
    return out


@pytest.mark.parametrize("pci,code,pid,name,msg,raw", _cases())
def test_parse_real_lines(pci: str, code: str, pid: str, name: str, msg: str, raw: str) -> None:
    ev = parse_xid_line(raw)
    assert ev is not None
    assert (ev.pci, ev.code) == (pci, int(code))
    assert ev.pid == (None if pid == "-" else int(pid))
    assert ev.process == (None if name == "-" else name)
    assert ev.message.startswith(msg)


@pytest.mark.parametrize("text", [
    "", "Xid", "NVRM: Xid", "NVRM: Xid (PCI:zzzz:3b:00): 79, x", "NVRM: loading NVIDIA UNIX",
    "slurmguard-test Xid-reader-marker", "NVRM: Xid (PCI:0000:3b:00): , nothing",
])
def test_parse_non_xid(text: str) -> None:
    assert parse_xid_line(text) is None


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_parser_never_raises(text: str) -> None:
    parse_xid_line(text)
    parse_xid_line("NVRM: Xid (PCI:0000:3b:00): " + text)


_msg = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="\x7f"),
               min_size=1, max_size=120).map(str.strip).filter(bool)


@given(dom=st.integers(0, 0xFFFF), bus=st.integers(0, 255), dev=st.integers(0, 31),
       code=st.integers(1, 999), msg=_msg, pid=st.one_of(st.none(), st.integers(1, 4194304)),
       name=st.one_of(st.none(), st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,14}", fullmatch=True)))
@settings(max_examples=300, deadline=None)
def test_round_trip(dom: int, bus: int, dev: int, code: int, msg: str, pid: int | None,
                    name: str | None) -> None:
    pci = f"{dom:04x}:{bus:02x}:{dev:02x}"
    ev = parse_xid_line(format_xid_line(pci, code, msg, pid, name))
    assert ev is not None
    assert (ev.pci, ev.code, ev.pid, ev.process, ev.message) == (pci, code, pid, name, msg)


def test_normalize_pci() -> None:
    assert normalize_pci("PCI:00000000:3B:00.0") == "0000:3b:00"
    assert normalize_pci("0000:3a:00.0") == "0000:3a:00"


@pytest.mark.parametrize("code,msg,want", [
    (79, "GPU has fallen off the bus.", XidClass.DRAIN),
    (48, "An uncorrectable double bit error", XidClass.DRAIN),
    (13, "Graphics Exception", XidClass.APP),
    (31, "MMU Fault", XidClass.APP),
    (63, "Row remapping event", XidClass.INFO),
    (92, "High single-bit ECC", XidClass.INFO),
    (999, "something new", XidClass.UNKNOWN),
    (144, "SAW_MVB Nonfatal XC0 i0 Link 0 (0x1)", XidClass.DEGRADED),
    (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6)", XidClass.DRAIN),
    (147, "TREX something without a severity", XidClass.DRAIN),
    (154, "GPU recovery action changed from 0x1 (GPU Reset) to 0x0 (None)", XidClass.INFO),
    (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot)", XidClass.DRAIN),
    (154, "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", XidClass.DRAIN),
    (154, "garbled", XidClass.DRAIN),
])
def test_classify(code: int, msg: str, want: XidClass) -> None:
    assert classify(code, msg)[0] is want


def test_classify_overrides() -> None:
    assert classify(13, "x", drain_codes=frozenset({13}))[0] is XidClass.DRAIN
    assert classify(79, "x", ignore_codes=frozenset({79}))[0] is XidClass.IGNORED
    assert classify(154, "to 0x2 (Node Reboot)")[1] == "GPU recovery action: Node Reboot"


def test_table_covers_catalog_drain_codes() -> None:
    for code in (48, 61, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143):
        assert XID_TABLE[code][0] is XidClass.DRAIN
    for code in (13, 31, 43, 45, 68, 69, 94):
        assert XID_TABLE[code][0] is XidClass.APP


# ------------------------------------------------------------------ the check over real reads


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    gpus = write_gpu_tree(tmp_path / "gpus")
    log = tmp_path / "kmsg.log"
    log.write_text("")
    boot = tmp_path / "boot_id"
    boot.write_text(str(uuid.uuid4()) + "\n")
    cfg = write_config(tmp_path / "sg.toml", {
        "checks.xid.source": "file", "checks.xid.file": str(log),
        "checks.xid.nvidia_proc_root": str(gpus), "checks.xid.boot_id_path": str(boot),
    })
    return {"log": log, "cfg": cfg, "gpus": gpus, "tmp": tmp_path, "boot": boot}


def run_xid(cfg_path: Path, previous: dict | None = None, now: float | None = None):
    cfg = config.load(str(cfg_path))
    log = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    ctx = CheckContext(cfg.section("checks.xid"), {"kmsg": log}, previous or {},
                       now or time.time())
    return gpu_xid.run(ctx), ctx.new_state


def test_fallen_off_bus_is_unhealthy_once(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07")
    inject_xid(node["log"], DEFAULT_GPUS[2], 79, "GPU has fallen off the bus.", pid=1234,
               name="python3")
    r, state = run_xid(node["cfg"])
    assert r.health is Health.UNHEALTHY
    assert r.reason == "GPU 2 (PCI 0000:3a:00) Xid 79: GPU has fallen off the bus"
    assert r.details["events"][0]["gpu"] == 2
    # the next run, with the saved cursor, does not count it again, but the fault is latched
    # until a reboot: no new Xid does not mean the GPU came back
    r2, state2 = run_xid(node["cfg"], state)
    assert r2.details["new_xids"] == 0 and r2.health is Health.UNHEALTHY
    assert r2.reason == ("GPU 2 (PCI 0000:3a:00) Xid 79: GPU has fallen off the bus "
                         "(latched until reboot)")
    # a new one after the cursor is counted (and named first)
    inject_xid(node["log"], DEFAULT_GPUS[7], 48, "An uncorrectable double bit error (DBE) ...")
    r3, state3 = run_xid(node["cfg"], state2)
    assert r3.health is Health.UNHEALTHY
    assert r3.reason == "GPU 7 (PCI 0000:db:00) Xid 48: double bit ECC error"
    assert len(state3["latched"]["faults"]) == 2
    # a reboot (new boot id) clears the latch; the cursor (file inode + offset) still holds
    node["boot"].write_text(str(uuid.uuid4()) + "\n")
    r4, state4 = run_xid(node["cfg"], state3)
    assert r4.health is Health.HEALTHY and state4["latched"]["faults"] == []


def test_latch_off(node: dict[str, Path]) -> None:
    cfg = write_config(node["tmp"] / "nolatch.toml", {
        "checks.xid.source": "file", "checks.xid.file": str(node["log"]),
        "checks.xid.nvidia_proc_root": str(node["gpus"]), "checks.xid.latch": False})
    inject_xid(node["log"], DEFAULT_GPUS[2], 79, "GPU has fallen off the bus.")
    r, state = run_xid(cfg)
    assert r.health is Health.UNHEALTHY
    r2, _ = run_xid(cfg, state)
    assert r2.health is Health.HEALTHY and "latched" not in state


def test_unknown_bus_and_more_count(node: dict[str, Path]) -> None:
    inject_xid(node["log"], "0000:77:00.0", 79, "GPU has fallen off the bus.")
    inject_xid(node["log"], DEFAULT_GPUS[0], 95, "Uncontained error")
    r, _ = run_xid(node["cfg"])
    assert r.reason == "GPU ? (PCI 0000:77:00) Xid 79: GPU has fallen off the bus (+1 more)"


def test_first_run_window(node: dict[str, Path]) -> None:
    # kmsg timestamps cannot predate the boot (and test machines may have booted minutes ago),
    # so the old record is a syslog line with its own wall-clock time
    old = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 7200))
    node["log"].write_text(f"{old} gpu017 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=1, "
                           "name=x, GPU has fallen off the bus.\n")
    r, state = run_xid(node["cfg"])
    assert r.health is Health.HEALTHY  # 2 h old, window is 1 h: already handled
    assert state["cursor"]["pos"] == node["log"].stat().st_size


def test_rotated_file_uses_window(node: dict[str, Path]) -> None:
    inject_xid(node["log"], DEFAULT_GPUS[1], 13, "Graphics Exception")
    _, state = run_xid(node["cfg"])
    node["log"].unlink()  # logrotate: a new file (new inode), smaller than the old offset
    inject_xid(node["log"], DEFAULT_GPUS[3], 62, "PMU halt")
    r, _ = run_xid(node["cfg"], state)
    assert r.health is Health.UNHEALTHY and "GPU 3" in r.reason


def test_app_errors_repeat_to_degraded(node: dict[str, Path]) -> None:
    state: dict = {}
    healths = []
    for _ in range(3):
        inject_xid(node["log"], DEFAULT_GPUS[5], 13, "Graphics Exception: ESR 0x404600=0x80000002",
                   pid=99, name="python3")
        r, state = run_xid(node["cfg"], state)
        healths.append(r.health)
    assert healths == [Health.HEALTHY, Health.HEALTHY, Health.DEGRADED]
    assert r.reason == "GPU 5 (PCI 0000:ab:00): 3 app-error Xids within 3600s"


def test_nonfatal_nvlink_and_unknown_degrade(node: dict[str, Path]) -> None:
    inject_xid(node["log"], DEFAULT_GPUS[4], 144,
               "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x0 0x0 0x0 0x0)")
    r, state = run_xid(node["cfg"])
    assert r.health is Health.DEGRADED and "Xid 144: NVLink SAW error (non-fatal)" in r.reason
    inject_xid(node["log"], DEFAULT_GPUS[4], 555, "brand new")
    r, _ = run_xid(node["cfg"], state)
    assert r.reason == "GPU 4 (PCI 0000:9a:00) Xid 555: unknown Xid"


def test_config_overrides(node: dict[str, Path]) -> None:
    cfg = write_config(node["tmp"] / "o.toml", {
        "checks.xid.source": "file", "checks.xid.file": str(node["log"]),
        "checks.xid.nvidia_proc_root": str(node["gpus"]),
        "checks.xid.drain_codes": [13], "checks.xid.ignore_codes": [79],
    })
    inject_xid(node["log"], DEFAULT_GPUS[0], 79, "GPU has fallen off the bus.")
    r, state = run_xid(cfg)
    assert r.health is Health.HEALTHY and r.details["events"][0]["class"] == "ignored"
    inject_xid(node["log"], DEFAULT_GPUS[0], 13, "Graphics Exception")
    r, _ = run_xid(cfg, state)
    assert r.health is Health.UNHEALTHY and "Xid 13" in r.reason


def test_dmesg_and_syslog_lines(node: dict[str, Path]) -> None:
    up = time.time() - kmsg.boot_time("/proc/stat")
    stamp = time.strftime("%b %e %H:%M:%S", time.localtime())
    old = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 86400))
    with open(node["log"], "a") as fh:
        fh.write(f"[{up:12.6f}] NVRM: Xid (PCI:0000:2a:00): 64, pid='<unknown>', name=<unknown>, "
                 "Row Remapper Error: failed to remap\n")
        fh.write(f"{stamp} gpu017 kernel: [ {up:.6f}] NVRM: Xid (PCI:0000:5d:00): 119, pid=1, "
                 "name=x, Timeout after 6s of waiting for RPC response from GPU3 GSP!\n")
        fh.write(f"{old} gpu017 kernel: NVRM: Xid (PCI:0000:db:00): 79, pid=1, name=x, old\n")
        fh.write("NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, partial line without newline")
    r, _ = run_xid(node["cfg"])
    got = sorted((e["gpu"], e["xid"]) for e in r.details["events"])
    assert got == [(1, 64), (3, 119)]  # the day-old 79 is outside the window, the partial skipped


def test_no_driver_is_unsupported(tmp_path: Path) -> None:
    log = tmp_path / "k.log"
    append_kmsg(log, "usb 1-1: new high-speed USB device")
    cfg = config.load(str(write_config(tmp_path / "c.toml", {
        "checks.xid.source": "file", "checks.xid.file": str(log),
        "checks.xid.nvidia_proc_root": str(tmp_path / "absent")})))
    append_kmsg(log, "slurmguard-test Xid-reader-marker")  # mentions Xid, is no Xid line
    with pytest.raises(Unsupported):
        kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 5))
    # a real Xid line without the driver's /proc tree (driver failed to load back): reported
    inject_xid(log, DEFAULT_GPUS[0], 79, "GPU has fallen off the bus.")
    got = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 5))
    r = gpu_xid.run(CheckContext(cfg.section("checks.xid"), {"kmsg": got}, {}, time.time()))
    assert r.reason == "GPU ? (PCI 0000:18:00) Xid 79: GPU has fallen off the bus"


def test_real_dev_kmsg(tmp_path: Path) -> None:
    """Read the real /dev/kmsg ring buffer: non-blocking to EAGAIN, seq + boot id cursor."""
    require(os.access("/dev/kmsg", os.R_OK | os.W_OK), "/dev/kmsg not readable and writable")
    gpus = write_gpu_tree(tmp_path / "gpus")
    cfg_path = write_config(tmp_path / "c.toml", {"checks.xid.nvidia_proc_root": str(gpus)})
    marker = f"slurmguard-test Xid-reader-marker {uuid.uuid4().hex}"  # not an Xid line
    with open("/dev/kmsg", "w") as fh:
        fh.write(marker + "\n")
    cfg = config.load(str(cfg_path))
    log = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    assert log.kind == "kmsg" and log.scanned > 0
    assert log.identity == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    mine = [r for r in log.records if r.text == marker]
    assert len(mine) == 1 and mine[0].pos <= log.end_pos
    assert abs(mine[0].wall - time.time()) < 120
    ctx = CheckContext(cfg.section("checks.xid"), {"kmsg": log}, {}, time.time())
    r = gpu_xid.run(ctx)
    assert r.health in (Health.HEALTHY, Health.DEGRADED, Health.UNHEALTHY)
    # it names "Xid" but is no driver line: reported as unreadable, never read as an Xid code
    assert all(e["kind"] == "unreadable" for e in r.details["events"] if e["message"] == marker)
    assert ctx.new_state["cursor"] == {"kind": "kmsg", "identity": log.identity,
                                       "pos": log.end_pos}


def test_journal_source(node: dict[str, Path]) -> None:
    require(os.path.exists("/usr/bin/journalctl"), "journalctl not installed")
    cfg = config.load(str(write_config(node["tmp"] / "j.toml", {
        "checks.xid.source": "journal", "checks.xid.nvidia_proc_root": str(node["gpus"])})))
    log = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    assert log.kind == "journal" and log.identity
    assert all(r.wall is not None for r in log.records)


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_log_line_parsers_never_raise(text: str) -> None:
    kmsg.parse_kmsg_record(text)
    wall, msg = kmsg.parse_log_line(text, 1_700_000_000.0, time.time())
    assert isinstance(msg, str)


@given(seq=st.integers(0, 2**63), usec=st.integers(0, 2**40), msg=_msg)
@settings(max_examples=200, deadline=None)
def test_kmsg_record_round_trip(seq: int, usec: int, msg: str) -> None:
    assert kmsg.parse_kmsg_record(f"6,{seq},{usec},-;{msg}\n SUBSYSTEM=pci\n") == (seq, usec, msg)
