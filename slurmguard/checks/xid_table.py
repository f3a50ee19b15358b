"""How slurmguard classifies each NVIDIA Xid: drain, app error, informational, or unknown.

Derived from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, r555 and the 2025-10
catalog; summarised in shared/data/xid-catalog.md). NVIDIA's buckets map to ours like this:

* RESET_GPU, RESTART_BM, CONTACT_SUPPORT as the immediate action -> ``DRAIN``: the GPU (or
  node) needs a reset/reboot/ticket before it can run the next job; the node is drained.
* RESTART_APP -> ``APP``: the job's own fault (bad kernel, page fault); no node action, unless
  the same GPU keeps producing them (the check turns K repeats in a window into ``degraded``).
* IGNORE (sympathetic, e.g. 63 "row remapping event" that accompanies a 48/64) -> ``INFO``:
  recorded in the result's details, acted on through the Xid it accompanies.
* WORKFLOW_* codes are decoded from the message text:
  - 144-150 (NVLink5 SAW/RLW/TLW/TREX/NVLPW/NETIR/MSE): the driver prints the severity in
    the line (``SAW_MVB Nonfatal XC0 ...`` / ``NETIR_LINK_EVT Fatal XC0 ...``). "Nonfatal" ->
    ``DEGRADED`` (NVIDIA: monitor; the link keeps working), anything else (Fatal, Link Fatal,
    no severity printed) -> ``DRAIN`` (NVIDIA: reset the GPU).
  - 154 (GPU recovery action changed): the new action is in the message
    (``... changed from 0x0 (None) to 0x1 (GPU Reset)``): 0x0 None -> ``INFO``; 0x1 GPU
    Reset, 0x2 Node Reboot, 0x3 Drain P2P, 0x4 Drain and Reset -> ``DRAIN``; an action we
    cannot read -> ``DRAIN`` (the driver asked for *something*).
  - 74 (NVLink error): decoding the seven register words needs per-architecture bit tables;
    a 74 kills the job's NVLink traffic and NVIDIA's immediate action is a GPU reset or reboot,
    so it drains.
  - 45 (preemptive cleanup) is almost always "caused by previous Xid N": it is counted with the
    app errors so that a solo storm of them still surfaces as degraded.
* A code in none of these lists -> ``UNKNOWN`` -> degraded (someone should look; a new driver
  may have added it), never a drain by itself.
"""

from __future__ import annotations

import re
from enum import StrEnum

from slurmguard.lazyre import LazyPattern


class XidClass(StrEnum):
    DRAIN = "drain"  # node fault: unhealthy
    DEGRADED = "degraded"  # worth a look (non-fatal NVLink5 event)
    APP = "app"  # the application's fault; repeated on one GPU -> degraded
    INFO = "info"  # informational / sympathetic; only recorded
    UNUSED = "unused"  # a code NVIDIA lists as unused on current GPUs -> degraded
    UNKNOWN = "unknown"  # not in the table -> degraded
    IGNORED = "ignored"  # configured away (checks.xid.ignore_codes)

    def __str__(self) -> str:
        return self.value


