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


class XidClass(StrEnum):
    DRAIN = "drain"  # node fault: unhealthy
    DEGRADED = "degraded"  # worth a look (non-fatal NVLink5 event)
    APP = "app"  # the application's fault; repeated on one GPU -> degraded
    INFO = "info"  # informational / sympathetic; only recorded
    UNKNOWN = "unknown"  # not in the table -> degraded
    IGNORED = "ignored"  # configured away (checks.xid.ignore_codes)

    def __str__(self) -> str:
        return self.value


# code -> (class, what it means). The meaning is the short text used in drain reasons; the
# action NVIDIA suggests is in ACTIONS (shown in details and docs/checks.md).
XID_TABLE: dict[int, tuple[XidClass, str]] = {
    13: (XidClass.APP, "graphics engine exception"),
    31: (XidClass.APP, "GPU memory page fault"),
    43: (XidClass.APP, "GPU stopped processing"),
    45: (XidClass.APP, "preemptive cleanup after a previous error"),
    48: (XidClass.DRAIN, "double bit ECC error"),
    61: (XidClass.DRAIN, "PMU breakpoint"),
    62: (XidClass.DRAIN, "internal micro-controller halt"),
    63: (XidClass.INFO, "GPU memory remapping event"),
    64: (XidClass.DRAIN, "GPU memory remapping failure"),
    68: (XidClass.APP, "NVDEC0 exception"),
    69: (XidClass.APP, "graphics engine class error"),
    74: (XidClass.DRAIN, "NVLink error"),
    79: (XidClass.DRAIN, "GPU has fallen off the bus"),
    92: (XidClass.INFO, "high single-bit ECC error rate"),
    94: (XidClass.APP, "contained memory error"),
    95: (XidClass.DRAIN, "uncontained memory error"),
    109: (XidClass.DRAIN, "context switch timeout"),
    119: (XidClass.DRAIN, "GSP RPC timeout"),
    120: (XidClass.DRAIN, "GSP error"),
    140: (XidClass.DRAIN, "unrecovered ECC error"),
    143: (XidClass.DRAIN, "GPU initialization error"),
    144: (XidClass.DRAIN, "NVLink SAW error"),
    145: (XidClass.DRAIN, "NVLink RLW error"),
    146: (XidClass.DRAIN, "NVLink TLW error"),
    147: (XidClass.DRAIN, "NVLink TREX error"),
    148: (XidClass.DRAIN, "NVLink NVLPW_CTRL error"),
    149: (XidClass.DRAIN, "NVLink NETIR error"),
    150: (XidClass.DRAIN, "NVLink MSE error"),
    154: (XidClass.DRAIN, "GPU recovery action changed"),
}

# What NVIDIA suggests doing, per class (the per-code nuance is in the catalog).
ACTIONS: dict[XidClass, str] = {
    XidClass.DRAIN: "drain; reset the GPU (reboot for 79 or where reset is unavailable)",
    XidClass.DEGRADED: "monitor; look at the link if it repeats",
    XidClass.APP: "restart the job; look at the GPU if it repeats",
    XidClass.INFO: "none by itself; act on the Xid it accompanies",
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
_RECOVERY_RE = re.compile(r"\bto\s+(0x[0-9a-fA-F]+|\d+)\b(?:\s*\(([^)]*)\))?")
_NONFATAL_RE = re.compile(r"\bnon-?fatal\b", re.IGNORECASE)


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
    if entry is None:
        return XidClass.UNKNOWN, what
    return entry
