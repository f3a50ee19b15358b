"""Kernel-log and NVIDIA /proc fixtures in the real formats.

* :func:`write_gpu_tree` builds ``/proc/driver/nvidia/gpus/<bus id>/information`` as the
  driver writes it (``Device Minor: N`` gives the GPU index).
* :func:`inject_xid` appends a ``/dev/kmsg`` record (``prio,seq,usec,flags;message``) holding
  the driver's Xid line to a fixture file read with ``checks.xid.source = "file"``.
"""

from __future__ import annotations

import time
from pathlib import Path

# The default fixture GPUs, index 0..7 (the stand-in NVML uses the same bus ids).
DEFAULT_GPUS: tuple[str, ...] = (
    "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
    "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0",
)

_INFO = """Model: \t\t {model}
IRQ:   \t\t {irq}
GPU UUID: \t {uuid}
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t {bus}
Device Minor: \t {minor}
GPU Firmware: \t 550.90.07
GPU Excluded:\t No
"""


def write_gpu_tree(root: Path, bus_ids: tuple[str, ...] = DEFAULT_GPUS,
                   model: str = "NVIDIA H100 80GB HBM3") -> Path:
    """Create <root>/<bus id>/information for each GPU; returns root."""
    for minor, bus in enumerate(bus_ids):
        d = Path(root) / bus
        d.mkdir(parents=True, exist_ok=True)
        uuid = f"GPU-{minor:08x}-0000-0000-0000-00000000{minor:04x}"
        (d / "information").write_text(
            _INFO.format(model=model, irq=200 + minor, uuid=uuid, bus=bus, minor=minor))
    return Path(root)


def boot_time() -> float:
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


def _next_seq(path: Path) -> int:
    try:
        return sum(1 for _ in open(path, "rb"))
    except FileNotFoundError:
        return 0


def append_kmsg(path: Path, message: str, *, at: float | None = None, prio: int = 3) -> int:
    """Append one kmsg record whose timestamp corresponds to wall time ``at``; returns seq."""
    seq = _next_seq(Path(path))
    usec = max(0, int(((at if at is not None else time.time()) - boot_time()) * 1e6))
    with open(path, "a") as fh:
        fh.write(f"{prio},{seq},{usec},-;{message}\n")
    return seq


def xid_line(pci: str, xid: int, msg: str, pid: int | None = None, name: str | None = None) -> str:
    """The driver's line, e.g. ``NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, ...``."""
    bus = pci[:-2] if pci.count(":") == 2 and "." in pci else pci
    p = str(pid) if pid is not None else "'<unknown>'"
    n = name if name is not None else "<unknown>"
    return f"NVRM: Xid (PCI:{bus}): {xid}, pid={p}, name={n}, {msg}"


def inject_xid(path: Path, pci: str, xid: int, msg: str, *, pid: int | None = None,
               name: str | None = None, at: float | None = None) -> int:
    """Append a real-format Xid record for GPU ``pci`` (e.g. "0000:3a:00.0"); returns seq."""
    return append_kmsg(path, xid_line(pci, xid, msg, pid, name), at=at, prio=3)