# code -> (class, what it means). The meaning is the short text used in drain reasons; the
# action NVIDIA suggests is in ACTIONS (shown in details and docs/checks.md). Every code of
# NVIDIA's catalog (Ampere and newer, plus the older r555 page for the codes it alone names)
# up to 154 that we could check is here; a code not listed is UNKNOWN (degraded).
_U = XidClass.UNUSED
_A = XidClass.APP
_D = XidClass.DRAIN
_I = XidClass.INFO
_W = XidClass.DEGRADED
XID_TABLE: dict[int, tuple[XidClass, str]] = {
    # NVIDIA marks these "Unused" on A100/H100/B100/GB200 (bucket CONTACT_SUPPORT, "N/A;
    # Unused"): not expected from a current GPU; one that appears is worth a look, not a drain.
    **{c: (_U, "code NVIDIA lists as unused") for c in (
        1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29,
        30, 33, 34, 35, 36, 42, 47, 49, 50, 51, 52, 53, 55, 73, 81, 87, 90, 91, 108)},
    8: (_A, "GPU stopped processing"),  # RESTART_APP
    11: (_A, "invalid or corrupted push buffer stream"),  # RESTART_APP, CHECK_APP/CUDA
    13: (_A, "graphics engine exception"),
    14: (_I, "fake or injected error"),  # what error-injection tooling logs
    25: (_A, "invalid or illegal push buffer stream"),
    31: (_A, "GPU memory page fault"),
    # RESTART_APP, but NVIDIA's trigger text: "quality issues on PCI, generally not caused by
    # user application actions" -> degraded: someone should look at the PCIe link.
    32: (_W, "invalid or corrupted push buffer stream (PCIe/DMA)"),
    37: (_I, "driver firmware error"),  # IGNORE
    38: (_I, "driver firmware error"),  # IGNORE
    39: (_A, "copy engine exception"),
    40: (_A, "copy engine exception"),
    41: (_A, "copy engine exception"),
    43: (_A, "GPU stopped processing"),
    44: (_A, "graphics engine fault during context switch"),
    45: (_A, "preemptive cleanup after a previous error"),
    46: (_D, "GPU stopped processing (GPU timeout)"),  # RESET_GPU
    48: (_D, "double bit ECC error"),
    54: (_D, "auxiliary power is not connected to the GPU board"),
    56: (_A, "display engine error"),
    57: (_D, "error programming video memory interface"),
    58: (_D, "unstable video memory interface"),
    59: (_D, "internal micro-controller error"),
    60: (_A, "video processor exception"),
    61: (_D, "PMU breakpoint"),
    62: (_D, "internal micro-controller halt"),
    63: (_I, "GPU memory remapping event"),
    64: (_D, "GPU memory remapping failure"),
    65: (_A, "video processor exception"),
    66: (_W, "illegal access by driver"),
    67: (_W, "illegal access by driver"),
    68: (_A, "NVDEC0 exception"),
    69: (_A, "graphics engine class error"),
    70: (_A, "copy engine 3 error"),
    71: (_A, "copy engine 4 error"),
    72: (_A, "copy engine 5 error"),
    74: (_D, "NVLink error"),
    75: (_A, "copy engine 6 error"),
    76: (_A, "copy engine 7 error"),
    77: (_A, "copy engine 8 error"),
    78: (_W, "vGPU start error"),  # UPDATE_SWFW: the software stack, not the board
    79: (_D, "GPU has fallen off the bus"),
    80: (_A, "corrupted data sent to GPU"),
    82: (_A, "NVJPG0 error"),
    83: (_A, "NVDEC1 error"),
    84: (_A, "NVDEC2 error"),
    85: (_A, "copy engine 9 error"),
    86: (_A, "OFA exception"),
    88: (_A, "NVDEC3 error"),
    89: (_A, "NVDEC4 error"),
    92: (_I, "high single-bit ECC error rate"),
    93: (_W, "InfoROM wear limit exceeded (non-fatal)"),
    94: (_A, "contained memory error"),
    95: (_D, "uncontained memory error"),
    96: (_A, "NVDEC5 error"),
    97: (_A, "NVDEC6 error"),
    98: (_A, "NVDEC7 error"),
    99: (_A, "NVJPG1 error"),
    100: (_A, "NVJPG2 error"),
    101: (_A, "NVJPG3 error"),
    102: (_A, "NVJPG4 error"),
    103: (_A, "NVJPG5 error"),
    104: (_A, "NVJPG6 error"),
    105: (_A, "NVJPG7 error"),
    106: (_I, "SMBPBI test message"),
    107: (_I, "SMBPBI test message (silent)"),
    109: (_D, "context switch timeout"),
    110: (_D, "security fault"),
    119: (_D, "GSP RPC timeout"),
    120: (_D, "GSP error"),
    121: (_D, "C2C link error"),
    122: (_W, "SPI PMU RPC read failure"),
    123: (_W, "SPI PMU RPC write failure"),
    124: (_W, "SPI PMU RPC erase failure"),
    125: (_W, "InfoROM filesystem failure"),
    140: (_D, "unrecovered ECC error"),
    143: (_D, "GPU initialization error"),
    144: (_D, "NVLink SAW error"),
    145: (_D, "NVLink RLW error"),
    146: (_D, "NVLink TLW error"),
    147: (_D, "NVLink TREX error"),
    148: (_D, "NVLink NVLPW_CTRL error"),
    149: (_D, "NVLink NETIR error"),
    150: (_D, "NVLink MSE error"),
    154: (_D, "GPU recovery action changed"),
}

