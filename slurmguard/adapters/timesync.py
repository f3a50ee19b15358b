"""Source "timesync": which service keeps this node's clock, and what it says.

The first service whose client is installed answers, in this order:

* chrony: ``chronyc -c -n tracking`` (CSV: reference id, reference name, stratum, ..., system
  time offset, ..., leap status). The reference is the selected source; chronyd's own
  ``local`` clock shows as reference id 7F7F0101 (127.127.1.1), a refclock by its refid.
* ntpd: ``ntpq -pn``: the peer marked ``*`` is the selected one (``o``: PPS); its stratum
  and offset (milliseconds). No ``*`` peer: not synchronised. ``127.127.1.x`` / ``.LOCL.``
  is ntpd's undisciplined local clock driver.
* systemd-timesyncd: ``timedatectl show`` (``NTP=``, ``NTPSynchronized=``), then
  ``timedatectl timesync-status`` (server, stratum, leap, offset) when NTP is on.

None installed, timedatectl saying ``NTP=no``, or timedatectl failing (no timedated: a
container, a node without systemd as init): ``service=""`` (the check decides whether
that is a fault: ``checks.timesync.required``). Every command goes through run_command.
"""

import os
import re
import time
from typing import NamedTuple

from slurmguard.config import Config
from slurmguard.errors import CommandError
from slurmguard.proc import run_command
from slurmguard.sources import GatherContext

# chronyd's `local` directive and ntpd's local clock driver (127.127.1.x): a clock that
# serves itself, never a synchronised one.
LOCAL_REFS = frozenset({"7F7F0101", "LOCL", "LOCAL", "127.127.1.0", "127.127.1.1"})


class TimeSync(NamedTuple):
    service: str  # chrony | ntpd | timesyncd | "" (none found)
    ok: bool = True  # the daemon answered
    synced: bool = True  # the daemon says it is synchronised
    offset: float | None = None  # seconds, absolute
    leap_status: str = ""
    stratum: int | None = None
    reference: str = ""  # the selected source (address, refid or server name)
    local: bool = False  # the selected source is the node's own clock
    error: str = ""


def parse_chrony_tracking(csv: str) -> TimeSync:
    """``chronyc -c tracking``: ref id, ref name, stratum, ref time, system time offset, last
    offset, rms offset, freq, residual freq, skew, root delay, root dispersion, update
    interval, leap status."""
    f = csv.strip().splitlines()[0].split(",") if csv.strip() else []
    if len(f) < 14:
        raise ValueError(f"unexpected chronyc output: {csv.strip()[:80]!r}")
    ref_id, name, leap = f[0].strip().upper(), f[1].strip(), f[13].strip()
    local = ref_id in LOCAL_REFS or name.upper() in LOCAL_REFS
    return TimeSync("chrony", True, not leap.lower().startswith("not sync") and ref_id != "00000000",
                    abs(float(f[4])), leap, int(f[2]), name or ref_id, local)


_NTPQ_PEER = re.compile(r"^(?P<tally>[ *#o+x.\-])(?P<remote>\S+)\s+(?P<refid>\S+)\s+(?P<st>\d+)\s+"
                        r"\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(?P<offset>[-+]?\d+(?:\.\d+)?)\s+\S+\s*$")


def parse_ntpq_peers(text: str) -> TimeSync:
    """``ntpq -pn``: the ``*`` (or ``o``, PPS) peer is the selected source."""
    rows = [m for m in (_NTPQ_PEER.match(line) for line in text.splitlines()) if m]
    if not rows and "remote" not in text:
        raise ValueError(f"unexpected ntpq output: {text.strip()[:80]!r}")
    sel = next((m for m in rows if m["tally"] in "*o"), None)
    if sel is None:
        return TimeSync("ntpd", True, False, None, "no selected peer", None, "", False)
    remote, refid = sel["remote"], sel["refid"].strip(".").upper()
    local = remote.startswith("127.127.1.") or refid in LOCAL_REFS
    return TimeSync("ntpd", True, True, abs(float(sel["offset"])) / 1000.0, "",
                    int(sel["st"]), remote, local)


