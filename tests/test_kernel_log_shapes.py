"""Every shape in which the kernel log reports a GPU or NVSwitch fault, and every timestamp form.

Table tests on lines written from the documented formats (the driver's printf formats, dmesg's
and journalctl's output modes; docs/checks.md "Kernel-log line formats"), a Hypothesis test
that no line crashes the reader and that every line naming an Xid or SXid is classified or
reported, and the gpu-xid check over real file reads of each form.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path

import pytest
from fakehw.kmsg import DEFAULT_GPUS, append_kmsg, write_gpu_tree
from fakehw.sysfs import write_config
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.adapters import kmsg
from slurmguard.checks.base import CheckContext
from slurmguard.checks.xid import gpu_xid
from slurmguard.checks.xid_table import XID_TABLE, XidClass, classify, classify_sxid
from slurmguard.contract import Health
from slurmguard.sources import GatherContext
from slurmguard.sources.xidline import parse_kernel_line

# ------------------------------------------------------------------------------ line shapes

SHAPES = [
    # (line, kind, pci, code, switch)
    ("nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 31 LTSSM Fault Up",
     "sxid", "0000:c6:00", 20034, 3),
    ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 47 egress non-posted "
     "PRIV error (First)", "sxid", "0000:05:00", 12028, 0),
    ("[2026-07-15T04:18:55.513286+00:00] nvidia-nvswitch1: SXid (PCI:0000:59:00.0): 23001, "
     "Fatal, Link 12 Always Fatal", "sxid", "0000:59:00", 23001, 1),
    ("SXid (PCI:0000:87:00.0): 24007, Fatal, Link 30 sourcetrack timeout error",
     "sxid", "0000:87:00", 24007, None),
    ("NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.", "bus", "0000:a1:00", 79, None),
    ("NVRM: GPU at PCI:0000:a1:00: GPU has fallen off the bus.", "bus", "0000:a1:00", 79, None),
    ("NVRM: The NVIDIA GPU has fallen off the bus and is not responding", "bus", "", 79, None),
    ("NVRM: Xid (0003:00): 8, Channel 00000001", "xid", "0000:03:00", 8, None),
    ("NVRM: Xid (0001:00): 13, 0008 00000000 00008297 00001b64 00000080 00000000",
     "xid", "0000:01:00", 13, None),
    ("NVRM: Xid (PCI:0000:3b:00.0): 79, pid=1, name=x, GPU has fallen off the bus.",
     "xid", "0000:3b:00", 79, None),
    ("NVRM: Xid (PCI:0000:05:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error "
     "detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "xid", "0000:05:00", 74, None),
    ("NVRM: Xid (PCI:zzzz:3b:00): 79, GPU has fallen off the bus", "bus", "", 79, None),
    ("NVRM: Xid (43, pid: 5678): ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "unreadable", "", 0, None),
    ("NVRM: Xid (PCI:0000:3b:00): , nothing", "unreadable", "", 0, None),
    ("nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): garbled, Fatal", "unreadable", "", 0, None),
]


@pytest.mark.parametrize("line,kind,pci,code,switch", SHAPES)
def test_every_fault_shape(line: str, kind: str, pci: str, code: int, switch: int | None) -> None:
    ev = parse_kernel_line(line)
    assert ev is not None
    assert (ev.kind, ev.pci, ev.code, ev.switch) == (kind, pci, code, switch)


@pytest.mark.parametrize("line", [
    "", "usb 1-1: new high-speed USB device number 2", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "xid lower case is no NVIDIA line", "XidFoo is one word",
])
def test_other_lines_are_not_faults(line: str) -> None:
    assert parse_kernel_line(line) is None


@pytest.mark.parametrize("code,msg,want,what", [
    (20034, "Fatal, Link 31 LTSSM Fault Up", XidClass.DRAIN, "NVLink LTSSM fault (fatal)"),
    (12028, "Non-fatal, Link 47 egress", XidClass.DEGRADED, "egress non-posted PRIV error (non-fatal)"),
    (99999, "Fatal, something new", XidClass.DRAIN, "SXid (fatal)"),
    (99999, "Non-fatal, something new", XidClass.DEGRADED, "SXid (non-fatal)"),
    (99999, "no severity printed", XidClass.UNKNOWN, "unknown SXid"),
    (24007, "no severity printed", XidClass.DRAIN, "sourcetrack timeout"),
    (23001, "Always Fatal", XidClass.DRAIN, "always fatal (fatal)"),
])
def test_classify_sxid(code: int, msg: str, want: XidClass, what: str) -> None:
    assert classify_sxid(code, msg) == (want, what)
    assert classify_sxid(code, msg, ignore_codes=frozenset({code}))[0] is XidClass.IGNORED


@pytest.mark.parametrize("code,want", [
    (32, XidClass.DEGRADED), (51, XidClass.UNUSED), (1, XidClass.UNUSED), (46, XidClass.DRAIN),
    (8, XidClass.APP), (14, XidClass.INFO), (38, XidClass.INFO), (78, XidClass.DEGRADED),
    (121, XidClass.DRAIN), (93, XidClass.DEGRADED),
])
def test_table_fills_the_catalog(code: int, want: XidClass) -> None:
    assert XID_TABLE[code][0] is want
    assert classify(code, "x")[0] is want


def test_table_has_every_code_to_125() -> None:
    missing = [c for c in range(1, 126) if c not in XID_TABLE and c not in range(111, 119)]
    assert missing == []  # 111-118 are display-engine errors of boards without a datacenter use


def test_xid74_names_the_link() -> None:
    msg = "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
    assert classify(74, msg) == (XidClass.DRAIN, "NVLink error on link 14")
    assert classify(74, "NVLink error, no link printed") == (XidClass.DRAIN, "NVLink error")


_LINEISH = st.one_of(
    st.text(max_size=200),
    st.builds(lambda a, b: a + "Xid" + b, st.text(max_size=60), st.text(max_size=60)),
    st.builds(lambda a, b: a + "SXid (PCI:" + b, st.text(max_size=40), st.text(max_size=60)),
    st.builds(lambda a, b: "NVRM: Xid (" + a + "): " + b, st.text(max_size=20), st.text(max_size=40)),
)


@given(_LINEISH)
@settings(max_examples=400, deadline=None)
def test_no_line_crashes_and_every_xid_line_is_seen(text: str) -> None:
    import re

    ev = parse_kernel_line(text)
    if re.search(r"\bS?Xid\b", text):
        assert ev is not None, text  # classified, or reported as unreadable: never dropped
    if ev is not None and ev.kind != "unreadable":
        if ev.kind == "sxid":
            assert classify_sxid(ev.code, ev.message)[0] in set(XidClass)
        else:
            assert classify(ev.code, ev.message)[0] in set(XidClass)
    wall, msg = kmsg.parse_log_line(text, 1_700_000_000.0, time.time())
    assert isinstance(msg, str)


# -------------------------------------------------------------------------- timestamp forms

MSG = "NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=x, GPU has fallen off the bus."
BTIME = 1_780_000_000.0


def _forms(at: float) -> dict[str, str]:
    """The same message as each source writes it, logged at wall time ``at``."""
    local = time.localtime(at)
    up = at - BTIME
    usec = int(round((at % 1) * 1e6))
    iso_local = dt.datetime.fromtimestamp(at).astimezone()
    off = iso_local.strftime("%z")
    return {
        "kmsg record": f"4,1234,{int(up * 1e6)},-;{MSG}",
        "dmesg": f"[{up:12.6f}] {MSG}",
        "dmesg -r": f"<4>[{up:12.6f}] {MSG}",
        "dmesg -x": f"kern  :warn  : [{up:12.6f}] {MSG}",
        "dmesg -T": f"[{time.strftime('%a %b %e %H:%M:%S %Y', local)}] {MSG}",
        "dmesg -x -T": f"kern  :err   : [{time.strftime('%a %b %e %H:%M:%S %Y', local)}] {MSG}",
        "dmesg --time-format=iso": f"{iso_local.strftime('%Y-%m-%dT%H:%M:%S')},{usec:06d}"
                                   f"{off[:3]}:{off[3:]} {MSG}",
        "journalctl -o short": f"{time.strftime('%b %e %H:%M:%S', local)} gpu017 kernel: {MSG}",
        "journalctl -o short-precise": f"{time.strftime('%b %e %H:%M:%S', local)}.{usec:06d} "
                                       f"gpu017 kernel: {MSG}",
        "journalctl -o short-iso": f"{iso_local.strftime('%Y-%m-%dT%H:%M:%S')}{off} gpu017 kernel: {MSG}",
        "journalctl -o short-iso-precise": f"{iso_local.strftime('%Y-%m-%dT%H:%M:%S')}.{usec:06d}{off} "
                                           f"gpu017 kernel: {MSG}",
        "syslog + dmesg stamp": f"{time.strftime('%b %e %H:%M:%S', local)} gpu017 kernel: "
                                f"[{up - 5000:12.6f}] {MSG}",
        "rsyslog RFC 3339": f"{dt.datetime.fromtimestamp(at, dt.UTC).isoformat()} gpu017 "
                            f"kernel: {MSG}",
    }


WHOLE_SECONDS = {"dmesg -T", "dmesg -x -T", "journalctl -o short", "journalctl -o short-iso",
                 "syslog + dmesg stamp"}
FORMS = sorted(_forms(BTIME + 1000.25))


@pytest.mark.parametrize("form", FORMS)
def test_every_timestamp_form_gives_the_right_time(form: str) -> None:
    at = BTIME + 86_400 * 3 + 0.25
    line = _forms(at)[form]
    wall, msg = kmsg.parse_log_line(line, BTIME, at + 60)
    assert msg == MSG, (form, msg)
    assert wall is not None, form
    tol = 1.0 if form in WHOLE_SECONDS else 1e-3
    assert abs(wall - at) <= tol, (form, wall - at)


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    gpus = write_gpu_tree(tmp_path / "gpus")
    log = tmp_path / "kern.log"
    log.write_text("")
    boot = tmp_path / "boot_id"
    boot.write_text(str(uuid.uuid4()) + "\n")
    cfg = write_config(tmp_path / "sg.toml", {
        "checks.xid.source": "file", "checks.xid.file": str(log),
        "checks.xid.nvidia_proc_root": str(gpus), "checks.xid.boot_id_path": str(boot),
    })
    return {"log": log, "cfg": cfg, "tmp": tmp_path}


def run_xid(node: dict[str, Path], previous: dict | None = None):
    cfg = config.load(str(node["cfg"]))
    log = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    ctx = CheckContext(cfg.section("checks.xid"), {"kmsg": log}, previous or {}, time.time())
    return gpu_xid.run(ctx), ctx.new_state


@pytest.mark.parametrize("form", [f for f in FORMS if f not in ("kmsg record", "dmesg", "dmesg -r",
                                                                 "dmesg -x")])
def test_window_rule_holds_in_every_wall_clock_form(node: dict[str, Path], form: str) -> None:
    """First run: a 2 h old fault is outside the 1 h window, a fresh one is counted."""
    now = time.time()
    old = _forms(now - 7200)[form].replace("0000:3a:00", "0000:18:00")
    new = _forms(now - 60)[form]
    node["log"].write_text(old + "\n" + new + "\n")
    r, _ = run_xid(node)
    assert r.health is Health.UNHEALTHY, (form, r)
    assert [e["pci"] for e in r.details["events"]] == ["0000:3a:00"], form


def test_sxid_fatal_drains_naming_the_switch(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, "
                             "Link 31 LTSSM Fault Up")
    r, state = run_xid(node)
    assert r.health is Health.UNHEALTHY
    assert r.reason == ("NVSwitch 3 (PCI 0000:c6:00) SXid 20034: NVLink LTSSM fault (fatal): "
                        "Link 31 LTSSM Fault Up")
    assert r.details["events"][0]["action"].startswith("drain; reset the NVSwitch")
    r2, _ = run_xid(node, state)  # latched until reboot like a drain-class Xid
    assert r2.health is Health.UNHEALTHY and "latched until reboot" in r2.reason


def test_sxid_nonfatal_degrades(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20009, Non-fatal, "
                             "Link 28 RX Short Error Rate")
    r, _ = run_xid(node)
    assert r.health is Health.DEGRADED
    assert r.reason.startswith("NVSwitch 0 (PCI 0000:05:00) SXid 20009: NVLink RX short error rate")


@pytest.mark.parametrize("prefix", ["", "[6781741.548783] ", "[Fri Apr  5 21:29:39 2024] "])
def test_bare_fallen_off_the_bus_drains_that_gpu(node: dict[str, Path], prefix: str) -> None:
    with open(node["log"], "a") as fh:
        fh.write(f"{prefix}NVRM: GPU {DEFAULT_GPUS[5]}: GPU has fallen off the bus.\n")
    cfg = config.load(str(node["cfg"]))
    log = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    # the window rule would drop a 2024 line on a first run; a cursor from an earlier run
    # (here: "everything before this line was seen") makes it new
    ctx = CheckContext(cfg.section("checks.xid"), {"kmsg": log},
                       {"cursor": {"kind": log.kind, "identity": log.identity, "pos": 0}},
                       time.time())
    r = gpu_xid.run(ctx)
    assert r.health is Health.UNHEALTHY
    assert r.reason == "GPU 5 (PCI 0000:ab:00): GPU has fallen off the bus"


def test_xid79_and_its_bare_line_are_one_fault(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], f"NVRM: GPU {DEFAULT_GPUS[2]}: GPU has fallen off the bus.")
    append_kmsg(node["log"], MSG)
    r, _ = run_xid(node)
    assert r.reason.startswith("GPU 2 (PCI 0000:3a:00)") and "(+1 more)" in r.reason  # two shapes
    append_kmsg(node["log"], f"NVRM: GPU {DEFAULT_GPUS[2]}: GPU has fallen off the bus.")
    r, _ = run_xid(node)
    assert r.reason.count("fallen off") == 1 and "(+1 more)" in r.reason  # repeats not counted


def test_unreadable_xid_line_is_reported_with_the_line(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], "NVRM: Xid (43, pid: 5678): ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR")
    r, _ = run_xid(node)
    assert r.health is Health.DEGRADED
    assert r.reason == ("unreadable Xid line: NVRM: Xid (43, pid: 5678): "
                        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR")


def test_xid74_reason_and_register_words(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], "NVRM: Xid (PCI:0000:3a:00): 74, pid='<unknown>', name=<unknown>, "
                             "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    r, _ = run_xid(node)
    assert r.reason == "GPU 2 (PCI 0000:3a:00) Xid 74: NVLink error on link 3"
    assert r.details["events"][0]["nvlink_words"] == ["0x0", "0x0", "0x10000", "0x0", "0x0", "0x0", "0x0"]


def test_unused_and_pcie_codes_degrade(node: dict[str, Path]) -> None:
    append_kmsg(node["log"], "NVRM: Xid (PCI:0000:3a:00): 51, pid=1, name=x, something")
    append_kmsg(node["log"], "NVRM: Xid (PCI:0000:18:00): 32, pid=1, name=x, Channel ID 0001")
    r, _ = run_xid(node)
    assert r.health is Health.DEGRADED
    assert r.reason == "GPU 2 (PCI 0000:3a:00) Xid 51: code NVIDIA lists as unused (+1 more)"


def test_journal_reader_parses_only_what_matters(tmp_path: Path) -> None:
    """journalctl -o json: a fake journalctl prints 5,000 entries, one Xid; cursor = last entry."""
    import json
    import os

    entries = [{"__REALTIME_TIMESTAMP": str(1_780_000_000_000_000 + i), "MESSAGE": f"line {i}"}
               for i in range(5000)]
    entries[1234]["MESSAGE"] = MSG
    entries[2000]["MESSAGE"] = list(b"NVRM: GPU 0000:18:00.0: GPU has fallen off the bus. \xff")
    out = tmp_path / "journal.json"
    out.write_text("".join(json.dumps(e) + "\n" for e in entries))
    tool = tmp_path / "journalctl"
    tool.write_text(f"#!/bin/sh\ncat {out}\n")
    tool.chmod(0o755)
    cfg = config.load(str(write_config(tmp_path / "j.toml", {
        "checks.xid.source": "journal", "checks.xid.journalctl": str(tool),
        "checks.xid.nvidia_proc_root": str(write_gpu_tree(tmp_path / "gpus"))})))
    log = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    assert log.scanned == 5000 and log.end_pos == 1_780_000_000_000_000 + 4999
    assert [r.pos for r in log.records] == [1_780_000_000_000_000 + 1234, 1_780_000_000_000_000 + 2000]
    assert os.path.exists(tool)