# The Xids that drain a node, from the table alone (checks.xid.drain_codes adds a site's own):
# the node side's fallback drains them without the cap (node/fallback.py INTRINSIC), and a
# repair ladder may name only these (repair/params.py). 144-150 and 154 are here: they drain
# unless the line says otherwise (non-fatal, recovery action None).
DRAIN_XIDS: frozenset[int] = frozenset(c for c, (k, _) in XID_TABLE.items() if k is XidClass.DRAIN)


# What NVIDIA suggests doing, per class (the per-code nuance is in the catalog).
ACTIONS: dict[XidClass, str] = {
    XidClass.DRAIN: "drain; reset the GPU (reboot for 79 or where reset is unavailable)",
    XidClass.DEGRADED: "monitor; look at the link if it repeats",
    XidClass.APP: "restart the job; look at the GPU if it repeats",
    XidClass.INFO: "none by itself; act on the Xid it accompanies",
    XidClass.UNUSED: "look at the GPU; contact support if it repeats",
    XidClass.UNKNOWN: "look it up in NVIDIA's Xid catalog",
    XidClass.IGNORED: "none (ignored by configuration)",
}

NVLINK5_CODES = frozenset(range(144, 151))

_RECOVERY_ACTIONS = {
    0: "None",
    1: "GPU Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
}
# "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset)"
_RECOVERY_RE = LazyPattern(r"\bto\s+(0x[0-9a-fA-F]+|\d+)\b(?:\s*\(([^)]*)\))?")
_NONFATAL_RE = LazyPattern(r"\bnon-?fatal\b", re.IGNORECASE)


def classify(code: int, message: str, *, drain_codes: frozenset[int] = frozenset(),
             ignore_codes: frozenset[int] = frozenset()) -> tuple[XidClass, str]:
    """Classify one Xid by its code and the message text after the code.

    ``ignore_codes`` wins over everything, then ``drain_codes`` (config overrides), then the
    per-subcode decoding of 144-150 and 154, then :data:`XID_TABLE`.
    """
    if code in ignore_codes:
        return XidClass.IGNORED, "ignored by configuration"
    entry = XID_TABLE.get(code)
    what = entry[1] if entry else "unknown Xid"
    if code in drain_codes:
        return XidClass.DRAIN, what
    if code in NVLINK5_CODES:
        if _NONFATAL_RE.search(message):
            return XidClass.DEGRADED, what + " (non-fatal)"
        return XidClass.DRAIN, what + " (fatal)"
    if code == 154:
        m = _RECOVERY_RE.search(message)
        if m:
            action = int(m.group(1), 0)
            name = _RECOVERY_ACTIONS.get(action, (m.group(2) or f"action {action:#x}").strip())
            if action == 0:
                return XidClass.INFO, "GPU recovery action cleared (None)"
            return XidClass.DRAIN, f"GPU recovery action: {name}"
        return XidClass.DRAIN, "GPU recovery action changed (unreadable action)"
    if code == 74:
        link = nvlink_link(message)
        if link is not None:
            return XidClass.DRAIN, f"NVLink error on link {link}"
    if entry is None:
        return XidClass.UNKNOWN, what
    return entry


