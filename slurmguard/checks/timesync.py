"""Check of area 'timesync': the node's clock is kept by a synchronised time service.

Fault: a clock that drifted (the sync daemon dead, NTP unreachable, or a daemon that only
follows the node's own clock). Munge rejects credentials past their TTL (300 s default) once
clocks diverge that far, job accounting and logs lose their order, and distributed jobs see
bogus timeouts.

Read (adapters/timesync.py): chronyd (``chronyc -c -n tracking``), else ntpd (``ntpq -pn``),
else systemd-timesyncd (``timedatectl show`` / ``timesync-status``). Judged:

* the offset: 0.5 s is far beyond a synchronised clock's error (micro- to milliseconds) yet
  harmless to jobs: degraded; 30 s is well on the way to munge failures: unhealthy;
* synchronised at all: leap status "Not synchronised", no selected ntpd peer, or
  ``NTPSynchronized=no``: degraded (the clock is free-running; the offset grows slowly);
* the selected source: the node's own clock (chronyd's ``local stratum 10``, ntpd's
  127.127.1.0 ``.LOCL.``) is not a time source, so it counts as not synchronised: a cluster
  whose nodes each follow themselves drifts apart while every daemon reports "Normal";
* the stratum: above ``max_stratum`` (default 15; 16 means unsynchronised in NTP) degraded;
* no service at all: ``unsupported``, or ``unhealthy`` when ``required`` is set (a site
  that knows every node must run one wants the node out before munge starts failing).
"""

from __future__ import annotations

from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.contract import CheckResult, degraded, healthy, unhealthy, unsupported
from slurmguard.fieldtypes import AbsPath, Bool, Float, Int

AREA = "timesync"
PARAMS: dict[str, Any] = {
    "required": Bool(False, "a node without any time sync service is unhealthy (else unsupported)"),
    "chronyc": AbsPath("/usr/bin/chronyc", "chronyc (chronyd), asked first"),
    "ntpq": AbsPath("/usr/bin/ntpq", "ntpq (ntpd), asked when chronyc is absent"),
    "timedatectl": AbsPath("/usr/bin/timedatectl", "timedatectl (systemd-timesyncd), asked last"),
    "max_offset": Float(0.5, "clock offset in seconds above which the node is degraded"),
    "max_offset_unhealthy": Float(30.0, "clock offset in seconds above which it is unhealthy"),
    "max_stratum": Int(15, "stratum above which the clock counts as degraded", minimum=1),
    "command_timeout": Float(5.0, "seconds before chronyc/ntpq/timedatectl are killed",
                             minimum=0.1),
}


@check("host-timesync", AREA, ("timesync",), "clock synchronised (chrony, ntpd or timesyncd)")
def host_timesync(ctx: CheckContext) -> CheckResult:
    ts = ctx.sources["timesync"]
    p = ctx.params
    if not ts.service:
        what = f"no time sync service ({ts.error})" if ts.error else "no time sync service"
        if p["required"]:
            return unhealthy("host-timesync", what, service="")
        return unsupported("host-timesync", what)
    names = {"chrony": "chronyd", "ntpd": "ntpd", "timesyncd": "systemd-timesyncd"}
    daemon = names.get(ts.service, ts.service)
    if not ts.ok:
        return degraded("host-timesync", f"{daemon} not answering: {ts.error}", service=ts.service)
    details = {"service": ts.service, "offset_s": ts.offset, "leap_status": ts.leap_status,
               "stratum": ts.stratum, "reference": ts.reference, "synchronised": ts.synced}
    off = ts.offset or 0.0
    if off > float(p["max_offset_unhealthy"]):
        return unhealthy("host-timesync", f"clock off by {off:.3f}s", **details)
    if off > float(p["max_offset"]):
        return degraded("host-timesync", f"clock off by {off:.3f}s", **details)
    if not ts.synced:
        return degraded("host-timesync", "clock not synchronised", **details)
    if ts.local:
        return degraded("host-timesync", f"clock not synchronised: {daemon} follows the node's "
                        f"own clock ({ts.reference or 'local'}, stratum {ts.stratum})", **details)
    if ts.stratum is not None and ts.stratum > int(p["max_stratum"]):
        return degraded("host-timesync", f"clock at stratum {ts.stratum} (> {p['max_stratum']})",
                        **details)
    return healthy("host-timesync", **details)


CHECKS: list[Check] = [host_timesync]
