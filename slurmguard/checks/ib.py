"""Checks of area 'ib': InfiniBand / RoCE ports.

``ib-link`` catches a dead or badly trained fabric link: a cable pulled or failed, a port
stuck in Polling/INIT because the subnet manager lost it, a link that trained at a lower
rate (HDR instead of NDR) after a bad transceiver. It reads
/sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate}. A port that is not ACTIVE/
LinkUp breaks every multi-node job (NCCL/MPI over that HCA); a port slower than
``expected_rate`` slows every collective of the job by the same factor, so both are node
faults (unhealthy). ``expected_count`` catches an HCA that vanished (PCIe or firmware fault).

``ib-counters`` catches a marginal link before it dies: the error counters under
ports/<n>/counters/ that rose since the last run. ``link_downed`` counts link drops (each one
kills in-flight RDMA traffic), ``symbol_error``/``port_rcv_errors`` rise with a dirty
connector or failing cable, ``link_error_recovery`` with a link that keeps retraining.
Rises are compared with per-counter thresholds (``degraded_on``, ``unhealthy_on``); the
defaults flag a single link drop as degraded and a flapping link (5 drops between two runs)
as unhealthy, and only large bursts of symbol/receive errors, since a few per day are normal
on long optical links.

A counter stuck at the maximum of its width (PortCounters: ``link_downed`` is 8 bits, so 255;
``symbol_error`` 16 bits, 65535; ``local_link_integrity_errors`` 4 bits, 15) saturates
instead of wrapping, so it can never rise again and a check of rises alone would call the
port healthy for ever while it fails. A saturated counter is ``degraded`` naming the counter,
its width and the fix (``perfquery -R`` clears the port's counters), never a drain on its own:
a port can take years of benign errors to saturate.

Which ports are judged: every InfiniBand port, and the Ethernet ports that carry RDMA (RoCE:
a GID made from an IP address, see adapters/sysfs.py). A plain Ethernet port of an RDMA NIC
(an unused second port, a separate management NIC that ib_core also lists) is judged only
when ``devices`` names it or ``ethernet = "all"``: its link being down says nothing about
the fabric, and must not drain the node.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.contract import CheckResult, degraded, healthy, unhealthy
from slurmguard.fieldtypes import AbsPath, Choice, Field, Float, Int, StrList


def _int_table(value: Any) -> str | None:
    for k, v in value.items():
        if not str(v).isdigit():
            return f"counter {k}: expected a non-negative integer as a string"
    return None


AREA = "ib"
PARAMS: dict[str, Any] = {
    "sysfs_root": AbsPath("/sys/class/infiniband", "where the RDMA devices are"),
    "devices": StrList([], "device name patterns to check (fnmatch; empty = all)"),
    "ignore_devices": StrList([], "device name patterns never checked (e.g. a management NIC)"),
    "link_layers": StrList(["InfiniBand", "Ethernet"], "port link layers checked"),
    "ethernet": Choice("roce", ("roce", "all"),
                       "Ethernet ports judged: roce = those carrying RDMA (an IP-derived GID) and "
                       "those named in devices; all = every one (the old default)"),
    "expected_count": Int(0, "number of devices that must exist (0 = do not check)"),
    "expected_rate": Float(0.0, "minimum port rate in Gb/s (0 = do not check)"),
    "degraded_on": Field("table", {
        "link_downed": "1", "symbol_error": "1000", "port_rcv_errors": "1000",
        "link_error_recovery": "10", "local_link_integrity_errors": "10",
        "excessive_buffer_overrun_errors": "10",
    }, "counter -> rise since the last run that makes the port degraded ('0' = off)",
        validate=_int_table),
    "unhealthy_on": Field("table", {"link_downed": "5", "link_error_recovery": "100"},
                          "counter -> rise since the last run that makes the port unhealthy ('0' = off)",
                          validate=_int_table),
}


def _selected(snapshot: Any, p: Any, plain_ethernet: bool = False) -> list[Any]:
    """The ports judged; ``plain_ethernet`` keeps plain Ethernet ports too (to count HCAs:
    a device is present whatever its ports carry)."""
    want, skip = list(p["devices"]), list(p["ignore_devices"])
    layers = set(p["link_layers"])
    out = []
    for port in snapshot.ports:
        if want and not any(fnmatch.fnmatchcase(port.device, w) for w in want):
            continue
        if any(fnmatch.fnmatchcase(port.device, s) for s in skip):
            continue
        if port.link_layer not in layers:
            continue
        if (port.link_layer == "Ethernet" and p["ethernet"] == "roce" and not port.roce
                and not want and not plain_ethernet):
            continue  # a plain Ethernet port nobody named: not the fabric
        out.append(port)
    return out


# PortCounters widths (IBTA spec, vol. 1, 16.1.3.5): a counter at 2**bits - 1 has saturated.
COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16, "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16,
}


def saturated(name: str, value: int) -> int | None:
    """The width in bits when ``value`` is the maximum of counter ``name``, else None. A
    counter without a known width counts as saturated at 2**32 - 1 or 2**64 - 1."""
    bits = COUNTER_BITS.get(name)
    if bits is not None:
        return bits if value == (1 << bits) - 1 else None
    return next((b for b in (32, 64) if value == (1 << b) - 1), None)


@check("ib-link", AREA, ("ib",), "InfiniBand/RoCE ports present, ACTIVE/LinkUp, at the expected rate")
def ib_link(ctx: CheckContext) -> CheckResult:
    p = ctx.params
    ports = _selected(ctx.sources["ib"], p)
    devices = sorted({x.device for x in _selected(ctx.sources["ib"], p, plain_ethernet=True)})
    details: dict[str, Any] = {
        "ports": {x.key: {"state": x.state, "phys_state": x.phys_state, "rate": x.rate}
                  for x in ports}
    }
    expected = int(p["expected_count"])
    if expected and len(devices) < expected:
        return unhealthy("ib-link", f"{len(devices)} of {expected} IB devices present "
                         f"({', '.join(devices) or 'none'})", **details)
    problems: list[str] = []
    for x in ports:
        if x.state != "ACTIVE" or x.phys_state != "LinkUp":
            problems.append(f"{x.key} is {x.state}/{x.phys_state}")
        elif p["expected_rate"] and x.rate_gbps < float(p["expected_rate"]):
            problems.append(f"{x.key} at {x.rate or 'unknown rate'}, expected "
                            f">= {float(p['expected_rate']):g} Gb/sec")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return unhealthy("ib-link", problems[0] + more, **details)
    if not ports:
        return healthy("ib-link", note="no port selected by the configuration", **details)
    return healthy("ib-link", **details)


@check("ib-counters", AREA, ("ib",), "InfiniBand/RoCE error counters rising since the last run")
def ib_counters(ctx: CheckContext) -> CheckResult:
    p = ctx.params
    ports = _selected(ctx.sources["ib"], p)
    before: dict[str, Any] = dict(ctx.previous.get("counters") or {})
    ctx.new_state["counters"] = {x.key: dict(x.counters) for x in ports}
    deg = {k: int(v) for k, v in p["degraded_on"].items() if int(v) > 0}
    bad = {k: int(v) for k, v in p["unhealthy_on"].items() if int(v) > 0}
    worst: list[str] = []
    warn: list[str] = []
    rises: dict[str, dict[str, int]] = {}
    stuck: dict[str, dict[str, int]] = {}
    for x in ports:
        for name in sorted(set(COUNTER_BITS) | set(deg) | set(bad)):
            bits = saturated(name, x.counters.get(name, -1))
            if bits is not None:
                stuck.setdefault(x.key, {})[name] = bits
        old = before.get(x.key)
        if not isinstance(old, dict):
            continue  # first run for this port: baseline only
        for name in sorted(set(deg) | set(bad)):
            if name not in x.counters or not isinstance(old.get(name), int):
                continue
            rise = x.counters[name] - old[name]
            if rise <= 0:
                continue  # unchanged, or reset (HCA reset / counter cleared): not a fault
            rises.setdefault(x.key, {})[name] = rise
            text = f"{x.key} {name} +{rise} since last run"
            if name in bad and rise >= bad[name]:
                worst.append(text)
            elif name in deg and rise >= deg[name]:
                warn.append(text)
    details: dict[str, Any] = {"rises": rises}
    if stuck:
        details["saturated"] = stuck
    for key, names in sorted(stuck.items()):  # after the rises: a rise is the stronger news
        for name, bits in names.items():
            warn.append(f"{key} {name} saturated at {(1 << bits) - 1} ({bits}-bit): "
                        "clear with perfquery -R")
    if worst:
        more = f" (+{len(worst) + len(warn) - 1} more)" if len(worst) + len(warn) > 1 else ""
        return unhealthy("ib-counters", worst[0] + more, **details)
    if warn:
        more = f" (+{len(warn) - 1} more)" if len(warn) > 1 else ""
        return degraded("ib-counters", warn[0] + more, **details)
    return healthy("ib-counters", **details)


CHECKS: list[Check] = [ib_link, ib_counters]