# Xid 74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)".
# The link number is what an admin needs first (which cable/bridge/port); the seven register
# words that follow need per-architecture bit tables to decode further, so they are kept in
# the details (``nvlink_words``) rather than interpreted.
_LINK_RE = LazyPattern(r"\b[Ll]ink\s*(\d{1,3})\b")
_WORDS_RE = LazyPattern(r"\(((?:\s*0x[0-9a-fA-F]+\s*,?){2,})\)")


def nvlink_link(message: str) -> int | None:
    """The NVLink link number an Xid 74 line names, or None when the driver printed none."""
    m = _LINK_RE.search(message)
    return int(m.group(1)) if m else None


def nvlink_words(message: str) -> list[str]:
    """The register words of an Xid 74 line (``0x...`` as printed), possibly empty."""
    m = _WORDS_RE.search(message)
    return [w.strip() for w in m.group(1).replace(",", " ").split()] if m else []


# --------------------------------------------------------------------------- NVSwitch SXid
# NVSwitch errors are logged by the nvidia-nvswitch driver (and Fabric Manager's log):
#
#     nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 31 LTSSM Fault Up
#     nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 47 egress non-posted PRIV error (First)
#
# The driver prints the severity with every SXid; NVIDIA's Fabric Manager guide: a fatal SXid
# means the switch (and with it the NVLink fabric of every GPU behind it) is unusable until
# the switch is reset, which on bare metal means a reboot -> DRAIN; a non-fatal one is a
# degradation (link errors being corrected, a counter) -> DEGRADED. When the line carries no
# severity, the table below gives the code's usual one; a code in neither -> UNKNOWN.
SXID_TABLE: dict[int, tuple[XidClass, str]] = {
    11001: (XidClass.DRAIN, "ingress invalid command"),
    11004: (XidClass.DRAIN, "ingress invalid VCSet"),
    11012: (XidClass.DEGRADED, "ingress single-bit ECC error"),
    12028: (XidClass.DEGRADED, "egress non-posted PRIV error"),
    19084: (XidClass.DRAIN, "AN1 heartbeat timeout"),
    20009: (XidClass.DEGRADED, "NVLink RX short error rate"),
    20034: (XidClass.DRAIN, "NVLink LTSSM fault"),
    22013: (XidClass.DEGRADED, "MINION link DLREQ interrupt"),
    23001: (XidClass.DRAIN, "always fatal"),
    24007: (XidClass.DRAIN, "sourcetrack timeout"),
    28006: (XidClass.DEGRADED, "MC TS crumbstore MCTO"),
}

SXID_ACTION = "drain; reset the NVSwitch (reboot on bare metal), restart Fabric Manager"
_SXID_FATAL_RE = LazyPattern(r"^\s*(?:always\s+)?fatal\b", re.IGNORECASE)
_SXID_NONFATAL_RE = LazyPattern(r"^\s*non-?fatal\b", re.IGNORECASE)


def classify_sxid(code: int, message: str, *, ignore_codes: frozenset[int] = frozenset()
                  ) -> tuple[XidClass, str]:
    """Classify one NVSwitch SXid by the severity the driver printed, else by SXID_TABLE."""
    if code in ignore_codes:
        return XidClass.IGNORED, "ignored by configuration"
    entry = SXID_TABLE.get(code)
    what = entry[1] if entry else "SXid"
    if _SXID_NONFATAL_RE.match(message):
        return XidClass.DEGRADED, f"{what} (non-fatal)"
    if _SXID_FATAL_RE.match(message):
        return XidClass.DRAIN, f"{what} (fatal)"
    if entry is None:
        return XidClass.UNKNOWN, "unknown SXid"
    return entry
