"""`slurmguard triage collect`: an evidence bundle per node, gathered over SSH in parallel.

For each node: run ``slurmguard check --json`` there, keep the kernel-log lines with NVIDIA
Xids, ``nvidia-smi -q`` when the tool exists, the InfiniBand port state from sysfs, and the
node's recent results from the store when one is configured. A node that cannot be reached
(unknown host key, auth failure, timeout) is recorded as failed and the others still
complete. Paramiko is imported only here (through slurmguard.adapters.ssh).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from slurmguard.errors import ConfigError, InputError
from slurmguard.triage.bundle import Bundle, NodeEvidence

# The NVIDIA driver's kernel-log line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has
# fallen off the bus." Matched loosely (the PCI part and spacing vary across drivers).
XID_LINE = re.compile(r"NVRM: Xid\b")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$|^\[?[0-9A-Fa-f:.]+\]?$")


@dataclass(frozen=True)
class CollectOptions:
    """Everything `triage collect` needs; built from config section ``triage`` + flags."""

    user: str = "root"
    port: int = 22
    identity: str | None = None
    known_hosts: tuple[str, ...] = ()
    host_map: Mapping[str, str] = field(default_factory=dict)
    parallel: int = 16
    connect_timeout: float = 10.0
    command_timeout: float = 60.0
    remote_slurmguard: tuple[str, ...] = ("/usr/local/bin/slurmguard",)
    remote_dmesg: str = "/usr/bin/dmesg"
    remote_journalctl: str = "/usr/bin/journalctl"
    remote_nvidia_smi: str = "/usr/bin/nvidia-smi"
    remote_timeout: str = "/usr/bin/timeout"
    remote_sysfs: str = "/sys"
    xid_lines: int = 1000

    @classmethod
    def from_config(cls, section: Mapping[str, Any], **overrides: Any) -> CollectOptions:
        """Options from the validated ``triage`` config section; ``None`` overrides ignored."""
        values: dict[str, Any] = {
            "user": section["user"], "port": section["port"],
            "identity": section["identity"] or None,
            "known_hosts": tuple(section["known_hosts"]),
            "host_map": dict(section["host_map"]), "parallel": section["parallel"],
            "connect_timeout": section["connect_timeout"],
            "command_timeout": section["command_timeout"],
            "remote_slurmguard": tuple(section["remote_slurmguard"]),
            "remote_dmesg": section["remote_dmesg"],
            "remote_journalctl": section["remote_journalctl"],
            "remote_nvidia_smi": section["remote_nvidia_smi"],
            "remote_timeout": section["remote_timeout"],
            "remote_sysfs": section["remote_sysfs"], "xid_lines": section["xid_lines"],
        }
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "host_map":
                values["host_map"] = {**values["host_map"], **value}
            else:
                values[key] = value
        return cls(**values)


def parse_host_map(items: Sequence[str]) -> dict[str, str]:
    """``["n[1-2]=127.0.0.1:2222", ...]`` -> {pattern: address}; InputError on a bad item."""
    out: dict[str, str] = {}
    for item in items:
        pattern, sep, address = item.partition("=")
        if not sep or not pattern.strip() or not address.strip():
            raise InputError(f"--host-map: expected NODESET=HOST[:PORT], got {item!r}")
        out[pattern.strip()] = address.strip()
    return out


def split_address(address: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` -> (host, port); InputError when malformed."""
    host, port = address, default_port
    if address.startswith("["):
        inner, _, rest = address[1:].partition("]")
        host = inner
        if rest:
            if not rest.startswith(":"):
                raise InputError(f"host address {address!r}: expected [ADDRESS]:PORT")
            port = _port(rest[1:], address)
    elif address.count(":") == 1:
        host, p = address.split(":")
        port = _port(p, address)
    if not host or not _HOSTNAME.match(host):
        raise InputError(f"host address {address!r}: not a host name or IP address")
    return host, port


