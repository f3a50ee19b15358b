"""The NVIDIA driver's GPU and NVSwitch fault lines in the kernel log, read into XidEvent.

Shared by ``slurmguard.adapters.kmsg`` (which pre-filters and parses each record while it
reads) and the pure check ``slurmguard.checks.xid`` (which judges the events): below both, so
neither imports the other (tests/test_import_graph.py). The shapes and why each is read are
in ``checks/xid.py``'s docstring. Never raises on any input (tests/test_kernel_log_shapes.py).
"""

from typing import NamedTuple

from slurmguard.lazyre import LazyPattern

# `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`
# The address is domain:bus:device (4 hex digits of domain on current drivers; accept up to 8,
# nvidia-smi style, and a function suffix), or the two-field bus:device of old drivers
# (`NVRM: Xid (0003:00): 8, Channel 00000001`, domain 0).
_ADDR = r"(?P<addr>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2})?(?:\.[0-7])?)"
# A MIG-enabled GPU names the GPU instance (and on some drivers the compute instance) that
# faulted beside the address: `(PCI:0000:01:00 GPU-I:05)`, `(PCI:0000:01:00 GPU-I:05 GPU-CI:01)`.
_MIG = r"(?:[ \t]+GPU-I:(?P<gi>\d{1,3})(?:[ \t]+GPU-CI:(?P<ci>\d{1,3}))?)?"
XID_RE = LazyPattern(
    r"NVRM:\s*Xid\s*\((?:PCI:)?" + _ADDR + _MIG
    + r"\):\s*(?P<code>\d{1,5}),[ \t]*(?P<rest>[^\n]*)"
)
# `nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 31 LTSSM Fault Up`
SXID_RE = LazyPattern(
    r"(?:nvidia-nvswitch(?P<switch>\d{1,4}):\s*)?SXid\s*\((?:PCI:)?" + _ADDR
    + r"\):\s*(?P<code>\d{1,6}),?[ \t]*(?P<rest>[^\n]*)"
)
# `NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.` (no Xid: the driver lost the GPU
# before it could report one); also `NVRM: GPU at PCI:0000:a1:00: ...`.
_BUS_TEXT = "fallen off the bus"
_BUS_RE = LazyPattern(r"NVRM:.*?\bGPU\s+(?:at\s+)?(?:PCI:)?(?P<addr>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:"
                      r"[0-9a-fA-F]{2}(?:\.[0-7])?)")
# A line "names an Xid" when it holds the word Xid or SXid: such a line is classified or
# reported as unreadable, never dropped.
_NAMES_XID_RE = LazyPattern(r"\bS?Xid\b")
_PID_RE = LazyPattern(r"pid=(?P<pid>'<unknown>'|<unknown>|\d+),\s*name=(?P<name>[^,]*),\s*")

# Markers that make a kernel-log line worth parsing (the adapters pre-filter on them).
MARKERS: tuple[str, ...] = ("Xid", _BUS_TEXT)


class XidEvent(NamedTuple):
    pci: str  # normalised "0000:3b:00" (domain:bus:device, lower case); "" when unknown
    code: int  # the Xid or SXid; 79 for a bare "fallen off the bus"; 0 when unreadable
    pid: int | None
    process: str | None
    message: str
    kind: str = "xid"  # xid | sxid | bus (fallen off the bus, no Xid) | unreadable
    switch: int | None = None  # N of nvidia-nvswitchN (kind sxid)
    instance: int | None = None  # MIG GPU instance (GPU-I) named by the line, if any


def _addr(text: str) -> str | None:
    """'0000:3b:00' / '0000:3B:00.0' / two-field '0003:00' -> '0000:3b:00'; None if not hex."""
    parts = text.split(".")[0].split(":")
    try:
        nums = [int(x, 16) for x in parts]
    except ValueError:
        return None
    if len(nums) == 2:
        nums = [0, *nums]
    dom, bus, dev = nums
    if bus > 0xFF or dev > 0x1F:
        return None
    return f"{dom:04x}:{bus:02x}:{dev:02x}"


def normalize_pci(text: str) -> str:
    """'PCI:00000000:3B:00.0' / '0000:3b:00' -> '0000:3b:00' (the key used for the GPU map)."""
    text = text.strip()
    if text.upper().startswith("PCI:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) != 3:
        return text.lower()
    dom, bus, dev = parts
    dev = dev.split(".")[0]
    try:
        return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"
    except ValueError:
        return text.lower()


def _split_pid(rest: str) -> tuple[int | None, str | None, str]:
    pm = _PID_RE.match(rest)
    if not pm:
        return None, None, rest
    raw_pid = pm.group("pid")
    name = pm.group("name").strip()
    return (int(raw_pid) if raw_pid.isdigit() else None,
            None if name == "<unknown>" else name, rest[pm.end():])


def parse_xid_line(text: str) -> XidEvent | None:
    """Parse one kernel log message; None when it holds no readable Xid. Never raises."""
    if "Xid" not in text:
        return None
    m = XID_RE.search(text)
    if not m:
        return None
    pci = _addr(m.group("addr"))
    if pci is None:
        return None
    pid, process, rest = _split_pid(m.group("rest").strip())
    gi = m.group("gi")
    return XidEvent(pci, int(m.group("code")), pid, process, rest.strip(),
                    instance=int(gi) if gi is not None else None)


def parse_kernel_line(text: str) -> XidEvent | None:
    """Every GPU/NVSwitch fault shape of one message: an Xid, an SXid, a bare "fallen off the
    bus", or (a line that names an Xid but cannot be read) kind ``unreadable``. None when the
    line is about neither. Never raises."""
    ev = parse_xid_line(text)
    if ev is not None:
        return ev
    if "SXid" in text:
        m = SXID_RE.search(text)
        pci = _addr(m.group("addr")) if m else None
        if m and pci is not None:
            sw = m.group("switch")
            return XidEvent(pci, int(m.group("code")), None, None, m.group("rest").strip(),
                            "sxid", int(sw) if sw else None)
    if _BUS_TEXT in text and "NVRM" in text:
        m = _BUS_RE.search(text)
        pci = (_addr(m.group("addr")) if m else None) or ""
        return XidEvent(pci, 79, None, None, "GPU has fallen off the bus", "bus")
    if _NAMES_XID_RE.search(text):
        return XidEvent("", 0, None, None, text.strip()[:200], "unreadable")
    return None


def format_xid_line(pci: str, code: int, message: str, pid: int | None = None,
                    process: str | None = None, instance: int | None = None) -> str:
    """The driver's line for these fields (r470+ format, the MIG form when ``instance`` is
    given); the inverse of parse_xid_line."""
    p = str(pid) if pid is not None else "'<unknown>'"
    n = process if process is not None else "<unknown>"
    mig = f" GPU-I:{instance:02d}" if instance is not None else ""
    return f"NVRM: Xid (PCI:{normalize_pci(pci)}{mig}): {code}, pid={p}, name={n}, {message}"
