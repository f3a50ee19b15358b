"""Source "ib": one walk of /sys/class/infiniband (InfiniBand HCAs and RoCE NICs alike).

Per port the kernel's ib_core exposes (Documentation/ABI/stable/sysfs-class-infiniband)::

    <dev>/ports/<n>/state        "4: ACTIVE"
    <dev>/ports/<n>/phys_state   "5: LinkUp"
    <dev>/ports/<n>/rate         "400 Gb/sec (4X NDR)"
    <dev>/ports/<n>/link_layer   "InfiniBand" | "Ethernet"
    <dev>/ports/<n>/counters/*   link_downed, symbol_error, port_rcv_errors, ... (integers)
    <dev>/ports/<n>/gids/<i>     "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d" (the GID table)

An Ethernet-link-layer port carries RDMA (RoCE v2) only when its GID table holds a GID made
from an IP address of its netdev: RoCE v2 packets are routed by IP, while the link-local
fe80 GID that every port gets from its MAC says nothing about RDMA use.

The root is ``checks.ib.sysfs_root`` so tests point it at a fixture tree.
"""

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from slurmguard.config import Config
from slurmguard.errors import Unsupported
from slurmguard.lazyre import LazyPattern
from slurmguard.sources import GatherContext


class IbPort(NamedTuple):
    device: str  # mlx5_0
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ... (the text after "N: ")
    phys_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float  # 0.0 when unreadable
    rate: str  # as read, e.g. "400 Gb/sec (4X NDR)"
    link_layer: str  # InfiniBand | Ethernet
    counters: Mapping[str, int] = MappingProxyType({})
    roce: bool = False  # Ethernet port whose GID table holds an IP-derived GID (RoCE v2)

    @property
    def key(self) -> str:
        return f"{self.device}/{self.port}"


class IbSnapshot(NamedTuple):
    root: str
    ports: tuple[IbPort, ...]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _after_colon(text: str) -> str:
    # "4: ACTIVE" -> "ACTIVE"; tolerate a bare word
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


_RATE_RE = LazyPattern(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def parse_rate(text: str) -> float:
    m = _RATE_RE.match(text)
    return float(m.group(1)) if m else 0.0


def read_counters(directory: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        entries = list(directory.iterdir())
    except OSError:
        return out
    for f in entries:
        try:
            out[f.name] = int(f.read_text().strip())
        except (OSError, ValueError):
            continue  # some counters are unreadable on some HCAs (EINVAL): skip them
    return out


# GID entries read per Ethernet port: the kernel fills the table from index 0 (the link-local
# GIDs first, then one per IP address and RoCE version), so an IP-derived GID, when there is
# one, sits within the first few entries; reading all 256 would cost the hot path for nothing.
_GID_SCAN = 16


def has_roce_gid(pdir: Path) -> bool:
    """True when one of the port's first GIDs is neither empty nor link-local."""
    for i in range(_GID_SCAN):
        gid = _read(pdir / "gids" / str(i)).lower()
        if not gid:
            continue  # unreadable (newer kernels: EINVAL for an empty slot) or absent
        if gid.replace(":", "").strip("0") and not gid.startswith("fe80:"):
            return True
    return False


def gather_ib(cfg: Config, ctx: GatherContext) -> IbSnapshot:
    """Walk the IB sysfs tree once; Unsupported when the node has no RDMA device."""
    root = Path(cfg["checks.ib.sysfs_root"])
    try:
        devices = sorted(d for d in root.iterdir() if (d / "ports").is_dir())
    except OSError:
        raise Unsupported(f"no InfiniBand/RoCE devices ({root} absent)") from None
    if not devices:
        raise Unsupported(f"no InfiniBand/RoCE devices under {root}")
    ports: list[IbPort] = []
    for dev in devices:
        for pdir in sorted((dev / "ports").iterdir(), key=lambda x: x.name):
            if not pdir.name.isdigit():
                continue
            rate = _read(pdir / "rate")
            layer = _read(pdir / "link_layer") or "InfiniBand"
            ports.append(IbPort(
                device=dev.name,
                port=int(pdir.name),
                state=_after_colon(_read(pdir / "state")) or "UNKNOWN",
                phys_state=_after_colon(_read(pdir / "phys_state")) or "UNKNOWN",
                rate_gbps=parse_rate(rate),
                rate=rate,
                link_layer=layer,
                counters=read_counters(pdir / "counters"),
                roce=layer == "Ethernet" and has_roce_gid(pdir),
            ))
    return IbSnapshot(str(root), tuple(ports))