def parse_timedatectl_show(text: str) -> dict[str, str]:
    """``timedatectl show``: KEY=value lines."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|µs|ms|s|min|h)\b")
_UNIT = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}


def parse_span(text: str) -> float:
    """systemd's time span: ``+1.104ms``, ``-512us``, ``-1min 2.500s`` -> seconds (absolute)."""
    parts = _SPAN.findall(text)
    if not parts:
        raise ValueError(f"not a time span: {text!r}")
    return sum(float(n) * _UNIT[u] for n, u in parts)


def parse_timesync_status(text: str, synchronized: bool) -> TimeSync:
    """``timedatectl timesync-status``: ``Key: value`` lines (Server, Stratum, Leap, Offset)."""
    kv = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())
          if v}
    offset = parse_span(kv["Offset"]) if "Offset" in kv else None
    stratum = int(kv["Stratum"]) if kv.get("Stratum", "").isdigit() else None
    server = kv.get("Server", "").split(" ")[0]
    return TimeSync("timesyncd", True, synchronized, offset, kv.get("Leap", ""), stratum,
                    server, False)


def _timeout(cfg: Config, ctx: GatherContext) -> float:
    return min(float(cfg["checks.timesync.command_timeout"]),
               max(0.1, ctx.deadline - time.monotonic()))


def _ask(service: str, argv: list[str], cfg: Config, ctx: GatherContext) -> str | TimeSync:
    try:
        return run_command(argv, timeout=_timeout(cfg, ctx)).stdout
    except CommandError as exc:
        # e.g. chronyd down ("506 Cannot talk to daemon"): the clock is not being disciplined
        return TimeSync(service, False, False, error=str(exc))


def gather(cfg: Config, ctx: GatherContext) -> TimeSync:
    """Ask the first installed sync service; ``service=""`` when there is none."""
    chronyc, ntpq = cfg["checks.timesync.chronyc"], cfg["checks.timesync.ntpq"]
    timedatectl = cfg["checks.timesync.timedatectl"]
    service = ""
    try:
        if os.path.exists(chronyc):
            service = "chrony"
            out = _ask(service, [chronyc, "-c", "-n", "tracking"], cfg, ctx)
            return out if isinstance(out, TimeSync) else parse_chrony_tracking(out)
        if os.path.exists(ntpq):
            service = "ntpd"
            out = _ask(service, [ntpq, "-pn"], cfg, ctx)
            return out if isinstance(out, TimeSync) else parse_ntpq_peers(out)
        if os.path.exists(timedatectl):
            service = "timesyncd"
            return _timesyncd(timedatectl, cfg, ctx)
    except (ValueError, KeyError) as exc:  # an answer we cannot read: not a synced clock
        return TimeSync(service, False, False, error=str(exc))
    return TimeSync("", False, False, error="no chronyc, ntpq or timedatectl")


def _timesyncd(timedatectl: str, cfg: Config, ctx: GatherContext) -> TimeSync:
    out = _ask("timesyncd", [timedatectl, "show"], cfg, ctx)
    if isinstance(out, TimeSync):
        # no timedated (a container, no systemd as init): timedatectl knows of no service
        first = out.error.splitlines()[0] if out.error else ""
        return TimeSync("", False, False, error=f"timedatectl: {first[:120]}")
    props = parse_timedatectl_show(out)
    synced = props.get("NTPSynchronized") == "yes"
    if props.get("NTP") != "yes":
        # timedated knows no active NTP unit: nothing keeps this clock
        return TimeSync("", False, synced, error="timedatectl: NTP=no")
    status = _ask("timesyncd", [timedatectl, "timesync-status"], cfg, ctx)
    if isinstance(status, TimeSync):
        # NTP=yes but the unit is not timesyncd (another service registered with timedated)
        return TimeSync("timesyncd", True, synced, error=status.error)
    return parse_timesync_status(status, synced)
