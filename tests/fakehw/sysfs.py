"""sysfs / procfs fixture trees in the kernel's formats, plus a config writer for tests.

* IB: ``<root>/<dev>/ports/<n>/{state,phys_state,rate,link_layer,counters/*,gids/*}``
  (Documentation/ABI/stable/sysfs-class-infiniband).
* host: ``<proc>/meminfo``, ``<sys>/devices/system/cpu/{online,present}``,
  ``<sys>/devices/system/edac/mc/mc<N>/{ce_count,ue_count}``, ``<proc>/<pid>/{status,comm,
  cgroup}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

IB_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors",
               "port_xmit_discards", "port_rcv_data", "port_xmit_data")


def write_ib_port(root: Path, dev: str = "mlx5_0", port: int = 1, *, state: str = "4: ACTIVE",
                  phys_state: str = "5: LinkUp", rate: str = "400 Gb/sec (4X NDR)",
                  link_layer: str = "InfiniBand", counters: Mapping[str, int] | None = None,
                  gids: list[str] | None = None) -> Path:
    """One port; ``gids`` fills gids/0.. (an Ethernet port with an IP-derived GID is RoCE)."""
    pdir = Path(root) / dev / "ports" / str(port)
    if gids is not None:
        (pdir / "gids").mkdir(parents=True, exist_ok=True)
        for i, gid in enumerate(gids):
            (pdir / "gids" / str(i)).write_text(gid + "\n")
    (pdir / "counters").mkdir(parents=True, exist_ok=True)
    for name, value in (("state", state), ("phys_state", phys_state), ("rate", rate),
                        ("link_layer", link_layer)):
        (pdir / name).write_text(value + "\n")
    values = {c: 0 for c in IB_COUNTERS}
    values.update(counters or {})
    for name, value in values.items():
        (pdir / "counters" / name).write_text(f"{value}\n")
    return pdir


def write_ib_fabric(root: Path, n: int = 8, **kw: Any) -> Path:
    """n single-port HCAs mlx5_0..mlx5_{n-1}, all ACTIVE/LinkUp at NDR unless kw says otherwise."""
    for i in range(n):
        write_ib_port(root, f"mlx5_{i}", 1, **kw)
    return Path(root)


def set_counter(root: Path, dev: str, port: int, name: str, value: int) -> None:
    (Path(root) / dev / "ports" / str(port) / "counters" / name).write_text(f"{value}\n")


def write_meminfo(proc_root: Path, mem_total_kib: int) -> None:
    Path(proc_root).mkdir(parents=True, exist_ok=True)
    free = mem_total_kib // 2
    (Path(proc_root) / "meminfo").write_text(
        f"MemTotal:       {mem_total_kib} kB\nMemFree:        {free} kB\n"
        f"MemAvailable:   {free} kB\nBuffers:          123456 kB\n")


def write_cpus(sys_root: Path, online: str, present: str | None = None) -> None:
    d = Path(sys_root) / "devices/system/cpu"
    d.mkdir(parents=True, exist_ok=True)
    (d / "online").write_text(online + "\n")
    (d / "present").write_text((present or online) + "\n")


def write_edac(sys_root: Path, counts: Mapping[str, tuple[int, int]]) -> None:
    """counts: {"mc0": (ce_count, ue_count)}"""
    for mc, (ce, ue) in counts.items():
        d = Path(sys_root) / "devices/system/edac/mc" / mc
        d.mkdir(parents=True, exist_ok=True)
        (d / "ce_count").write_text(f"{ce}\n")
        (d / "ue_count").write_text(f"{ue}\n")


def write_proc(proc_root: Path, pid: int, uid: int, comm: str, *, state: str = "S",
               job_id: str | None = None) -> None:
    """A /proc/<pid> with status, comm and (cgroup v2, Slurm's layout) cgroup."""
    d = Path(proc_root) / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    names = {"R": "running", "S": "sleeping", "D": "disk sleep", "Z": "zombie"}
    (d / "status").write_text(
        f"Name:\t{comm}\nUmask:\t0022\nState:\t{state} ({names.get(state, '?')})\n"
        f"Tgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        f"Gid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "comm").write_text(comm + "\n")
    cg = (f"0::/system.slice/slurmstepd.scope/job_{job_id}/step_batch/user/task_0\n"
          if job_id else f"0::/user.slice/user-{uid}.slice/session-1.scope\n")
    (d / "cgroup").write_text(cg)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)  # str, int, float, list of those: JSON spelling is valid TOML here


def write_config(path: Path, values: Mapping[str, Any]) -> Path:
    """Write a TOML config from dotted keys: {"checks.xid.source": "file"}."""
    sections: dict[str, list[str]] = {}
    for key, value in values.items():
        section, _, name = key.rpartition(".")
        sections.setdefault(section, []).append(f"{name} = {_toml_value(value)}")
    text = "".join(f"[{s}]\n" + "\n".join(lines) + "\n\n" for s, lines in sections.items())
    Path(path).write_text(text)
    return Path(path)
