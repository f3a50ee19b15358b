"""gpu-xid on MIG-enabled GPUs: the driver names the GPU instance beside the PCI address.

`NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, ...` was reported as an unreadable line; it is the
Xid it says, with the GPU instance in the reason (the instance tells the admin which MIG slice,
and so which job, met the fault).
"""

from __future__ import annotations

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
from slurmguard.contract import Health
from slurmguard.sources import GatherContext
from slurmguard.sources.xidline import format_xid_line, parse_kernel_line

# Real MIG-form lines (A100/H100 with MIG on, r470+ drivers): line -> pci, code, instance,
# pid, process, start of the message.
MIG_LINES = [
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=2541, name=python3, Contained ECC error.",
     "0000:01:00", 94, 5, 2541, "python3", "Contained ECC error"),
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:00): 95, pid='<unknown>', name=<unknown>, "
     "Uncontained ECC error.", "0000:3b:00", 95, 0, None, None, "Uncontained ECC error"),
    ("[ 912.4] NVRM: Xid (PCI:0000:b7:00 GPU-I:13): 31, pid=77, name=pt_main_thread, "
     "Ch 00000010, intr 00000000. MMU Fault", "0000:b7:00", 31, 13, 77, "pt_main_thread", "Ch 0"),
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:02 GPU-CI:01): 43, pid=9, name=a.out, Ch 00000018",
     "0000:3b:00", 43, 2, 9, "a.out", "Ch 00000018"),
    # the non-MIG form still reads without an instance
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
     "0000:3b:00", 79, None, 1234, "python3", "GPU has fallen off the bus"),
]


@pytest.mark.parametrize("line,pci,code,instance,pid,name,msg", MIG_LINES)
def test_mig_xid_lines_read_as_xids(line: str, pci: str, code: int, instance: int | None,
                                    pid: int | None, name: str | None, msg: str) -> None:
    ev = parse_kernel_line(line)
    assert ev is not None and ev.kind == "xid"
    assert (ev.pci, ev.code, ev.instance, ev.pid, ev.process) == (pci, code, instance, pid, name)
    assert ev.message.startswith(msg)


_msg = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="\x7f"),
               min_size=1, max_size=80).map(str.strip).filter(bool)


@given(bus=st.integers(0, 255), dev=st.integers(0, 31), instance=st.integers(0, 99),
       code=st.integers(1, 999), msg=_msg, pid=st.one_of(st.none(), st.integers(1, 4194304)))
@settings(max_examples=200, deadline=None)
def test_mig_round_trip(bus: int, dev: int, instance: int, code: int, msg: str,
                        pid: int | None) -> None:
    pci = f"0000:{bus:02x}:{dev:02x}"
    ev = parse_kernel_line(format_xid_line(pci, code, msg, pid, "python3", instance))
    assert ev is not None and ev.kind == "xid"
    assert (ev.pci, ev.code, ev.instance, ev.pid, ev.message) == (pci, code, instance, pid, msg)


def _run(tmp: Path, lines: list[str]):
    gpus = write_gpu_tree(tmp / "gpus")
    log = tmp / "kmsg.log"
    log.write_text("")
    for line in lines:
        append_kmsg(log, line)
    boot = tmp / "boot_id"
    boot.write_text(str(uuid.uuid4()) + "\n")
    cfg = config.load(str(write_config(tmp / "sg.toml", {
        "checks.xid.source": "file", "checks.xid.file": str(log),
        "checks.xid.nvidia_proc_root": str(gpus), "checks.xid.boot_id_path": str(boot)})))
    snap = kmsg.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    ctx = CheckContext(cfg.section("checks.xid"), {"kmsg": snap}, {}, time.time())
    return gpu_xid.run(ctx)


def test_mig_xid_names_the_gpu_instance_in_the_reason(tmp_path: Path) -> None:
    pci = DEFAULT_GPUS[2][:10]  # GPU 2 of the fixture tree
    r = _run(tmp_path, [format_xid_line(pci, 95, "Uncontained ECC error.", 2541, "python3", 5)])
    assert r.health is Health.UNHEALTHY
    assert r.reason.startswith(f"GPU 2 MIG GI 5 (PCI {pci}) Xid 95: ")
    assert r.details["events"][0]["gpu_instance"] == 5
    assert "unreadable" not in r.reason


def test_mig_contained_error_is_not_unreadable(tmp_path: Path) -> None:
    pci = DEFAULT_GPUS[0][:10]
    r = _run(tmp_path, [format_xid_line(pci, 94, "Contained ECC error.", 7, "python3", 3)])
    assert r.details["events"][0]["kind"] == "xid"
    assert r.details["events"][0]["xid"] == 94
    assert "unreadable" not in (r.reason or "")