def _port(text: str, address: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InputError(f"host address {address!r}: port must be 1-65535, got {text!r}")
    return int(text)


def resolve_targets(nodes: Sequence[str], opts: CollectOptions) -> list[Any]:
    """Map each (already validated) node name to an SSHTarget through ``opts.host_map``.

    Map keys are NodeSet patterns; the first that holds the node wins; unmapped nodes are
    reached by their own name on ``opts.port``.
    """
    from slurmguard.adapters.ssh import SSHTarget
    from slurmguard.nodeset import expand

    patterns: list[tuple[Any, str]] = []
    for pattern, address in opts.host_map.items():
        try:
            patterns.append((set(expand(pattern, source="triage.host_map")), address))
        except InputError as exc:
            raise ConfigError(f"triage.host_map: key {pattern!r} is not a NodeSet ({exc.message})") from None
    targets = []
    for node in nodes:
        address = next((a for ns, a in patterns if node in ns), node)
        host, port = split_address(address, opts.port)
        targets.append(SSHTarget(node, host, port, opts.user))
    return targets


def collect_node(target: Any, opts: CollectOptions,
                 recent: Callable[[str], Any] | None = None) -> NodeEvidence:
    """Gather one node's evidence; never raises for the node's own failures."""
    from slurmguard.adapters.ssh import SSHError, connect

    ev = NodeEvidence(target.node, target.host, target.port)
    start = time.monotonic()
    if recent is not None:
        try:
            ev.add_json("results.json", recent(target.node))
        except Exception as exc:  # the store is a bonus here: its failure is noted, not fatal
            ev.step_failed("results", f"store: {exc}")
    try:
        session = connect(target, identity=opts.identity, known_hosts=opts.known_hosts,
                          timeout=opts.connect_timeout)
    except SSHError as exc:
        ev.fail(exc.kind, exc.message)
        ev.duration = time.monotonic() - start
        return ev
    try:
        with session:
            _gather(session, ev, opts)
    except SSHError as exc:
        ev.fail(exc.kind, exc.message)
    except Exception as exc:  # a dropped connection mid-way: report it, keep the others going
        ev.fail("ssh", f"{target.node}: {type(exc).__name__}: {exc}")
    ev.duration = time.monotonic() - start
    return ev


def _gather(session: Any, ev: NodeEvidence, opts: CollectOptions) -> None:
    t, tool = opts.command_timeout, opts.remote_timeout or None

    res = session.run([*opts.remote_slurmguard, "check", "--json"], timeout=t, timeout_tool=tool)
    ev.step("check", res)
    try:
        ev.add_json("check.json", json.loads(res.stdout))
    except ValueError:
        ev.add_text("check.out", res.stdout)
        if res.rc not in (None, 0, 1):
            ev.step_failed("check", _why(res))
    if res.stderr.strip():
        ev.add_text("check.stderr", res.stderr)

    res = session.run([opts.remote_dmesg, "--time-format=iso"], timeout=t, timeout_tool=tool)
    ev.step("dmesg", res)
    source = "dmesg"
    if res.rc != 0:  # restricted dmesg (kernel.dmesg_restrict) or no dmesg: the journal
        res = session.run([opts.remote_journalctl, "-k", "-b", "--no-pager", "-o", "short-iso"],
                          timeout=t, timeout_tool=tool)
        ev.step("journalctl", res)
        source = "journalctl"
    if res.rc == 0:
        lines = [ln for ln in res.stdout.splitlines() if XID_LINE.search(ln)]
        ev.add_text("xid.log", "\n".join(lines[-opts.xid_lines:]) + ("\n" if lines else ""))
        ev.facts["xid_source"] = source
        ev.facts["xid_count"] = len(lines)
    else:
        ev.step_failed("kernel-log", _why(res))

    res = session.run([opts.remote_nvidia_smi, "-q"], timeout=t, timeout_tool=tool)
    if res.rc == 127 or (res.rc is not None and "No such file" in res.stderr):
        ev.facts["nvidia_smi"] = "absent"
    else:
        ev.step("nvidia-smi", res)
        ev.add_text("nvidia-smi.txt", res.stdout + res.stderr)
        ev.facts["nvidia_smi"] = "ok" if res.rc == 0 else _why(res)

    tree = session.read_tree(f"{opts.remote_sysfs.rstrip('/')}/class/infiniband")
    ev.add_json("ib.json", _ib_ports(tree))
    ev.facts["ib_ports"] = len(_ib_ports(tree)["ports"])


def _ib_ports(tree: dict[str, str] | None) -> dict[str, Any]:
    """sysfs files -> {"present": bool, "ports": {"mlx5_0/1": {"state": ..., ...}}}."""
    if tree is None:
        return {"present": False, "ports": {}}
    keep = {"state", "phys_state", "rate", "link_layer", "lid",
            "counters/link_downed", "counters/symbol_error", "counters/port_rcv_errors",
            "counters/link_error_recovery"}
    ports: dict[str, dict[str, str]] = {}
    for rel, value in tree.items():
        parts = rel.split("/")
        if len(parts) >= 4 and parts[1] == "ports":
            key = "/".join(parts[3:])
            if key in keep:
                ports.setdefault(f"{parts[0]}/{parts[2]}", {})[key] = value
    return {"present": True, "ports": dict(sorted(ports.items()))}


def _why(res: Any) -> str:
    if res.timed_out:
        return f"timed out after {res.duration:.0f}s"
    last = (res.stderr.strip().splitlines() or ["no error output"])[-1]
    return f"exited {res.rc}: {last[:200]}"


def collect(nodes: Sequence[str], opts: CollectOptions, bundle: Bundle, *,
            recent: Callable[[str], Any] | None = None,
            progress: bool | None = None) -> dict[str, Any]:
    """Collect every node into ``bundle`` (opts.parallel at a time); returns the manifest."""
    targets = resolve_targets(nodes, opts)
    show = sys.stderr.isatty() if progress is None else progress
    from tqdm import tqdm  # lazy: only this command draws a progress bar

    bar = tqdm(total=len(targets), unit="node", file=sys.stderr, disable=not show,
               desc="collect")
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(opts.parallel, len(targets)))) as pool:
            futures = [pool.submit(collect_node, t, opts, recent) for t in targets]
            for fut in as_completed(futures):
                ev = fut.result()
                bundle.add(ev)
                bar.set_postfix_str(f"{ev.node} {ev.status}", refresh=False)
                bar.update(1)
    finally:
        bar.close()
    return bundle.finish()
